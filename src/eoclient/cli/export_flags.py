"""The export flags of ``subscriptions create`` and ``update``, as gcloud names them, and the
views of an export (``describe``, JSON records).

BigQuery: ``--bigquery-table``, ``--use-topic-schema`` or ``--use-table-schema``,
``--write-metadata``, ``--drop-unknown-fields``, ``--bigquery-service-account-email``.
Cloud Storage: ``--cloud-storage-bucket``, ``--cloud-storage-file-prefix``,
``--cloud-storage-file-suffix``, ``--cloud-storage-file-datetime-format``,
``--cloud-storage-max-bytes``, ``--cloud-storage-max-duration``,
``--cloud-storage-max-messages``, ``--cloud-storage-output-format`` (text or avro),
``--cloud-storage-write-metadata``, ``--cloud-storage-use-topic-schema``,
``--cloud-storage-service-account-email``. ``update`` also takes
``--clear-bigquery-config`` and ``--clear-cloud-storage-config``; an update that names some
fields of an existing config keeps its others.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping
from typing import Any

import click

from eoclient.admin import (
    BigQueryConfig,
    CloudStorageConfig,
    CloudStorageOutputFormat,
    Subscription,
)
from eoclient.cli.errors import UsageProblem
from eoclient.cli.flags import DURATION, duration_help
from eoclient.cli.values import format_duration, wire_duration

# flag parameter -> CloudStorageConfig field
_CLOUD_STORAGE = {
    "cloud_storage_bucket": "bucket",
    "cloud_storage_file_prefix": "filename_prefix",
    "cloud_storage_file_suffix": "filename_suffix",
    "cloud_storage_file_datetime_format": "filename_datetime_format",
    "cloud_storage_max_bytes": "max_bytes",
    "cloud_storage_max_duration": "max_duration",
    "cloud_storage_max_messages": "max_messages",
    "cloud_storage_output_format": "output_format",
    "cloud_storage_write_metadata": "write_metadata",
    "cloud_storage_use_topic_schema": "use_topic_schema",
    "cloud_storage_service_account_email": "service_account_email",
}
_BIGQUERY = {
    "bigquery_table": "table",
    "use_topic_schema": "use_topic_schema",
    "use_table_schema": "use_table_schema",
    "write_metadata": "write_metadata",
    "drop_unknown_fields": "drop_unknown_fields",
    "bigquery_service_account_email": "service_account_email",
}


def export_options(*, update: bool) -> Callable[[Any], Any]:
    """The export flags (``update``: with the --clear-... flags; booleans that can be
    turned off)."""

    def flag(name: str, text: str) -> Any:
        if update:
            return click.option(f"--{name}/--no-{name}", default=None, help=text)
        return click.option(f"--{name}", is_flag=True, default=None, help=text)

    options = [
        click.option(
            "--bigquery-table",
            metavar="PROJECT.DATASET.TABLE",
            help="Write each message as a row of this BigQuery table (the server's stand-in).",
        ),
        flag("use-topic-schema", "BigQuery: columns from the topic's schema."),
        flag("use-table-schema", "BigQuery: JSON messages, fields to columns by name."),
        flag(
            "write-metadata",
            "BigQuery: also write subscription_name, message_id, "
            "publish_time, data and attributes.",
        ),
        flag("drop-unknown-fields", "BigQuery: drop fields the table lacks."),
        click.option(
            "--bigquery-service-account-email",
            metavar="EMAIL",
            help="BigQuery: service account (kept).",
        ),
        click.option(
            "--cloud-storage-bucket",
            metavar="BUCKET",
            help="Write messages in batches, one object each, to this bucket.",
        ),
        click.option("--cloud-storage-file-prefix", metavar="PREFIX", help="Object names' prefix."),
        click.option(
            "--cloud-storage-file-suffix",
            metavar="SUFFIX",
            help="Object names' suffix (not ending in /).",
        ),
        click.option(
            "--cloud-storage-file-datetime-format",
            metavar="FORMAT",
            help="Object names' date-time, e.g. YYYY-MM-DD/hh_mm_ssZ.",
        ),
        click.option(
            "--cloud-storage-max-bytes",
            type=int,
            metavar="BYTES",
            help="A new object past this size (1000..10737418240).",
        ),
        click.option(
            "--cloud-storage-max-duration",
            type=DURATION,
            help=duration_help("A new object at least this often, 1m..10m"),
        ),
        click.option(
            "--cloud-storage-max-messages",
            type=int,
            metavar="COUNT",
            help="A new object past this many messages (>= 1000).",
        ),
        click.option(
            "--cloud-storage-output-format",
            type=click.Choice(["text", "avro"]),
            default=None,
            help="text (data, a line each; the default) or avro.",
        ),
        flag("cloud-storage-write-metadata", "Avro: records with the message's metadata."),
        flag("cloud-storage-use-topic-schema", "Avro: records of the topic's Avro schema."),
        click.option(
            "--cloud-storage-service-account-email",
            metavar="EMAIL",
            help="Cloud Storage: service account (kept).",
        ),
    ]
    if update:
        options += [
            click.option(
                "--clear-bigquery-config",
                is_flag=True,
                help="Make a BigQuery subscription a pull one again.",
            ),
            click.option(
                "--clear-cloud-storage-config",
                is_flag=True,
                help="Make a Cloud Storage subscription a pull one again.",
            ),
        ]

    def decorate(command: Any) -> Any:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _given(flags: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    values = {names[k]: v for k, v in flags.items() if k in names and v is not None}
    if "output_format" in values:
        values["output_format"] = CloudStorageOutputFormat(values["output_format"])
    return values


def _build(cls: Any, values: dict[str, Any], base: Any, needs: str, flag: str) -> Any:
    if base is not None:
        values = {**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, **values}
        values.pop("state", None)
    if needs not in values:
        raise UsageProblem(f"{flag} is required to make this an export subscription")
    try:
        return cls(**values)
    except ValueError:
        # As gcloud: the metadata and topic-schema flags only apply to Avro files.
        raise UsageProblem(
            "--cloud-storage-write-metadata and --cloud-storage-use-topic-schema need "
            "--cloud-storage-output-format=avro"
        ) from None


def create_exports(flags: Mapping[str, Any]) -> dict[str, Any]:
    """``create_subscription`` arguments from the flags."""
    bigquery = _given(flags, _BIGQUERY)
    storage = _given(flags, _CLOUD_STORAGE)
    if bigquery and storage:
        raise UsageProblem("a subscription exports to BigQuery or to Cloud Storage, not both")
    made: dict[str, Any] = {}
    if bigquery:
        made["bigquery_config"] = _build(
            BigQueryConfig, bigquery, None, "table", "--bigquery-table"
        )
    if storage:
        made["cloud_storage_config"] = _build(
            CloudStorageConfig, storage, None, "bucket", "--cloud-storage-bucket"
        )
    return made


def update_exports(flags: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The field changes the flags ask for, and whether the current subscription is
    needed to make them (``apply_update_exports``)."""
    bigquery = _given(flags, _BIGQUERY)
    storage = _given(flags, _CLOUD_STORAGE)
    changes: dict[str, Any] = {}
    if flags.get("clear_bigquery_config"):
        if bigquery:
            raise UsageProblem("--clear-bigquery-config contradicts the BigQuery flags")
        changes["bigquery_config"] = None
    if flags.get("clear_cloud_storage_config"):
        if storage:
            raise UsageProblem("--clear-cloud-storage-config contradicts the Cloud Storage flags")
        changes["cloud_storage_config"] = None
    return changes, bool(bigquery or storage)


