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
fsync's latency never stalls the loop. A caller with more to compute before it waits (an
exactly-once Pull, its answer still to encode) begins the commit itself (``start``), so the
fsync runs beside that work; the loop then only sees it end. A caller whose changes a
commit in flight already took waits for that one, not for the next. Without the loop
running (services used without a server) a commit is made at once, on the caller's thread.

A store that keeps nothing (``MemoryStore``) is never dirty, so waiting costs nothing.

``EOCLIENT_TEST_ANSWER_BEFORE_COMMIT=1`` breaks the rule on purpose, for the crash test's
negative control only: answers go out at once and the store commits every
``UNSAFE_COMMIT_INTERVAL`` seconds, so a crash loses what was answered meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from eoclient.errors import Unavailable
from eoclient.server_stub.core.store import Store

logger = logging.getLogger("eoclient.server_stub.store")

UNSAFE_SWITCH = "EOCLIENT_TEST_ANSWER_BEFORE_COMMIT"
UNSAFE_COMMIT_INTERVAL = 2.0
# The interpreter's switch interval (seconds) while a commit loop runs. A commit's thread
# needs the GIL a few times before its COMMIT releases it for the fsync (to wake, to call
# each statement) and once after, while the loop may be computing: an exactly-once Pull
# encodes its answer (1,000 messages, ~0.7 ms) while its leases commit (``start``), and a
# window's top-up (~1 ms) runs while the gRPC poller thread waits to send that answer. At
# CPython's 5 ms default the waiting thread gets the GIL only once the loop goes idle, so
# the fsync never overlaps the loop's work and the answer waits for the top-up; at 0.1 ms
# each wait costs at most a tenth of a millisecond. The memory server runs no slower with
# it (measured: a Pull + Acknowledge round of 1,000 messages 5.5-5.6 ms against 5.7-6.4
# without), so every server runs with it.
COMMIT_SWITCH_INTERVAL = 0.0001


class GroupCommit:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiters: list[asyncio.Future[None]] = []
        self._wanted = asyncio.Event()  # a commit is wanted: the loop makes one
        self._running = False
        self._flight: _Flight | None = None  # the commit running in the executor's thread
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
        if self.unsafe:
            return None
        if self._store.dirty:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self._want()
            return waiter
        if self._flight is not None:
            # Nothing new, but the commit in flight may hold the caller's changes (taken
            # by ``start`` or by the loop while the caller awaited): they are safe once
            # it ends, not before.
            waiter = asyncio.get_running_loop().create_future()
            self._flight.waiters.append(waiter)
            return waiter
        return None

    def start(self) -> None:
        """Begin the commit of every change made so far at once, on the caller's stack,
        when none is in flight (else the loop makes it after that one): for a caller that
        has more to do before it awaits ``durable()`` (a Pull encoding its answer), so
        that the COMMIT's fsync runs meanwhile in the commit's thread. Without the loop
        running, nothing happens here: ``durable()`` commits at once."""
        if self.unsafe or not self._running or self._flight is not None:
            return
        if not self._store.dirty:
            return
        self._launch()
        self._wanted.set()  # the loop awaits the commit and releases its waiters

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
        _SWITCHES.enter()
        try:
            while True:
                if not self._wanted.is_set():
                    if self._closing:
                        return
                    await self._wanted.wait()
                self._wanted.clear()
                if self._flight is not None or self._waiters or self._store.dirty:
                    await self._commit_group()
        finally:
            _SWITCHES.exit()
            self._running = False
            self._stopped.set()
            waiters, self._waiters = self._waiters, []
            if self._flight is not None:  # cancelled before it ended: it may still fail
                waiters += self._flight.waiters
                self._flight = None
            self._fail(waiters, Unavailable("The reference server is shutting down."))

    @property
    def in_flight(self) -> bool:
        """Is a commit running in its thread (a read of the store would wait for it)?"""
        return self._flight is not None

    async def _commit_group(self) -> None:
        if self._flight is None:
            await asyncio.sleep(0)  # the other calls of this turn add their changes
            if self._flight is None:  # (else ``start`` began one meanwhile)
                self._launch()
        flight = self._flight
        if flight is None:  # nothing to commit, or it failed to begin: waiters settled
            return
        error: BaseException | None = None
        try:
            await asyncio.shield(flight.done)
            self.commits += 1
            self._last_commit = time.monotonic()
        except asyncio.CancelledError:
            raise  # ``run`` fails the flight's waiters
        except Exception as exc:  # sqlite3.Error, OSError (disk full, I/O error)
            logger.exception("the store could not commit")
            error = _commit_failed(exc)
        self._flight = None
        waiters = flight.waiters
        self._fail(waiters, error) if error is not None else self._release(waiters)
        if self._waiters:
            self._wanted.set()

    def _launch(self) -> None:
        """Take what is pending and every waiter so far into a commit, and start its
        COMMIT in the commit's thread (``in_flight`` until the loop sees it end)."""
        waiters, self._waiters = self._waiters, []
        try:
            if not self._store.begin_commit():
                self._release(waiters)
                return
        except Exception as exc:
            logger.exception("the store could not commit")
            self._fail(waiters, _commit_failed(exc))
            return
        # Submitted here, not from a task scheduled later: until the commit ends, a read
        # of the store blocks the loop waiting for it, so it must already be running. Its
        # own thread (nothing queued ahead of it); not cancelled with the loop's task (the
        # store waits for it anyway).
        done = asyncio.get_running_loop().run_in_executor(self._executor, self._store.finish_commit)
        self._flight = _Flight(done, waiters)

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


class _ShortSwitches:
    """The process's switch interval, ``COMMIT_SWITCH_INTERVAL`` at most while any commit
    loop runs (servers in one process, or on several threads: the first to start saves the
    interval, the last to stop restores it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops = 0
        self._saved = 0.0

    def enter(self) -> None:
        with self._lock:
            if self._loops == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved, COMMIT_SWITCH_INTERVAL))
            self._loops += 1

    def exit(self) -> None:
        with self._lock:
            self._loops -= 1
            if self._loops == 0:
                sys.setswitchinterval(self._saved)


_SWITCHES = _ShortSwitches()


class _Flight:
    """The commit running in the commit's thread, and who waits for its end."""

    def __init__(self, done: asyncio.Future[None], waiters: list[asyncio.Future[None]]) -> None:
        self.done = done
        self.waiters = waiters


def _commit_failed(error: Exception) -> Unavailable:
    return Unavailable(f"The reference server could not store the change: {error}")
