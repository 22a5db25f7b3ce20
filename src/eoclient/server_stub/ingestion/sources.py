"""The sources of an import topic as this server sees them, and the states they show.

Pure values, no protobuf (the shell translates the topic's settings). Two kinds:

* ``CloudStorageSource``: ingested for real, from the buckets of ``--buckets-dir`` or the
  Cloud Storage API at ``STORAGE_EMULATOR_HOST`` (``cloud_storage.py`` decides what);
* every other source (Amazon Kinesis Data Streams, Amazon MSK, Azure Event Hubs,
  Confluent Cloud) is another cloud's service, reached by the real service through
  federated identity (``gcp_service_account`` -> an AWS role, an Azure application, a
  Confluent identity pool). A server on one machine has no such identity, so its first
  step fails as the service's does when the federation is not set up: the source shows
  its ``*_PERMISSION_DENIED`` state (never ACTIVE: nothing is ingested; never
  unspecified: the settings are kept and the topic works otherwise), and the topic
  ``INGESTION_RESOURCE_ERROR`` (docs/protocol.md#topic-ingestion-states).
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVE = "ACTIVE"

# source field -> (the state the service shows when its identity is refused, its name).
UNREACHABLE: dict[str, tuple[str, str]] = {
    "aws_kinesis": ("KINESIS_PERMISSION_DENIED", "Amazon Kinesis Data Streams"),
    "aws_msk": ("MSK_PERMISSION_DENIED", "Amazon MSK"),
    "azure_event_hubs": ("EVENT_HUBS_PERMISSION_DENIED", "Azure Event Hubs"),
    "confluent_cloud": ("CONFLUENT_CLOUD_PERMISSION_DENIED", "Confluent Cloud"),
}


@dataclass(frozen=True)
class UnreachableSource:
    """A source in another cloud: kept as given, never read."""

    kind: str  # the settings' oneof field: "aws_kinesis", ...

    @property
    def state(self) -> str:
        return UNREACHABLE[self.kind][0]

    def reason(self) -> str:
        state, name = UNREACHABLE[self.kind]
        return (
            f"{name} cannot be read from this server: the service reaches it with "
            "federated identity (gcp_service_account), which a server on one machine does "
            f"not have; the source shows {state}, as the service's does when that identity "
            "is refused, and nothing is ingested"
        )


@dataclass(frozen=True)
class CloudStorageSource:
    """``IngestionDataSourceSettings.CloudStorage``, checked (services/ingestion_settings)."""

    bucket: str
    input_format: str = "text"  # formats.TEXT, AVRO or PUBSUB_AVRO
    delimiter: str = "\n"
    match_glob: str = ""
    minimum_object_create_time: float | None = None  # seconds since the epoch
    # PlatformLogsSettings.Severity's name ("" when unset: no platform logs).
    log_severity: str = ""


Source = CloudStorageSource | UnreachableSource
