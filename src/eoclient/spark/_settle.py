"""Settling a committed part, on an executor: ack it, give back what its dead attempts held.

Batch ``k``'s plan lists the committed batches it settles (``plan.settles``: the previous
batch, Spark having committed it before it asked for batch ``k``); ``partitions`` deals
their parts out to batch ``k``'s read tasks, and each task settles its share before it
pulls. For one part:

1. if ``part-<i>.settled`` exists, it is done (a retried task, a re-run batch);
2. ack every ack id of the part (emitted and ack-only rows: the SDK's bulk
   ``SubscriberClient.acknowledge``, one call per 2,500 ids, nothing per id when a call
   succeeds);
3. give back (modack 0) what the part's dead attempts pulled and never journaled: their
   lease logs (``part-<i>.<attempt>.log``) list it;
4. write the messages none of whose ack ids succeeded to ``pending/<k>-<i>.arrow``: a
   redelivery of one of them is acked, not emitted (until ``PENDING_TTL_SECONDS``);
5. mark the part settled, delete the logs.

All of it under the part's settle lock (``Journal.settle_lock``). The worker whose task
emitted a part usually settles it before the task it is dealt to starts
(:class:`EarlySettles`); that task then waits for the lock and finds the part settled.

A task that dies before 5 leaves it to its retry, which acks again: ids acked the first time
then fail and go pending too (harmless: such a message is never redelivered; its id is only
remembered). Spark commits batch ``k`` only once every task succeeded, so when the driver
learns of that commit (``latestOffset(k + 1)``) every part of ``plan.settles`` is settled
and it prunes those batches.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

from eoclient._clock import AsyncClock
from eoclient._tasks import TaskOwner
from eoclient.spark._decisions import give_back, unconfirmed
from eoclient.spark._journal import Journal, Part
from eoclient.spark._lease_log import read_logs
from eoclient.subscriber import AcknowledgeStatus, AckRetrySettings, SubscriberClient

# Transient ack failures are retried this long before the ids count as unconfirmed
# (pending: acked on redelivery). Nothing is lost by giving up.
SETTLE_RETRY = AckRetrySettings(deadline=30.0)
# How often a worker looks for the commit mark of a batch whose parts it emitted (seconds):
# its settle starts at most this long after the driver learns of the commit (a stat a look).
COMMIT_POLL_SECONDS = 0.01
# How long it looks (seconds). A query whose next trigger comes later leaves the part to the
# task the driver deals it to, as without the early settle.
COMMIT_WATCH_SECONDS = 30.0

logger = logging.getLogger("eoclient.spark")


def unsettled_part(journal: Journal, batch: int, index: int) -> Part | None:
    """Part ``index`` of ``batch`` with its ids, or ``None`` if it is settled (or pruned)."""
    if journal.settled_path(batch, index).exists():
        return None
    try:
        return journal.read_part(batch, index, ["message_id", "ack_id"])
    except FileNotFoundError:
        return None


async def acknowledge_part(
    client: SubscriberClient, subscription: str, journal: Journal, part: Part
) -> None:
    """Steps 2-4: ack the part, give back its dead attempts' deliveries, record what stays
    pending."""
    ack_ids = part.table.column("ack_id").to_pylist()
    try:
        failed = await acknowledge(client, subscription, ack_ids, SETTLE_RETRY)
    except Exception as error:  # a broken channel: nothing is confirmed
        logger.warning(
            "acknowledging %d messages failed, they stay pending: %s", len(ack_ids), error
        )
        failed = dict.fromkeys(ack_ids, AcknowledgeStatus.OTHER)
    record = read_logs(journal.attempt_logs(part.batch, part.index))
    if released := give_back(record.answered, set(ack_ids) if record.answered else ()):
        with contextlib.suppress(Exception):  # best effort: else they come back at their deadline
            await client.modify_ack_deadline(subscription, released, 0, ack_retry=SETTLE_RETRY)
    if failed:
        message_ids = part.table.column("message_id").to_pylist()
        pending = unconfirmed(message_ids, ack_ids, failed)
        if pending:
            journal.write_pending(part.batch, part.index, pending)


def finish(journal: Journal, part: Part) -> None:
    """Step 5."""
    journal.mark_settled(part.batch, part.index)
    for path in journal.attempt_logs(part.batch, part.index):
        path.unlink(missing_ok=True)


async def acknowledge(
    client: SubscriberClient, subscription: str, ack_ids: list[str], retry: AckRetrySettings
) -> dict[str, AcknowledgeStatus]:
    """Ack ``ack_ids`` in bulk; the ids that did not succeed, with their status (a transient
    failure that outlived ``retry.deadline``: OTHER).

    A failed id only becomes *pending* (its redelivery is acked, not emitted), which is right
    for any subscription: without exactly-once delivery the server does not check ack ids,
    and none fails."""
    results = await client.acknowledge(subscription, ack_ids, ack_retry=retry)
    return {ack_id: result.status for ack_id, result in results.failed.items()}


class EarlySettles:
    """Settles the parts a worker's read tasks emitted once their batch is committed, on the
    worker's loop, before the next batch's tasks (which the driver deals them to) start.

    Spark commits batch k, then asks for batch k + 1 (``latestOffset``); the driver marks k
    committed there (``Journal.mark_committed``), probes and plans k + 1, and Spark launches
    its tasks. Those used to settle k's parts before anything else: 0.1-0.3 s of every batch
    (``benchmarks/spark_timeline.py``, 100,000 messages a batch on local[2]) in which the
    tasks only acked and Spark waited for their rows. Now the worker that emitted a part
    watches for its batch's mark and settles the part meanwhile, holding the part's settle
    lock; the task dealt the part takes the lock after it (waiting while it is held) and
    finds the part settled. A worker that finds the lock held leaves the part to the holder
    (docs/protocol.md#spark-early-settles). Every method runs on the worker's loop."""

    def __init__(self, client: SubscriberClient, clock: AsyncClock) -> None:
        self._client = client
        self._clock = clock
        self._tasks = TaskOwner()

    async def watch(
        self,
        journal: Journal,
        subscription: str,
        batch: int,
        index: int,
        fault: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """Settle part ``index`` of ``batch`` once the batch is marked committed; ``fault``:
        the crash tests' hook, at the task path's points (``before_settle``,
        ``after_settle``), so that a kill lands in either path."""
        await self._tasks.open()
        self._tasks.spawn(
            self._settle_when_committed(journal, subscription, batch, index, fault),
            "eoclient-spark-early-settle",
        )

    async def _settle_when_committed(
        self,
        journal: Journal,
        subscription: str,
        batch: int,
        index: int,
        fault: Callable[[str], Awaitable[None]] | None,
    ) -> None:
        clock = self._clock
        give_up = clock.now() + COMMIT_WATCH_SECONDS
        committed, settled = journal.committed_path(batch), journal.settled_path(batch, index)
        while not committed.exists():
            if clock.now() >= give_up or settled.exists():
                return
            await clock.sleep(COMMIT_POLL_SECONDS)
        try:
            with journal.settle_lock(batch, index, wait=False) as held:
                part = unsettled_part(journal, batch, index) if held else None
                if part is not None:
                    if fault is not None:
                        await fault("before_settle")
                    await acknowledge_part(self._client, subscription, journal, part)
                    if fault is not None:
                        await fault("after_settle")
                    finish(journal, part)
        except Exception as error:  # the task dealt the part settles it
            logger.warning("settling part %d of batch %d early failed: %s", index, batch, error)

    async def close(self) -> None:
        await self._tasks.close()
