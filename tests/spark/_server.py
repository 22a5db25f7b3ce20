"""Reference servers for the Spark tests.

``ThreadedServer`` (the ``spark_server`` fixture) runs ``run_server()`` on an event loop in a
thread of the test process, so a test reads the broker's state (``backlog``: messages not
yet acknowledged, leased or not) while Spark, in its own processes, talks to the server over
gRPC. ``DurableServer`` is ``eoclient serve --data-dir`` in a process of its own, which a test
can kill (SIGKILL) and start again on the same port and data.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from eoclient.server_stub.server import ReferenceServer, run_server

T = TypeVar("T")


class ThreadedServer:
    """A reference server on 127.0.0.1 port 0, served by a loop in a daemon thread."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self._data_dir = data_dir
        self._started: Future[tuple[asyncio.AbstractEventLoop, ReferenceServer]] = Future()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self._thread.start()
        self._loop, self._server = self._started.result(timeout=30)
        self.address = self._server.address

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with run_server(data_dir=self._data_dir) as server:
                self._started.set_result((asyncio.get_running_loop(), server))
                await self._stop.wait()
        except BaseException as error:
            if not self._started.done():
                self._started.set_exception(error)
            raise

    def call(self, function: Callable[[ReferenceServer], T]) -> T:
        """``function(server)`` on the server's loop (its state is not thread-safe)."""

        async def run() -> T:
            return function(self._server)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def backlog(self, subscription: str) -> int:
        """Messages of ``subscription`` not acknowledged yet, leased or waiting."""
        return self.call(lambda server: server.broker.backlog(subscription))

    def history(self, subscription: str, message_id: str) -> Any:
        return self.call(lambda server: server.history(subscription, message_id))

    def close(self) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class DurableServer:
    """``eoclient serve --data-dir`` on a fixed port of 127.0.0.1, in a process of its own."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.address = f"127.0.0.1:{_free_port()}"
        self._process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        command = [sys.executable, "-m", "eoclient.cli", "serve", "--port", port, "--no-rest"]
        log = self.data_dir.with_name(f"{self.data_dir.name}-serve.log")
        with log.open("w") as out:  # a file, not a pipe nobody reads on
            self._process = subprocess.Popen(
                [*command, "--data-dir", str(self.data_dir)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={k: v for k, v in os.environ.items() if k != "PUBSUB_EMULATOR_HOST"},
            )
        deadline = time.monotonic() + 60
        while "export PUBSUB_EMULATOR_HOST=" not in log.read_text():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"eoclient serve --data-dir did not start: {log.read_text()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """As if the machine lost the process: SIGKILL, nothing flushed but what is fsync'd."""
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(30)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(30)

    def backlog(self, subscription: str) -> int:
        """Messages of ``subscription`` not acknowledged, read from its data once stopped."""
        self.stop()
        server = ThreadedServer(self.data_dir)
        try:
            return server.backlog(subscription)
        finally:
            server.close()
