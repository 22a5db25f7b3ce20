"""Processes the tests start: a free port, ``eoclient serve`` in a subprocess, and
stopping a process group for good.

Every process a test starts binds 127.0.0.1 and is started with ``start_new_session=True``
so that ``stop_process_group`` ends it and everything it spawned, even when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# How long `eoclient serve` may take to print where it listens (about a second here; a
# loaded machine is slower).
SERVE_START_TIMEOUT = 20.0


def free_port() -> int:
    """A port that was free a moment ago (the emulator cannot bind port 0 and report it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process_group(process: subprocess.Popen[Any], timeout: float = 5.0) -> None:
    """SIGTERM the process group (started with start_new_session=True), then SIGKILL it."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout)


def wait_for_line(
    process: subprocess.Popen[Any], log: Path, pattern: str, timeout: float
) -> re.Match[str]:
    """Wait until ``log`` has a line matching ``pattern`` (RuntimeError if the process
    exits first or ``timeout`` seconds pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        found = re.search(pattern, text)
        if found:
            return found
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before starting:\n{text}")
        time.sleep(0.05)
    raise RuntimeError(f"not started after {timeout} s:\n{log.read_text(errors='replace')}")


@dataclass(frozen=True)
class ServeProcess:
    """A running ``eoclient serve`` and the file its output goes to."""

    process: subprocess.Popen[Any]
    log: Path

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first match of ``pattern`` in what it printed, once it has printed it."""
        return wait_for_line(self.process, self.log, pattern, SERVE_START_TIMEOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def eoclient_serve(*flags: str) -> Iterator[ServeProcess]:
    """``eoclient serve --port 0 FLAGS`` in a process group of its own, its output in a
    temporary file. On leaving it is stopped with SIGTERM and must have exited 0: a clean
    shutdown is part of the program's contract."""
    with tempfile.TemporaryDirectory(prefix="eoclient-serve-") as tmp:
        log = Path(tmp) / "serve.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "eoclient.cli", "serve", "--port", "0", *flags],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        served = ServeProcess(process, log)
        try:
            yield served
        finally:
            stop_process_group(process)
            assert process.returncode == 0, served.output()
