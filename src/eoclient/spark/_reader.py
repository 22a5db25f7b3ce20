"""A read task (executor side): settle its share of the committed batch, then replay a
journaled part or pull it, journal it, hand its leases to the keeper, and emit.

``read_part`` runs in Spark's Python worker on an executor, for one :class:`ReadTask` of a
batch. It settles the committed parts the driver dealt it (``_settle``: their acks, the
give-back of what their dead attempts held). A task with no part of its own (a batch that
only settles) stops there. If its part is journaled (a task retry, a speculative copy, a
re-run of the batch after a restart), its rows are replayed from the journal and nothing is
pulled. The batch's first pulling task also carries the driver's probe part (part 0, always
journaled before the batch's tasks exist): it replays it before its own rows. Otherwise:

1. pull up to the part's quota (``_pull.pull_part``; every answer's ack ids go to this
   attempt's lease log first), on the worker's loop while the settles' acks are sent
   (``_Pulling``); the steps below wait for the settles. Published after an
   ``availableNow`` run began: given back (modack 0).
2. redeliveries of committed messages (the batches being settled, the pending ids) are
   acked at once, not emitted; messages another part of this batch journaled meanwhile keep
   their redelivery's ack id, to be acked with the batch (ack-only rows). Both are looked up
   in Arrow once the pull is over, by message id and publish time
   (``_dated_ids.ids_among``).
3. if the pull took so long that the leases might not outlive the keeper's first tick,
   extend them first (``_decisions.may_claim_unverified``); a message whose lease is already
   lost is dropped (whoever got its redelivery emits it);
4. claim the part: its file appears atomically, or another attempt's did, in which case
   this attempt gives its messages back (modack 0) and replays the winner's file;
5. hand the part's ack ids to this worker's lease keeper (``_keeper``), which extends them
   until the part is settled;
6. only then return the rows to Spark.

The rows thus always come from the journal's file (or are exactly its content), so every
attempt of a partition emits the same rows. A worker process keeps its event loop, channel
and keepers for its next tasks (Spark reuses Python workers), so a task opens no connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from eoclient._clock import AsyncClock
from eoclient.spark._ahead import adopt_answers
from eoclient.spark._dated_ids import ids_among
from eoclient.spark._decisions import Admission, Known, may_claim_unverified
from eoclient.spark._faults import fault_point
from eoclient.spark._journal import (
    Journal,
    Part,
    PartFile,
    Plan,
    emitted_rows,
    local_path,
)
from eoclient.spark._keeper import StringColumn
from eoclient.spark._lease_log import LeaseLog
from eoclient.spark._options import SourceSettings
from eoclient.spark._pull import Pulled, pull_part
from eoclient.spark._schema import ROW_SCHEMA, WIRE_SCHEMA
from eoclient.spark._settle import acknowledge, acknowledge_part, finish, unsettled_part
from eoclient.spark._worker import Worker as _Worker
from eoclient.spark._worker import close_workers as close_workers
from eoclient.spark._worker import fault_hook, freeze_survivors, read_ahead_key
from eoclient.spark._worker import worker as _worker
from eoclient.spark._worker import workers as _workers  # noqa: F401 (tests, benchmarks)
from eoclient.subscriber import AckRetrySettings, SubscriberClient

# Rows an executor gives Spark per Arrow batch; bounds a read task's memory at ~this x
# message size beyond the part itself.
READ_CHUNK_ROWS = 8192
# Acks and modacks from a read task are retried this long at most: what fails is acked with
# the batch, or comes back when its deadline passes.
TASK_ACK_RETRY = AckRetrySettings(deadline=10.0)

logger = logging.getLogger("eoclient.spark")


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One partition of a batch (the value of its ``InputPartition``).

    Attributes:
        batch: the batch.
        part: the part it reads (0: the driver's probe; i >= 1: pulls up to ``quota``), or
            ``None`` for a task that only settles.
        quota: how many messages it pulls at most (0 for the probe's part).
        settle: committed parts ``(batch, part)`` it settles first.
        with_probe: it also replays the probe's part (0) of its batch, before its own rows.
            The driver gives the probe's part to the batch's first pulling task rather than
            a task of its own: with ``numPartitions`` tasks on as many executor slots, a
            third task made one read task wait for a slot (~0.3 s of every 3 s batch,
            measured on local[2]).
    """

    batch: int
    part: int | None
    quota: int
    settle: tuple[tuple[int, int], ...] = ()
    with_probe: bool = False


@dataclass(slots=True)
class _Attempt:
    """One attempt at pulling a part: what it pulled, its lease log, its executor."""

    pulled: Pulled
    log: LeaseLog
    parent: int
    ack_deadline: float
    batch: int
    index: int


