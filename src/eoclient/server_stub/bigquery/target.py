"""Where a BigQuery subscription writes and how: the value the export runner hands the
stand-in (``BigQueryTarget``), built from the subscription's ``BigQueryConfig`` and its
topic's schema, and the table name it names.

A table is ``project.dataset.table`` (the proto's ``{projectId}.{datasetId}.{tableId}``; the
``project:dataset.table`` form of older tools is refused with a hint). In DuckDB it is
``dataset.table``: the dataset is a DuckDB schema, and the project part is not kept — every
project's ``dataset.table`` is the same DuckDB table (one file stands for one BigQuery
project's worth of tables). Names are always quoted in SQL, so a table id with dashes or
spaces (BigQuery allows both) is one table; DuckDB compares names case-insensitively, so
two tables whose names differ only in case are one here.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from eoclient._proto import pubsub_pb2, schema_pb2
from eoclient.errors import InvalidArgument

# Dataset ids: letters, digits and underscores, at most 1,024 ("Creating datasets").
_DATASET = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
# Table ids: Unicode letters, marks, numbers, connectors (underscore), dashes and spaces,
# at most 1,024 characters ("Creating and using tables": table naming).
_TABLE_CATEGORIES = ("L", "M", "N", "Pc", "Pd", "Zs")
MAX_TABLE_ID = 1024
# DuckDB's own schemas and the stand-in's catalog: never a dataset.
RESERVED_DATASETS = ("information_schema", "pg_catalog", "_eoclient_bigquery", "temp", "system")


@dataclass(frozen=True)
class TopicSchemaSettings:
    """The topic's schema as the subscription writes with it (its newest revision)."""

    type: str  # AVRO or PROTOCOL_BUFFER
    definition: str
    encoding: str = "JSON"  # the topic's message encoding: JSON or BINARY


@dataclass(frozen=True)
class TableName:
    project: str
    dataset: str
    table: str

    def __str__(self) -> str:
        return f"{self.project}.{self.dataset}.{self.table}"

    @property
    def local(self) -> str:
        """``dataset.table``: the name in DuckDB (and in the stand-in's statistics)."""
        return f"{self.dataset}.{self.table}"


@dataclass(frozen=True)
class BigQueryTarget:
    """One BigQuery subscription's writing settings."""

    subscription: str  # projects/p/subscriptions/s: what subscription_name columns get
    table: str  # project.dataset.table
    use_topic_schema: bool = False
    use_table_schema: bool = False
    write_metadata: bool = False
    drop_unknown_fields: bool = False
    service_account_email: str = ""  # kept; nothing to enforce on one machine
    topic_schema: TopicSchemaSettings | None = None

    @classmethod
    def from_config(
        cls,
        subscription: str,
        config: pubsub_pb2.BigQueryConfig,
        topic_schema: TopicSchemaSettings | None = None,
    ) -> BigQueryTarget:
        return cls(
            subscription=subscription,
            table=config.table,
            use_topic_schema=config.use_topic_schema,
            use_table_schema=config.use_table_schema,
            write_metadata=config.write_metadata,
            drop_unknown_fields=config.drop_unknown_fields,
            service_account_email=config.service_account_email,
            topic_schema=topic_schema,
        )

    @property
    def name(self) -> TableName:
        return parse_table(self.table)


def topic_schema_settings(schema: schema_pb2.Schema, encoding: int | str) -> TopicSchemaSettings:
    """The settings of a topic's schema from its ``Schema`` and the topic's encoding
    (``schema_pb2.Encoding`` value or name; unspecified counts as JSON, the service's
    default)."""
    kind = schema_pb2.Schema.Type.Name(schema.type_)
    name = schema_pb2.Encoding.Name(encoding) if isinstance(encoding, int) else encoding
    return TopicSchemaSettings(kind, schema.definition, "BINARY" if name == "BINARY" else "JSON")


def parse_table(text: str) -> TableName:
    """``project.dataset.table`` checked; InvalidArgument naming what is wrong."""
    if ":" in text and text.count(".") == 1:
        raise InvalidArgument(
            f"Invalid BigQuery table name {text!r}: write it project.dataset.table (with a dot "
            "after the project, not the colon of bq's project:dataset.table)."
        )
    parts = text.split(".")
    if len(parts) != 3 or not all(parts):
        raise InvalidArgument(
            f"Invalid BigQuery table name {text!r}: it must be of the form "
            "{projectId}.{datasetId}.{tableId}."
        )
    project, dataset, table = parts
    check_dataset(dataset)
    check_table_id(table)
    return TableName(project, dataset, table)


def parse_local(text: str) -> tuple[str, str]:
    """``dataset.table`` (or ``project.dataset.table``, its project ignored) for the CLI."""
    parts = text.split(".")
    if len(parts) == 3:
        name = parse_table(text)
        return name.dataset, name.table
    if len(parts) != 2 or not all(parts):
        raise InvalidArgument(f"Invalid table name {text!r}: write it DATASET.TABLE.")
    check_dataset(parts[0])
    check_table_id(parts[1])
    return parts[0], parts[1]


def check_dataset(dataset: str) -> None:
    if not _DATASET.match(dataset):
        raise InvalidArgument(
            f"Invalid dataset id {dataset!r}: letters, digits and underscores, 1 to 1,024 of them."
        )
    if dataset.casefold() in RESERVED_DATASETS:
        raise InvalidArgument(
            f"The dataset id {dataset!r} is reserved by the BigQuery stand-in (DuckDB's own "
            "schemas and its catalog): choose another."
        )


def check_table_id(table: str) -> None:
    ok = 0 < len(table) <= MAX_TABLE_ID and all(
        unicodedata.category(c).startswith(_TABLE_CATEGORIES) for c in table
    )
    if not ok:
        raise InvalidArgument(
            f"Invalid table id {table!r}: letters, marks, numbers, underscores, dashes and "
            f"spaces, 1 to {MAX_TABLE_ID} of them."
        )
