"""A topic's ``ingestion_data_source_settings``: what CreateTopic and UpdateTopic accept.

The core keeps these settings opaque (the topic's ``extras``); this module is where their
rules live (docs/protocol.md#topic-ingestion-settings):

* one source of the ``source`` oneof, or none; ``platform_logs_settings`` only with one;
* each source's required fields present (every missing one named, in the service's words,
  which Google's emulator shares), and of the right form (AWS ARNs of the right
  service and resource, a service account that is an email address, a Kafka topic name,
  ``host:port`` for a bootstrap server, a Cloud Storage bucket name, a ``match_glob`` that
  parses, a known log severity);
* the ``state`` fields are output only: a request's are dropped, never stored
  (``stored``), and the answer's are filled from the ingestion room
  (``server_stub/ingestion/``) through ``IngestionStates``;
* an UpdateTopic mask names the settings whole (``ingestion_data_source_settings``): a
  path into them is refused as the service refuses it.

Every refusal is INVALID_ARGUMENT naming the field and saying what would be accepted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Protocol

from google.protobuf.message import Message

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument
from eoclient.server_stub.services.cloud_storage_glob import GlobError, compile_glob

Settings = pubsub_pb2.IngestionDataSourceSettings
FIELD = "ingestion_data_source_settings"

# AWS ARNs: arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE. Partitions and the region form
# are AWS's (aws, aws-cn, aws-us-gov; "us-west-2", "cn-north-1", "us-gov-west-1"); an
# account is twelve digits.
_PARTITION = r"aws(?:-cn|-us-gov)?"
_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d+"
_ACCOUNT = r"\d{12}"
# Kinesis stream and consumer names: 1-128 of [a-zA-Z0-9_.-] (Kinesis' CreateStream and
# RegisterStreamConsumer); a consumer ARN ends in ":<creation timestamp>".
_KINESIS_NAME = r"[a-zA-Z0-9_.-]{1,128}"
_STREAM_ARN = re.compile(
    rf"arn:{_PARTITION}:kinesis:{_REGION}:{_ACCOUNT}:stream/(?P<stream>{_KINESIS_NAME})"
)
_CONSUMER_ARN = re.compile(
    rf"(?P<stream_arn>arn:{_PARTITION}:kinesis:{_REGION}:{_ACCOUNT}:stream/{_KINESIS_NAME})"
    rf"/consumer/{_KINESIS_NAME}:\d+"
)
# IAM role names and paths: [\w+=,.@-] and "/" (IAM's CreateRole).
_ROLE_ARN = re.compile(rf"arn:{_PARTITION}:iam::{_ACCOUNT}:role/[\w+=,.@/-]{{1,512}}")
# An MSK cluster: cluster/<name>/<cluster uuid>.
_CLUSTER_ARN = re.compile(
    rf"arn:{_PARTITION}:kafka:{_REGION}:{_ACCOUNT}:cluster/[a-zA-Z0-9-]{{1,64}}/[a-zA-Z0-9-]+"
)
# Kafka topic names (MSK and Confluent Cloud): 1-249 of [a-zA-Z0-9._-].
_KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_HOST_PORT = re.compile(r"(?P<host>[a-zA-Z0-9.-]+|\[[0-9a-fA-F:.]+\]):(?P<port>\d{1,5})")
# Cloud Storage bucket names: 3-63 characters of [a-z0-9_.-], beginning and ending with a
# letter or digit; with dots up to 222, each dot-separated part at most 63; not an IP
# address; not beginning with "goog" nor containing "google".
_BUCKET = re.compile(r"[a-z0-9][a-z0-9_.-]{1,220}[a-z0-9]")

_SEVERITIES = frozenset(pubsub_pb2.PlatformLogsSettings.Severity.values())


class IngestionStates(Protocol):
    """What the services ask the ingestion room (``server_stub/ingestion/``) about."""

    def changed(self, topic: str) -> None:
        """``topic`` was created, updated or deleted: its ingestion starts over, stops or
        goes on with the new settings."""

    def fill(self, topic: pubsub_pb2.Topic) -> None:
        """Set the output-only states of ``topic`` (an answer about to leave)."""


def _invalid(path: str, text: str) -> InvalidArgument:
    return InvalidArgument(f"Invalid {FIELD}.{path}: {text}")


# source field -> (its message's name, its required fields in the proto's order).
_REQUIRED = {
    "aws_kinesis": (
        "AwsKinesis",
        ("stream_arn", "consumer_arn", "aws_role_arn", "gcp_service_account"),
    ),
    "cloud_storage": ("CloudStorage", ("bucket", "input_format")),
    # The proto marks these optional, but the service requires every one (ingestion
    # cannot name an event hub or authenticate without them).
    "azure_event_hubs": (
        "AzureEventHubs",
        (
            "resource_group",
            "namespace",
            "event_hub",
            "client_id",
            "tenant_id",
            "subscription_id",
            "gcp_service_account",
        ),
    ),
    "aws_msk": ("AwsMsk", ("cluster_arn", "topic", "aws_role_arn", "gcp_service_account")),
    "confluent_cloud": (
        "ConfluentCloud",
        ("bootstrap_server", "cluster_id", "topic", "identity_pool_id", "gcp_service_account"),
    ),
}


def _check_required(kind: str, source: Message) -> None:
    """Every missing required field named at once, in the service's words."""
    message_name, required = _REQUIRED[kind]
    missing = [
        name
        for name in required
        if not (source.WhichOneof(name) if name == "input_format" else getattr(source, name))
    ]
    if missing:
        raise InvalidArgument(
            f"Missing required fields for {message_name} ingestion settings: " + ", ".join(missing)
        )