def read_part(settings: SourceSettings, task: ReadTask) -> Iterator[pa.RecordBatch]:
    """The rows of ``task``'s part (pulled now, or replayed), once its settles are done;
    first the probe's part's, if the task carries it (``ReadTask.with_probe``)."""
    journal = Journal(local_path(settings.journal_path))
    fault_point("read", settings.fault_points, settings.fault_dir)
    freeze_survivors.task_started()
    worker = _worker(settings.endpoint)
    pulling = _pulling(settings, worker, journal, task)
    if pulling is None:  # nothing to pull: a read-ahead held is given back now
        worker.loop.run(worker.ahead.take(None))
    own_rows = None
    try:
        for batch, index in task.settle:
            _settle_one(settings, worker, journal, batch, index, pulling)
        if task.part is None:
            return
        if pulling is not None:
            pulling.settled()
            attempt = pulling.result()
            # Here, not on the worker's loop: a test may hold this task here.
            fault_point("before_claim", settings.fault_points, settings.fault_dir)
            own_rows = worker.loop.run(
                _claim(settings, worker, journal, pulling.plan.settles, attempt)
            )
    finally:
        if pulling is not None:
            pulling.close()
    if pulling is not None:
        # Pulled and journaled (or not, in the negative control), no row returned yet.
        fault_point("after_claim", settings.fault_points, settings.fault_dir)
    if task.with_probe:
        yield from _replay(settings, worker, journal, task.batch, 0, None)
    yield from _replay(settings, worker, journal, task.batch, task.part, own_rows)
    if pulling is not None and pulling.full() and settings.read_ahead:
        # Its rows handed over: pull the next batch's share while Spark finishes this one.
        # Only an optimization: a failure to start one must not fail the task.
        pulling_tasks = len(pulling.plan.quotas)
        start = worker.ahead.start(
            read_ahead_key(settings),
            journal,
            settings.subscription,
            task.quota,
            settings.pull_timeout,
            fault_hook(settings),
            lambda: journal.parts_journaled(task.batch, pulling_tasks),
        )
        try:
            worker.loop.run(start)
        except Exception as error:
            logger.warning("no read-ahead: %s", error)


def _replay(
    settings: SourceSettings,
    worker: _Worker,
    journal: Journal,
    batch: int,
    index: int,
    own_rows: pa.Table | None,
) -> Iterator[pa.RecordBatch]:
    """The rows of a journaled part, its leases handed to the worker's keeper first (or,
    in the negative control, ``own_rows``: what this attempt pulled)."""
    part = journal.read_part(batch, index)
    worker.loop.run(_hold(settings, worker, journal, part))
    if own_rows is not None:  # the negative control only: not the journaled rows
        rows = own_rows.select(ROW_SCHEMA.names).cast(ROW_SCHEMA)
    else:
        rows = emitted_rows(part)
    yield from rows.to_batches(max_chunksize=READ_CHUNK_ROWS)


def _pulling(
    settings: SourceSettings, worker: _Worker, journal: Journal, task: ReadTask
) -> _Pulling | None:
    """The pull of ``task``'s part, not started yet; ``None`` if the task pulls nothing (it
    only settles, or its part is journaled: replayed)."""
    if task.part is None:
        return None
    batch, index = task.batch, task.part
    probe = journal.part_path(batch, 0)
    if task.with_probe and not probe.exists():
        raise RuntimeError(
            f"the journal in {journal.directory} has no {probe.name} of batch {batch}: "
            "was it deleted, or does journalPath belong to another checkpoint?"
        )
    path = journal.part_path(batch, index)
    if path.exists() and (index == 0 or settings.journal_replay):
        return None
    if index == 0 or task.quota == 0:
        raise RuntimeError(
            f"the journal in {journal.directory} has no {path.name} of batch {batch}: "
            "was it deleted, or does journalPath belong to another checkpoint?"
        )
    plan = journal.plan(batch)
    if plan is None:
        raise RuntimeError(f"the journal in {journal.directory} has no plan of batch {batch}")
    return _Pulling(settings, worker, journal, task, plan)


