"""Group commit: the reference server answers only what its store has made durable.

Durability rule (the one the exactly-once promise rests on): a Publish response (message
ids), every admin change, and on an exactly-once subscription an acknowledgement's SUCCESS —
unary or a StreamingPull confirmation — and a delivery (its lease: so its ack id still
resolves after a crash) leave the server only after the store committed them. Each call
awaits ``durable()`` after the broker applied its change. Without exactly-once a delivery,
an ack or a modack promises nothing a crash could break (at-least-once: the message comes
again), so those answers do not wait (``services/subscriber.py``); their changes go with the
next commit — a call that waits, or the ticker's (``commit_pending``), within a quarter of a
second. One commit runs at a time, in the
commit loop (``run``, a task the server owns from its start to its stop): it yields once (so
the other calls of this turn of the event loop add their changes), runs the pending
statements (``begin_commit``), then the COMMIT and its fsync in a thread
(``finish_commit``) — the event loop goes on serving meanwhile, and whatever arrives during
that fsync shares the next commit: the busier the server, the larger the groups, and an
fsync's latency never stalls the loop. Without the loop running (services used without a
server) a commit is made at once, on the caller's thread.

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
from concurrent.futures import ThreadPoolExecutor

from eoclient.errors import Unavailable
from eoclient.server_stub.core.store import Store

logger = logging.getLogger("eoclient.server_stub.store")

UNSAFE_SWITCH = "EOCLIENT_TEST_ANSWER_BEFORE_COMMIT"
UNSAFE_COMMIT_INTERVAL = 2.0


class GroupCommit:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiters: list[asyncio.Future[None]] = []
        self._wanted = asyncio.Event()  # a commit is wanted: the loop makes one
        self._running = False
        self._in_flight = False  # a commit runs in the executor's thread
        self._closing = False
        self._stopped = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
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
        waiter = self.pending()
        if waiter is not None:
            await waiter

    def pending(self) -> asyncio.Future[None] | None:
        """A future done once every change made so far is committed (None: nothing to
        wait for); for a caller that goes on working meanwhile (a stream's writer)."""
        if self.unsafe or not self._store.dirty:
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._want()
        return waiter

    def commit_pending(self) -> None:
        """The ticker's periodic commit of changes nobody waits for."""
        if not self._store.dirty:
            return
        if self.unsafe:
            if time.monotonic() - self._last_commit >= UNSAFE_COMMIT_INTERVAL:
                self.commit()
            return
        self._want()

    def _want(self) -> None:
        if self._running:
            self._wanted.set()
        else:
            self.commit()  # no loop to commit in: now, on this thread

    async def run(self) -> None:
        """The commit loop: one commit at a time, whenever one is wanted, until ``aclose``
        (or until cancelled: the waiters then fail with UNAVAILABLE)."""
        self._running = True
        self._stopped.clear()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-commit")
        try:
            while True:
                if not self._wanted.is_set():
                    if self._closing:
                        return
                    await self._wanted.wait()
                self._wanted.clear()
                if self._waiters or self._store.dirty:
                    await self._commit_group()
        finally:
            self._running = False
            self._stopped.set()
            self._fail(self._waiters, Unavailable("The reference server is shutting down."))
            self._waiters = []

    @property
    def in_flight(self) -> bool:
        """Is a commit running in its thread (a read of the store would wait for it)?"""
        return self._in_flight

    async def _commit_group(self) -> None:
        await asyncio.sleep(0)  # the other calls of this turn add their changes
        waiters, self._waiters = self._waiters, []
        error: BaseException | None = None
        try:
            if self._store.begin_commit():
                self._in_flight = True
                # Submitted here, not from a task scheduled later: until the commit ends,
                # a read of the store blocks the loop waiting for it, so it must already
                # be running. Its own thread (nothing queued ahead of it); not cancelled
                # with this task (the store waits for it anyway).
                done = asyncio.get_running_loop().run_in_executor(
                    self._executor, self._store.finish_commit
                )
                await asyncio.shield(done)
                self.commits += 1
                self._last_commit = time.monotonic()
        except asyncio.CancelledError:
            self._fail(waiters, Unavailable("The reference server is shutting down."))
            raise
        except Exception as exc:  # sqlite3.Error, OSError (disk full, I/O error)
            logger.exception("the store could not commit")
            error = _commit_failed(exc)
        finally:
            self._in_flight = False
        self._fail(waiters, error) if error is not None else self._release(waiters)
        if self._waiters:
            self._wanted.set()

    @staticmethod
    def _release(waiters: list[asyncio.Future[None]]) -> None:
        for waiter in waiters:
            if not waiter.done():  # done: its caller was cancelled
                waiter.set_result(None)

    @staticmethod
    def _fail(waiters: list[asyncio.Future[None]], error: BaseException) -> None:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)

    def commit(self) -> None:
        """Commit now, on this thread (after one in flight), and release everyone waiting."""
        waiters, self._waiters = self._waiters, []
        try:
            self._store.commit()
            self._last_commit = time.monotonic()
        except Exception as exc:
            logger.exception("the store could not commit")
            self._fail(waiters, _commit_failed(exc))
            return
        self._release(waiters)

    async def aclose(self) -> None:
        """Let the commit in flight, and one wanted, finish; then ``run`` returns (server
        shutdown). Idempotent; afterwards commits are made at once, on the caller's thread."""
        self._closing = True
        self._wanted.set()
        if self._running:
            await self._stopped.wait()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def _commit_failed(error: Exception) -> Unavailable:
    return Unavailable(f"The reference server could not store the change: {error}")
