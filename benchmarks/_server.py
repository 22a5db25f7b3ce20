"""The reference server the benchmarks measure against, in a process of its own."""

from __future__ import annotations

import subprocess
import sys


def start_server() -> tuple[subprocess.Popen[str], str]:
    """Start ``eoclient serve`` on a free port; return the process and its host:port."""
    server = subprocess.Popen(
        [sys.executable, "-m", "eoclient.cli", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith("export PUBSUB_EMULATOR_HOST="):
            return server, line.strip().split("=", 1)[1]
    server.wait(timeout=10)
    raise RuntimeError("eoclient serve exited before printing its address")
