"""A background thread running an asyncio loop, for Spark's synchronous callbacks.

Spark calls the source's methods synchronously, one at a time, in one long-lived process; the
SDK is asyncio. The loop thread owns every client and all the source's in-memory state, and
runs background tasks (the lease extender) between Spark's calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread (the process may be killed, never joined)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result (or exception)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coroutine`` on the loop; its future (``result()`` waits for it)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        """Cancel the tasks still pending on the loop and wait for them, then stop the loop
        and close it (its self-pipe sockets) once its thread is done.

        A task left pending (a lease keeper whose owner's ``close`` failed or timed out) would
        be destroyed with the loop, which asyncio reports as an error ("Task was destroyed
        but it is pending!") whenever that happens, at the latest at exit."""
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(Exception):  # a stuck task: the loop is closed anyway
                self.run(_cancel_others(), timeout=5.0)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5.0)
        else:  # halted: nothing runs it now, so this thread does
            self.loop.run_until_complete(_cancel_others())
        if not self._thread.is_alive():
            self.loop.close()

    def halt(self) -> None:
        """Stop the loop where it is and end its thread, its tasks left pending: what a
        killed process does (the tests' kill of a driver); ``close`` then finishes them."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5.0)


async def _cancel_others() -> None:
    """Cancel every task of the running loop but this one; wait until they are done."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