def _required(source: object, name: str, path: str) -> str:
    return str(getattr(source, name))  # present: _check_required ran first


def _matching(pattern: re.Pattern[str], value: str, path: str, form: str) -> re.Match[str]:
    match = pattern.fullmatch(value)
    if match is None:
        raise _invalid(path, f"{value!r} is not of the form {form}.")
    return match


def _service_account(source: object, path: str) -> None:
    value = _required(source, "gcp_service_account", path)
    _matching(_EMAIL, value, f"{path}.gcp_service_account", "NAME@PROJECT.iam.gserviceaccount.com")


def _role_arn(source: object, path: str) -> None:
    value = _required(source, "aws_role_arn", path)
    _matching(_ROLE_ARN, value, f"{path}.aws_role_arn", "arn:aws:iam::ACCOUNT:role/NAME")


def _check_kinesis(source: Settings.AwsKinesis) -> None:
    path = "aws_kinesis"
    stream = _required(source, "stream_arn", path)
    _matching(
        _STREAM_ARN, stream, f"{path}.stream_arn", "arn:aws:kinesis:REGION:ACCOUNT:stream/NAME"
    )
    consumer = _required(source, "consumer_arn", path)
    match = _matching(
        _CONSUMER_ARN,
        consumer,
        f"{path}.consumer_arn",
        "arn:aws:kinesis:REGION:ACCOUNT:stream/NAME/consumer/CONSUMER:TIMESTAMP",
    )
    if match.group("stream_arn") != stream:
        raise _invalid(f"{path}.consumer_arn", f"{consumer!r} is not a consumer of {stream!r}.")
    _role_arn(source, path)
    _service_account(source, path)


def _check_msk(source: Settings.AwsMsk) -> None:
    path = "aws_msk"
    cluster = _required(source, "cluster_arn", path)
    _matching(
        _CLUSTER_ARN,
        cluster,
        f"{path}.cluster_arn",
        "arn:aws:kafka:REGION:ACCOUNT:cluster/NAME/UUID",
    )
    topic = _required(source, "topic", path)
    _matching(
        _KAFKA_TOPIC, topic, f"{path}.topic", "a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)"
    )
    _role_arn(source, path)
    _service_account(source, path)


def _check_confluent(source: Settings.ConfluentCloud) -> None:
    path = "confluent_cloud"
    server = _required(source, "bootstrap_server", path)
    match = _matching(_HOST_PORT, server, f"{path}.bootstrap_server", "HOST:PORT")
    if not 0 < int(match.group("port")) < 65536:
        raise _invalid(f"{path}.bootstrap_server", f"port {match.group('port')} is out of range.")
    _required(source, "cluster_id", path)
    topic = _required(source, "topic", path)
    _matching(
        _KAFKA_TOPIC, topic, f"{path}.topic", "a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)"
    )
    _required(source, "identity_pool_id", path)
    _service_account(source, path)


