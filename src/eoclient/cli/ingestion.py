"""Import topics on the command line: gcloud's ingestion flags for ``topics create`` and
``topics update``, and how a topic's ingestion settings are shown.

The flags are gcloud's (``gcloud pubsub topics create --help``), with its rules: at most
one source's group; within a group every flag but the Cloud Storage delimiter, minimum
creation time and glob; ``--ingestion-log-severity`` only with a source. On ``update``
the settings are replaced whole (gcloud: "all IngestionDataSourceSettings flags must be
specified"), and ``--clear-ingestion-data-source-settings`` makes the topic a plain one.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from eoclient.admin import (
    AwsKinesisSource,
    AwsMskSource,
    AzureEventHubsSource,
    CloudStorageFormat,
    CloudStorageSource,
    ConfluentCloudSource,
    IngestionLogSeverity,
    IngestionSettings,
)
from eoclient.admin.ingestion import IngestionSource
from eoclient.cli.errors import UsageProblem
from eoclient.cli.values import wire_time

F = TypeVar("F", bound=Callable[..., Any])

# flag group -> (source class, its fields in order, the fields whose flags are optional).
# A flag is --<prefix>-<field with "-">, except where _FLAG_NAMES says otherwise.
_GROUPS: dict[str, tuple[type[Any], tuple[str, ...], frozenset[str]]] = {
    "kinesis-ingestion": (
        AwsKinesisSource,
        ("stream_arn", "consumer_arn", "aws_role_arn", "gcp_service_account"),
        frozenset(),
    ),
    "cloud-storage-ingestion": (
        CloudStorageSource,
        ("bucket", "input_format", "text_delimiter", "minimum_object_create_time", "match_glob"),
        frozenset({"text_delimiter", "minimum_object_create_time", "match_glob"}),
    ),
    "azure-event-hubs-ingestion": (
        AzureEventHubsSource,
        (
            "resource_group",
            "namespace",
            "event_hub",
            "client_id",
            "tenant_id",
            "subscription_id",
            "gcp_service_account",
        ),
        frozenset(),
    ),
    "aws-msk-ingestion": (
        AwsMskSource,
        ("cluster_arn", "topic", "aws_role_arn", "gcp_service_account"),
        frozenset(),
    ),
    "confluent-cloud-ingestion": (
        ConfluentCloudSource,
        ("bootstrap_server", "cluster_id", "topic", "identity_pool_id", "gcp_service_account"),
        frozenset(),
    ),
}
# gcloud's own names where they are not the field's.
_FLAG_NAMES = {
    ("kinesis-ingestion", "aws_role_arn"): "role-arn",
    ("kinesis-ingestion", "gcp_service_account"): "service-account",
    ("azure-event-hubs-ingestion", "gcp_service_account"): "service-account",
    ("aws-msk-ingestion", "gcp_service_account"): "service-account",
    ("confluent-cloud-ingestion", "gcp_service_account"): "service-account",
}
_HELP = {
    "stream_arn": "Kinesis data stream ARN from which to ingest data.",
    "consumer_arn": "Kinesis data streams consumer ARN to use for ingestion.",
    "aws_role_arn": "AWS role ARN for Federated Identity authentication.",
    "gcp_service_account": "Google Cloud service account for Federated Identity.",
    "bucket": "Cloud Storage bucket from which to ingest data.",
    "input_format": "Format of the objects: text, avro or pubsub_avro.",
    "text_delimiter": "One character splitting text objects into messages (default \\n).",
    "minimum_object_create_time": "Only objects created at or after this time (RFC 3339).",
    "match_glob": "Glob of the object names to ingest (default: all).",
    "resource_group": "Azure Event Hubs resource group.",
    "namespace": "Azure Event Hubs namespace.",
    "event_hub": "Azure event hub from which to ingest data.",
    "client_id": "Azure application (client) ID.",
    "tenant_id": "Azure tenant ID.",
    "subscription_id": "Azure subscription ID.",
    "cluster_arn": "ARN of the Amazon MSK cluster.",
    "topic": "Kafka topic from which to ingest data.",
    "bootstrap_server": "Confluent Cloud bootstrap server, HOST:PORT.",
    "cluster_id": "Confluent Cloud cluster ID.",
    "identity_pool_id": "Confluent Cloud identity pool ID for Federated Identity.",
}
_FORMATS = {f.value: f for f in CloudStorageFormat}
_SEVERITIES = {s.name: s for s in IngestionLogSeverity}


def _flag(prefix: str, field: str) -> str:
    return f"--{prefix}-{_FLAG_NAMES.get((prefix, field), field.replace('_', '-'))}"


def _param(prefix: str, field: str) -> str:
    return _flag(prefix, field)[2:].replace("-", "_")


def ingestion_options(*, update: bool) -> Callable[[F], F]:
    """Add gcloud's ingestion flags to a ``topics create`` / ``topics update`` command."""

    def decorate(command: F) -> F:
        for prefix, (_, fields, _optional) in reversed(_GROUPS.items()):
            for field in reversed(fields):
                choice = None
                if field == "input_format":
                    choice = click.Choice(sorted(_FORMATS), case_sensitive=False)
                command = click.option(
                    _flag(prefix, field),
                    _param(prefix, field),
                    type=choice,
                    default=None,
                    help=_HELP[field],
                )(command)
        command = click.option(
            "--ingestion-log-severity",
            type=click.Choice(sorted(_SEVERITIES), case_sensitive=False),
            default=None,
            help="Least severe platform log written for ingestion failures.",
        )(command)
        if update:
            command = click.option(
                "--clear-ingestion-data-source-settings",
                is_flag=True,
                help="Make the topic a plain one again (no ingestion).",
            )(command)
        return command

    return decorate


