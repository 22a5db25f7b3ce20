"""One object of a bucket into messages on its import topic: parsed (``formats``), cut into
Publish requests within the service's limits, published through ``Services.call`` as a
publisher would, then recorded in the ledger so that it is never ingested twice.

A message refused for what it is (INVALID_ARGUMENT: schema, transform, limits) is an
ingestion failure of its own (docs/protocol.md#cloud-storage-ingestion): counted, and
logged as the service's platform logs would carry it (an ``IngestionFailureEvent``) when the
topic's ``platform_logs_settings`` ask for it; the other messages of the object go on.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.protobuf import json_format

from eoclient._clock import Clock
from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument, NotFound, PermissionDenied, RpcError
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.ingestion import formats
from eoclient.server_stub.ingestion.cloud_storage import (
    CloudStorageIngestion,
    IngestionCounters,
    ListedObject,
)
from eoclient.server_stub.ingestion.ledger import IngestedObjects
from eoclient.server_stub.ingestion.sources import Source

logger = logging.getLogger("eoclient.server_stub.ingestion")
# Where IngestionFailureEvents go: the platform logs of the service, here a logger of
# their own so an operator can route or silence them apart from the server's log.
platform_logger = logging.getLogger("eoclient.server_stub.ingestion.platform_logs")

# One Publish request: the service's limits (docs/protocol.md#publish-limits), with room
# for the request's framing under the 10,000,000 bytes.
MAX_BATCH_MESSAGES = 1000
MAX_BATCH_BYTES = 9_000_000
MAX_MESSAGE_BYTES = 10_000_000
MAX_ATTRIBUTES = 100
# Failure events kept per topic for the dashboard.
RECENT_FAILURES = 20
# Ingestion failure events are written at WARNING: a severity setting of DEBUG, INFO or
# WARNING shows them, ERROR and DISABLED (or unset) do not.
_FAILURE_SEVERITY = "WARNING"
_SEVERITY_ORDER = ("DEBUG", "INFO", "WARNING", "ERROR")
_AGENT = Grant(frozenset(), every_project=True)


class Publisher(Protocol):
    """How the shell publishes (``Services``)."""

    async def call(
        self, method: str, request: Any, handler: Any = None, grant: Grant | None = None
    ) -> Any: ...


@dataclass
class IngestionStatus:
    """What the dashboard and the metrics show of one import topic."""

    topic: str
    source: str  # "cloud_storage", "aws_kinesis", ...
    state: str  # the source's State name
    detail: str  # the bucket, or why nothing is ingested
    counters: IngestionCounters = field(default_factory=IngestionCounters)
    recent_failures: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_FAILURES))


@dataclass
class TopicEntry:
    """One import topic: its source, what it shows, its core (a Cloud Storage source)."""

    source: Source
    status: IngestionStatus
    core: CloudStorageIngestion | None = None
    # An object whose messages were published in part when a Publish failed: its key and
    # how many went, so the next look goes on from there instead of repeating them.
    resume: tuple[tuple[str, str, int], int] | None = None


class ObjectIngester:
    """Ingests the objects the shell read, for every topic (the ledger is shared)."""

    def __init__(self, ledger: IngestedObjects, clock: Clock) -> None:
        self._ledger = ledger
        self._clock = clock

    async def ingest(
        self,
        entry: TopicEntry,
        core: CloudStorageIngestion,
        listed: ListedObject,
        data: bytes,
        publisher: Publisher,
    ) -> bool:
        """Publish the messages of one object read from the bucket, then record it in the
        ledger; False when a Publish failed in a way worth trying again (the messages
        published so far are not published again: ``entry.resume``)."""
        source = core.source
        key = listed.key(source.bucket)
        try:
            messages = formats.messages(data, source.input_format, source.delimiter)
        except formats.ObjectParseError as error:
            self._failure(entry, core, listed, "avro", str(error))
            self._ledger.add(core.topic, key)  # not tried again: it will not parse later
            return True
        start = entry.resume[1] if entry.resume is not None and entry.resume[0] == key else 0
        published = start
        for batch in self._batches(entry, core, listed, messages[start:]):
            try:
                await self._publish(entry, core, listed, batch, publisher)
            except RpcError as error:
                entry.resume = (key, published)
                if isinstance(error, PermissionDenied):
                    core.state = "PUBLISH_PERMISSION_DENIED"
                    entry.status.state = core.state
                if not isinstance(error, NotFound):
                    logger.warning(
                        "topic %s: publishing %s/%s stopped (%s); tried again at the next look",
                        core.topic,
                        source.bucket,
                        listed.name,
                        error,
                    )
                return False
            published += len(batch)
        entry.resume = None
        self._ledger.add(core.topic, key)
        core.ingested(listed, published - start, len(data), self._clock.now())
        return True

    def _batches(
        self,
        entry: TopicEntry,
        core: CloudStorageIngestion,
        listed: ListedObject,
        messages: Sequence[formats.IngestedMessage],
    ) -> list[list[pubsub_pb2.PubsubMessage]]:
        batches: list[list[pubsub_pb2.PubsubMessage]] = []
        batch: list[pubsub_pb2.PubsubMessage] = []
        size = 0
        for message in messages:
            attributes = dict(message.attributes)
            if len(attributes) > MAX_ATTRIBUTES:
                # The service keeps the first 100 and reports the rest (ApiViolationReason).
                kept = sorted(attributes)[:MAX_ATTRIBUTES]
                attributes = {k: attributes[k] for k in kept}
                self._failure(entry, core, listed, "api_violation", "more than 100 attributes")
            pb = pubsub_pb2.PubsubMessage(
                data=message.data, attributes=attributes, ordering_key=message.ordering_key
            )
            bytes_ = pb.ByteSize()
            if bytes_ > MAX_MESSAGE_BYTES:
                self._failure(entry, core, listed, "api_violation", f"a message of {bytes_} bytes")
                continue
            if batch and (len(batch) >= MAX_BATCH_MESSAGES or size + bytes_ > MAX_BATCH_BYTES):
                batches.append(batch)
                batch, size = [], 0
            batch.append(pb)
            size += bytes_
        if batch:
            batches.append(batch)
        return batches

    async def _publish(
        self,
        entry: TopicEntry,
        core: CloudStorageIngestion,
        listed: ListedObject,
        batch: list[pubsub_pb2.PubsubMessage],
        publisher: Publisher,
    ) -> None:
        """Publish ``batch``; a message refused for what it is (INVALID_ARGUMENT: schema,
        transform, limits) is a failure of its own and the others still go."""
        request = pubsub_pb2.PublishRequest(topic=core.topic, messages=batch)
        try:
            await publisher.call("Publish", request, grant=_AGENT)
            return
        except InvalidArgument as error:
            if len(batch) == 1:
                self._failure(entry, core, listed, _refusal_reason(str(error)), str(error))
                return
        for message in batch:  # find the refused ones
            await self._publish(entry, core, listed, [message], publisher)

    def _failure(
        self,
        entry: TopicEntry,
        core: CloudStorageIngestion,
        listed: ListedObject,
        reason: str,
        text: str,
    ) -> None:
        core.failed(reason)
        source = core.source
        event = pubsub_pb2.IngestionFailureEvent(topic=core.topic, error_message=text)
        failure = event.cloud_storage_failure
        failure.bucket = source.bucket
        failure.object_name = listed.name
        failure.object_generation = listed.generation
        getattr(failure, f"{_FAILURE_FIELDS[reason]}_reason").SetInParent()
        rendered = json_format.MessageToJson(event, indent=None)
        entry.status.recent_failures.append(rendered)
        if _logs_failures(source.log_severity):
            platform_logger.warning("%s", rendered)
        else:
            logger.debug("topic %s: ingestion failure: %s", core.topic, rendered)


def _logs_failures(severity: str) -> bool:
    return severity in _SEVERITY_ORDER and _SEVERITY_ORDER.index(severity) <= (
        _SEVERITY_ORDER.index(_FAILURE_SEVERITY)
    )


_FAILURE_FIELDS = {
    "avro": "avro_failure",
    "api_violation": "api_violation",
    "schema_violation": "schema_violation",
    "transform": "message_transformation_failure",
}


def _refusal_reason(text: str) -> str:
    lowered = text.lower()
    if "schema" in lowered:
        return "schema_violation"
    if "transform" in lowered:
        return "transform"
    return "api_violation"
