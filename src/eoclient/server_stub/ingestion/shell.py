"""Topic ingestion's async shell: polls buckets, reads objects, publishes their messages.

``Ingestion`` is what the server runs (``run(services)``, a task of the server's) and what
the services ask (``IngestionStates``: ``changed`` when a topic's settings may have
changed, ``fill`` for the output-only states of an answer). It keeps one entry per import
topic: a ``CloudStorageIngestion`` (the pure core that decides) for a Cloud Storage
source, or the ``UnreachableSource`` of a source in another cloud, which is logged once
(why it shows the state it shows) and never read.

Each object it reads is ingested by ``objects.ObjectIngester``: published through
``Services.call("Publish", ...)``, as a publisher would (the topic's schema, message
transforms, retention, quotas and the subscriptions' filters all apply, and an answer means
the messages are committed), then recorded in the ledger.

The buckets are the ``BucketReader`` the server was given: the local directories of
``--buckets-dir`` or the Cloud Storage API at ``STORAGE_EMULATOR_HOST``; with neither,
no bucket exists (every Cloud Storage source shows BUCKET_NOT_FOUND, saying why once).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from eoclient._clock import Clock
from eoclient._proto import pubsub_pb2
from eoclient._tasks import cancel_and_wait
from eoclient.errors import InvalidArgument, NotFound
from eoclient.server_stub.core import Broker
from eoclient.server_stub.ingestion import formats
from eoclient.server_stub.ingestion.cloud_storage import (
    DEFAULT_POLL_INTERVAL,
    CloudStorageIngestion,
    ListedObject,
    listing_prefix,
)
from eoclient.server_stub.ingestion.ledger import IngestedObjects
from eoclient.server_stub.ingestion.objects import (
    IngestionStatus,
    ObjectIngester,
    Publisher,
    TopicEntry,
)
from eoclient.server_stub.ingestion.sources import (
    ACTIVE,
    CloudStorageSource,
    Source,
    UnreachableSource,
)

logger = logging.getLogger("eoclient.server_stub.ingestion")

# On the server's stop, the object being ingested is finished (its messages published and
# recorded) for at most this long before the loop is cancelled: a clean stop then repeats
# nothing after the restart. An object of thousands of lines takes well under a second.
STOP_GRACE_SECONDS = 5.0


class BucketObject(Protocol):
    """What a listing gives of one object (the bucket store's ``ObjectInfo``)."""

    @property
    def name(self) -> str: ...
    @property
    def generation(self) -> Any: ...
    @property
    def created(self) -> Any: ...
    @property
    def size(self) -> int: ...


class BucketReader(Protocol):
    """The bucket store's read side (``server_stub/buckets/``)."""

    async def exists(self, bucket: str) -> bool: ...

    async def list(self, bucket: str, prefix: str = "") -> Sequence[BucketObject]: ...

    async def read(self, bucket: str, name: str) -> bytes: ...


def _seconds(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return float(value)


def source_of(topic: pubsub_pb2.Topic) -> Source | None:
    """The ingestion source ``topic``'s (checked) settings name, or None."""
    if not topic.HasField("ingestion_data_source_settings"):
        return None
    settings = topic.ingestion_data_source_settings
    kind = settings.WhichOneof("source")
    if kind is None:
        return None
    if kind != "cloud_storage":
        return UnreachableSource(kind)
    storage = settings.cloud_storage
    input_format = {
        "avro_format": formats.AVRO,
        "pubsub_avro_format": formats.PUBSUB_AVRO,
    }.get(storage.WhichOneof("input_format") or "", formats.TEXT)
    delimiter = formats.DEFAULT_DELIMITER
    if storage.HasField("text_format") and storage.text_format.HasField("delimiter"):
        delimiter = storage.text_format.delimiter
    minimum = None
    if storage.HasField("minimum_object_create_time"):
        stamp = storage.minimum_object_create_time
        minimum = stamp.seconds + stamp.nanos / 1e9
    severity = ""
    if settings.HasField("platform_logs_settings"):
        severity = pubsub_pb2.PlatformLogsSettings.Severity.Name(
            settings.platform_logs_settings.severity
        )
    return CloudStorageSource(
        bucket=storage.bucket,
        input_format=input_format,
        delimiter=delimiter,
        match_glob=storage.match_glob,
        minimum_object_create_time=minimum,
        log_severity=severity,
    )


class Ingestion:
    """Every import topic of one broker (see the module docstring)."""

    def __init__(
        self,
        broker: Broker,
        clock: Clock,
        buckets: BucketReader | None = None,
        ledger: IngestedObjects | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        self._broker = broker
        self._clock = clock
        self._buckets = buckets
        self._ledger = ledger or IngestedObjects()
        self._poll_interval = poll_interval
        self._entries: dict[str, TopicEntry] = {}
        self._objects = ObjectIngester(self._ledger, clock)
        self._dirty: set[str] = set()
        self._synced = False
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    # ------------------------------------------------ what the services ask

    def changed(self, topic: str) -> None:
        """``topic`` was created, updated or deleted (``IngestionStates``)."""
        try:
            self._broker.topics.get(topic)
        except (NotFound, InvalidArgument):
            # Deleted: what it ingested is forgotten at once, so a topic created again
            # under the name (even before the loop looks) starts from nothing.
            self._entries.pop(topic, None)
            self._ledger.forget(topic)
        self._dirty.add(topic)
        self._wake.set()

    def fill(self, topic: pubsub_pb2.Topic) -> None:
        """Set the output-only states of an answer's ``topic`` (``IngestionStates``)."""
        source = source_of(topic)
        if source is None:
            return
        kind = topic.ingestion_data_source_settings.WhichOneof("source")
        assert kind is not None
        message = getattr(topic.ingestion_data_source_settings, kind)
        if isinstance(source, UnreachableSource):
            state = source.state
        else:
            # Before its first look (or new settings' first), a source shows ACTIVE, as
            # the service's does until its first read fails.
            entry = self._entries.get(topic.name)
            core = entry.core if entry is not None and entry.source == source else None
            state = core.state if core is not None else ACTIVE
        message.state = type(message).State.Value(state)
        topic.state = (
            pubsub_pb2.Topic.ACTIVE
            if state == ACTIVE
            else pubsub_pb2.Topic.INGESTION_RESOURCE_ERROR
        )

    # ------------------------------------------------ what observe/ reads

    def status(self, topic: str) -> IngestionStatus | None:
        entry = self._entries.get(topic)
        return entry.status if entry is not None else None

    def statuses(self) -> list[IngestionStatus]:
        return [self._entries[name].status for name in sorted(self._entries)]

    def poll_now(self) -> None:
        """Look at every bucket at once (tests, and the dashboard's "look now")."""
        now = self._clock.now()
        for entry in self._entries.values():
            if entry.core is not None:
                entry.core.wake(now)
        self._wake.set()

    # ------------------------------------------------ the loop

    async def finish(self, task: asyncio.Task[None] | None) -> None:
        """Stop ``task`` (``run``'s): the object under way is finished first, within
        ``STOP_GRACE_SECONDS``; then it is cancelled."""
        self._stopping.set()
        self._wake.set()
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=STOP_GRACE_SECONDS)
        await cancel_and_wait(task)

    async def run(self, publisher: Publisher) -> None:
        """Ingest until cancelled (the server's stop). Each topic's next look is due by
        the server's clock: on a ``FakeClock`` a test advances it (or calls
        ``poll_now``) for the next look to happen."""
        while not self._stopping.is_set():
            self._sync()
            now = self._clock.now()
            for name, entry in list(self._entries.items()):
                core = entry.core
                if self._stopping.is_set():
                    return
                if core is not None and core.due(now) and self._entries.get(name) is entry:
                    try:
                        await self._look(entry, core, publisher)
                    except Exception:  # a bug: logged; it never stops the other topics
                        logger.exception("topic %s: ingestion failed; tried again later", name)
                        core.next_poll = self._clock.now() + core.poll_interval
            self._wake.clear()
            if self._dirty:
                continue
            delay = self._poll_interval
            polling = [e.core for e in self._entries.values() if e.core is not None]
            if polling:
                delay = max(0.0, min(c.next_poll for c in polling) - self._clock.now())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(delay, self._poll_interval))

    def _sync(self) -> None:
        """Bring the entries in line with the topics' settings (all at the first pass,
        then the topics the services said changed)."""
        if not self._synced:
            names = {t.name for t in self._broker.stats().topics}
            for forgotten in set(self._ledger.topics()) - names:
                self._ledger.forget(forgotten)  # deleted while the server was down
            self._dirty |= names
            self._synced = True
        dirty, self._dirty = self._dirty, set()
        for name in sorted(dirty):
            self._sync_topic(name)

    def _sync_topic(self, name: str) -> None:
        try:
            extras = self._broker.topics.get(name).config.extras
        except (NotFound, InvalidArgument):
            self._entries.pop(name, None)
            return
        source = source_of(pubsub_pb2.Topic.FromString(extras))
        entry = self._entries.get(name)
        if source is None:
            self._entries.pop(name, None)
            return
        if entry is not None and entry.source == source:
            return
        now = self._clock.now()
        if isinstance(source, UnreachableSource):
            status = IngestionStatus(name, source.kind, source.state, source.reason())
            self._entries[name] = TopicEntry(source, status)
            logger.warning("topic %s: %s", name, source.reason())
            return
        core = CloudStorageIngestion(name, source, now, self._poll_interval)
        status = IngestionStatus(name, "cloud_storage", core.state, source.bucket, core.counters)
        self._entries[name] = TopicEntry(source, status, core)
        logger.info("topic %s: ingesting from Cloud Storage bucket %s", name, source.bucket)

    async def _look(
        self, entry: TopicEntry, core: CloudStorageIngestion, publisher: Publisher
    ) -> None:
        source = core.source
        try:
            listed = await self._list(source)
        except Exception as error:  # the store's I/O: tried again at the next look
            logger.warning("topic %s: cannot list bucket %s: %s", core.topic, source.bucket, error)
            core.next_poll = self._clock.now() + core.poll_interval
            return
        now = self._clock.now()
        if listed is None:
            if core.bucket_missing(now):
                why = (
                    ""
                    if self._buckets is not None
                    else (
                        " (this server has no Cloud Storage: give --buckets-dir or "
                        "STORAGE_EMULATOR_HOST)"
                    )
                )
                logger.warning(
                    "topic %s: bucket %s does not exist: BUCKET_NOT_FOUND%s",
                    core.topic,
                    source.bucket,
                    why,
                )
            entry.status.state = core.state
            return
        done = self._ledger.of(core.topic)
        objects, changed = core.select(listed, done, now)
        entry.status.state = core.state
        if changed:
            logger.info("topic %s: bucket %s is read again: ACTIVE", core.topic, source.bucket)
        for listed_object in objects:
            if self._stopping.is_set() or self._entries.get(core.topic) is not entry:
                return  # stopping, or the settings changed or the topic went meanwhile
            if not await self._ingest(entry, core, listed_object, publisher):
                core.next_poll = self._clock.now() + core.poll_interval
                return

    async def _list(self, source: CloudStorageSource) -> list[ListedObject] | None:
        buckets = self._buckets
        if buckets is None or not await buckets.exists(source.bucket):
            return None
        found = await buckets.list(source.bucket, listing_prefix(source.match_glob))
        return [
            ListedObject(o.name, int(o.generation or 0), _seconds(o.created), int(o.size or 0))
            for o in found
        ]

    async def _ingest(
        self,
        entry: TopicEntry,
        core: CloudStorageIngestion,
        listed: ListedObject,
        publisher: Publisher,
    ) -> bool:
        """Read one object and ingest it (``objects``); False when it is worth trying
        again at the next look."""
        source = core.source
        assert self._buckets is not None
        try:
            data = await self._buckets.read(source.bucket, listed.name)
        except Exception as error:  # gone since the listing, or the store's I/O
            logger.warning(
                "topic %s: cannot read %s/%s: %s", core.topic, source.bucket, listed.name, error
            )
            return False
        return await self._objects.ingest(entry, core, listed, data, publisher)
