"""A read task (executor side): replay a journaled part, or pull it, journal it, then emit.

``read_part`` runs in Spark's Python worker on an executor, for one partition of a batch.
If the part is journaled (a task retry, a speculative copy, a re-run of the batch after a
restart), its rows are replayed from the journal and nothing is pulled. Otherwise:

1. pull up to the part's quota (``_pull.pull_part``; every answer's ack ids go to this
   attempt's lease log first), admitting each delivery against what the plan says is
   committed (pending ids, and the ids of batches whose acks were under way when it was
   planned): such redeliveries are acked at once, not emitted. Published after an
   ``availableNow`` run began: given back (modack 0).
2. just before journaling, drop messages another part of this batch journaled meanwhile
   (their redelivery's ack id is kept, to be acked with the batch: ack-only rows);
3. if the pull took so long that the leases might not outlive the driver finding the
   journal, extend them first (``_decisions.may_claim_unverified``); a message whose lease
   is already lost is dropped (whoever got its redelivery emits it);
4. claim the part: its file appears atomically, or another attempt's did, in which case
   this attempt gives its messages back (modack 0) and replays the winner's file;
5. only then return the rows to Spark.

The rows thus always come from the journal's file (or are exactly its content), so every
attempt of a partition emits the same rows. A worker process keeps its event loop and
clients for its next tasks (Spark reuses Python workers), so a task opens no connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from eoclient._transport import PubSubTransport
from eoclient.spark._decisions import Admission, Known, may_claim_unverified
from eoclient.spark._faults import fault_point
from eoclient.spark._journal import Journal, emitted_rows, encode_part, local_path
from eoclient.spark._lease_log import LeaseLog
from eoclient.spark._loop import LoopThread
from eoclient.spark._options import SourceSettings
from eoclient.spark._pull import Pulled, open_transport, pull_part
from eoclient.spark._schema import ROW_SCHEMA, WIRE_SCHEMA
from eoclient.subscriber import AcknowledgeStatus, AckRetrySettings, SubscriberClient

# Rows an executor gives Spark per Arrow batch; bounds a read task's memory at ~this x
# message size beyond the part itself.
READ_CHUNK_ROWS = 8192
# Acks and modacks from a read task are retried this long at most: what fails is acked with
# the batch, or comes back when its deadline passes.
TASK_ACK_RETRY = AckRetrySettings(deadline=10.0)

logger = logging.getLogger("eoclient.spark")


@dataclass(slots=True)
class _Worker:
    """This Python worker's event loop and clients, kept for its next read tasks: Spark
    reuses a worker process for many tasks (``spark.python.worker.reuse``), so a task does
    not pay for a new connection (a busy server may be slow to accept one)."""

    loop: LoopThread
    transport: PubSubTransport
    client: SubscriberClient


_workers: dict[str | None, _Worker] = {}


def _worker(endpoint: str | None) -> _Worker:
    worker = _workers.get(endpoint)
    if worker is None:
        loop = LoopThread("eoclient-spark-read")

        async def connect() -> tuple[PubSubTransport, SubscriberClient]:
            # On the loop: a grpc.aio channel belongs to the loop it is made on.
            return open_transport(endpoint), SubscriberClient(endpoint)

        transport, client = loop.run(connect())
        worker = _workers[endpoint] = _Worker(loop, transport, client)
    return worker


def close_workers() -> None:
    """Close this process's read-task clients (for tests: a worker process just exits)."""
    for worker in _workers.values():

        async def close(worker: _Worker = worker) -> None:
            await worker.client.aclose()
            await worker.transport.close()

        with contextlib.suppress(Exception):
            worker.loop.run(close(), timeout=10)
        worker.loop.close()
    _workers.clear()


@dataclass(slots=True)
class _Attempt:
    """One attempt at pulling a part: what it pulled, its lease log, its executor."""

    pulled: Pulled
    log: LeaseLog
    parent: int
    ack_deadline: float


