"""A reference server the Spark tests can look inside (the ``spark_server`` fixture).

It runs ``run_server()`` on an event loop in a thread of the test process, so a test reads
the broker's state (``backlog``: messages not yet acknowledged, leased or not) while Spark,
in its own processes, talks to the server over gRPC.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from eoclient.server_stub.server import ReferenceServer, run_server

T = TypeVar("T")


class ThreadedServer:
    """A reference server on 127.0.0.1 port 0, served by a loop in a daemon thread."""

    def __init__(self) -> None:
        self._started: Future[tuple[asyncio.AbstractEventLoop, ReferenceServer]] = Future()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self._thread.start()
        self._loop, self._server = self._started.result(timeout=30)
        self.address = self._server.address

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with run_server() as server:
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
