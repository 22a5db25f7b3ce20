"""What the BigQuery stand-in's file holds, read through a DuckDB cursor: which datasets
(DuckDB schemas) and tables exist, and the catalog (schema ``_eoclient_bigquery``) that
keeps what DuckDB cannot say about a table (``table_schema``'s mapping): its BigQuery
schema and its primary key, and the change numbers of CDC keys (``table_writes``)."""

from __future__ import annotations

import json

import duckdb

from eoclient.server_stub.bigquery.table_schema import (
    TableSchema,
    from_duckdb,
    parse_schema,
    quote,
)

CATALOG = "_eoclient_bigquery"


def create(cur: duckdb.DuckDBPyConnection) -> None:
    """The catalog's schema and tables, where missing."""
    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG}")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {CATALOG}.tables (dataset VARCHAR, name VARCHAR, "
        "schema VARCHAR, created TIMESTAMPTZ, PRIMARY KEY (dataset, name))"
    )
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {CATALOG}.change_numbers (dataset VARCHAR, "
        "name VARCHAR, key VARCHAR, number VARCHAR, PRIMARY KEY (dataset, name, key))"
    )


def local(dataset: str, table: str) -> str:
    """The table's name in DuckDB's SQL."""
    return f"{quote(dataset)}.{quote(table)}"


def forget(cur: duckdb.DuckDBPyConnection, dataset: str, table: str | None = None) -> None:
    """Drop what the catalog keeps of a table (or of every table of ``dataset``), inside
    the caller's transaction."""
    where, values = "dataset = ?", [dataset.lower()]
    if table is not None:
        where, values = "dataset = ? AND name = ?", [dataset.lower(), table.lower()]
    for kept in ("tables", "change_numbers"):
        cur.execute(f"DELETE FROM {CATALOG}.{kept} WHERE {where}", values)


def dataset_exists(cur: duckdb.DuckDBPyConnection, dataset: str) -> bool:
    row = cur.execute(
        "SELECT count(*) FROM duckdb_schemas() WHERE database_name = current_database() "
        "AND lower(schema_name) = lower(?)",
        [dataset],
    ).fetchone()
    return bool(row and row[0])


def table_exists(cur: duckdb.DuckDBPyConnection, dataset: str, table: str) -> bool:
    row = cur.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?)",
        [dataset, table],
    ).fetchone()
    return bool(row and row[0])


def table_names(cur: duckdb.DuckDBPyConnection, dataset: str) -> list[str]:
    rows = cur.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND lower(schema_name) = lower(?) ORDER BY 1",
        [dataset],
    ).fetchall()
    return [r[0] for r in rows]


def describe(cur: duckdb.DuckDBPyConnection, dataset: str, table: str) -> TableSchema | None:
    """The table's BigQuery schema (None if it does not exist): DuckDB's columns, with what
    only the catalog knows laid over them."""
    if not table_exists(cur, dataset, table):
        return None
    relation = cur.sql(f"SELECT * FROM {local(dataset, table)} LIMIT 0")
    nullable = dict(
        cur.execute(
            "SELECT column_name, is_nullable FROM duckdb_columns() WHERE database_name = "
            "current_database() AND lower(schema_name) = lower(?) AND lower(table_name) = "
            "lower(?)",
            [dataset, table],
        ).fetchall()
    )
    row = cur.execute(
        f"SELECT schema FROM {CATALOG}.tables WHERE dataset = ? AND name = ?",
        [dataset.lower(), table.lower()],
    ).fetchone()
    known = parse_schema(json.loads(row[0])) if row else None
    fields = tuple(
        from_duckdb(
            name,
            kind,
            bool(nullable.get(name, True)),
            known.column(name) if known is not None else None,
        )
        for name, kind in zip(relation.columns, relation.types, strict=True)
    )
    primary_key: tuple[str, ...] = ()
    if known is not None and known.primary_key:
        primary_key = tuple(
            k for k in known.primary_key if any(f.name.lower() == k.lower() for f in fields)
        )
    if not primary_key:
        constraint = cur.execute(
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE database_name "
            "= current_database() AND lower(schema_name) = lower(?) AND lower(table_name) "
            "= lower(?) AND constraint_type = 'PRIMARY KEY'",
            [dataset, table],
        ).fetchone()
        if constraint:
            primary_key = tuple(constraint[0])
    return TableSchema(fields, primary_key)