def read_part(
    settings: SourceSettings, batch: int, index: int, quota: int
) -> Iterator[pa.RecordBatch]:
    """The rows of part ``index`` of ``batch`` (pulled now, or replayed)."""
    journal = Journal(local_path(settings.journal_path))
    fault_point("read", settings.fault_points, settings.fault_dir)
    path = journal.part_path(batch, index)
    own_rows = None
    if not path.exists() or (index > 0 and not settings.journal_replay):
        if index == 0 or quota == 0:
            raise RuntimeError(
                f"the journal in {journal.directory} has no {path.name} of batch {batch}: "
                "was it deleted, or does journalPath belong to another checkpoint?"
            )
        worker = _worker(settings.endpoint)
        known, ack_deadline = _known(settings, journal, batch)
        attempt = _Attempt(
            Pulled(Admission(known)),
            LeaseLog(journal.attempt_log(batch, index)),
            os.getppid(),
            ack_deadline,
        )
        try:
            worker.loop.run(_pull(settings, worker, attempt, quota))
            # Here, not on the worker's loop: a test may hold this task here.
            fault_point("before_claim", settings.fault_points, settings.fault_dir)
            own_rows = worker.loop.run(_claim(settings, worker, journal, batch, index, attempt))
        finally:
            # Kept unless journaled or given back: the driver releases what it lists.
            attempt.log.close(delete=False)
        # Pulled and journaled (or not, in the negative control), no row returned yet.
        fault_point("after_claim", settings.fault_points, settings.fault_dir)
    if own_rows is not None:  # the negative control only: not the journaled rows
        rows = own_rows.select(ROW_SCHEMA.names).cast(ROW_SCHEMA)
    else:
        rows = emitted_rows(journal.read_part(batch, index))
    yield from rows.to_batches(max_chunksize=READ_CHUNK_ROWS)


def _known(settings: SourceSettings, journal: Journal, batch: int) -> tuple[Known, float]:
    plan = journal.plan(batch)
    if plan is None:
        raise RuntimeError(f"the journal in {journal.directory} has no plan of batch {batch}")
    committed: set[str] = set(plan.pending)
    for earlier in plan.unsettled:
        committed.update(journal.message_ids(earlier))
    # A batch settled since the plan (and pruned, maybe while it was read above) left its
    # unconfirmed ids here: the state is saved before a batch is pruned.
    committed.update(journal.load_state().get("pending", {}))
    known = Known(committed=committed, cutoff_ns=plan.cutoff_ns, dedupe=settings.dedupe)
    return known, plan.ack_deadline


async def _pull(settings: SourceSettings, worker: _Worker, attempt: _Attempt, quota: int) -> None:
    await pull_part(
        worker.transport,
        settings.subscription,
        attempt.pulled,
        attempt.log,
        max_rows=quota,
        deadline=time.monotonic() + settings.pull_timeout,
    )


async def _claim(
    settings: SourceSettings,
    worker: _Worker,
    journal: Journal,
    batch: int,
    index: int,
    attempt: _Attempt,
) -> pa.Table | None:
    """Journal the part; ``None`` once the journal holds it (this attempt's or another's).
    With ``journalReplay`` off (a negative control), the rows this attempt pulled, whether
    or not another attempt's are the journaled ones."""
    client, subscription = worker.client, settings.subscription
    pulled = attempt.pulled
    admission = pulled.admission
    if admission.ack_now:
        await client.acknowledge(subscription, admission.ack_now, ack_retry=TASK_ACK_RETRY)
    await _release(client, subscription, admission.release)
    # Another part of this batch may have journaled some of these meanwhile (a redelivery
    # after its lease ran out): keep those as ack-only rows.
    admission.withdraw(journal.message_ids(batch, except_part=index))
    first_sent = pulled.first_sent or time.time()
    leased_until = first_sent + attempt.ack_deadline
    if not may_claim_unverified(time.time(), first_sent, attempt.ack_deadline):
        leased_until = await _verify_leases(client, subscription, admission, settings)
    if os.getppid() != attempt.parent:
        # Orphaned: the executor died under this worker. Journal nothing; the lease log
        # tells the driver what to give back.
        raise RuntimeError("the executor of this read task is gone")
    rows = pulled.rows()
    data = encode_part(rows, _ack_only(admission), leased_until)
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
    client: SubscriberClient, subscription: str, admission: Admission, settings: SourceSettings
) -> float:
    """Extend every lease this attempt holds; drop the messages whose lease is lost. When
    the extended leases end."""
    emitted = dict(admission.emitted_ack_ids)
    started = time.time()
    # The ack-only ones too: they are acked with the batch. One of them that is lost is
    # harmless: its message's next redelivery is acked then (its id is in this batch).
    results = await client.modify_ack_deadline(
        subscription,
        [*emitted.values(), *admission.after_commit],
        settings.lease_seconds,
        ack_retry=TASK_ACK_RETRY,
    )
    lost = [
        message_id
        for message_id, ack_id in emitted.items()
        if results[ack_id].status is not AcknowledgeStatus.SUCCESS
    ]
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