@dataclass(slots=True)
class _Pulling:
    """A read task's pull, on the worker's loop while the task's main thread settles the
    committed parts: the settle's acks and the pull's calls then share the server, and the
    task decodes what it pulled while the server acks (one after the other, the task waited
    for the acks, ~0.7 s of a 100,000-message batch on two cores, with next to no CPU of its
    own). The pull starts once the first settle is about to send its acks (after its
    ``before_settle`` point: a task stopped there has pulled nothing), or at once without a
    settle. What it pulled is admitted and journaled only once every settle is done
    (``_claim`` reads the pending ids the settles write); ``pullTimeoutSeconds`` counts from
    then (:meth:`deadline`)."""

    settings: SourceSettings
    worker: _Worker
    journal: Journal
    task: ReadTask
    plan: Plan
    attempt: _Attempt | None = None
    running: Future[None] | None = None
    settled_at: float | None = None  # on the worker's clock; set from the task's thread

    def deadline(self) -> float:
        """When the pull stops sending calls: ``pullTimeoutSeconds`` after the settles are
        done (while they run, never: the acks share the server with the pull, and a
        deadline that counted them would cut parts short on a busy machine)."""
        settled_at = self.settled_at
        start = self.worker.clock.now() if settled_at is None else settled_at
        return start + self.settings.pull_timeout

    def settled(self) -> None:
        """The task's settles are done: the pull's deadline runs from now."""
        self.settled_at = self.worker.clock.now()

    def start(self) -> None:
        """Send the pull's first calls (once)."""
        if self.running is not None:
            return
        batch, index = self.task.batch, self.task.part
        assert index is not None
        known = Known(cutoff_ns=self.plan.cutoff_ns, dedupe=self.settings.dedupe)
        pulled = Pulled(Admission(known))
        path = self.journal.attempt_log(batch, index)
        adopted, excess = self._adopt(pulled, path)
        self.attempt = attempt = _Attempt(
            pulled,
            adopted or LeaseLog(path, self.worker.clock),
            os.getppid(),
            self.plan.ack_deadline,
            batch,
            index,
        )
        pull = _pull(self.settings, self.worker, attempt, self.task.quota, self.deadline, excess)
        self.running = self.worker.loop.submit(pull)

    def _adopt(self, pulled: Pulled, path: Path) -> tuple[LeaseLog | None, list[str]]:
        """Adopt the worker's read-ahead if it holds one of this journal and subscription
        (``_ahead``): its log becomes this attempt's, at ``path``; its answers ``pulled``'s
        first. The adopted log (``None``: nothing adopted) and the ack ids past the quota,
        to give back."""
        settings, worker = self.settings, self.worker
        ahead = worker.loop.run(worker.ahead.take(read_ahead_key(settings)))
        if ahead is None:
            return None, []
        # Holding it, taken from the worker's slot, not yet renamed.
        fault_point("before_adopt", settings.fault_points, settings.fault_dir)
        try:
            ahead.log.move(path)
        except FileNotFoundError:  # held too long: the driver took its log, gives it back
            worker.loop.run(worker.ahead.give_back(ahead))
            return None, []
        # The attempt's log lists the adopted answers; nothing admitted or given back yet.
        fault_point("after_adopt", settings.fault_points, settings.fault_dir)
        return ahead.log, adopt_answers(ahead, pulled, self.task.quota)

    def full(self) -> bool:
        """Whether the pull came back with its whole quota (else the backlog is drained,
        or slow: no read-ahead)."""
        attempt = self.attempt
        return attempt is not None and attempt.pulled.admission.delivered >= self.task.quota

    def result(self) -> _Attempt:
        """What the pull collected, once it is over (its error if it failed)."""
        self.start()
        assert self.running is not None
        assert self.attempt is not None
        self.running.result()
        return self.attempt

    def close(self) -> None:
        """After the claim, or on an error: wait for the pull's calls to end, then close
        its lease log, kept unless journaled or given back (the settle releases what it
        lists)."""
        if self.running is None or self.attempt is None:
            return
        with contextlib.suppress(Exception):  # raised by result() already, or a settle's
            self.running.result()
        self.attempt.log.close(delete=False)


def _settle_one(
    settings: SourceSettings,
    worker: _Worker,
    journal: Journal,
    batch: int,
    index: int,
    pulling: _Pulling | None,
) -> None:
    # Waits for a worker settling the part early (``_settle.EarlySettles``), then finds
    # it settled.
    with journal.settle_lock(batch, index, wait=True):
        part = unsettled_part(journal, batch, index)
        if part is None:
            return
        # Outside the worker's loop: a test may hold this task here.
        fault_point("before_settle", settings.fault_points, settings.fault_dir)
        if pulling is not None:
            pulling.start()
        worker.loop.run(acknowledge_part(worker.client, settings.subscription, journal, part))
        # Acked, pending written, not yet marked settled.
        fault_point("after_settle", settings.fault_points, settings.fault_dir)
        finish(journal, part)


async def _hold(settings: SourceSettings, worker: _Worker, journal: Journal, part: Part) -> None:
    """Keep the part's leases until it is settled, and settle it once its batch is
    committed (``_settle.EarlySettles``)."""
    await worker.keeper(settings).hold(
        journal.part_path(part.batch, part.index),
        journal.settled_path(part.batch, part.index),
        StringColumn(part.table.column("ack_id")),
        part.leased_until,
    )
    await worker.settles.watch(
        journal, settings.subscription, part.batch, part.index, fault_hook(settings)
    )


