"""The driver side of the source, in Spark's source-runner process: plans batches, acks
them after Spark's commit, keeps journaled deliveries leased, cleans up after dead pullers.

Every coroutine runs on one loop (``LoopThread``); the runner's state is touched only there.
Spark's calls (``source.py``) hand their work to the loop and wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eoclient._tasks import cancel_and_wait
from eoclient._transport import PubSubTransport
from eoclient.admin import AdminClient
from eoclient.errors import NotFound, RpcError, SparkConnectorError
from eoclient.spark._decisions import (
    Admission,
    Known,
    Leases,
    Settlement,
    expire_pending,
    leftovers,
    plan_partitions,
)
from eoclient.spark._faults import fault_point
from eoclient.spark._journal import Journal, Plan, encode_part, local_path
from eoclient.spark._lease_log import LeaseLog, read_logs
from eoclient.spark._loop import LoopThread
from eoclient.spark._options import SourceSettings
from eoclient.spark._pull import (
    PULL_CALL_TIMEOUT,
    PULL_MAX,
    PULLS_IN_FLIGHT,
    Pulled,
    open_transport,
    pull_part,
)
from eoclient.spark._schema import WIRE_SCHEMA
from eoclient.subscriber import AcknowledgeStatus, AckRetrySettings, SubscriberClient

# The driver's probe pull asks for this many messages at most: what its Pull calls in
# flight bring in one round. A batch whose probe gets fewer is the probe alone; otherwise
# read tasks on the executors pull the rest of maxMessagesPerTrigger.
PROBE_ROWS = PULL_MAX * PULLS_IN_FLIGHT
# How often the lease task looks for new journal parts and leases to extend (seconds).
LEASE_TICK = 1.0
# Transient ack failures are retried this long before the ids count as unconfirmed
# (pending: acked on redelivery). Nothing is lost by giving up.
ACK_RETRY = AckRetrySettings(deadline=30.0)
# A lease extension is retried for at most this long: the next tick sends it again anyway.
LEASE_RETRY = AckRetrySettings(deadline=LEASE_TICK * 2)
# A restarted driver gives back what dead pullers held only once their logs have been still
# this long: a read task whose executor died finishes its pull within pullTimeoutSeconds
# (and checks for its executor before journaling), so none is still about to journal them.
DEAD_PULLER_QUIET = 5.0

logger = logging.getLogger("eoclient.spark")


@dataclass(frozen=True, slots=True)
class _PartIds:
    batch: int
    message_ids: list[str]
    ack_ids: list[str]


class Runner:
    """The source runner's state and work (see the module docstring)."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self.journal = Journal(local_path(settings.journal_path))
        self.journal.create()
        self.epoch = self.journal.epoch()
        state = self.journal.load_state()
        self.settled: int = int(state.get("settled", 0))  # batches below are acked
        self.pending: dict[str, float] = dict(state.get("pending", {}))
        self.ack_deadline = 10.0
        self.available_now = False
        self.cutoff_ns: int | None = None
        self.grace_until = 0.0  # monotonic
        self.leases = Leases(settings.lease_seconds)
        self.parts: dict[str, _PartIds] = {}  # discovered journal parts, by lease group
        self._settle_target = self.settled
        self._settling: asyncio.Task[None] | None = None
        self._acked_by_probe: set[str] = set()
        self._lease_task: asyncio.Task[None] | None = None
        self.client: SubscriberClient | None = None
        self.transport: PubSubTransport | None = None
        self.loop = LoopThread("eoclient-spark-source")
        self.log: LeaseLog | None = None
        self.loop.run(self._start())

    # ------------------------------------------------------------------- start

    async def _start(self) -> None:
        # On the loop: a grpc.aio channel belongs to the loop it is made on.
        self.client = SubscriberClient(self.settings.endpoint)
        self.transport = open_transport(self.settings.endpoint)
        await self._check_subscription()
        dead_logs = self.journal.driver_logs()
        for batch in self._unsettled_on_disk():
            dead_logs += self.journal.attempt_logs(batch)
        self._discover(time.time())
        await self._give_back(dead_logs)
        self.log = LeaseLog(self.journal.new_driver_log())
        self._lease_task = asyncio.get_running_loop().create_task(self._lease_forever())

    async def _check_subscription(self) -> None:
        name = self.settings.subscription
        try:
            async with AdminClient(self.settings.endpoint) as admin:
                subscription = await admin.get_subscription(name)
        except NotFound as error:
            raise SparkConnectorError(
                f"eoclient source: the subscription {name} does not exist ({error}); create "
                "it (with exactly-once delivery), or correct the subscription option"
            ) from error
        except RpcError as error:
            raise SparkConnectorError(
                f"eoclient source: cannot read the subscription {name}: {error}"
            ) from error
        if not subscription.enable_exactly_once_delivery and not self.settings.allow_at_least_once:
            raise SparkConnectorError(
                f"eoclient source: {name} does not have exactly-once delivery, and the source "
                "is exactly-once only on such subscriptions. Enable it, or set "
                '.option("allowAtLeastOnce", "true") to accept at-least-once results.'
            )
        self.ack_deadline = float(subscription.ack_deadline_seconds or 10)

    async def _give_back(self, logs: list[Path]) -> None:
        """Release what dead pullers (an earlier run's driver and read tasks) held and never
        journaled; decide how long an ``availableNow`` run waits for what they may hold."""
        record = read_logs(logs)
        quiet_for = time.time() - record.newest_write
        if record.paths and quiet_for < DEAD_PULLER_QUIET:
            await asyncio.sleep(DEAD_PULLER_QUIET - quiet_for)
        journaled = {ack_id for part in self.parts.values() for ack_id in part.ack_ids}
        plan = leftovers(
            record.answered,
            [sent + PULL_CALL_TIMEOUT for sent in record.unanswered_since],
            journaled,
            self.ack_deadline,
        )
        await self._release(plan.release)
        for path in record.paths:
            path.unlink(missing_ok=True)
        if self.settings.restart_grace is not None:
            grace = self.settings.restart_grace
        else:
            grace = max(0.0, plan.wait_until - time.time())
        self.grace_until = time.monotonic() + grace

    # -------------------------------------------------------------- Spark's calls

    async def latest(self, start: int, max_rows: int) -> int:
        """``latestOffset``: batches below ``start`` are committed; plan batch ``start``
        (probe, journal, plan) and return ``start + 1``, or ``start`` if there is nothing."""
        now = time.time()
        self._discover(now)
        self.request_settle(start)
        if self.journal.plan(start) is not None:
            return start + 1  # planned before a crash, before Spark's offset log
        if self.journal.part_path(start, 0).exists():
            # The probe was journaled, the plan not: the batch is the probe alone.
            self._write_plan(start, ())
            return start + 1
        pulled, asked = await self._probe(start, max_rows)
        if not pulled.admission.emitted:
            # Nothing (more) to read: what is committed is acked before this returns, since
            # Spark may end the query (availableNow) and kill this process.
            await self.settled_upto(start)
            return start
        rows = pulled.rows()
        quotas = plan_partitions(rows.num_rows, asked, max_rows, self.settings.num_partitions)
        leased_until = (pulled.first_sent or now) + self.ack_deadline
        self.journal.batch_dir(start).mkdir(exist_ok=True)
        self.journal.claim(start, 0, encode_part(rows, WIRE_SCHEMA.empty_table(), leased_until))
        self._write_plan(start, quotas)
        self._renew_log()
        self._discover(time.time())
        return start + 1

    def partitions(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """``(batch, part, quota)`` of each part of the batches in ``[start, end)``."""
        parts = []
        for batch in range(start, end):
            plan = self.journal.plan(batch)
            if plan is None:
                raise RuntimeError(
                    f"the journal in {self.journal.directory} has no plan of batch {batch}: "
                    "was it deleted, or does journalPath belong to another checkpoint?"
                )
            parts.append((batch, 0, 0))
            parts += [(batch, index, quota) for index, quota in enumerate(plan.quotas, 1)]
        return parts

    def request_settle(self, upto: int) -> None:
        """Batches below ``upto`` are committed: ack them (in the background, in order)."""
        self._settle_target = max(self._settle_target, upto)
        if self._settle_target > self.settled and (self._settling is None or self._settling.done()):
            self._settling = asyncio.get_running_loop().create_task(self._settle_all())

    async def settled_upto(self, upto: int) -> None:
        self.request_settle(upto)
        while self.settled < upto:
            assert self._settling is not None
            await asyncio.shield(self._settling)

    # --------------------------------------------------------------- probing

    def _write_plan(self, batch: int, quotas: tuple[int, ...]) -> None:
        plan = Plan(
            quotas=quotas,
            cutoff_ns=self.cutoff_ns,
            ack_deadline=self.ack_deadline,
            pending=tuple(self.pending),
            unsettled=tuple(range(self.settled, batch)),
        )
        self.journal.write_plan(batch, plan)

    def _committed(self, below: int) -> set[str]:
        ids = set(self.pending)
        for part in self.parts.values():
            if part.batch < below:
                ids.update(part.message_ids)
        return ids

    async def _probe(self, start: int, max_rows: int) -> tuple[Pulled, int]:
        assert self.log is not None
        assert self.transport is not None
        known = Known(
            committed=self._committed(start), cutoff_ns=self.cutoff_ns, dedupe=self.settings.dedupe
        )
        pulled = Pulled(Admission(known))
        asked = min(max_rows, PROBE_ROWS)
        await pull_part(
            self.transport,
            self.settings.subscription,
            pulled,
            self.log,
            max_rows=asked,
            deadline=time.monotonic() + self.settings.pull_timeout,
            keep_waiting=lambda now: self.available_now and now < self.grace_until,
        )
        admission = pulled.admission
        if admission.ack_now:
            # Redeliveries of committed messages: acked, not emitted.
            statuses = await self._acknowledge(admission.ack_now)
            for ack_id, message_id in admission.ack_now.items():
                if statuses.get(ack_id) is AcknowledgeStatus.SUCCESS:
                    self.pending.pop(message_id, None)
                    self._acked_by_probe.add(message_id)
        # Published after this availableNow run began: back to the subscription now.
        await self._release(admission.release)
        if not admission.emitted:
            self._renew_log()
        return pulled, asked

    def _renew_log(self) -> None:
        """What the driver's log listed is journaled or settled: start a fresh one."""
        assert self.log is not None
        self.log.close(delete=True)
        self.log = LeaseLog(self.journal.new_driver_log())

    # -------------------------------------------------------------- settling

    async def _settle_all(self) -> None:
        while self.settled < self._settle_target:
            await self._settle(self.settled)

    async def _settle(self, batch: int) -> None:
        """Ack batch ``batch`` (committed), give back what dead attempts held, prune it."""
        self._discover(time.time())
        groups = [group for group, part in self.parts.items() if part.batch == batch]
        message_ids: list[str] = []
        ack_ids: list[str] = []
        for group in groups:
            message_ids += self.parts[group].message_ids
            ack_ids += self.parts[group].ack_ids
        if ack_ids:
            fault_point("before_ack", self.settings.fault_points, self.settings.fault_dir)
            settlement = Settlement.from_rows(message_ids, ack_ids)
            while sent := settlement.next_round():
                settlement.record(sent, await self._acknowledge(sent))
            now = time.time()
            for message_id in settlement.unconfirmed - self._acked_by_probe:
                # Unconfirmed: a redelivery is acked, not emitted.
                self.pending[message_id] = now
        # Read tasks that died (or lost a race and died before giving back): their
        # deliveries were never journaled; release them now rather than at their deadline.
        record = read_logs(self.journal.attempt_logs(batch))
        await self._release(leftovers(record.answered, (), set(ack_ids), 0).release)
        for group in groups:
            self.leases.remove(group)
            del self.parts[group]
        self._acked_by_probe.clear()
        self.settled = batch + 1
        self.pending = expire_pending(self.pending, time.time())
        # Saved before the batch is pruned: a read task that finds it gone reads the
        # pending ids here instead.
        self.journal.save_state({"settled": self.settled, "pending": self.pending})
        self.journal.prune(batch)

    async def _acknowledge(self, ack_ids: Iterable[str]) -> dict[str, AcknowledgeStatus]:
        """Ack by id; an id not confirmed SUCCESS is missing from or not SUCCESS in the
        answer (a broken channel: nothing is confirmed)."""
        try:
            results = await self._client().acknowledge(
                self.settings.subscription, ack_ids, ack_retry=ACK_RETRY
            )
        except Exception as error:
            logger.warning("acknowledging failed, the ids stay pending: %s", error)
            return {}
        return {ack_id: result.status for ack_id, result in results.items()}

    async def _release(self, ack_ids: list[str]) -> None:
        """Give deliveries back for redelivery now (modack 0). Best effort: one that is not
        released comes back when its deadline passes."""
        if ack_ids:
            with contextlib.suppress(Exception):
                await self._client().modify_ack_deadline(self.settings.subscription, ack_ids, 0)

    def _client(self) -> SubscriberClient:
        assert self.client is not None, "used before _start"
        return self.client

    # ------------------------------------------------------------------ leases

    def _unsettled_on_disk(self) -> list[int]:
        return [batch for batch in self.journal.batches() if batch >= self.settled]

    def _discover(self, now: float) -> None:
        """Lease (and remember for the settle) every journal part not seen yet."""
        for batch in self._unsettled_on_disk():
            for index in self.journal.part_indexes(batch):
                group = f"{batch}/{index}"
                if group in self.parts:
                    continue
                part = self.journal.read_part(batch, index, ["message_id", "ack_id"])
                ids = _PartIds(
                    batch,
                    part.table.column("message_id").to_pylist(),
                    part.table.column("ack_id").to_pylist(),
                )
                self.parts[group] = ids
                self.leases.add(group, ids.ack_ids, part.leased_until, now)

    async def _lease_forever(self) -> None:
        while True:
            # Every tick (new parts to find), or sooner when a lease is due sooner.
            now = time.time()
            wakeup = self.leases.next_wakeup(now)
            await asyncio.sleep(LEASE_TICK if wakeup is None else min(LEASE_TICK, wakeup - now))
            try:
                self._discover(time.time())
            except OSError as error:  # a part being pruned: the next tick sees the rest
                logger.debug("journal scan: %s", error)
            for group, ack_ids in self.leases.due(time.time()).items():
                try:
                    results = await self._client().modify_ack_deadline(
                        self.settings.subscription,
                        ack_ids,
                        self.settings.lease_seconds,
                        ack_retry=LEASE_RETRY,
                    )
                except Exception as error:  # the next round tries again
                    logger.warning("extending %d leases failed: %s", len(ack_ids), error)
                    continue
                lost = [
                    ack_id
                    for ack_id, result in results.items()
                    if result.status is AcknowledgeStatus.INVALID_ACK_ID
                ]
                # Lost: the message comes back as a redelivery; it is in a journal, so
                # admission acks it (committed) or keeps it with the batch.
                self.leases.lost(group, lost)

    # ----------------------------------------------------------------- closing

    async def close(self) -> None:
        await cancel_and_wait(self._lease_task)
        if self.log is not None:
            self.log.close(delete=False)
        if self.client is not None:
            await self.client.aclose()
        if self.transport is not None:
            await self.transport.close()
