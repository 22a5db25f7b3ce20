"""The Cloud Storage export of one subscription: the async shell around ``batch`` (when a
file closes), ``formats`` and ``files`` (what goes in it, and how) and ``naming`` (what it
is called) (docs/protocol.md#export-delivery).

It leases from the broker exactly as a subscriber does — ``broker.leasing.pull``, lease
extensions while a batch is open or being written, ``broker.acks.acknowledge`` once the
object holding the messages is complete — so filters, ordering keys (a key's messages are
pulled in order and written in that order), dead letters, retention, seek and detach act on
it as on any subscription. The batch being filled streams to a local file in the runner's
work directory; a closed batch is written to the bucket by a task of its own while the next
one fills (at most ``MAX_PENDING_WRITES`` at a time). A write that fails is tried again
(the bucket missing: once it exists again; other errors: after a backoff), its leases kept
meanwhile; a message that cannot be written (``files.Unwritable``) is nacked, a failed
delivery that the dead-letter policy counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from eoclient.errors import ResourceExhausted, RpcError
from eoclient.server_stub.buckets import BucketError, BucketNotFound, InvalidName
from eoclient.server_stub.core import Delivery
from eoclient.server_stub.exports.batch import (
    MAX_LEASE_SECONDS,
    WRITE_ALLOWANCE_SECONDS,
    Batch,
    Leases,
)
from eoclient.server_stub.exports.context import ExportConfig, ExportContext, export_config
from eoclient.server_stub.exports.files import BatchFile, FileFormat, SchemaMismatch, Unwritable
from eoclient.server_stub.exports.formats import FileFormats
from eoclient.server_stub.exports.journal import LeaseJournal
from eoclient.server_stub.exports.naming import object_name
from eoclient.server_stub.exports.settings import CloudStorageExport, cloud_storage_export
from eoclient.server_stub.exports.status import (
    ACTIVE,
    CLOUD_STORAGE,
    NOT_FOUND,
    SCHEMA_MISMATCH,
    ExportStatus,
    Written,
)

logger = logging.getLogger("eoclient.server_stub.exports")

# A worker looks at its subscription at least this often (a FakeClock advanced by a test,
# a config changed by UpdateSubscription, a batch that came due).
MAX_IDLE_SECONDS = 0.25
# Messages one pull asks for (the broker's limit for a Pull).
PULL_MESSAGES = 1000
# Closed batches being written at once; beyond it the worker stops pulling until one is done.
MAX_PENDING_WRITES = 2
# How often a missing bucket (or a topic schema that does not fit) is looked at again.
RECHECK_SECONDS = 1.0
# Backoff of a write that failed for another reason than a missing bucket.
WRITE_RETRY_FIRST_SECONDS = 1.0
WRITE_RETRY_MAX_SECONDS = 30.0


@dataclass(eq=False)
class _OpenBatch:
    """A batch: its file, its limits' state, the leases of its messages."""

    uid: str
    settings: CloudStorageExport
    format_key: object
    format: FileFormat
    file: BatchFile
    batch: Batch
    leases: Leases = field(default_factory=Leases)
    journal: LeaseJournal | None = None
    # Set when it closed: it is written, and its leases must last until then.
    closed_at: float | None = None


