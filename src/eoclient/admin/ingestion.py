"""Import topics: a topic's ``ingestion_data_source_settings`` as frozen dataclasses.

::

    from eoclient.admin import CloudStorageFormat, CloudStorageSource, IngestionSettings

    async with AdminClient() as admin:
        topic = await admin.create_topic(
            topic_path("my-project", "imports"),
            ingestion_data_source_settings=IngestionSettings(
                CloudStorageSource("my-bucket", CloudStorageFormat.TEXT, match_glob="**.txt")
            ),
        )
        print(topic.state, topic.ingestion_data_source_settings.source.state)

One source per topic (:data:`IngestionSource`): Amazon Kinesis Data Streams, Cloud
Storage, Azure Event Hubs, Amazon MSK or Confluent Cloud, with the platform logs'
severity. Each source's ``state`` is output only (ignored when sent): it says whether the
source is read (``ACTIVE``) or why not. eoclient's reference server reads Cloud Storage
sources and shows the other four as their ``*_PERMISSION_DENIED`` state
(docs/protocol.md#topic-ingestion-states). ``update_topic(name,
ingestion_data_source_settings=None)`` makes an import topic a plain one again.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from typing import Any

from eoclient._proto import pubsub_pb2 as pb

__all__ = [
    "AwsKinesisSource",
    "AwsMskSource",
    "AzureEventHubsSource",
    "CloudStorageFormat",
    "CloudStorageSource",
    "CloudStorageState",
    "ConfluentCloudSource",
    "ConfluentCloudState",
    "EventHubsState",
    "IngestionLogSeverity",
    "IngestionSettings",
    "IngestionSource",
    "KinesisState",
    "MskState",
]

_Settings = pb.IngestionDataSourceSettings


class KinesisState(enum.Enum):
    """``IngestionDataSourceSettings.AwsKinesis.State`` (output only)."""

    STATE_UNSPECIFIED = 0
    ACTIVE = 1
    KINESIS_PERMISSION_DENIED = 2
    PUBLISH_PERMISSION_DENIED = 3
    STREAM_NOT_FOUND = 4
    CONSUMER_NOT_FOUND = 5
    CONFLICTING_REGION_CONSTRAINTS = 6


class CloudStorageState(enum.Enum):
    """``IngestionDataSourceSettings.CloudStorage.State`` (output only)."""

    STATE_UNSPECIFIED = 0
    ACTIVE = 1
    CLOUD_STORAGE_PERMISSION_DENIED = 2
    PUBLISH_PERMISSION_DENIED = 3
    BUCKET_NOT_FOUND = 4
    TOO_MANY_OBJECTS = 5
    CONFLICTING_REGION_CONSTRAINTS = 8


class EventHubsState(enum.Enum):
    """``IngestionDataSourceSettings.AzureEventHubs.State`` (output only)."""

    STATE_UNSPECIFIED = 0
    ACTIVE = 1
    EVENT_HUBS_PERMISSION_DENIED = 2
    PUBLISH_PERMISSION_DENIED = 3
    NAMESPACE_NOT_FOUND = 4
    EVENT_HUB_NOT_FOUND = 5
    SUBSCRIPTION_NOT_FOUND = 6
    RESOURCE_GROUP_NOT_FOUND = 7
    CONFLICTING_REGION_CONSTRAINTS = 8


class MskState(enum.Enum):
    """``IngestionDataSourceSettings.AwsMsk.State`` (output only)."""

    STATE_UNSPECIFIED = 0
    ACTIVE = 1
    MSK_PERMISSION_DENIED = 2
    PUBLISH_PERMISSION_DENIED = 3
    CLUSTER_NOT_FOUND = 4
    TOPIC_NOT_FOUND = 5
    CONFLICTING_REGION_CONSTRAINTS = 6


class ConfluentCloudState(enum.Enum):
    """``IngestionDataSourceSettings.ConfluentCloud.State`` (output only)."""

    STATE_UNSPECIFIED = 0
    ACTIVE = 1
    CONFLUENT_CLOUD_PERMISSION_DENIED = 2
    PUBLISH_PERMISSION_DENIED = 3
    UNREACHABLE_BOOTSTRAP_SERVER = 4
    CLUSTER_NOT_FOUND = 5
    TOPIC_NOT_FOUND = 6
    CONFLICTING_REGION_CONSTRAINTS = 7


class CloudStorageFormat(enum.Enum):
    """How a Cloud Storage object becomes messages (docs/protocol.md#cloud-storage-ingestion)."""

    TEXT = "text"  # one message per line (per ``text_delimiter``)
    AVRO = "avro"  # one message per record of an Avro file
    PUBSUB_AVRO = "pubsub_avro"  # the Avro files a Cloud Storage subscription writes


class IngestionLogSeverity(enum.Enum):
    """``PlatformLogsSettings.Severity``: the least severe platform log written."""

    DISABLED = 1
    DEBUG = 2
    INFO = 3
    WARNING = 4
    ERROR = 5


@dataclass(frozen=True, slots=True)
class AwsKinesisSource:
    """Amazon Kinesis Data Streams (every field required)."""

    stream_arn: str
    consumer_arn: str
    aws_role_arn: str
    gcp_service_account: str
    state: KinesisState = KinesisState.STATE_UNSPECIFIED  # output only


@dataclass(frozen=True, slots=True)
class CloudStorageSource:
    """Cloud Storage: the objects of ``bucket`` matching ``match_glob`` (all when ``""``)
    created at or after ``minimum_object_create_time`` (any when ``None``);
    ``text_delimiter``: one character (``None``: ``"\\n"``), text format only."""

    bucket: str
    input_format: CloudStorageFormat = CloudStorageFormat.TEXT
    text_delimiter: str | None = None
    match_glob: str = ""
    minimum_object_create_time: datetime.datetime | None = None
    state: CloudStorageState = CloudStorageState.STATE_UNSPECIFIED  # output only


@dataclass(frozen=True, slots=True)
class AzureEventHubsSource:
    """Azure Event Hubs (every field required)."""

    resource_group: str
    namespace: str
    event_hub: str
    client_id: str
    tenant_id: str
    subscription_id: str
    gcp_service_account: str
    state: EventHubsState = EventHubsState.STATE_UNSPECIFIED  # output only


@dataclass(frozen=True, slots=True)
class AwsMskSource:
    """Amazon MSK (every field required; ``topic`` is the Kafka topic)."""

    cluster_arn: str
    topic: str
    aws_role_arn: str
    gcp_service_account: str
    state: MskState = MskState.STATE_UNSPECIFIED  # output only


@dataclass(frozen=True, slots=True)
class ConfluentCloudSource:
    """Confluent Cloud (every field required; ``bootstrap_server`` is ``host:port``)."""

    bootstrap_server: str
    cluster_id: str
    topic: str
    identity_pool_id: str
    gcp_service_account: str
    state: ConfluentCloudState = ConfluentCloudState.STATE_UNSPECIFIED  # output only


IngestionSource = (
    AwsKinesisSource
    | CloudStorageSource
    | AzureEventHubsSource
    | AwsMskSource
    | ConfluentCloudSource
)


@dataclass(frozen=True, slots=True)
class IngestionSettings:
    """``IngestionDataSourceSettings``: the source and which failures are logged
    (``log_severity``: ``None`` = no platform logs)."""

    source: IngestionSource
    log_severity: IngestionLogSeverity | None = None


# ================================================================ wire


_FIELDS: dict[type[Any], str] = {
    AwsKinesisSource: "aws_kinesis",
    CloudStorageSource: "cloud_storage",
    AzureEventHubsSource: "azure_event_hubs",
    AwsMskSource: "aws_msk",
    ConfluentCloudSource: "confluent_cloud",
}
_PLAIN_FIELDS: dict[str, tuple[str, ...]] = {
    "aws_kinesis": ("stream_arn", "consumer_arn", "aws_role_arn", "gcp_service_account"),
    "azure_event_hubs": (
        "resource_group",
        "namespace",
        "event_hub",
        "client_id",
        "tenant_id",
        "subscription_id",
        "gcp_service_account",
    ),
    "aws_msk": ("cluster_arn", "topic", "aws_role_arn", "gcp_service_account"),
    "confluent_cloud": (
        "bootstrap_server",
        "cluster_id",
        "topic",
        "identity_pool_id",
        "gcp_service_account",
    ),
}
_CLASSES = {field: cls for cls, field in _FIELDS.items()}
_STATES = {
    "aws_kinesis": KinesisState,
    "cloud_storage": CloudStorageState,
    "azure_event_hubs": EventHubsState,
    "aws_msk": MskState,
    "confluent_cloud": ConfluentCloudState,
}
_FORMAT_FIELDS = {
    CloudStorageFormat.TEXT: "text_format",
    CloudStorageFormat.AVRO: "avro_format",
    CloudStorageFormat.PUBSUB_AVRO: "pubsub_avro_format",
}


def settings_to_pb(settings: IngestionSettings, message: _Settings) -> None:
    """Fill ``message`` (a topic's ``ingestion_data_source_settings``) from ``settings``."""
    field = _FIELDS[type(settings.source)]
    target = getattr(message, field)
    target.SetInParent()
    source = settings.source
    if isinstance(source, CloudStorageSource):
        target.bucket = source.bucket
        getattr(target, _FORMAT_FIELDS[source.input_format]).SetInParent()
        if source.text_delimiter is not None:
            target.text_format.delimiter = source.text_delimiter
        target.match_glob = source.match_glob
        if source.minimum_object_create_time is not None:
            when = source.minimum_object_create_time
            if when.tzinfo is None:
                raise ValueError(
                    "minimum_object_create_time must be timezone-aware, e.g. "
                    f"datetime.now(timezone.utc); got the naive {when!r}"
                )
            target.minimum_object_create_time.FromDatetime(when.astimezone(datetime.UTC))
    else:
        for name in _PLAIN_FIELDS[field]:
            setattr(target, name, getattr(source, name))
    if settings.log_severity is not None:
        message.platform_logs_settings.severity = settings.log_severity.value  # type: ignore[assignment]


def settings_from_pb(message: _Settings) -> IngestionSettings | None:
    field = message.WhichOneof("source")
    if field is None:
        return None
    wire = getattr(message, field)
    states: Any = _STATES[field]
    try:
        state = states(wire.state)
    except ValueError:  # a state newer than our proto
        state = states.STATE_UNSPECIFIED
    source: IngestionSource
    if field == "cloud_storage":
        chosen = wire.WhichOneof("input_format")
        input_format = next(
            (f for f, name in _FORMAT_FIELDS.items() if name == chosen), CloudStorageFormat.TEXT
        )
        delimiter = (
            wire.text_format.delimiter
            if chosen == "text_format" and wire.text_format.HasField("delimiter")
            else None
        )
        source = CloudStorageSource(
            bucket=wire.bucket,
            input_format=input_format,
            text_delimiter=delimiter,
            match_glob=wire.match_glob,
            minimum_object_create_time=(
                wire.minimum_object_create_time.ToDatetime(tzinfo=datetime.UTC)
                if wire.HasField("minimum_object_create_time")
                else None
            ),
            state=state,
        )
    else:
        values = {name: getattr(wire, name) for name in _PLAIN_FIELDS[field]}
        source = _CLASSES[field](**values, state=state)
    severity = None
    if message.HasField("platform_logs_settings"):
        try:
            severity = IngestionLogSeverity(message.platform_logs_settings.severity)
        except ValueError:  # unspecified (0) or newer than our proto
            severity = None
    return IngestionSettings(source, severity)
