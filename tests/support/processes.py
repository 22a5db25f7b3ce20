"""Processes the tests start: a free port, and stopping a process group for good.

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
import time
from pathlib import Path
from typing import Any


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