class CloudStorageWorker:
    """Exports one subscription to Cloud Storage until it stops being such an export."""

    kind = CLOUD_STORAGE

    def __init__(self, context: ExportContext, name: str, status: ExportStatus) -> None:
        self.context = context
        self.name = name
        self.status = status
        self.wake = asyncio.Event()
        self._open: _OpenBatch | None = None
        self._writing: set[_OpenBatch] = set()
        self._settings: CloudStorageExport | None = None
        self._extras = b""
        self._has_retry_policy = False
        self._ack_deadline = 10
        self._formats = FileFormats(name, context.broker)
        self._gone = asyncio.Event()
        self._bucket_missing = False
        self._schema_problem = ""

    # ---------------------------------------------------------------- loop

    async def run(self) -> None:
        try:
            while True:
                self.wake.clear()
                config = export_config(self.context.broker, self.name)
                if config is None or config.kind != CLOUD_STORAGE:
                    return
                self._configure(config)
                now = self.context.clock.now()
                self._extend_leases(now)
                await self._look(now)
                current = self._open
                if current is not None and (current.batch.due(now) or current.batch.full()):
                    self._close(now)
                pulled = await self._pull(config, now) if self._may_pull() else 0
                self._observe()
                if pulled:
                    await asyncio.sleep(0)  # more may be waiting: pull again at once
                else:
                    await self._idle()
        finally:
            self._gone.set()
            self._abandon_open()

    def _configure(self, config: ExportConfig) -> None:
        extras = config.view.config.extras
        if extras == self._extras and self._settings is not None:
            return
        settings = cloud_storage_export(config.subscription.cloud_storage_config)
        if self._settings is not None and settings != self._settings:
            # New settings apply from the next file on: this one closes as it was opened.
            self._close(self.context.clock.now())
            self._formats.clear()
            self._schema_problem = ""
        if self._settings is None or settings.bucket != self._settings.bucket:
            self.status.checked_at = 0.0  # a new bucket: look at it now
        self._settings = settings
        self._extras = extras
        self._has_retry_policy = config.view.config.retry_policy is not None
        self._ack_deadline = config.view.config.ack_deadline_seconds or 10
        self._topic = config.view.config.topic
        self.status.destination = settings.describe()

    async def _idle(self) -> None:
        now = self.context.clock.now()
        delay = MAX_IDLE_SECONDS
        wakeups = [self._open.batch.closes_at] if self._open is not None else []
        for batch in (self._open, *self._writing):
            if batch is not None and (at := batch.leases.next_extension()) is not None:
                wakeups.append(at)
        if wakeups:
            delay = min(delay, max(min(wakeups) - now, 0.001))
        await _wait(self.wake, delay)

    def _may_pull(self) -> bool:
        return (
            not self._bucket_missing
            and not self._schema_problem
            and len(self._writing) < MAX_PENDING_WRITES
        )

    def _observe(self) -> None:
        batches = [b for b in (self._open, *self._writing) if b is not None]
        self.status.open_messages = sum(b.batch.messages for b in batches)
        self.status.open_bytes = sum(b.batch.bytes for b in batches)

    # -------------------------------------------------------- destination

    async def _look(self, now: float) -> None:
        """Whether the bucket exists, and the topic schema fits (at most every
        ``RECHECK_SECONDS`` while it does not, at once when asked by ``refresh``)."""
        if now - self.status.checked_at < RECHECK_SECONDS and self.status.checked_at:
            return
        await self.refresh(now)

    async def refresh(self, now: float, fresh_for: float = 0.0) -> None:
        """Look at the destination (and the topic's schema) now, unless it was looked at
        within ``fresh_for`` seconds with the settings it has now."""
        config = export_config(self.context.broker, self.name)
        if config is not None and config.kind == CLOUD_STORAGE:
            self._configure(config)
        settings = self._settings
        if settings is None:
            return
        checked = self.status.checked_at
        if fresh_for and checked and now - checked < fresh_for:
            return
        try:
            exists = await self.context.buckets.exists(settings.bucket)
        except BucketError as error:
            self.status.last_error = str(error)
            self.status.checked_at = now
            return
        self._bucket_missing = not exists
        self._schema_problem = self._formats.topic_schema_problem(settings, self._topic)
        if not exists:
            self.status.set_state(NOT_FOUND, f"bucket {settings.bucket!r} does not exist", now)
        elif self._schema_problem:
            self.status.set_state(SCHEMA_MISMATCH, self._schema_problem, now)
        else:
            self.status.set_state(ACTIVE, "", now)

    # -------------------------------------------------------------- pulls

    async def _pull(self, config: ExportConfig, now: float) -> int:
        """Lease what the open batch may take and add it; how many were leased."""
        want = PULL_MESSAGES
        if self._open is not None and (room := self._open.batch.room()) is not None:
            want = max(min(want, room), 1)
        try:
            deliveries = self.context.broker.leasing.pull(self.name, want)
        except ResourceExhausted:
            # The server's lease limit: this file closes early (the docs allow it) so that
            # its leases end and pulling can go on.
            if self._open is not None:
                self._close(now)
            return 0
        except RpcError:
            return 0  # deleted or detached: the next look ends the worker
        leased = len(deliveries)
        if deliveries:
            # The subscription's message transforms first (they settle what they drop).
            deliveries = await self.context.deliver(self.name, deliveries)
        if deliveries:
            self._admit(deliveries, self.context.clock.now())
        return leased

    def _admit(self, deliveries: list[Delivery], now: float) -> None:
        settings = self._settings
        assert settings is not None
        lease_until = now + self._ack_deadline
        refused: list[str] = []
        taken: dict[_OpenBatch, list[str]] = {}
        pieces: dict[_OpenBatch, list[bytes]] = {}
        for delivery in deliveries:
            try:
                key, file_format = self._formats.of(delivery.message, settings)
                encoded = file_format.encode(delivery.message)
            except (Unwritable, SchemaMismatch) as error:
                refused.append(delivery.ack_id)
                self.status.unwritable += 1
                self.status.last_error = str(error)
                continue
            current = self._open
            if current is None or current.format_key != key or not current.batch.fits(len(encoded)):
                if current is not None:
                    self._flush_pieces(current, pieces, taken, lease_until)
                    self._close(now)
                current = self._start(key, file_format, now)
            pieces.setdefault(current, []).append(encoded)
            taken.setdefault(current, []).append(delivery.ack_id)
            current.batch.add(len(encoded))
            if current.batch.full():
                self._flush_pieces(current, pieces, taken, lease_until)
                self._close(now)
        if self._open is not None:
            self._flush_pieces(self._open, pieces, taken, lease_until)
        if refused:
            self.context.refuse(self.name, refused, self._has_retry_policy)

    def _flush_pieces(
        self,
        batch: _OpenBatch,
        pieces: dict[_OpenBatch, list[bytes]],
        taken: dict[_OpenBatch, list[str]],
        lease_until: float,
    ) -> None:
        data = pieces.pop(batch, None)
        if data:
            batch.file.write(data)
        ack_ids = taken.pop(batch, None)
        if ack_ids:
            if batch.journal is not None:
                batch.journal.add(ack_ids)
            # The leases cover the batch from the start: until it closes and is written
            # (up to the 600 s a modack may give; ``_extend_leases`` goes on from there).
            now = lease_until - self._ack_deadline
            needed = batch.batch.closes_at + WRITE_ALLOWANCE_SECONDS
            if needed > lease_until:
                seconds = int(min(needed - now, MAX_LEASE_SECONDS))
                self.context.modack(self.name, ack_ids, seconds)
                lease_until = now + seconds
            batch.leases.add(ack_ids, lease_until)

    def _start(self, key: object, file_format: FileFormat, now: float) -> _OpenBatch:
        settings = self._settings
        assert settings is not None
        uid = self.context.new_id()
        path = self.context.work_dir / f"{uid}.part"
        journal = None
        if self.context.durable:
            journal = LeaseJournal(self.context.work_dir / f"{uid}.leases", self.name)
        opened = _OpenBatch(
            uid=uid,
            settings=settings,
            format_key=key,
            format=file_format,
            file=file_format.open(path),
            batch=Batch(settings.limits, now),
            journal=journal,
        )
        self._open = opened
        return opened

    # ------------------------------------------------------------- leases

    def _extend_leases(self, now: float) -> None:
        for batch in (self._open, *self._writing):
            if batch is None:
                continue
            if batch.closed_at is None:
                needed = batch.batch.closes_at + WRITE_ALLOWANCE_SECONDS
            else:
                needed = now + WRITE_ALLOWANCE_SECONDS
            by_seconds: dict[int, list[str]] = {}
            for ack_ids, seconds in batch.leases.to_extend(now, needed):
                by_seconds.setdefault(seconds, []).extend(ack_ids)
            for seconds, ack_ids in by_seconds.items():
                self.context.modack(self.name, ack_ids, seconds)

    # ------------------------------------------------------------- writes

    def _close(self, now: float) -> None:
        """The open batch is complete: write it (a task of its own)."""
        closing, self._open = self._open, None
        if closing is None:
            return
        closing.closed_at = now
        if closing.batch.messages == 0:
            closing.file.discard()
            if closing.journal is not None:
                closing.journal.remove()
            return
        self._writing.add(closing)
        self.context.tasks.create_task(self._write(closing), name=f"export-write:{self.name}")

    async def _write(self, batch: _OpenBatch) -> None:
        settings = batch.settings
        name = object_name(
            settings.prefix,
            settings.datetime_format,
            batch.batch.opened_at,
            batch.uid,
            settings.suffix,
        )
        delay = WRITE_RETRY_FIRST_SECONDS
        try:
            await asyncio.to_thread(batch.file.close)
            while True:
                if self._gone.is_set():
                    self._give_back(batch)
                    return
                try:
                    info = await self.context.buckets.write_file(
                        settings.bucket,
                        name,
                        batch.file.path,
                        content_type=batch.format.content_type,
                        move=True,
                    )
                    break
                except InvalidName as error:
                    # Never writable under this name (a bucket directory cannot hold it).
                    self.status.unwritable += batch.batch.messages
                    self.status.last_error = str(error)
                    self.context.refuse(self.name, batch.leases.ack_ids(), self._has_retry_policy)
                    self._forget(batch)
                    return
                except BucketNotFound:
                    self._bucket_missing = True
                    now = self.context.clock.now()
                    self.status.set_state(
                        NOT_FOUND, f"bucket {settings.bucket!r} does not exist", now
                    )
                    await _wait(self._gone, RECHECK_SECONDS)
                except (BucketError, OSError) as error:
                    self.status.write_failures += 1
                    self.status.last_error = f"writing {name}: {error}"
                    logger.warning("export of %s: %s", self.name, self.status.last_error)
                    await _wait(self._gone, delay)
                    delay = min(delay * 2, WRITE_RETRY_MAX_SECONDS)
            confirmed = self.context.acknowledge(self.name, batch.leases.ack_ids())
            self.status.objects += 1
            self.status.messages += confirmed
            self.status.bytes += info.size
            self.status.last_written.append(
                Written(
                    f"gs://{settings.bucket}/{name}",
                    batch.batch.messages,
                    info.size,
                    self.context.clock.now(),
                )
            )
            self._forget(batch)
        except BaseException:
            self._give_back(batch)
            raise
        finally:
            self._observe()
            self.wake.set()

    def _give_back(self, batch: _OpenBatch) -> None:
        if batch in self._writing or batch is self._open:
            self.context.give_back(self.name, batch.leases.ack_ids())
            self._forget(batch)

    def _forget(self, batch: _OpenBatch) -> None:
        self._writing.discard(batch)
        if self._open is batch:
            self._open = None
        batch.file.discard()
        if batch.journal is not None:
            batch.journal.remove()

    def _abandon_open(self) -> None:
        """The worker ends (subscription deleted, detached, no longer Cloud Storage): the
        batch being filled is given back; those being written finish or give theirs back."""
        if self._open is not None:
            self._give_back(self._open)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
