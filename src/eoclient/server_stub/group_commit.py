"""Group commit: the reference server answers only what its store has made durable.

Durability rule (the one the exactly-once promise rests on): a Publish response (message
ids), an acknowledgement's SUCCESS — unary or a StreamingPull confirmation — and every
admin change leave the server only after the store committed them. Each call awaits
``durable()`` after the broker applied its change; the first waiter of a turn of the
event loop schedules one commit at the end of that turn, so every change made meanwhile
shares it (one transaction, one fsync). While a commit runs (it blocks the loop for the
fsync), new requests queue in the transport; they are applied together afterwards and
share the next commit: the busier the server, the larger the groups.

A store that keeps nothing (``MemoryStore``) is never dirty, so waiting costs nothing.

``EOCLIENT_TEST_ANSWER_BEFORE_COMMIT=1`` breaks the rule on purpose, for the crash test's
negative control only: answers go out at once and the store commits every
``UNSAFE_COMMIT_INTERVAL`` seconds, so a crash loses what was answered meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from eoclient.errors import Unavailable
from eoclient.server_stub.core.store import Store

logger = logging.getLogger("eoclient.server_stub.store")

UNSAFE_SWITCH = "EOCLIENT_TEST_ANSWER_BEFORE_COMMIT"
UNSAFE_COMMIT_INTERVAL = 2.0


class GroupCommit:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiters: list[asyncio.Future[None]] = []
        self._scheduled = False
        self.commits = 0  # how many commits ran (inspection: the groups' sizes)
        self.unsafe = os.environ.get(UNSAFE_SWITCH) == "1"
        self._last_commit = time.monotonic()
        if self.unsafe:
            logger.warning(
                "%s=1: answering before the store commits (a crash loses answered "
                "changes); for the crash test's negative control only",
                UNSAFE_SWITCH,
            )

    async def durable(self) -> None:
        """Return once every change made before the call is committed.

        Raises ``Unavailable`` if the store could not commit (the caller's change may be
        lost: the client must retry, as after any UNAVAILABLE).
        """
        if not self._store.dirty or self.unsafe:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.commit)
        await waiter

    def commit_pending(self) -> None:
        """The ticker's periodic commit of changes nobody waits for."""
        if not self._store.dirty:
            return
        if self.unsafe and time.monotonic() - self._last_commit < UNSAFE_COMMIT_INTERVAL:
            return
        self.commit()

    def commit(self) -> None:
        """Commit now and release everyone waiting."""
        self._scheduled = False
        self._last_commit = time.monotonic()
        waiters, self._waiters = self._waiters, []
        error: BaseException | None = None
        try:
            self._store.commit()
            self.commits += 1
        except Exception as exc:  # sqlite3.Error, OSError (disk full, I/O error)
            logger.exception("the store could not commit")
            error = Unavailable(f"The reference server could not store the change: {exc}")
        for waiter in waiters:
            if waiter.done():
                continue  # its caller was cancelled
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
