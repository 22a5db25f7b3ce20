"""What the dashboard shows of the server's edge rooms: a subscription's export (its
settings, state, counters and the last objects or rows written), the message transforms
of a topic or a subscription (its UDFs and what they did), and a topic's ingestion (its
source, state and what it ingested).

Read-only: :class:`Edges` reads the rooms the server hands it (``EdgeRooms``: the export
runner, the ingestion loop, the BigQuery stand-in) and the transforms stage, and turns
what they report into plain panels that ``edge_sections.py`` renders. It changes nothing
in them: a resource's settings come from its stored config (the ``extras`` the core keeps
opaque), never from compiling its transforms or looking at a bucket.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.bigquery import BigQueryStandIn
from eoclient.server_stub.core.model import SubscriptionView, TopicView
from eoclient.server_stub.exports import ExportRunner, ExportStatus
from eoclient.server_stub.exports.settings import max_duration_of
from eoclient.server_stub.exports.status import BIGQUERY, CLOUD_STORAGE
from eoclient.server_stub.ingestion import Ingestion, IngestionStatus
from eoclient.server_stub.observe.dashboard import formats
from eoclient.server_stub.transforms import MessageTransforms, TransformCounts, Udf
from eoclient.server_stub.transforms.config import udfs_of

# What an object name looks like without filename_datetime_format (docs/protocol.md's
# export rules: the service's default).
DEFAULT_DATETIME_FORMAT = "YYYY-MM-DDThh:mm:ss+00:00"

# Cloud Storage ingestion's input formats, as the settings' oneof names them.
_INPUT_FORMATS = {
    "text_format": "text",
    "avro_format": "Avro",
    "pubsub_avro_format": "Pub/Sub Avro",
}

# The ingestion sources as a person names them (the settings' oneof field names).
SOURCE_NAMES = {
    "cloud_storage": "Cloud Storage",
    "aws_kinesis": "Amazon Kinesis Data Streams",
    "aws_msk": "Amazon MSK",
    "azure_event_hubs": "Azure Event Hubs",
    "confluent_cloud": "Confluent Cloud",
}


class EdgeRooms(Protocol):
    """The server's edge rooms the dashboard reads: the server's own ``EdgeRooms`` value
    (server.py) is one; a test can hand it any object with these three."""

    @property
    def exports(self) -> ExportRunner | None: ...

    @property
    def ingestion(self) -> Ingestion | None: ...

    @property
    def bigquery(self) -> BigQueryStandIn | None: ...


@dataclass(frozen=True)
class TableWrites:
    """What every subscription wrote to one BigQuery table since the server started."""

    table: str
    messages: int
    unwritable: int
    writes: int
    last_write: float | None
    subscriptions: int


@dataclass(frozen=True)
class ExportPanel:
    """A subscription's export: its kind, its settings (``(what, value)`` text), and what
    the runner reports (None: the runner has not looked at it yet, or the server runs
    none)."""

    kind: str  # CLOUD_STORAGE or BIGQUERY
    settings: Sequence[tuple[str, str]]
    flags: Sequence[str]  # the boolean settings that are on
    status: ExportStatus | None
    runs: bool  # whether the server runs exports at all
    table: TableWrites | None = None  # BigQuery: the table's writes, every subscription's


@dataclass(frozen=True)
class TransformsPanel:
    """A topic's or a subscription's message transforms and what they did."""

    kind: str  # "topic" or "subscription"
    udfs: Sequence[Udf]
    counts: TransformCounts


@dataclass(frozen=True)
class IngestionPanel:
    """A topic's ingestion: the source, its settings, its state and what it ingested."""

    source: str  # the settings' oneof field: "cloud_storage", "aws_kinesis", ...
    settings: Sequence[tuple[str, str]]
    state: str  # the source's State name ("" when the server runs no ingestion)
    topic_state: str  # Topic.State: ACTIVE or INGESTION_RESOURCE_ERROR
    status: IngestionStatus | None


@dataclass(frozen=True)
class EdgeRow:
    """One export subscription or import topic, as the overview lists them."""

    name: str
    kind: str  # "subscription" or "topic": whose page the name links to
    what: str  # "Cloud Storage export", "BigQuery export", "Amazon MSK ingestion", ...
    where: str  # the bucket or table, or the source
    state: str
    done: str  # what it exported or ingested since the server started