def apply_update_exports(flags: Mapping[str, Any], current: Subscription) -> dict[str, Any]:
    """The export configs, the current ones with the fields the flags name changed."""
    changes: dict[str, Any] = {}
    bigquery = _given(flags, _BIGQUERY)
    storage = _given(flags, _CLOUD_STORAGE)
    if bigquery:
        changes["bigquery_config"] = _build(
            BigQueryConfig, bigquery, current.bigquery_config, "table", "--bigquery-table"
        )
    if storage:
        changes["cloud_storage_config"] = _build(
            CloudStorageConfig,
            storage,
            current.cloud_storage_config,
            "bucket",
            "--cloud-storage-bucket",
        )
    return changes


# ================================================================ views


def export_fields(subscription: Subscription) -> list[tuple[str, str]]:
    """describe's lines for the subscription's export (none without one)."""
    bigquery, storage = subscription.bigquery_config, subscription.cloud_storage_config
    if bigquery is not None:
        options = [
            name
            for name, on in (
                ("use topic schema", bigquery.use_topic_schema),
                ("use table schema", bigquery.use_table_schema),
                ("write metadata", bigquery.write_metadata),
                ("drop unknown fields", bigquery.drop_unknown_fields),
            )
            if on
        ]
        return [
            ("bigquery table", bigquery.table),
            ("bigquery options", ", ".join(options)),
            ("export state", bigquery.state.name),
        ]
    if storage is not None:
        fmt = storage.output_format.value
        extras = [
            name
            for name, on in (
                ("write metadata", storage.write_metadata),
                ("use topic schema", storage.use_topic_schema),
            )
            if on
        ]
        limits = [
            f"{format_duration(storage.max_duration or datetime.timedelta(minutes=5))}",
            f"{storage.max_bytes} bytes" if storage.max_bytes else "",
            f"{storage.max_messages} messages" if storage.max_messages else "",
        ]
        when = storage.filename_datetime_format or "YYYY-MM-DDThh:mm:ss+00:00"
        return [
            ("cloud storage bucket", storage.bucket),
            (
                "cloud storage objects",
                f"{storage.filename_prefix}<{when}>_<uuid>{storage.filename_suffix}",
            ),
            ("cloud storage format", " ".join([fmt, *(f"({e})" for e in extras)])),
            ("cloud storage batches", "first of " + ", ".join(x for x in limits if x)),
            ("export state", storage.state.name),
        ]
    return []


def export_records(subscription: Subscription) -> dict[str, Any]:
    """The JSON record's ``bigqueryConfig`` and ``cloudStorageConfig`` (null when unset)."""
    bigquery, storage = subscription.bigquery_config, subscription.cloud_storage_config
    return {
        "bigqueryConfig": None
        if bigquery is None
        else {
            "table": bigquery.table,
            "useTopicSchema": bigquery.use_topic_schema,
            "useTableSchema": bigquery.use_table_schema,
            "writeMetadata": bigquery.write_metadata,
            "dropUnknownFields": bigquery.drop_unknown_fields,
            "serviceAccountEmail": bigquery.service_account_email,
            "state": bigquery.state.name,
        },
        "cloudStorageConfig": None
        if storage is None
        else {
            "bucket": storage.bucket,
            "filenamePrefix": storage.filename_prefix,
            "filenameSuffix": storage.filename_suffix,
            "filenameDatetimeFormat": storage.filename_datetime_format,
            "outputFormat": storage.output_format.value,
            "writeMetadata": storage.write_metadata,
            "useTopicSchema": storage.use_topic_schema,
            "maxDuration": None
            if storage.max_duration is None
            else wire_duration(storage.max_duration),
            "maxBytes": str(storage.max_bytes),
            "maxMessages": str(storage.max_messages),
            "serviceAccountEmail": storage.service_account_email,
            "state": storage.state.name,
        },
    }
