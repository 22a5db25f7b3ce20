"""The streaming source: subscription → DataFrame, exactly once into a file sink.

Design (spark-notes §4, option A: driver pull + offset-keyed journal + ack after commit +
message_id dedup). Every method but ``read`` runs in Spark's one long-lived source-runner
process, on the same reader object; there a :class:`_Driver` owns a background asyncio loop,
the SDK clients and all in-memory state.

* ``latestOffset(start, limit)``: (1) acks every batch ending at or before ``start`` (Spark
  calls it only after ``commits/<that batch>`` is durable: the *early ack*, needed because
  ``commit`` lags one batch and never comes for the last batch of an ``availableNow`` run);
  (2) if a journal file starting at ``start`` exists (a crash after the journal write, before
  Spark's offset WAL), returns its end; (3) otherwise pulls up to ``limit`` messages (while
  the acks of (1) are under way), drops message ids already journaled (keeping the
  redelivery's newer ack id) or awaiting an ack (acking them now), writes the batch
  atomically to ``batch-<start>-<end>.arrow`` and returns ``{"journal": <epoch>, "seq": end}``.
  Then, if that batch was full and Spark's batches run well within the ack deadline, it
  starts *pulling ahead*: the next batch's messages are pulled in the background while Spark
  runs this one, and the next ``latestOffset`` journals them (they are leased but not
  journaled meanwhile: a crash lets them come back after their deadline, like a crash mid-pull).
* ``partitions`` / ``read`` serve row slices of the journal, so a replay is identical.
* ``commit(end)``: acks ``seq < end``. SUCCESS → never redelivered. Anything else (an expired
  or superseded ack id, a broken channel) → the id goes to the durable ``pending`` set: a
  redelivery is acked and not emitted. Then journal files ``<= end`` are pruned.
* a lease task on the loop extends a journaled, unacked message to ``leaseSeconds`` whenever
  less than a third of its deadline is left.

Acks and lease extensions go by ack id, many ids a call (``SubscriberClient.acknowledge`` /
``modify_ack_deadline``). The journal keeps each message's ack id, so after a restart the
journaled messages are leased and acked with it at once (their leases may well still hold),
without waiting for a redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from eoclient.admin import AdminClient
from eoclient.errors import NotFound, RpcError, SparkConnectorError
from eoclient.spark._errors import one_line_errors
from eoclient.spark._faults import fault_point
from eoclient.spark._journal import JOURNAL_SCHEMA, ROW_SCHEMA, Journal, read_table
from eoclient.spark._loop import LoopThread
from eoclient.spark._options import SourceSettings
from eoclient.subscriber import AcknowledgeStatus, AckRetrySettings, Message, SubscriberClient

# Rows an executor gets per Arrow batch; bounds a read task's memory at ~this x message size.
READ_CHUNK_ROWS = 8192
# One Pull asks for at most this many messages (the service caps a Pull at 1000).
PULL_MAX = 1000
# Pull calls kept in flight at once: with two, the server encodes the next response while
# this process converts the last (measured here: 35k → see docs/benchmarks.md).
PULLS_IN_FLIGHT = 2
# Pull ahead only while Spark asks for the next batch within this share of the ack deadline
# after the last: pulled-ahead messages are not leased beyond the deadline of their delivery
# (a query that stops would hold them), so they must be journaled, and so leased, well
# before it passes. A batch that takes longer just costs their redelivery (dropped by id).
PULL_AHEAD_WITHIN = 0.5
# How often the lease task looks for leases to extend (seconds).
LEASE_TICK = 1.0
# Pending ids (committed, ack unconfirmed) are forgotten after this long: the default
# message retention (7 days), after which the service will not redeliver them either.
PENDING_TTL_SECONDS = 7 * 24 * 3600.0
# Transient ack failures are retried this long before the ids count as unconfirmed (pending:
# acked on redelivery). Short, because the early ack runs inside latestOffset, which holds up
# Spark's trigger; nothing is lost by giving up.
ACK_RETRY = AckRetrySettings(deadline=30.0)
# A lease extension is retried for at most this long: the next tick sends it again anyway.
LEASE_RETRY = AckRetrySettings(deadline=LEASE_TICK * 2)

logger = logging.getLogger("eoclient.spark")


class _Driver:
    """The source-runner side. Every coroutine runs on ``loop``; state is touched only there."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self.journal = Journal(settings.journal_path)
        self.epoch = self.journal.epoch()
        self.loop = LoopThread("eoclient-spark-source")
        self.client: SubscriberClient | None = None
        # Journaled and not yet settled: message id → seq, and the ack id of its newest
        # delivery while that is believed live (a redelivery replaces it; a failed lease
        # extension drops it, and the next redelivery brings a new one).
        self.seq_of: dict[str, int] = {}
        self.ack_id_of: dict[str, str] = {}
        # When the lease of each live ack id runs out (monotonic; an estimate from below).
        self.lease_until: dict[str, float] = {}
        self.ack_deadline = 10.0
        state = self.journal.load_state()
        self.pending: dict[str, float] = dict(state.get("pending", {}))
        # Wall-clock start of the pull (or pull ahead) whose messages are not all journaled
        # or released yet; None when there is none.
        self.pulling_since: float | None = None
        # Wall-clock time until which messages that an earlier run pulled but never journaled
        # (it died mid-pull) may still be leased to it; they come back after it. Persisted, and
        # kept until it passes, so a run that dies during the wait hands it on.
        self.unjournaled_leased_until: float = float(state.get("unjournaled_leased_until") or 0)
        for f in self.journal.files():
            table = read_table(str(f.path))
            message_ids = table.column("message_id").to_pylist()
            ack_ids = table.column("ack_id").to_pylist()
            for offset, (message_id, ack_id) in enumerate(zip(message_ids, ack_ids, strict=True)):
                self.seq_of[message_id] = f.start + offset
                # Journaled by an earlier run: its lease may still hold. Extended at the
                # first lease tick; if that fails, a redelivery brings a new ack id.
                self.ack_id_of[message_id] = ack_id
                self.lease_until[message_id] = 0.0
        self.available_now = False
        # availableNow: messages published after this (ns since the epoch) wait for a later run.
        self.cutoff: int | None = None
        self.grace_until = 0.0
        self._lease_task: asyncio.Task[None] | None = None
        # The next batch being pulled while Spark runs this one (settle_and_pull).
        self._ahead: _PullAhead | None = None
        # When settle_and_pull last returned (monotonic): how long Spark takes per batch.
        self._returned_at: float | None = None
        self.loop.run(self._start())

    async def _start(self) -> None:
        self.client = SubscriberClient(self.settings.endpoint)
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
        grace = self.settings.restart_grace
        if grace is None:
            grace = max(0.0, self.unjournaled_leased_until - time.time())
        elif self.unjournaled_leased_until == 0 and not self.journal.has_history():
            grace = 0.0  # a first run: nothing of an earlier run to wait for
        self.grace_until = time.monotonic() + grace
        self._lease_task = asyncio.get_running_loop().create_task(self._extend_leases())

    # ------------------------------------------------------------------- leases

    async def _extend_leases(self) -> None:
        """Extend a lease once less than a third of the ack deadline is left, all due ones
        in one call: a batch that Spark commits quickly is acked with no modack at all."""
        margin = max(2.0, self.ack_deadline / 3)
        while True:
            await asyncio.sleep(LEASE_TICK)
            now = time.monotonic()
            due = {
                self.ack_id_of[message_id]: message_id
                for message_id, until in self.lease_until.items()
                if until - now < margin
            }
            if not due:
                continue
            try:
                results = await self._client().modify_ack_deadline(
                    self.settings.subscription,
                    due,
                    self.settings.lease_seconds,
                    ack_retry=LEASE_RETRY,
                )
            except Exception as error:  # the next tick tries again
                logger.warning("extending %d leases failed: %s", len(due), error)
                continue
            for ack_id, result in results.items():
                message_id = due[ack_id]
                if self.ack_id_of.get(message_id) != ack_id:
                    continue  # settled or redelivered meanwhile
                if result.status is AcknowledgeStatus.SUCCESS:
                    self.lease_until[message_id] = now + self.settings.lease_seconds
                elif result.status is AcknowledgeStatus.INVALID_ACK_ID:
                    # The lease is gone (expired, or the server redelivered): the
                    # message comes back with a new ack id, which _admit records.
                    del self.ack_id_of[message_id]
                    del self.lease_until[message_id]

    # ---------------------------------------------------------------- settling

    def _client(self) -> SubscriberClient:
        assert self.client is not None, "used before _start"
        return self.client

    def due(self, upto: int) -> int:
        """How many journaled messages ``settle(upto)`` would ack (runs on any thread: reads)."""
        return sum(1 for seq in list(self.seq_of.values()) if seq < upto)

    async def _acknowledge(self, ack_ids: Iterable[str]) -> dict[str, AcknowledgeStatus]:
        """Ack by id; every id not confirmed SUCCESS is missing from or not SUCCESS in the
        answer (a broken channel: nothing is confirmed)."""
        try:
            results = await self._client().acknowledge(
                self.settings.subscription, ack_ids, ack_retry=ACK_RETRY
            )
        except Exception as error:
            logger.warning("acknowledging failed, the ids stay pending: %s", error)
            return {}
        return {ack_id: result.status for ack_id, result in results.items()}

    async def settle(self, upto: int) -> None:
        """Ack every journaled message with ``seq < upto`` (its batch is committed).

        A redelivery of one of them may arrive while the ack is under way (settle_and_pull
        pulls meanwhile): ``_admit`` records its newer ack id, which is acked in another
        round. (Marking the message pending instead would drop that delivery: it would sit
        leased and unacked until its deadline, past the end of an availableNow run.)
        """
        ids = [message_id for message_id, seq in self.seq_of.items() if seq < upto]
        if ids:
            unconfirmed = set(ids)
            tried: dict[str, str] = {}
            while True:
                # Each round sends only ack ids no round has sent (redeliveries since the
                # last): it ends once none came, and a broken channel does not loop.
                sent = {
                    m: ack_id
                    for m in unconfirmed
                    if (ack_id := self.ack_id_of.get(m)) is not None and tried.get(m) != ack_id
                }
                if not sent:
                    break
                statuses = await self._acknowledge(sent.values())
                tried.update(sent)
                unconfirmed -= {
                    m
                    for m, ack_id in sent.items()
                    if statuses.get(ack_id) is AcknowledgeStatus.SUCCESS
                }
            now = time.time()
            for message_id in ids:
                if message_id in unconfirmed:
                    # Unconfirmed: a redelivery is acked, not emitted (pull_batch).
                    self.pending[message_id] = now
                del self.seq_of[message_id]
                self.ack_id_of.pop(message_id, None)
                self.lease_until.pop(message_id, None)
            self._save_state()
        self.journal.prune(upto)

    def _save_state(self) -> None:
        now = time.time()
        horizon = now - PENDING_TTL_SECONDS
        self.pending = {k: t for k, t in self.pending.items() if t >= horizon}
        leased_until = self.unjournaled_leased_until if self.unjournaled_leased_until > now else 0.0
        if self.pulling_since is not None:
            # What this pull takes comes back, if this run dies before journaling it, one ack
            # deadline after the pull ends: it lasts pull_timeout, plus the rest of a Pull in
            # flight then (the reference server holds an empty one for a second); 2 s margin.
            ends = self.pulling_since + self.settings.pull_timeout + self.ack_deadline + 2.0
            leased_until = max(leased_until, ends)
        self.journal.save_state(
            {"pending": self.pending, "unjournaled_leased_until": leased_until or None}
        )

    # ------------------------------------------------------------------ pulling

    async def settle_and_pull(self, start: int, max_rows: int) -> int:
        """``settle(start)`` and ``pull_batch(start, max_rows)`` at once; the new end.

        The two overlap: the server applies the acks while this process converts pulled
        messages. They share state safely: settle decides its ids before its first await,
        and a redelivery of one of them meanwhile only updates its ack id (if the ack then
        fails, the id goes pending and its next redelivery is acked).

        Then, after a full batch, when Spark came back for this one quickly (within
        ``PULL_AHEAD_WITHIN`` of the ack deadline), the next batch is pulled ahead.
        """
        called_at = time.monotonic()
        _, end = await asyncio.gather(self.settle(start), self.pull_batch(start, max_rows))
        spark_seconds = None if self._returned_at is None else called_at - self._returned_at
        if (
            end - start == max_rows
            and spark_seconds is not None
            and spark_seconds < self.ack_deadline * PULL_AHEAD_WITHIN
        ):
            self.pull_ahead(max_rows)
        self._returned_at = time.monotonic()
        return end

    def pull_ahead(self, max_rows: int) -> None:
        """Start pulling the next batch (up to ``max_rows``) in the background; the next
        ``pull_batch`` takes what it got and journals it."""
        pulled = _Pulled(time.monotonic())
        self.pulling_since = time.time()
        self._save_state()  # a crash from now on leaves unjournaled messages leased
        deadline = pulled.began + self.settings.pull_timeout
        task = asyncio.get_running_loop().create_task(self._pull_into(pulled, max_rows, deadline))
        self._ahead = _PullAhead(pulled, task, max_rows)

    async def release_pulled_ahead(self) -> None:
        """Give the messages pulled ahead back to the subscription (the source stops)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        with contextlib.suppress(Exception):
            await ahead.task
        pulled = ahead.pulled
        ack_ids = [m.ack_id for m in pulled.batch.values()]
        ack_ids += [*pulled.redelivered_pending, *pulled.after_cutoff]
        await self._release(ack_ids)
        self.pulling_since = None
        self._save_state()

    async def _release(self, ack_ids: list[str]) -> None:
        """Give deliveries back for redelivery now (modack 0). Best effort: one that is not
        released comes back when its deadline passes."""
        if ack_ids:
            with contextlib.suppress(Exception):
                await self._client().modify_ack_deadline(self.settings.subscription, ack_ids, 0)

    async def pull_batch(self, start: int, max_rows: int) -> int:
        """Pull, dedupe and journal up to ``max_rows`` messages; the new end (or ``start``)."""
        called_at = time.monotonic()
        ahead = self._ahead
        if ahead is not None and ahead.max_rows > max_rows:
            await self.release_pulled_ahead()  # more than now allowed (the limit shrank)
            ahead = None
        if ahead is not None:
            self._ahead = None
            pulled = ahead.pulled
            try:
                await ahead.task
            except Exception as error:  # what it got is kept; the pull below goes on
                logger.warning("pulling ahead failed, pulling again: %s", error)
        else:
            pulled = _Pulled(called_at)
        self.pulling_since = time.time()
        self._save_state()
        await self._pull_into(pulled, max_rows, called_at + self.settings.pull_timeout)
        if pulled.redelivered_pending:
            statuses = await self._acknowledge(pulled.redelivered_pending)
            for ack_id, message_id in pulled.redelivered_pending.items():
                if statuses.get(ack_id) is AcknowledgeStatus.SUCCESS:
                    self.pending.pop(message_id, None)
        # Published after this availableNow run began: back to the subscription now.
        await self._release(pulled.after_cutoff)
        if pulled.batch:
            messages = list(pulled.batch.values())
            self.journal.write(start, _to_table(messages, start))
        self.pulling_since = None
        self._save_state()
        if not pulled.batch:
            return start
        end = start + len(messages)
        for seq, message in enumerate(messages, start):
            self.seq_of[message.message_id] = seq
            self.ack_id_of[message.message_id] = message.ack_id
            self.lease_until[message.message_id] = pulled.began + self.ack_deadline
        return end

    async def _pull_into(self, pulled: _Pulled, max_rows: int, deadline: float) -> None:
        """Pull until ``max_rows`` are admitted, a pull comes back empty, or ``deadline``.

        ``PULLS_IN_FLIGHT`` calls overlap, so the server prepares the next response while
        this process converts the last. Every call asks for no more than is still missing
        (counting the calls in flight), so the batch never exceeds ``max_rows``. Once it is
        time to stop, no new call goes out, but those in flight are still awaited and their
        messages taken: one may hold messages even when another came back empty, and a
        cancelled call's messages would come back only after their ack deadline.
        """
        client = self._client()
        in_flight: dict[asyncio.Task[list[Message]], int] = {}  # call → messages asked
        stopping = False
        try:
            while True:
                room = max_rows - len(pulled.batch) - sum(in_flight.values())
                while not stopping and room > 0 and len(in_flight) < PULLS_IN_FLIGHT:
                    count = min(PULL_MAX, room)
                    call = asyncio.ensure_future(client.pull(self.settings.subscription, count))
                    in_flight[call] = count
                    room -= count
                if not in_flight:
                    return
                answered, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for call in answered:
                    del in_flight[call]
                    received = call.result()
                    now = time.monotonic()
                    for message in received:
                        self._admit(message, pulled, now)
                    if not received:
                        in_grace = self.available_now and now < self.grace_until
                        stopping = stopping or bool(pulled.batch) or not in_grace
                    elif now >= deadline:
                        stopping = True
        finally:
            # Only when a call failed or this was cancelled: end the others and collect
            # what they raised (nobody else will).
            for call in in_flight:
                call.cancel()
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)

    def _admit(self, message: Message, pulled: _Pulled, now: float) -> None:
        message_id = message.message_id
        if self.settings.dedupe:
            if message_id in self.pending:
                # Committed earlier but its ack unconfirmed: ack this delivery, don't emit.
                pulled.redelivered_pending[message.ack_id] = message_id
                return
            if message_id in self.seq_of:
                # Journaled, not yet committed: keep the newest ack id, don't emit again.
                self.ack_id_of[message_id] = message.ack_id
                self.lease_until[message_id] = now + self.ack_deadline
                return
        if message_id in pulled.batch:
            pulled.batch[message_id] = message  # redelivered within this pull: newest ack id
            return
        if (
            self.cutoff is not None
            and message.publish_seconds * 1_000_000_000 + message.publish_nanos > self.cutoff
        ):
            pulled.after_cutoff.append(message.ack_id)
            return
        pulled.batch[message_id] = message


class _Pulled:
    """What one ``pull_batch`` collected: the new batch (message id → newest delivery),
    redeliveries of pending ids (ack id → message id) and deliveries to release."""

    __slots__ = ("after_cutoff", "batch", "began", "redelivered_pending")

    def __init__(self, began: float) -> None:
        self.began = began  # monotonic: no delivery in it is older
        self.batch: dict[str, Message] = {}
        self.redelivered_pending: dict[str, str] = {}
        self.after_cutoff: list[str] = []


class _PullAhead:
    """A background pull of the next batch: what it collected so far, and the task."""

    __slots__ = ("max_rows", "pulled", "task")

    def __init__(self, pulled: _Pulled, task: asyncio.Task[None], max_rows: int) -> None:
        self.pulled = pulled
        self.task = task
        self.max_rows = max_rows


def _to_table(messages: Sequence[Message], start: int) -> pa.Table:
    return pa.Table.from_pydict(
        {
            "message_id": [m.message_id for m in messages],
            "data": [bytes(m.data) for m in messages],
            "attributes": [m.attributes for m in messages],
            "ordering_key": [m.ordering_key for m in messages],
            "publish_time": [
                m.publish_seconds * 1_000_000 + m.publish_nanos // 1000 for m in messages
            ],
            "delivery_attempt": [m.delivery_attempt for m in messages],
            "seq": list(range(start, start + len(messages))),
            "ack_id": [m.ack_id for m in messages],
        },
        schema=JOURNAL_SCHEMA,
    )


class EoclientStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. Constructed in the source runner and in planner processes;
    pickled to executors for ``read`` (where ``__init__`` does not run), so it opens nothing
    until a driver-side method is first called."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Checked (SourceSettings) at the first call, not here: Spark's source runner turns
        # an error raised while it builds the reader into an UnboundLocalError of its own.
        self._options = dict(options)
        self._settings: SourceSettings | None = None
        self._driver: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "_settings": self.settings, "_driver": None}

    @property
    def settings(self) -> SourceSettings:
        if self._settings is None:
            with one_line_errors():
                self._settings = SourceSettings(self._options)
        return self._settings

    def _get_driver(self) -> _Driver:
        if self._driver is None:
            with one_line_errors():
                self._driver = _Driver(self.settings)
        return self._driver

    def _seq(self, offset: Mapping[str, Any], driver: _Driver) -> int:
        if offset.get("journal") != driver.epoch:
            raise RuntimeError(
                f"offset {dict(offset)} is not from the journal in {driver.journal.directory} "
                f"(epoch {driver.epoch}): journalPath must stay with its checkpoint"
            )
        return int(offset["seq"])

    # ------------------------------------------------------------- Spark's API

    def initialOffset(self) -> dict[str, Any]:
        # Called twice in a fresh run: the epoch is persisted, so both answers agree.
        return {"journal": self._get_driver().epoch, "seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        driver = self._get_driver()
        driver.available_now = True
        driver.cutoff = time.time_ns()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        driver = self._get_driver()
        start_seq = self._seq(start, driver)
        existing = driver.journal.starting_at(start_seq)
        if existing is not None:  # journaled before a crash, before Spark's offset WAL
            self._settle(driver, start_seq)
            return {"journal": driver.epoch, "seq": existing.end}
        max_rows = self.settings.max_rows
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            max_rows = self.settings.max_rows
        # Spark calls this only once the batch ending at `start` is in its commit log: its
        # acks go out while the next batch is pulled.
        if driver.due(start_seq):
            fault_point("before_ack", self.settings.fault_points, self.settings.fault_dir)
        end = driver.loop.run(driver.settle_and_pull(start_seq, max_rows))
        if end != start_seq:
            fault_point("after_journal", self.settings.fault_points, self.settings.fault_dir)
        return {"journal": driver.epoch, "seq": end}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        driver = self._get_driver()
        start_seq, end_seq = self._seq(start, driver), self._seq(end, driver)
        if start_seq >= end_seq:
            return []
        parts: list[InputPartition] = []
        for f in driver.journal.covering(start_seq, end_seq):
            low, high = max(start_seq, f.start), min(end_seq, f.end)
            rows = high - low
            size = -(-rows // self.settings.num_partitions)
            for offset in range(low - f.start, high - f.start, size):
                length = min(size, high - f.start - offset)
                parts.append(InputPartition((str(f.path), offset, length)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        path, offset, length = partition.value
        fault_point("read", self.settings.fault_points, self.settings.fault_dir)
        table = read_table(path).slice(offset, length).select(ROW_SCHEMA.names)
        yield from table.cast(ROW_SCHEMA).to_batches(max_chunksize=READ_CHUNK_ROWS)

    def commit(self, end: dict[str, Any]) -> None:
        driver = self._get_driver()
        self._settle(driver, self._seq(end, driver))

    def _settle(self, driver: _Driver, upto: int) -> None:
        if driver.due(upto):
            fault_point("before_ack", self.settings.fault_points, self.settings.fault_dir)
        driver.loop.run(driver.settle(upto))

    def stop(self) -> None:
        # Rarely called (the JVM usually kills this process): nothing relies on it.
        driver, self._driver = self._driver, None
        if driver is not None:
            if driver.client is not None:
                with contextlib.suppress(Exception):
                    driver.loop.run(driver.release_pulled_ahead(), timeout=5.0)
                with contextlib.suppress(Exception):
                    driver.loop.run(driver.client.aclose(), timeout=5.0)
            driver.loop.close()