def _check_event_hubs(source: Settings.AzureEventHubs) -> None:
    _service_account(source, "azure_event_hubs")  # the others are Azure's free-form names


def check_bucket_name(bucket: str, path: str) -> None:
    """INVALID_ARGUMENT unless ``bucket`` follows Cloud Storage's bucket naming rules."""
    if bucket.startswith("gs://"):
        raise _invalid(path, f"{bucket!r}: give the bucket's name without the gs:// prefix.")
    parts = bucket.split(".")
    valid = (
        _BUCKET.fullmatch(bucket) is not None
        and (len(bucket) <= 63 or "." in bucket)
        and all(0 < len(part) <= 63 for part in parts)
        and not bucket.startswith("goog")
        and "google" not in bucket
    )
    if valid:
        try:
            ipaddress.ip_address(bucket)
            valid = False
        except ValueError:
            pass
    if not valid:
        raise _invalid(
            path,
            f"{bucket!r} is not a Cloud Storage bucket name (3-63 lowercase letters, digits, "
            "'-', '_' and '.', beginning and ending with a letter or digit).",
        )


def _check_cloud_storage(source: Settings.CloudStorage) -> None:
    path = "cloud_storage"
    bucket = _required(source, "bucket", path)
    check_bucket_name(bucket, f"{path}.bucket")
    if source.WhichOneof("input_format") == "text_format":
        text = source.text_format
        if text.HasField("delimiter") and len(text.delimiter) != 1:
            raise InvalidArgument(
                "Delimiter for Cloud Storage ingestion text format must be a single "
                f"character. Delimiter provided: {text.delimiter}"
            )
    if source.match_glob:
        try:
            compile_glob(source.match_glob)
        except GlobError as error:
            raise _invalid(f"{path}.match_glob", str(error)) from None


_CHECKS = {
    "aws_kinesis": _check_kinesis,
    "cloud_storage": _check_cloud_storage,
    "azure_event_hubs": _check_event_hubs,
    "aws_msk": _check_msk,
    "confluent_cloud": _check_confluent,
}


def is_set(topic: pubsub_pb2.Topic) -> bool:
    """Whether ``topic`` carries ingestion settings (an empty message counts as unset)."""
    return topic.HasField(FIELD) and topic.ingestion_data_source_settings.ByteSize() > 0


def check(settings: Settings) -> None:
    """INVALID_ARGUMENT unless ``settings`` can be stored (see the module's docstring)."""
    source = settings.WhichOneof("source")
    if source is None:
        # The service's text; platform_logs_settings alone ingest nothing.
        raise InvalidArgument("No ingestion source provided")
    _check_required(source, getattr(settings, source))
    _CHECKS[source](getattr(settings, source))  # type: ignore[operator]
    if settings.HasField("platform_logs_settings"):
        severity = settings.platform_logs_settings.severity
        if severity not in _SEVERITIES:
            raise _invalid("platform_logs_settings.severity", f"{severity} is not a severity.")


def stored(topic: pubsub_pb2.Topic) -> None:
    """Drop the output-only states of ``topic``'s settings (in place) before it is kept;
    an empty settings message is dropped whole."""
    if not topic.HasField(FIELD):
        return
    settings = topic.ingestion_data_source_settings
    source = settings.WhichOneof("source")
    if source is not None:
        getattr(settings, source).ClearField("state")
    if source == "cloud_storage" and settings.cloud_storage.HasField("text_format"):
        text = settings.cloud_storage.text_format
        if not text.HasField("delimiter"):
            text.delimiter = "\n"  # the default made explicit, as the service shows it
    if settings.ByteSize() == 0:
        topic.ClearField(FIELD)


def check_mask(paths: Sequence[str]) -> None:
    """The settings are updated whole: a path into them is refused (as the service does)."""
    for path in paths:
        if path.startswith(f"{FIELD}."):
            raise InvalidArgument(
                "Invalid update_mask provided in the UpdateTopicRequest: "
                f"{path} is not a known Topic field. Update {FIELD} whole."
            )