class Edges:
    """Reads the edge rooms for the dashboard's pages (``rooms`` None: a dashboard of a
    broker without them, which shows the settings and no state)."""

    def __init__(self, transforms: MessageTransforms, rooms: EdgeRooms | None = None) -> None:
        self.transforms = transforms
        self.rooms = rooms

    # ------------------------------------------------------------- exports

    def export(self, view: SubscriptionView) -> ExportPanel | None:
        subscription = _subscription(view)
        if subscription is None:
            return None
        kind = _export_kind(subscription)
        if kind is None:
            return None
        runner = self.rooms.exports if self.rooms is not None else None
        status = runner.status(view.config.name) if runner is not None else None
        if status is not None and status.kind != kind:
            status = None  # the status of the export it was before an update
        if kind == CLOUD_STORAGE:
            settings, flags = _cloud_storage_settings(subscription.cloud_storage_config)
            return ExportPanel(kind, settings, flags, status, runner is not None)
        settings, flags = _bigquery_settings(subscription.bigquery_config)
        return ExportPanel(
            kind, settings, flags, status, runner is not None, self._table(view.config.name)
        )

    def _table(self, subscription: str) -> TableWrites | None:
        standin = self.rooms.bigquery if self.rooms is not None else None
        if standin is None:
            return None
        for activity in standin.activity():
            if subscription in activity.subscriptions:
                return TableWrites(
                    activity.table,
                    activity.messages_written,
                    activity.unwritable,
                    activity.writes,
                    activity.last_write,
                    len(activity.subscriptions),
                )
        return None

    # ---------------------------------------------------------- transforms

    def topic_transforms(self, view: TopicView) -> TransformsPanel | None:
        topic = _topic(view)
        counts = self.transforms.topic_counts.get(view.config.name)
        return _transforms("topic", topic.message_transforms if topic else (), counts)

    def subscription_transforms(self, view: SubscriptionView) -> TransformsPanel | None:
        subscription = _subscription(view)
        counts = self.transforms.subscription_counts.get(view.config.name)
        return _transforms(
            "subscription", subscription.message_transforms if subscription else (), counts
        )

    # ----------------------------------------------------------- ingestion

    def ingestion(self, view: TopicView) -> IngestionPanel | None:
        topic = _topic(view)
        if topic is None or not topic.HasField("ingestion_data_source_settings"):
            return None
        source = topic.ingestion_data_source_settings.WhichOneof("source")
        if source is None:
            return None
        room = self.rooms.ingestion if self.rooms is not None else None
        state = topic_state = ""
        status = None
        if room is not None:
            topic.name = view.config.name
            room.fill(topic)  # the states GetTopic answers with now
            state = _source_state(topic, source)
            topic_state = pubsub_pb2.Topic.State.Name(topic.state)
            status = room.status(view.config.name)
        settings = _source_settings(topic.ingestion_data_source_settings, source)
        return IngestionPanel(source, settings, state, topic_state, status)

    # ------------------------------------------------------------ overview

    def rows(
        self, subscriptions: Iterable[SubscriptionView], topics: Iterable[TopicView]
    ) -> list[EdgeRow]:
        """The export subscriptions and import topics among ``subscriptions`` and
        ``topics`` (what the overview may show), subscriptions first, each by name."""
        found: list[EdgeRow] = []
        for view in subscriptions:
            panel = self.export(view) if view.config.extras else None
            if panel is not None:
                found.append(_export_row(view.config.name, panel))
        for topic in topics:
            ingestion = self.ingestion(topic) if topic.config.extras else None
            if ingestion is not None:
                found.append(_ingestion_row(topic.config.name, ingestion))
        return found


# ------------------------------------------------------------------ configs


def _subscription(view: SubscriptionView) -> pubsub_pb2.Subscription | None:
    if not view.config.extras:
        return None
    return pubsub_pb2.Subscription.FromString(view.config.extras)


def _topic(view: TopicView) -> pubsub_pb2.Topic | None:
    if not view.config.extras:
        return None
    return pubsub_pb2.Topic.FromString(view.config.extras)


def _export_kind(subscription: pubsub_pb2.Subscription) -> str | None:
    # As the export runner tells them apart (a bucket, or a table, set).
    if subscription.HasField("cloud_storage_config") and subscription.cloud_storage_config.bucket:
        return CLOUD_STORAGE
    if subscription.HasField("bigquery_config") and subscription.bigquery_config.table:
        return BIGQUERY
    return None


