"""The BigQuery export of one subscription: the async shell around the stand-in's writer
(``server_stub/bigquery``; docs/protocol.md#export-delivery).

It leases from the broker as a subscriber does, up to 1,000 messages at a time, and hands
them to ``BigQueryStandIn.write`` (one transaction, in a thread: the stand-in is
synchronous, and one call at a time goes to a database, whichever subscription makes it).
The rows it committed are acknowledged; messages it could not write (an unknown field
without ``drop_unknown_fields``, a value that does not convert) are nacked — a failed
delivery, so a dead-letter policy takes them in the end; while the table is missing
(NOT_FOUND) or does not fit the settings (SCHEMA_MISMATCH) nothing is pulled and the
messages wait, looked at again every ``RECHECK_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TypeVar

from eoclient.errors import ResourceExhausted, RpcError
from eoclient.server_stub.bigquery import (
    BigQueryStandIn,
    BigQueryTarget,
    TopicSchemaSettings,
    WriteResult,
)
from eoclient.server_stub.core import Delivery
from eoclient.server_stub.exports.context import (
    ExportConfig,
    ExportContext,
    export_config,
    topic_schema_settings,
)
from eoclient.server_stub.exports.status import ACTIVE, BIGQUERY, ExportStatus, Written

T = TypeVar("T")

MAX_IDLE_SECONDS = 0.25
PULL_MESSAGES = 1000
RECHECK_SECONDS = 1.0
_BINARY = 2  # google.pubsub.v1.Encoding.BINARY


class BigQueryWorker:
    """Exports one subscription to a BigQuery stand-in table until it stops being one."""

    kind = BIGQUERY

    def __init__(
        self,
        context: ExportContext,
        name: str,
        status: ExportStatus,
        standin: BigQueryStandIn,
        lock: asyncio.Lock,
    ) -> None:
        self.context = context
        self.name = name
        self.status = status
        self.wake = asyncio.Event()
        self._standin = standin
        self._lock = lock
        self._target: BigQueryTarget | None = None
        self._has_retry_policy = False
        # Whether the table exists and fits (the stand-in's check), and the state the last
        # write that tried messages ended in: a message it could not write for an unknown
        # field leaves SCHEMA_MISMATCH shown until a write goes through clean.
        self._table_ok = False
        self._written_state: tuple[str, str] = (ACTIVE, "")

    async def _call(self, call: Callable[[], T]) -> T:
        async with self._lock:
            return await asyncio.to_thread(call)

    def _configure(self, config: ExportConfig) -> BigQueryTarget:
        topic_schema = None
        settings = topic_schema_settings(self.context.broker, config.view.config.topic)
        if settings is not None:
            with contextlib.suppress(RpcError):
                revision = self.context.broker.schemas.get(settings.schema)
                encoding = "BINARY" if settings.encoding == _BINARY else "JSON"
                topic_schema = TopicSchemaSettings(revision.type, revision.definition, encoding)
        target = BigQueryTarget.from_config(
            self.name, config.subscription.bigquery_config, topic_schema
        )
        if target != self._target:
            self.status.checked_at = 0.0  # new settings: look at the table now
        self._target = target
        self._has_retry_policy = config.view.config.retry_policy is not None
        self.status.destination = target.table
        return target

    async def refresh(self, now: float, fresh_for: float = 0.0) -> None:
        config = export_config(self.context.broker, self.name)
        if config is None or config.kind != BIGQUERY:
            return
        target = self._configure(config)
        checked = self.status.checked_at
        if fresh_for and checked and now - checked < fresh_for:
            return
        try:
            found = await self._call(lambda: self._standin.check(target))
        except RpcError as error:  # a table name the stand-in refuses
            self._table_ok = False
            self.status.set_state("NOT_FOUND", str(error), now)
            return
        self._table_ok = found.active
        if found.active:
            self.status.set_state(*self._written_state, now)
        else:
            self.status.set_state(found.state, found.reason, now)

    async def run(self) -> None:
        while True:
            self.wake.clear()
            config = export_config(self.context.broker, self.name)
            if config is None or config.kind != BIGQUERY:
                return
            now = self.context.clock.now()
            await self.refresh(now, RECHECK_SECONDS)
            written = 0
            if self._table_ok:
                written = await self._write_some(now)
            if written:
                await asyncio.sleep(0)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(MAX_IDLE_SECONDS):
                        await self.wake.wait()

    async def _write_some(self, now: float) -> int:
        target = self._target
        assert target is not None
        try:
            deliveries = self.context.broker.leasing.pull(self.name, PULL_MESSAGES)
        except (ResourceExhausted, RpcError):
            return 0
        leased = len(deliveries)
        if deliveries:
            # The subscription's message transforms first (they settle what they drop).
            deliveries = await self.context.deliver(self.name, deliveries)
        if not deliveries:
            return leased
        self.status.open_messages = len(deliveries)
        try:
            result = await self._call(
                lambda: self._standin.write(target, [d.message for d in deliveries])
            )
        except BaseException:
            self.context.give_back(self.name, [d.ack_id for d in deliveries])
            raise
        finally:
            self.status.open_messages = 0
        return self._settle(deliveries, result, now)

    def _settle(self, deliveries: list[Delivery], result: WriteResult, now: float) -> int:
        by_id = {d.message.message_id: d for d in deliveries}
        written, unwritable = result.written, result.unwritable
        state, reason = result.state, result.reason
        if not written and not unwritable:
            # Nothing was tried (the table went missing or stopped fitting): they wait.
            self.context.give_back(self.name, [d.ack_id for d in deliveries])
            self._table_ok = False
            self.status.set_state(state, reason, now)
            return 0
        self._written_state = (state, reason)
        done = [by_id[i].ack_id for i in written if i in by_id]
        refused = [by_id[i].ack_id for i in unwritable if i in by_id]
        left = set(by_id) - set(written) - set(unwritable)
        confirmed = self.context.acknowledge(self.name, done)
        if refused:
            self.context.refuse(self.name, refused, self._has_retry_policy)
            self.status.unwritable += len(refused)
            self.status.last_error = next(iter(unwritable.values()))
        if left:  # the writer said nothing of them: they wait
            self.context.give_back(self.name, [by_id[i].ack_id for i in left])
        size = sum(len(by_id[i].message.data) for i in written if i in by_id)
        self.status.messages += confirmed
        self.status.rows += len(done)
        self.status.bytes += size
        if done:
            target = self._target.table if self._target is not None else ""
            self.status.last_written.append(Written(target, len(done), size, now))
        self.status.set_state(state, reason, now)
        return len(deliveries)


def bigquery_workers(
    standin: BigQueryStandIn,
) -> Callable[[ExportContext, str, ExportStatus], BigQueryWorker]:
    """The runner's factory of BigQuery workers over one stand-in (one lock: one call at a
    time to its database)."""
    lock = asyncio.Lock()

    def make(context: ExportContext, name: str, status: ExportStatus) -> BigQueryWorker:
        return BigQueryWorker(context, name, status, standin, lock)

    return make
