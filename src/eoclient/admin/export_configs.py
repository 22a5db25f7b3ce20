"""Export subscriptions in the admin API: ``CloudStorageConfig`` and ``BigQueryConfig`` as
frozen dataclasses, and their only contact with the wire (``*_to_pb`` / ``*_from_pb``).

A subscription delivers by pull, push, BigQuery or Cloud Storage: at most one of
``push_config``, ``bigquery_config`` and ``cloud_storage_config`` is set. Field meanings and
limits follow google.pubsub.v1 (docs/protocol.md#cloud-storage-subscription-settings);
``state`` is output only and never sent.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass

from eoclient._proto import pubsub_pb2 as pb

__all__ = [
    "BigQueryConfig",
    "CloudStorageConfig",
    "CloudStorageOutputFormat",
    "ExportState",
]


class ExportState(enum.Enum):
    """An export's state (output only): ``BigQueryConfig.State`` and
    ``CloudStorageConfig.State`` by name (the two enums number them differently)."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    ACTIVE = "ACTIVE"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    NOT_FOUND = "NOT_FOUND"
    SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
    IN_TRANSIT_LOCATION_RESTRICTION = "IN_TRANSIT_LOCATION_RESTRICTION"
    VERTEX_AI_LOCATION_RESTRICTION = "VERTEX_AI_LOCATION_RESTRICTION"


class CloudStorageOutputFormat(enum.Enum):
    """How messages are written: ``TEXT`` (data only, a line each) or ``AVRO``."""

    TEXT = "text"
    AVRO = "avro"


@dataclass(frozen=True, slots=True)
class CloudStorageConfig:
    """A Cloud Storage subscription (``CloudStorageConfig``): messages written in batches,
    one object per batch, named ``<filename_prefix><UTC date-time>_<uuid><filename_suffix>``.

    Attributes:
        bucket: an existing bucket's name, without ``gs://``.
        filename_prefix / filename_suffix: object-name parts; the suffix may not end in ``/``.
        filename_datetime_format: how the date-time is written (``YYYY`` or ``YY``, ``MM``,
            ``DD``, ``hh``, ``mm``, ``ss`` once each; ``T`` and ``Z`` or ``+00:00`` at most
            once; ``-``, ``_``, ``:``, ``/``); ``""``: ``YYYY-MM-DDThh:mm:ss+00:00``.
        output_format: ``TEXT`` or ``AVRO``.
        write_metadata: Avro only: records with subscription_name, message_id,
            publish_time, attributes and data.
        use_topic_schema: Avro only: records of the topic's Avro schema.
        max_duration: a new object at least this often, 1..10 minutes; ``None``: 5 minutes.
        max_bytes: a new object past this size, 1 KB..10 GiB; ``0``: no such limit.
        max_messages: a new object past this many messages, >= 1000; ``0``: no such limit.
        service_account_email: kept (nothing to enforce on one machine).
        state: output only.
    """

    bucket: str
    filename_prefix: str = ""
    filename_suffix: str = ""
    filename_datetime_format: str = ""
    output_format: CloudStorageOutputFormat = CloudStorageOutputFormat.TEXT
    write_metadata: bool = False
    use_topic_schema: bool = False
    max_duration: datetime.timedelta | None = None
    max_bytes: int = 0
    max_messages: int = 0
    service_account_email: str = ""
    state: ExportState = ExportState.STATE_UNSPECIFIED

    def __post_init__(self) -> None:
        avro = self.output_format is CloudStorageOutputFormat.AVRO
        if (self.write_metadata or self.use_topic_schema) and not avro:
            raise ValueError(
                "write_metadata and use_topic_schema apply to Avro files only: pass "
                "output_format=CloudStorageOutputFormat.AVRO"
            )


@dataclass(frozen=True, slots=True)
class BigQueryConfig:
    """A BigQuery subscription (``BigQueryConfig``): each message a row of ``table``.

    Attributes:
        table: ``project.dataset.table``; it must exist.
        use_topic_schema: columns from the topic's schema (Avro or protobuf).
        use_table_schema: JSON messages, their fields to the columns of the same name.
        write_metadata: subscription_name, message_id, publish_time, data and attributes
            columns.
        drop_unknown_fields: drop fields the table lacks instead of refusing the message.
        service_account_email: kept (nothing to enforce on one machine).
        state: output only.
    """

    table: str
    use_topic_schema: bool = False
    use_table_schema: bool = False
    write_metadata: bool = False
    drop_unknown_fields: bool = False
    service_account_email: str = ""
    state: ExportState = ExportState.STATE_UNSPECIFIED


def _state(enum_type: type, value: int) -> ExportState:
    try:
        return ExportState(enum_type.Name(value))  # type: ignore[attr-defined]
    except ValueError:  # a state newer than this SDK
        return ExportState.STATE_UNSPECIFIED


def cloud_storage_to_pb(config: CloudStorageConfig, message: pb.CloudStorageConfig) -> None:
    message.bucket = config.bucket
    message.filename_prefix = config.filename_prefix
    message.filename_suffix = config.filename_suffix
    message.filename_datetime_format = config.filename_datetime_format
    if config.output_format is CloudStorageOutputFormat.AVRO:
        message.avro_config.write_metadata = config.write_metadata
        message.avro_config.use_topic_schema = config.use_topic_schema
        message.avro_config.SetInParent()
    else:
        message.text_config.SetInParent()
    if config.max_duration is not None:
        message.max_duration.FromTimedelta(config.max_duration)
    message.max_bytes = config.max_bytes
    message.max_messages = config.max_messages
    message.service_account_email = config.service_account_email


def cloud_storage_from_pb(message: pb.CloudStorageConfig) -> CloudStorageConfig:
    avro = message.WhichOneof("output_format") == "avro_config"
    return CloudStorageConfig(
        bucket=message.bucket,
        filename_prefix=message.filename_prefix,
        filename_suffix=message.filename_suffix,
        filename_datetime_format=message.filename_datetime_format,
        output_format=CloudStorageOutputFormat.AVRO if avro else CloudStorageOutputFormat.TEXT,
        write_metadata=avro and message.avro_config.write_metadata,
        use_topic_schema=avro and message.avro_config.use_topic_schema,
        max_duration=(
            message.max_duration.ToTimedelta() if message.HasField("max_duration") else None
        ),
        max_bytes=message.max_bytes,
        max_messages=message.max_messages,
        service_account_email=message.service_account_email,
        state=_state(pb.CloudStorageConfig.State, message.state),
    )


def bigquery_to_pb(config: BigQueryConfig, message: pb.BigQueryConfig) -> None:
    message.table = config.table
    message.use_topic_schema = config.use_topic_schema
    message.use_table_schema = config.use_table_schema
    message.write_metadata = config.write_metadata
    message.drop_unknown_fields = config.drop_unknown_fields
    message.service_account_email = config.service_account_email


def bigquery_from_pb(message: pb.BigQueryConfig) -> BigQueryConfig:
    return BigQueryConfig(
        table=message.table,
        use_topic_schema=message.use_topic_schema,
        use_table_schema=message.use_table_schema,
        write_metadata=message.write_metadata,
        drop_unknown_fields=message.drop_unknown_fields,
        service_account_email=message.service_account_email,
        state=_state(pb.BigQueryConfig.State, message.state),
    )