def _cloud_storage_settings(
    config: pubsub_pb2.CloudStorageConfig,
) -> tuple[list[tuple[str, str]], list[str]]:
    datetime_format = config.filename_datetime_format or DEFAULT_DATETIME_FORMAT
    names = f"{config.filename_prefix}{datetime_format}_<uuid>{config.filename_suffix}"
    avro = config.WhichOneof("output_format") == "avro_config"
    limits = [f"every {formats.duration(max_duration_of(config))}"]
    if config.max_bytes > 0:
        limits.append(f"at {formats.size(config.max_bytes)}")
    if config.max_messages > 0:
        limits.append(f"at {formats.count(config.max_messages, 'message')}")
    settings = [
        ("bucket", f"gs://{config.bucket}"),
        ("object names", names),
        ("output format", "Avro" if avro else "text (one message's data per line)"),
        ("a new object", ", or ".join(limits) + ", whichever comes first"),
    ]
    if config.service_account_email:
        settings.append(("service account", config.service_account_email))
    flags = []
    if avro and config.avro_config.write_metadata:
        flags.append("write metadata")
    if avro and config.avro_config.use_topic_schema:
        flags.append("use topic schema")
    return settings, flags


def _bigquery_settings(
    config: pubsub_pb2.BigQueryConfig,
) -> tuple[list[tuple[str, str]], list[str]]:
    settings = [("table", config.table)]
    if config.service_account_email:
        settings.append(("service account", config.service_account_email))
    flags = [
        text
        for on, text in (
            (config.use_topic_schema, "use topic schema"),
            (config.use_table_schema, "use table schema"),
            (config.write_metadata, "write metadata"),
            (config.drop_unknown_fields, "drop unknown fields"),
        )
        if on
    ]
    return settings, flags


def _transforms(
    kind: str,
    transforms: Sequence[pubsub_pb2.MessageTransform],
    counts: TransformCounts | None,
) -> TransformsPanel | None:
    udfs = udfs_of(transforms)
    if not udfs and counts is None:
        return None
    return TransformsPanel(kind, udfs, counts or TransformCounts())


def _source_state(topic: pubsub_pb2.Topic, source: str) -> str:
    message = getattr(topic.ingestion_data_source_settings, source)
    return str(type(message).State.Name(message.state))


def _source_settings(
    settings: pubsub_pb2.IngestionDataSourceSettings, source: str
) -> list[tuple[str, str]]:
    """The source's fields that are set, as ``(field, value)`` text (``state`` is shown
    apart); then the platform logs' severity."""
    message = getattr(settings, source)
    shown: list[tuple[str, str]] = []
    for field, value in message.ListFields():
        if field.name == "state":
            continue
        if field.name in _INPUT_FORMATS:
            text = _INPUT_FORMATS[field.name]
            if field.name == "text_format" and value.HasField("delimiter"):
                text += f", delimiter {value.delimiter!r}"
            shown.append(("input format", text))
        elif field.name == "bucket":
            shown.append(("bucket", f"gs://{value}"))
        elif field.name == "minimum_object_create_time":
            shown.append((field.name, formats.when(value.seconds + value.nanos / 1e9)))
        else:
            shown.append((field.name, str(value)))
    if settings.HasField("platform_logs_settings"):
        severity = pubsub_pb2.PlatformLogsSettings.Severity.Name(
            settings.platform_logs_settings.severity
        )
        shown.append(("platform logs", severity))
    return shown


# ------------------------------------------------------------------ overview


def _export_row(name: str, panel: ExportPanel) -> EdgeRow:
    status = panel.status
    what = "Cloud Storage export" if panel.kind == CLOUD_STORAGE else "BigQuery export"
    where = panel.settings[0][1]  # the bucket or the table
    if status is None:
        return EdgeRow(name, "subscription", what, where, "", "")
    unit = (
        formats.count(status.objects, "object")
        if panel.kind == CLOUD_STORAGE
        else formats.count(status.rows, "row")
    )
    done = f"{formats.count(status.messages, 'message')} in {unit}"
    return EdgeRow(name, "subscription", what, where, status.state, done)


def _ingestion_row(name: str, panel: IngestionPanel) -> EdgeRow:
    what = f"{SOURCE_NAMES.get(panel.source, panel.source)} ingestion"
    where = next((v for k, v in panel.settings if k in ("bucket", "stream_arn")), "")
    done = ""
    if panel.status is not None and panel.source == "cloud_storage":
        counters = panel.status.counters
        done = (
            f"{formats.count(counters.messages, 'message')} from "
            f"{formats.count(counters.objects, 'object')}"
        )
    return EdgeRow(name, "topic", what, where, panel.state, done)
