"""The reference server on an event loop of its own, in a daemon thread.

For code that cannot share the test's event loop: synchronous tests (the official
client's sync API, a Flask app, the ``eoclient`` command run in-process), and tests
without pytest-asyncio. The server is a ``ReferenceServer`` like any other, but it
belongs to its thread: touch it only through :meth:`ServerThread.call`, which runs a
function on the server's loop and returns its result (the broker is not thread-safe).
gRPC clients in other threads and loops reach it over the socket as usual.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from eoclient._clock import Clock
from eoclient.server_stub import ReferenceServer, run_server

T = TypeVar("T")

# Starting takes a few tens of milliseconds; a loaded CI machine is slower.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


class ServerThread:
    """``with ServerThread() as server:`` serves on 127.0.0.1 port 0 (``server.address``)."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        record_history: bool = True,
        rest: bool = True,
        host: str = "127.0.0.1",
        bigquery_db: str | os.PathLike[str] | None = None,
    ) -> None:
        self._clock = clock
        self._bigquery_db = bigquery_db  # BigQuery subscriptions write there (DuckDB)
        self._record_history = record_history
        self._rest = rest
        self._host = host
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: ReferenceServer | None = None
        self.address = ""
        self.rest_url = ""

    def __repr__(self) -> str:
        return f"<ServerThread {self.address or 'not started'}>"

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("a ServerThread starts once")
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(ready),), name="eoclient-server", daemon=True
        )
        self._thread.start()
        ready.result(START_TIMEOUT)  # re-raises a failure to start (e.g. OSError)

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with run_server(
                self._host,
                clock=self._clock,
                record_history=self._record_history,
                rest_port=0 if self._rest else None,
                bigquery_db=self._bigquery_db,
            ) as server:
                self._server = server
                self.address = server.address
                self.rest_url = server.rest_url if self._rest else ""
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error)
            raise

    def stop(self) -> None:
        """Stop the server and join its thread. Idempotent."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or not thread.is_alive() or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        thread.join(STOP_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError(f"the reference server did not stop within {STOP_TIMEOUT} s")

    def call(self, function: Callable[[ReferenceServer], T], timeout: float = 10.0) -> T:
        """``function(server)`` on the server's loop; its result (or its exception)."""
        server = self._running()

        async def run() -> T:
            return function(server)

        return self.run(run, timeout)

    def run(self, coroutine: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        """Await ``coroutine()`` on the server's loop (e.g. an ``AdminClient`` call: a
        client there reaches the server like any other); its result or exception."""
        self._running()
        assert self._loop is not None

        async def run() -> T:
            return await coroutine()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def _running(self) -> ReferenceServer:
        loop, server = self._loop, self._server
        if loop is None or server is None or not loop.is_running():
            raise RuntimeError("the reference server thread is not running")
        return server
