"""Read-ahead: a read task's worker pulls the next batch's share while Spark finishes this one.

Between two batches (the JVM writing the Parquet files, Spark's commit, the next planning and
the next task launch: ~0.45 s of a 1 s batch of 100,000 messages on two cores) the server
and the Python workers had nothing to do. So once a read task that pulled its whole quota
has handed its rows, its worker (``_worker.Worker``, kept between tasks) pulls up to the
same quota again on its loop and holds the answers as they came, unadmitted. Every answer's
ack ids go first to a read-ahead lease log of its own (``readahead/<id>.log`` in the
journal, the attempt logs' format: ``_lease_log``).

The worker's next read task for the same journal and subscription that pulls a part
*adopts* it (:meth:`ReadAheadSlot.take`, then ``LeaseLog.move``): the read-ahead log is
renamed to the task attempt's lease log, so at every instant one file lists those
deliveries, and the held answers become the attempt's first answers, admitted under its
batch's plan (cutoff, dedupe, committed ids) exactly as answers it pulled itself; the
attempt pulls only the rest of its quota, and answers past its quota are given back
(modack 0). A read-ahead that is not adopted is given back: when the worker's next task
cannot adopt it (another journal or subscription, a task that only settles or replays), at
once if it found nothing, or ``HOLD_SECONDS`` after its pull ended. A worker whose tasks
come further apart than that (two read-aheads in a row given back at the hold: a slow
trigger) reads no further ahead until two of its tasks come closer.

The driver gives back a read-ahead log last written more than ``HOLD_SECONDS +
CLOCK_SKEW_SECONDS`` ago (a worker that died holding it: else its deliveries would come back
only at their deadline); a fresher one means a worker may still adopt it, so a probe that
finds nothing then plans read tasks rather than ending an ``availableNow`` run
(``_runner``). Whoever gives back or adopts a log first renames it: a rename succeeds for
one process only, so the driver never gives back deliveries a task then journals (a
worker whose log was taken gives back what it holds itself: a second modack 0 of an ack id
is harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from eoclient._clock import AsyncClock
from eoclient._tasks import TaskOwner
from eoclient.spark._decisions import CLOCK_SKEW_SECONDS, Admission, Known
from eoclient.spark._journal import Journal
from eoclient.spark._lease_log import LeaseLog, LeaseRecord, read_logs
from eoclient.spark._pull import Pulled, pull_part
from eoclient.spark._wire import Received
from eoclient.subscriber import AckRetrySettings, SubscriberClient

# How long a worker holds a read-ahead after its pull ended, unadopted (seconds). At least
# the idle window it fills, the first one included: between two batches the JVM's tail,
# Spark's commit, the next planning and task launch take ~0.45 s on a quiet machine
# (benchmarks/spark_timeline.py), but after a query's first batch its cold start (the JIT,
# the first Parquet files) put 3.6-6 s between the two batches' tasks on local[2]
# (benchmarks/spark_pipeline.py, 100,000-message batches). A 2 s hold gave that first
# read-ahead back in four runs of five (the server's counters): each worker's whole share
# nacked (one by one on the server then, ~14 µs a message) and pulled again by the next
# batch, which doubled the server's and the read tasks' CPU a message in the batches
# measured. The deliveries are not extended while held (their deadline runs from the
# server's answer, at least 10 s): an adopting task journals without re-checking its leases
# only while first send + deadline is more than the renewal margin (>= 5 s) away
# (``_decisions.may_claim_unverified``); past that, as after a long hold on a 10 s
# deadline, it extends them first.
HOLD_SECONDS = 6.0
# A read-ahead pulls once every read task of its batch has journaled its part (looking every
# PARTS_POLL_SECONDS), waiting at most PARTS_WAIT_SECONDS. Near the end of a backlog, a worker
# whose task ended first would otherwise pull the next batch's share out of what a slower
# task of the same batch (or its worker's read-ahead) still had to pull: that one then finds
# the subscription empty, waits out the server's empty Pulls (~1 s each) and ends short, and
# a batch more follows (benchmarks/spark_pipeline.py, 400,000 messages: in one query of six,
# a task of the last full batch pulled for 2.1 s instead of 0.05-0.3, and the next batch's
# tasks waited 1 s for almost nothing). A task that never journals (it failed; Spark retries
# it) holds a read-ahead back no longer than the bound.
PARTS_WAIT_SECONDS = 1.0
PARTS_POLL_SECONDS = 0.01
# Read-aheads given back at the hold bound in a row after which a worker stops reading ahead
# (until two of its tasks come within HOLD_SECONDS of each other).
EXPIRED_IN_A_ROW = 2
# Give-backs are retried this long; what fails comes back at its deadline.
GIVE_BACK_RETRY = AckRetrySettings(deadline=5.0)

logger = logging.getLogger("eoclient.spark")

FaultHook = Callable[[str], Awaitable[None]]


@dataclass(slots=True)
class ReadAhead:
    """One read-ahead: the answers it holds (``pulled.chunks``, admitted by nobody yet)."""

    key: tuple[str, str]  # (journal path, subscription)
    pulled: Pulled
    log: LeaseLog
    pulling: asyncio.Task[None] | None = None
    expiry: asyncio.Task[None] | None = None
    failed: bool = False
    # A task takes it: it pulls now if it was waiting for its batch's other tasks (one of
    # them may be the task taking it, run by the same worker).
    taken: bool = False

    @property
    def ack_ids(self) -> list[str]:
        return [ack_id for chunk in self.pulled.chunks for ack_id in chunk.ack_ids]


class ReadAheadSlot:
    """A worker's read-ahead (one at most). Every method runs on the worker's loop."""

    def __init__(self, client: SubscriberClient, clock: AsyncClock) -> None:
        self._client = client
        self._clock = clock
        self._held: ReadAhead | None = None
        # Read-aheads given back unadopted at the hold bound, in a row, and when this
        # worker's last task handed its rows. Two in a row: its tasks come further apart than
        # the hold (a slow trigger; one alone may be the first batch's cold start), and each
        # read-ahead would be a wasted pull and one more delivery attempt for its messages
        # (which a dead-letter policy counts): none is started until two tasks come closer.
        self._expired = 0
        self._ended: float | None = None
        self._tasks = TaskOwner()

    @property
    def held(self) -> ReadAhead | None:
        return self._held

    async def start(
        self,
        key: tuple[str, str],
        journal: Journal,
        subscription: str,
        quota: int,
        pull_timeout: float,
        fault: FaultHook | None = None,
        batch_pulled: Callable[[], bool] = lambda: True,
    ) -> None:
        """Pull up to ``quota`` messages ahead, unless a read-ahead is held already, once
        ``batch_pulled()`` (the current batch's read tasks have all journaled their
        parts) or ``PARTS_WAIT_SECONDS`` have passed."""
        self._ended = self._clock.now()
        if self._held is not None or quota <= 0 or self._expired >= EXPIRED_IN_A_ROW:
            return
        await self._tasks.open()
        log = LeaseLog(journal.new_read_ahead_log(), self._clock)
        ahead = ReadAhead(key, Pulled(Admission(Known())), log)
        ahead.pulling = self._tasks.spawn(
            self._pull(ahead, subscription, quota, pull_timeout, fault, batch_pulled),
            "eoclient-read-ahead",
        )
        if ahead.pulling is not None:  # else closed
            self._held = ahead

    async def _pull(
        self,
        ahead: ReadAhead,
        subscription: str,
        quota: int,
        pull_timeout: float,
        fault: FaultHook | None,
        batch_pulled: Callable[[], bool],
    ) -> None:
        clock = self._clock
        waited_enough = clock.now() + PARTS_WAIT_SECONDS
        while not ahead.taken and not batch_pulled() and clock.now() < waited_enough:
            await clock.sleep(PARTS_POLL_SECONDS)
        try:
            await pull_part(
                self._client,
                subscription,
                ahead.pulled,
                ahead.log,
                max_rows=quota,
                deadline=clock.now() + pull_timeout,
                clock=clock,
            )
        except Exception as error:  # what it holds is given back; the next task pulls
            logger.warning("a read-ahead's pull failed: %s", error)
            ahead.failed = True
        if fault is not None and ahead.pulled.admission.delivered:
            await fault("read_ahead")  # holding answers, not adopted yet
        if self._held is ahead:
            if ahead.failed or not ahead.pulled.admission.delivered:
                self._held = None
                await self._give_back(ahead)
            else:
                ahead.expiry = self._tasks.spawn(self._expire(ahead), "eoclient-read-ahead-hold")

    async def _expire(self, ahead: ReadAhead) -> None:
        await self._clock.sleep(HOLD_SECONDS)
        if self._held is ahead:
            self._held = None
            self._expired += 1
            await self._give_back(ahead)

    async def take(self, key: tuple[str, str] | None) -> ReadAhead | None:
        """The read-ahead, once its pull is over, for a task of ``key`` to adopt; ``None``
        if there is none (one of another key, or that failed, is given back; ``key`` None:
        a task that pulls nothing gives it back)."""
        ended, self._ended = self._ended, None
        if ended is not None and self._clock.now() - ended <= HOLD_SECONDS:
            self._expired = 0  # tasks close enough together again
        ahead, self._held = self._held, None
        if ahead is None:
            return None
        assert ahead.pulling is not None
        ahead.taken = True
        await asyncio.shield(ahead.pulling)
        if ahead.expiry is not None:
            ahead.expiry.cancel()
        if ahead.key != key or ahead.failed or not ahead.pulled.admission.delivered:
            await self._give_back(ahead)
            return None
        return ahead

    async def give_back(self, ahead: ReadAhead) -> None:
        """Give back a read-ahead taken but not adopted (its log taken by the driver)."""
        await self._give_back(ahead)

    async def _give_back(self, ahead: ReadAhead) -> None:
        # Renamed first: the driver, which gives back a log it renamed, leaves this one.
        with contextlib.suppress(FileNotFoundError):  # the driver's: it gives them back too
            ahead.log.move(_giving_back(ahead.log.path))
        ack_ids = ahead.ack_ids
        if ack_ids:
            with contextlib.suppress(Exception):  # else they come back at their deadline
                await self._client.modify_ack_deadline(
                    ahead.key[1], ack_ids, 0, ack_retry=GIVE_BACK_RETRY
                )
        ahead.log.close(delete=True)

    async def close(self) -> None:
        """Give back what is held (the worker closes)."""
        ahead, self._held = self._held, None
        await self._tasks.close()  # its pull cancelled: what it logged is given back here
        if ahead is not None:
            await self._give_back(ahead)


def _giving_back(path: Path) -> Path:
    return path.with_name(f"{path.stem.split('.')[0]}.{uuid.uuid4().hex[:8]}.giveback")


def split_quota(chunks: list[Received], quota: int) -> tuple[list[Received], list[str]]:
    """The held answers an adopting task takes, in order, up to ``quota`` deliveries (the
    answer that crosses it cut there); the ack ids past it, to give back."""
    taken: list[Received] = []
    excess: list[str] = []
    room = quota
    for chunk in chunks:
        if room >= len(chunk):
            taken.append(chunk)
            room -= len(chunk)
        elif room > 0:
            taken.append(
                Received(
                    chunk.rows.slice(0, room),
                    chunk.message_ids[:room],
                    chunk.ack_ids[:room],
                    chunk.publish_ns[:room],
                )
            )
            excess.extend(chunk.ack_ids[room:])
            room = 0
        else:
            excess.extend(chunk.ack_ids)
    return taken, excess


def adopt_answers(ahead: ReadAhead, pulled: Pulled, quota: int) -> list[str]:
    """Make the held answers ``pulled``'s first (admitted under its own plan), up to
    ``quota`` deliveries; the ack ids past it (to give back). ``pulled.first_sent`` is the
    read-ahead's: the leases run from its first call."""
    taken, excess = split_quota(ahead.pulled.chunks, quota)
    pulled.first_sent = ahead.pulled.first_sent
    for chunk in taken:
        pulled.chunks.append(chunk)
        pulled.admission.admit(chunk.message_ids, chunk.ack_ids, chunk.publish_ns)
    return excess


def claim_stale(journal: Journal, now: float) -> tuple[LeaseRecord, bool]:
    """The driver's part: take the read-ahead logs last written more than ``HOLD_SECONDS +
    CLOCK_SKEW_SECONDS`` before ``now`` (wall clock), renamed so that no worker adopts them
    now; what they list (the caller gives their answered ids back, then deletes them). And
    whether a fresher one exists (a worker may still adopt it)."""
    taken: list[Path] = []
    fresh = False
    for path in journal.read_ahead_logs():
        try:
            written = os.stat(path).st_mtime
        except FileNotFoundError:
            continue  # adopted or given back meanwhile
        if now - written <= HOLD_SECONDS + CLOCK_SKEW_SECONDS:
            fresh = fresh or path.suffix == ".log"
            continue
        target = _giving_back(path)
        try:
            os.rename(path, target)
        except FileNotFoundError:
            continue  # adopted or given back meanwhile
        taken.append(target)
    return read_logs(taken), fresh