def _instant(flag: str, text: str) -> datetime.datetime:
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageProblem(f"{flag}: {text!r} is not an RFC 3339 time") from None
    if value.tzinfo is None:
        raise UsageProblem(f"{flag}: {text!r} needs a time zone (e.g. Z)")
    return value


def _source(prefix: str, given: Mapping[str, Any]) -> IngestionSource:
    cls, fields, optional = _GROUPS[prefix]
    missing = [_flag(prefix, f) for f in fields if f not in optional and given.get(f) is None]
    if missing:
        raise UsageProblem(f"{', '.join(missing)} must be given with the other {prefix} flags")
    values = {f: given[f] for f in fields if given.get(f) is not None}
    if cls is CloudStorageSource:
        values["input_format"] = _FORMATS[str(values["input_format"]).lower()]
        if "minimum_object_create_time" in values:
            values["minimum_object_create_time"] = _instant(
                _flag(prefix, "minimum_object_create_time"), values["minimum_object_create_time"]
            )
        if values.get("text_delimiter") is not None and values["input_format"] is not (
            CloudStorageFormat.TEXT
        ):
            raise UsageProblem(
                f"{_flag(prefix, 'text_delimiter')} applies to the text input format only"
            )
    source: IngestionSource = cls(**values)
    return source


def ingestion_from_flags(flags: Mapping[str, Any]) -> IngestionSettings | None:
    """The settings the flags ask for (None: no ingestion flag given)."""
    chosen = {
        prefix: {f: flags.get(_param(prefix, f)) for f in fields}
        for prefix, (_, fields, _optional) in _GROUPS.items()
    }
    given = {prefix: values for prefix, values in chosen.items() if any(values.values())}
    if len(given) > 1:
        groups = " and ".join(f"--{prefix}-*" for prefix in given)
        raise UsageProblem(f"{groups}: an import topic has one source")
    severity = flags.get("ingestion_log_severity")
    if not given:
        if severity is not None:
            raise UsageProblem("--ingestion-log-severity needs an ingestion source's flags")
        return None
    [(prefix, values)] = given.items()
    level = None if severity is None else _SEVERITIES[str(severity).upper()]
    return IngestionSettings(_source(prefix, values), level)


# ================================================================ showing


def _source_field(source: IngestionSource) -> str:
    return {
        AwsKinesisSource: "awsKinesis",
        CloudStorageSource: "cloudStorage",
        AzureEventHubsSource: "azureEventHubs",
        AwsMskSource: "awsMsk",
        ConfluentCloudSource: "confluentCloud",
    }[type(source)]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def ingestion_record(settings: IngestionSettings | None) -> dict[str, Any] | None:
    """The settings as the REST/JSON mapping shows them (``ingestionDataSourceSettings``)."""
    if settings is None:
        return None
    source = settings.source
    body: dict[str, Any] = {"state": source.state.name}
    if isinstance(source, CloudStorageSource):
        body["bucket"] = source.bucket
        if source.input_format is CloudStorageFormat.TEXT:
            text = {} if source.text_delimiter is None else {"delimiter": source.text_delimiter}
            body["textFormat"] = text
        else:
            body[_camel(f"{source.input_format.value}_format")] = {}
        if source.minimum_object_create_time is not None:
            body["minimumObjectCreateTime"] = wire_time(source.minimum_object_create_time)
        if source.match_glob:
            body["matchGlob"] = source.match_glob
    else:
        for name in source.__slots__:
            if name != "state":
                body[_camel(name)] = getattr(source, name)
    record: dict[str, Any] = {_source_field(source): body}
    if settings.log_severity is not None:
        record["platformLogsSettings"] = {"severity": settings.log_severity.name}
    return record


def ingestion_summary(settings: IngestionSettings | None) -> str:
    """One line for people: the source, what it reads, its state."""
    if settings is None:
        return "none"
    source = settings.source
    if isinstance(source, CloudStorageSource):
        what = f"Cloud Storage gs://{source.bucket} ({source.input_format.value}"
        what += f", glob {source.match_glob})" if source.match_glob else ")"
    elif isinstance(source, AwsKinesisSource):
        what = f"Kinesis {source.stream_arn}"
    elif isinstance(source, AwsMskSource):
        what = f"MSK {source.cluster_arn} topic {source.topic}"
    elif isinstance(source, AzureEventHubsSource):
        what = f"Event Hubs {source.namespace}/{source.event_hub}"
    else:
        what = f"Confluent Cloud {source.bootstrap_server} topic {source.topic}"
    return f"{what}: {source.state.name}"
