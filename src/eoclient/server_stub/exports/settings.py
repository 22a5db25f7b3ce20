"""An export subscription's settings as the runner uses them, read from its stored config
(``CloudStorageConfig`` / ``BigQueryConfig``), with the limits of the specification
(docs/protocol.md#export-batching). ``services/cloud_storage_config.py`` refuses what breaks
them at create and update, so what is stored here is valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.exports.batch import BatchLimits
from eoclient.server_stub.exports.naming import DatetimeFormat, parse_datetime_format

# max_duration: "Min 1 minute, max 10 minutes, default 5 minutes" (the proto's comments).
MIN_DURATION_SECONDS = 60.0
MAX_DURATION_SECONDS = 600.0
DEFAULT_DURATION_SECONDS = 300.0
# max_bytes: "Min 1 KB, max 10 GiB"; max_messages: "Min 1000 messages".
MIN_BYTES = 1000
MAX_BYTES = 10 * 2**30
MIN_MESSAGES = 1000


@dataclass(frozen=True)
class CloudStorageExport:
    bucket: str
    prefix: str
    suffix: str
    datetime_format: DatetimeFormat
    avro: bool
    write_metadata: bool
    use_topic_schema: bool
    limits: BatchLimits

    def describe(self) -> str:
        kind = "Avro" if self.avro else "text"
        return f"gs://{self.bucket}/{self.prefix}* ({kind})"


def max_duration_of(config: pubsub_pb2.CloudStorageConfig) -> float:
    if not config.HasField("max_duration"):
        return DEFAULT_DURATION_SECONDS
    duration = config.max_duration
    seconds = duration.seconds + duration.nanos / 1e9
    return seconds or DEFAULT_DURATION_SECONDS


def cloud_storage_export(config: pubsub_pb2.CloudStorageConfig) -> CloudStorageExport:
    avro = config.WhichOneof("output_format") == "avro_config"
    return CloudStorageExport(
        bucket=config.bucket,
        prefix=config.filename_prefix,
        suffix=config.filename_suffix,
        datetime_format=parse_datetime_format(config.filename_datetime_format),
        avro=avro,
        write_metadata=avro and config.avro_config.write_metadata,
        use_topic_schema=avro and config.avro_config.use_topic_schema,
        limits=BatchLimits(
            max_duration=max_duration_of(config),
            max_bytes=max(config.max_bytes, 0),
            max_messages=max(config.max_messages, 0),
        ),
    )
