"""The driver side of the source, in Spark's source-runner process: plans batches and keeps
the journal's books; the work per message is the executors' (``_reader``, ``_settle``).

Per batch the driver reads a few small files (plans, the previous batch's message ids as
Arrow columns, which it only scans), pulls one probe round (at most ``PROBE_ROWS``
messages, whatever the batch size) and writes the probe's part and the plan. It acks
nothing of a committed batch: the next batch's read tasks ack it (``plan.settles``). It
keeps only its probe's parts leased (a lease keeper of its own, ``_keeper``), since a
batch's first task may start long after the probe (a cold Python worker); the executors'
keepers extend what their tasks journaled.

Every coroutine runs on one loop (``LoopThread``); the runner's state is touched only there.
Spark's calls (``source.py``) hand their work to the loop and wait for it.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from eoclient._clock import AsyncClock, SystemClock
from eoclient.admin import AdminClient
from eoclient.errors import NotFound, RpcError, SparkConnectorError
from eoclient.spark._ahead import claim_stale
from eoclient.spark._dated_ids import DatedIds, ids_among
from eoclient.spark._decisions import (
    PENDING_TTL_SECONDS,
    Admission,
    Known,
    assign_settles,
    grace_until,
    plan_partitions,
)
from eoclient.spark._journal import Journal, PartFile, Plan, local_path
from eoclient.spark._keeper import LeaseKeeper
from eoclient.spark._lease_log import LeaseLog, read_logs
from eoclient.spark._loop import LoopThread
from eoclient.spark._options import SourceSettings
from eoclient.spark._pull import (
    PULL_CALL_TIMEOUT,
    PULL_MAX,
    PULLS_IN_FLIGHT,
    Pulled,
    open_client,
    pull_part,
)
from eoclient.spark._reader import ReadTask
from eoclient.spark._schema import WIRE_SCHEMA
from eoclient.spark._settle import acknowledge
from eoclient.subscriber import AcknowledgeStatus, AckRetrySettings, SubscriberClient

# The driver's probe pull asks for this many messages at most: what its Pull calls in
# flight bring in one round. A batch whose probe gets fewer is the probe alone; otherwise
# read tasks on the executors pull the rest of maxMessagesPerTrigger.
PROBE_ROWS = PULL_MAX * PULLS_IN_FLIGHT
# The probe's acks (redeliveries of committed messages) and releases: retried this long;
# what fails comes back and is handled again.
PROBE_ACK_RETRY = AckRetrySettings(deadline=10.0)
# A restarted driver reads what dead pullers' logs say only once they have been still this
# long: a read task whose executor died finishes its pull within pullTimeoutSeconds (and
# checks for its executor before journaling), so none is still writing then.
DEAD_PULLER_QUIET = 5.0

logger = logging.getLogger("eoclient.spark")


class Runner:
    """The source runner's state and work (see the module docstring). ``clock``: wall-clock
    time (lease ends and send times are compared with other processes'), by default the
    system's."""

    def __init__(self, settings: SourceSettings, clock: AsyncClock | None = None) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.journal = Journal(local_path(settings.journal_path))
        self.journal.create()
        self.epoch = self.journal.epoch()
        self.settled: int = int(self.journal.load_state().get("settled", 0))  # batches below
        self.ack_deadline = 10.0
        self.available_now = False
        self.cutoff_ns: int | None = None
        self.grace_until = 0.0  # on self.clock
        self.client: SubscriberClient | None = None
        self.keeper: LeaseKeeper | None = None
        self.loop = LoopThread("eoclient-spark-source")
        self.log: LeaseLog | None = None
        self.loop.run(self._start())

    # ------------------------------------------------------------------- start

    async def _start(self) -> None:
        # On the loop: a grpc.aio channel belongs to the loop it is made on.
        self.client = open_client(self.settings.endpoint, self.clock)
        self.keeper = LeaseKeeper(
            self.client, self.settings.subscription, self.settings.lease_seconds, self.clock
        )
        await self._check_subscription()
        self._migrate_pending()
        await self._give_back()
        self.log = LeaseLog(self.journal.new_driver_log(), self.clock)

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

    def _migrate_pending(self) -> None:
        """A journal written by the version whose driver acked every batch kept its pending
        ids in state.json: they move to a pending file of their own."""
        state = self.journal.load_state()
        pending = state.pop("pending", None)
        if pending is None:
            return
        if pending:
            self.journal.write_pending(self.settled, 0, sorted(pending))
        self.journal.save_state(state)

    async def _give_back(self) -> None:
        """Release what the dead driver's probe held and never journaled; decide how long an
        ``availableNow`` run waits for what dead pullers may hold unrecorded.

        Read tasks' attempt logs are the settle's (``_settle``): it gives their deliveries
        back once their batch is committed. Here only their unanswered calls count."""
        driver_logs = self.journal.driver_logs()
        attempt_logs = [
            path
            for batch in self.journal.batches()
            if batch >= self.settled
            for path in self.journal.attempt_logs(batch)
        ]
        # A read-ahead's calls in flight too (its answered ids: ``_read_aheads``).
        attempt_logs += self.journal.read_ahead_logs()
        record = read_logs(driver_logs)
        calls = read_logs(attempt_logs, ack_ids=False)
        quiet_for = self.clock.now() - max(record.newest_write, calls.newest_write)
        if (record.paths or calls.paths) and quiet_for < DEAD_PULLER_QUIET:
            await self.clock.sleep(DEAD_PULLER_QUIET - quiet_for)
            calls = read_logs(attempt_logs, ack_ids=False)
        journaled = await self._probe_ack_ids()
        await self._release([ack_id for ack_id in record.answered if ack_id not in journaled])
        for path in record.paths:
            path.unlink(missing_ok=True)
        if self.settings.restart_grace is not None:
            grace = self.settings.restart_grace
        else:
            sent = [*record.unanswered_since, *calls.unanswered_since]
            grace = grace_until(sent, PULL_CALL_TIMEOUT, self.ack_deadline) - self.clock.now()
        self.grace_until = self.clock.now() + max(0.0, grace)

    async def _probe_ack_ids(self) -> set[str]:
        """The ack ids of probe parts of unsettled batches, leased again (a dead driver's
        log lists those it journaled: they are the batch's, not to be given back)."""
        ids: set[str] = set()
        for batch in self.journal.batches():
            if batch >= self.settled and self.journal.part_path(batch, 0).exists():
                part = self.journal.read_part(batch, 0, ["ack_id"])
                ack_ids = part.table.column("ack_id").to_pylist()
                await self._hold(batch, ack_ids, part.leased_until)
                ids.update(ack_ids)
        return ids

    async def _hold(self, batch: int, ack_ids: list[str], leased_until: float) -> None:
        assert self.keeper is not None
        path = self.journal.part_path(batch, 0)
        settled = self.journal.settled_path(batch, 0)
        await self.keeper.hold(path, settled, ack_ids, leased_until)

    # -------------------------------------------------------------- Spark's calls

    async def latest(self, start: int, max_rows: int) -> int:
        """``latestOffset``: batches below ``start`` are committed; plan batch ``start``
        (probe, journal, plan) and return ``start + 1``, or ``start`` if there is nothing to
        read and nothing to settle."""
        self.advance(start)
        if self.journal.plan(start) is not None:
            return start + 1  # planned before a crash, before Spark's offset log
        settles = self._unsettled(start)
        for batch in settles:  # the workers that emitted their parts settle them now
            self.journal.mark_committed(batch)
        if self.journal.part_path(start, 0).exists():
            # The probe was journaled, the plan not: the batch is the probe alone.
            self._write_plan(start, (), probe=True, settles=settles)
            return start + 1
        fresh = await self._read_aheads()
        pulled, drained = await self._probe(start, max_rows)
        while not pulled.admission.emitted and pulled.admission.ack_now:
            # Only redeliveries of committed messages (acked now), until the pull's
            # deadline: the subscription is not known to be empty. Look again: each round
            # acks some for good, and a run must not end with them left unacked.
            self._renew_log()
            pulled, drained = await self._probe(start, max_rows)
        partitions = self.settings.num_partitions
        if not pulled.admission.emitted:
            self._renew_log()
            # A worker's fresh read-ahead may hold what is left: read tasks, which adopt it
            # (or find nothing, and then read no further ahead); not the end of the run.
            quotas = plan_partitions(0, False, max_rows, partitions) if fresh else ()
            if not settles and not quotas:
                return start
            # Nothing new, but a committed batch waits for its acks: a batch of settle tasks
            # (no row). Its commit then ends an availableNow run with everything acked.
            self._write_plan(start, quotas, probe=False, settles=settles)
            return start + 1
        rows = pulled.rows()
        quotas = plan_partitions(rows.num_rows, drained and not fresh, max_rows, partitions)
        leased_until = (pulled.first_sent or self.clock.now()) + self.ack_deadline
        self.journal.batch_dir(start).mkdir(exist_ok=True)
        self.journal.claim(start, 0, PartFile(rows, WIRE_SCHEMA.empty_table(), leased_until))
        await self._hold(start, rows.column("ack_id").to_pylist(), leased_until)
        self._write_plan(start, quotas, probe=True, settles=settles)
        self._renew_log()
        return start + 1

    def partitions(self, start: int, end: int) -> list[ReadTask]:
        """The read tasks of the batches in ``[start, end)``: one per quota, the first of
        them also replaying the probe's part (a task of its own only when the plan has no
        quota), and the parts of ``plan.settles`` spread over them (only settle tasks if the
        batch reads nothing). No task of its own for the probe's part beside pulling tasks:
        with ``numPartitions`` tasks on as many slots, that one made a pulling task wait
        for a free slot."""
        tasks: list[ReadTask] = []
        for batch in range(start, end):
            plan = self.journal.plan(batch)
            if plan is None:
                raise RuntimeError(
                    f"the journal in {self.journal.directory} has no plan of batch {batch}: "
                    "was it deleted, or does journalPath belong to another checkpoint?"
                )
            # (part, quota, with_probe) of each task.
            reads: list[tuple[int | None, int, bool]] = [
                (index, quota, plan.probe and index == 1)
                for index, quota in enumerate(plan.quotas, 1)
            ]
            if plan.probe and not reads:
                reads = [(0, 0, False)]
            units = [
                (settled, index)
                for settled in plan.settles
                for index in self.journal.part_indexes(settled)
            ]
            if not reads:
                reads = [(None, 0, False)] * min(len(units), self.settings.num_partitions)
            settles = assign_settles(units, len(reads))
            for (part, quota, with_probe), settle in zip(reads, settles, strict=True):
                tasks.append(ReadTask(batch, part, quota, settle, with_probe))
        return tasks

    def advance(self, start: int) -> None:
        """Batches below ``start`` are in Spark's commit log, so the settles their tasks ran
        are done: forget and prune every batch that is settled or had nothing to settle."""
        settled_by_tasks: set[int] = set()
        plans: dict[int, Plan] = {}
        for batch in self.journal.batches():
            if self.settled <= batch < start:
                plan = self.journal.plan(batch)
                if plan is not None:
                    plans[batch] = plan
                    settled_by_tasks.update(plan.settles)
        # The lowest committed batch still waiting for its acks bounds what is settled.
        waiting = [
            batch for batch, plan in plans.items() if plan.reads and batch not in settled_by_tasks
        ]
        settled = min(waiting, default=max(start, self.settled))
        if settled > self.settled:
            self.settled = settled
            # Saved before pruning: a crash in between prunes the rest at the restart.
            self.journal.save_state({"settled": self.settled})
            for batch in self.journal.batches():
                if batch < self.settled:
                    self.journal.prune(batch)
        self.journal.expire_pending(self.clock.now() - PENDING_TTL_SECONDS)

    def _unsettled(self, start: int) -> tuple[int, ...]:
        """Committed batches (below ``start``) whose rows no batch's tasks have acked."""
        return tuple(
            batch
            for batch in self.journal.batches()
            if self.settled <= batch < start
            and (plan := self.journal.plan(batch)) is not None
            and plan.reads
        )

    # --------------------------------------------------------------- probing

    def _write_plan(
        self, batch: int, quotas: tuple[int, ...], *, probe: bool, settles: tuple[int, ...]
    ) -> None:
        plan = Plan(
            quotas=quotas,
            probe=probe,
            settles=settles,
            cutoff_ns=self.cutoff_ns,
            ack_deadline=self.ack_deadline,
        )
        self.journal.write_plan(batch, plan)

    async def _probe(self, start: int, max_rows: int) -> tuple[Pulled, bool]:
        """Pull one round for batch ``start``; and whether it found the subscription drained
        (fewer new messages than it asked for)."""
        assert self.log is not None
        assert self.client is not None
        # Redeliveries of committed messages (the batches being settled, the pending ids):
        # acked, not emitted; looked up per response, so they do not fill the probe.
        committed = [
            *(c for batch in self._unsettled(start) for c in self.journal.message_ids(batch)),
            *self.journal.pending_ids(),
        ]
        known = Known(
            cutoff_ns=self.cutoff_ns,
            dedupe=self.settings.dedupe,
            committed=lambda message_ids: ids_among(
                committed, DatedIds(pa.array(message_ids, pa.string()))
            ),
        )
        pulled = Pulled(Admission(known))
        asked = min(max_rows, PROBE_ROWS)
        await pull_part(
            self.client,
            self.settings.subscription,
            pulled,
            self.log,
            max_rows=asked,
            deadline=self.clock.now() + self.settings.pull_timeout,
            clock=self.clock,
            keep_waiting=lambda now: self.available_now and now < self.grace_until,
        )
        admission = pulled.admission
        drained = len(admission.emitted) < asked
        if admission.ack_now:
            failed = await self._acknowledge(list(admission.ack_now))
            if failed:
                logger.info("%d redeliveries of committed messages not acked yet", len(failed))
        # Published after this availableNow run began: back to the subscription now.
        await self._release(admission.release)
        return pulled, drained

    async def _read_aheads(self) -> bool:
        """Give back the read-ahead logs workers held too long (dead, most likely:
        ``_ahead.claim_stale``); whether a fresher one exists, which a worker may adopt."""
        record, fresh = claim_stale(self.journal, self.clock.now())
        await self._release(record.answered)
        if record.unanswered_since:  # a call in flight when its worker died
            until = grace_until(record.unanswered_since, PULL_CALL_TIMEOUT, self.ack_deadline)
            self.grace_until = max(self.grace_until, until)
        for path in record.paths:
            path.unlink(missing_ok=True)
        return fresh

    def _renew_log(self) -> None:
        """What the driver's log listed is journaled, acked or given back: a fresh one."""
        assert self.log is not None
        self.log.close(delete=True)
        self.log = LeaseLog(self.journal.new_driver_log(), self.clock)

    async def _acknowledge(self, ack_ids: list[str]) -> dict[str, AcknowledgeStatus]:
        assert self.client is not None
        try:
            return await acknowledge(
                self.client, self.settings.subscription, ack_ids, PROBE_ACK_RETRY
            )
        except Exception as error:  # they come back, and are acked then
            logger.warning("acknowledging %d redeliveries failed: %s", len(ack_ids), error)
            return dict.fromkeys(ack_ids, AcknowledgeStatus.OTHER)

    async def _release(self, ack_ids: list[str]) -> None:
        """Give deliveries back for redelivery now (modack 0). Best effort: one that is not
        released comes back when its deadline passes."""
        if ack_ids and self.client is not None:
            try:
                await self.client.modify_ack_deadline(
                    self.settings.subscription, ack_ids, 0, ack_retry=PROBE_ACK_RETRY
                )
            except Exception as error:
                logger.debug("giving back %d deliveries failed: %s", len(ack_ids), error)

    # ----------------------------------------------------------------- closing

    async def close(self) -> None:
        if self.keeper is not None:
            await self.keeper.close()
        if self.log is not None:
            self.log.close(delete=False)
        if self.client is not None:
            await self.client.aclose()
