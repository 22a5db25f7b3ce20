"""The BigQuery stand-in: BigQuery datasets and tables kept in one DuckDB file, and the writer
of BigQuery subscriptions (docs/server/bigquery.md).

The API the export runner calls (synchronous; off the event loop, one call at a time per
database; the names are kept stable):

* ``BigQueryStandIn(path)`` opens or makes the database; ``close()``.
* ``BigQueryTarget.from_config(subscription, bigquery_config, topic_schema)`` — the target:
  the subscription's full name, its ``pubsub_pb2.BigQueryConfig`` and, when its topic has
  one, ``TopicSchemaSettings(type, definition, encoding)`` (``topic_schema_settings`` makes
  it from a ``pubsub_pb2.Schema`` and the topic's encoding).
* ``standin.check(target)`` -> ``TargetStatus(state, reason)``: ``ACTIVE``, ``NOT_FOUND`` (the
  dataset or the table is missing) or ``SCHEMA_MISMATCH`` (the table does not fit the
  settings), with a reason a user can act on.
* ``standin.write(target, messages)`` -> ``WriteResult(state, reason, written, unwritable)``:
  one transaction; acknowledge ``written``, nack ``unwritable`` (message id -> why); when
  the state is NOT_FOUND or SCHEMA_MISMATCH before anything was tried, both are empty.

For users and tests: ``create_dataset``, ``create_table`` (a ``TableSchema``, from
``parse_schema`` of ``bq``'s JSON schema), ``describe``, ``list_datasets``, ``list_tables``,
``query``, ``row_count``, ``delete_table``, ``delete_dataset``; ``activity()`` is what a
dashboard shows. ``page.BigQueryPage`` serves them on the REST door for the CLI.
"""

from eoclient.server_stub.bigquery.results import (
    ACTIVE,
    NOT_FOUND,
    SCHEMA_MISMATCH,
    QueryResult,
    TableActivity,
    TargetStatus,
    WriteResult,
)
from eoclient.server_stub.bigquery.standin import BigQueryStandIn
from eoclient.server_stub.bigquery.table_schema import Field, TableSchema, parse_schema
from eoclient.server_stub.bigquery.target import (
    BigQueryTarget,
    TableName,
    TopicSchemaSettings,
    parse_table,
    topic_schema_settings,
)

__all__ = [
    "ACTIVE",
    "NOT_FOUND",
    "SCHEMA_MISMATCH",
    "BigQueryStandIn",
    "BigQueryTarget",
    "Field",
    "QueryResult",
    "TableActivity",
    "TableName",
    "TableSchema",
    "TargetStatus",
    "TopicSchemaSettings",
    "WriteResult",
    "parse_schema",
    "parse_table",
    "topic_schema_settings",
]