async def _pull(
    settings: SourceSettings,
    worker: _Worker,
    attempt: _Attempt,
    quota: int,
    deadline: Callable[[], float],
    excess: list[str],
) -> None:
    await _release(worker.client, settings.subscription, excess)
    await pull_part(
        worker.client,
        settings.subscription,
        attempt.pulled,
        attempt.log,
        max_rows=quota,
        deadline=deadline,
        clock=worker.clock,
    )


async def _claim(
    settings: SourceSettings,
    worker: _Worker,
    journal: Journal,
    settles: tuple[int, ...],
    attempt: _Attempt,
) -> pa.Table | None:
    """Journal the part; ``None`` once the journal holds it (this attempt's or another's).
    With ``journalReplay`` off (a negative control), the rows this attempt pulled, whether
    or not another attempt's are the journaled ones."""
    client, subscription, clock = worker.client, settings.subscription, worker.clock
    pulled, batch, index = attempt.pulled, attempt.batch, attempt.index
    admission = pulled.admission
    # Redeliveries of messages Spark has committed: acked now, not emitted.
    committed = [
        *(column for settled in settles for column in journal.message_ids(settled)),
        *journal.pending_ids(),
    ]
    if committed:
        admission.ack_committed(ids_among(committed, pulled.emitted_ids()))
    if admission.ack_now:
        with contextlib.suppress(Exception):  # they come back, and are acked then
            await acknowledge(client, subscription, list(admission.ack_now), TASK_ACK_RETRY)
    await _release(client, subscription, admission.release)
    # Another part of this batch may have journaled some of these meanwhile (a redelivery
    # after its lease ran out): keep those as ack-only rows.
    elsewhere = journal.message_ids(batch, except_part=index)
    if elsewhere:
        admission.withdraw(ids_among(elsewhere, pulled.emitted_ids()))
    first_sent = pulled.first_sent or clock.now()
    leased_until = first_sent + attempt.ack_deadline
    if not may_claim_unverified(clock.now(), first_sent, attempt.ack_deadline):
        leased_until = await _verify_leases(client, subscription, admission, settings, clock)
    if os.getppid() != attempt.parent:
        # Orphaned: the executor died under this worker. Journal nothing; the lease log
        # tells the settle what to give back.
        raise RuntimeError("the executor of this read task is gone")
    rows = pulled.rows()
    data = PartFile(rows, _ack_only(admission), leased_until)
    if journal.claim(batch, index, data):
        attempt.log.close(delete=True)
        return None
    if not settings.journal_replay:
        attempt.log.close(delete=True)
        return rows  # emitted, never acked: what replay prevents
    # Another attempt journaled this part first: its rows are the part's.
    await _release(client, subscription, admission.leased())
    attempt.log.close(delete=True)
    return None


async def _release(client: SubscriberClient, subscription: str, ack_ids: list[str]) -> None:
    """Give deliveries back for redelivery now (modack 0). Best effort: one that is not
    released comes back when its deadline passes."""
    if ack_ids:
        with contextlib.suppress(Exception):
            await client.modify_ack_deadline(subscription, ack_ids, 0, ack_retry=TASK_ACK_RETRY)


async def _verify_leases(
    client: SubscriberClient,
    subscription: str,
    admission: Admission,
    settings: SourceSettings,
    clock: AsyncClock,
) -> float:
    """Extend every lease this attempt holds; drop the messages whose lease is lost. When
    the extended leases end."""
    emitted = dict(admission.emitted_ack_ids)
    started = clock.now()
    # The ack-only ones too: they are acked with the batch. One of them that is lost is
    # harmless: its message's next redelivery is acked then (its id is in this batch).
    results = await client.modify_ack_deadline(
        subscription,
        [*emitted.values(), *admission.after_commit],
        settings.lease_seconds,
        ack_retry=TASK_ACK_RETRY,
    )
    failed = results.failed
    lost = [message_id for message_id, ack_id in emitted.items() if ack_id in failed]
    if lost:
        logger.warning("%d leases were lost before journaling: not emitted here", len(lost))
    admission.drop(lost)
    return started + settings.lease_seconds


def _ack_only(admission: Admission) -> pa.Table:
    message_ids = list(admission.after_commit.values())
    columns = {field.name: pa.nulls(len(message_ids), field.type) for field in WIRE_SCHEMA}
    columns["message_id"] = pa.array(message_ids, pa.string())
    columns["ack_id"] = pa.array(list(admission.after_commit), pa.string())
    return pa.table(columns, schema=WIRE_SCHEMA)
