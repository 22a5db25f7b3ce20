"""The BigQuery stand-in: datasets and tables in one DuckDB file, and the subscription writer.

``BigQueryStandIn(path)`` opens (or makes) the file; ``close()`` closes it. Everything is
synchronous: the export runner calls ``check`` and ``write`` off the event loop (one call
at a time per database), the REST route and the CLI call the rest. DuckDB lets one
process hold the file and several cursors use it at once: writes (``write`` and the DDL)
are serialized by a lock and each runs in one transaction; reads (``query``, ``describe``,
``list_*``) take a cursor of their own and see only committed data, so querying while the
server writes is safe from any thread.

``write(target, messages)`` is one transaction (``table_writes``): every row of the batch,
or none. Messages that cannot be written (a field the table lacks without
``drop_unknown_fields``, a value that does not convert, a body that is not JSON for a JSON
column, a message that does not match the topic schema) are left out and reported with
their reason; the rest are written.

What DuckDB cannot say about a table is kept in the catalog (``catalog``). The answers are
values of ``results``. Statistics a dashboard would show (per table: messages written, the
last write, which subscriptions wrote; per subscription: its state) are ``activity()``.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from eoclient._clock import Clock, SystemClock
from eoclient.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from eoclient.server_stub.bigquery import catalog
from eoclient.server_stub.bigquery.catalog import local
from eoclient.server_stub.bigquery.results import (
    ACTIVE,
    NOT_FOUND,
    SCHEMA_MISMATCH,
    QueryResult,
    TableActivity,
    TargetStatus,
    WriteResult,
    jsonable,
)
from eoclient.server_stub.bigquery.rows import Mismatch, Plan, Row, Unwritable, plan
from eoclient.server_stub.bigquery.table_schema import (
    TableSchema,
    column_ddl,
    parse_schema,
    quote,
    schema_json,
)
from eoclient.server_stub.bigquery.table_writes import commit_rows
from eoclient.server_stub.bigquery.target import (
    BigQueryTarget,
    check_dataset,
    check_table_id,
    parse_local,
)
from eoclient.server_stub.core.model import StoredMessage

__all__ = ["DEFAULT_MAX_ROWS", "BigQueryStandIn"]

# A query's answer is cut at this many rows (the rest is counted, not sent).
DEFAULT_MAX_ROWS = 10_000


class BigQueryStandIn:
    """Datasets (DuckDB schemas) and tables in one DuckDB file; the writer of BigQuery
    subscriptions."""

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        self.path = os.fspath(path)
        self._clock = clock or SystemClock()
        try:
            # No file access from SQL: a query through the server reads and writes tables,
            # never the server's files (COPY, read_csv, ATTACH are refused).
            self._db = duckdb.connect(self.path, config={"enable_external_access": False})
        except duckdb.IOException as error:
            raise FailedPrecondition(
                f"The BigQuery database {self.path} cannot be opened: {error}. DuckDB lets one "
                "process hold a file: if a server holds it, go through the server."
            ) from None
        self._lock = threading.RLock()
        self._closed = False
        self._activity: dict[str, TableActivity] = {}
        self._states: dict[str, TargetStatus] = {}
        with self._lock:
            self._db.execute("SET GLOBAL TimeZone = 'UTC'")
            catalog.create(self._db)

    def __repr__(self) -> str:
        return f"<BigQueryStandIn {self.path}>"

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._closed:
            raise FailedPrecondition("The BigQuery stand-in is closed.")
        cursor = self._db.cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    # ------------------------------------------------------------ datasets

    def create_dataset(self, dataset: str, *, exists_ok: bool = False) -> None:
        check_dataset(dataset)
        with self._lock, self._cursor() as cur:
            database = cur.execute("SELECT current_database()").fetchone()
            if database and str(database[0]).lower() == dataset.lower():
                # DuckDB names the database after its file: SQL could not tell the two apart.
                raise InvalidArgument(
                    f"The dataset {dataset} has the name of the database file "
                    f"({os.path.basename(self.path)}), which DuckDB's SQL could not tell "
                    "from it: choose another dataset id, or another file name."
                )
            if catalog.dataset_exists(cur, dataset):
                if exists_ok:
                    return
                raise AlreadyExists(f"Already Exists: Dataset {dataset}")
            cur.execute(f"CREATE SCHEMA {quote(dataset)}")

    def delete_dataset(self, dataset: str, *, delete_contents: bool = False) -> None:
        check_dataset(dataset)
        with self._lock, self._cursor() as cur:
            if not catalog.dataset_exists(cur, dataset):
                raise NotFound(f"Not found: Dataset {dataset}")
            tables = catalog.table_names(cur, dataset)
            if tables and not delete_contents:
                raise FailedPrecondition(
                    f"Dataset {dataset} is still in use: it has {len(tables)} table(s) (delete "
                    "them, or delete the dataset with its contents)."
                )
            cur.execute("BEGIN")
            try:
                cur.execute(f"DROP SCHEMA {quote(dataset)} CASCADE")
                catalog.forget(cur, dataset)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def list_datasets(self) -> list[str]:
        with self._cursor() as cur:
            rows = cur.execute(
                "SELECT DISTINCT schema_name FROM duckdb_schemas() WHERE database_name = "
                "current_database() AND NOT internal AND schema_name <> ? ORDER BY 1",
                [catalog.CATALOG],
            ).fetchall()
        return [r[0] for r in rows if r[0] != "main"]

    # -------------------------------------------------------------- tables

    def create_table(
        self, dataset: str, table: str, schema: TableSchema, *, exists_ok: bool = False
    ) -> None:
        """A new table of ``schema`` (its BigQuery types kept in the catalog)."""
        check_dataset(dataset)
        check_table_id(table)
        columns = ", ".join(column_ddl(f) for f in schema.fields)
        with self._lock, self._cursor() as cur:
            if not catalog.dataset_exists(cur, dataset):
                raise NotFound(
                    f"Not found: Dataset {dataset} (make it first: eoclient bigquery mk-dataset "
                    f"{dataset})"
                )
            if catalog.table_exists(cur, dataset, table):
                if exists_ok:
                    return
                raise AlreadyExists(f"Already Exists: Table {dataset}.{table}")
            cur.execute("BEGIN")
            try:
                cur.execute(f"CREATE TABLE {local(dataset, table)} ({columns})")
                cur.execute(
                    f"INSERT OR REPLACE INTO {catalog.CATALOG}.tables VALUES (?, ?, ?, ?)",
                    [dataset.lower(), table.lower(), schema_json(schema), self._now()],
                )
                cur.execute("COMMIT")
            except duckdb.Error as error:
                cur.execute("ROLLBACK")
                raise InvalidArgument(f"The table cannot be made: {error}") from None

    def make_table(self, name: str, fields: Any, primary_key: Sequence[str] = ()) -> TableSchema:
        """``dataset.table`` (or ``project.dataset.table``) from ``bq``'s JSON schema
        (``fields``: the list, or a table resource), its dataset made if missing: what a
        test or a setup script calls on ``srv.bigquery``."""
        dataset, table = parse_local(name)
        schema = parse_schema(fields, primary_key)
        self.create_dataset(dataset, exists_ok=True)
        self.create_table(dataset, table, schema)
        return schema

    def delete_table(self, dataset: str, table: str) -> None:
        with self._lock, self._cursor() as cur:
            if not catalog.table_exists(cur, dataset, table):
                raise NotFound(f"Not found: Table {dataset}.{table}")
            cur.execute("BEGIN")
            try:
                cur.execute(f"DROP TABLE {local(dataset, table)}")
                catalog.forget(cur, dataset, table)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def list_tables(self, dataset: str) -> list[str]:
        with self._cursor() as cur:
            if not catalog.dataset_exists(cur, dataset):
                raise NotFound(f"Not found: Dataset {dataset}")
            return catalog.table_names(cur, dataset)

    def describe(self, dataset: str, table: str) -> TableSchema | None:
        """The table's BigQuery schema (None if it does not exist): DuckDB's columns, with
        what only the catalog knows laid over them."""
        with self._cursor() as cur:
            return catalog.describe(cur, dataset, table)

    def row_count(self, dataset: str, table: str) -> int:
        with self._cursor() as cur:
            if not catalog.table_exists(cur, dataset, table):
                raise NotFound(f"Not found: Table {dataset}.{table}")
            row = cur.execute(f"SELECT count(*) FROM {local(dataset, table)}").fetchone()
            return int(row[0]) if row else 0

    def query(self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS) -> QueryResult:
        """Run ``sql`` (DuckDB's dialect; tables are ``dataset.table``) on a cursor of its
        own; a statement that changes data commits as it ends, serialized with writes."""
        with self._lock if _changes_data(sql) else _nothing(), self._cursor() as cur:
            try:
                cur.execute(sql)
            except duckdb.Error as error:
                raise InvalidArgument(f"Query failed: {error}") from None
            description: Any = cur.description
            if description is None:  # a statement without a result (DDL, SET, ...)
                return QueryResult((), ())
            columns = tuple((d[0], str(d[1])) for d in description)
            rows = cur.fetchmany(max_rows + 1)
        truncated = len(rows) > max_rows
        return QueryResult(
            columns, tuple(tuple(jsonable(v) for v in r) for r in rows[:max_rows]), truncated
        )

    # ---------------------------------------------------- the subscription side

    def check(self, target: BigQueryTarget) -> TargetStatus:
        """Whether ``target`` can write now: ACTIVE, NOT_FOUND (dataset or table missing) or
        SCHEMA_MISMATCH (the table does not fit the settings), with the reason."""
        name = target.name
        with self._cursor() as cur:
            status, _ = self._plan(cur, target, name.dataset, name.table)
        return status

    def write(self, target: BigQueryTarget, messages: Sequence[StoredMessage]) -> WriteResult:
        """Write ``messages`` as rows of the target's table in one transaction."""
        name = target.name
        with self._lock, self._cursor() as cur:
            status, the_plan = self._plan(cur, target, name.dataset, name.table)
            if the_plan is None:
                self._states[target.subscription] = status
                return WriteResult(status.state, status.reason, (), {})
            rows: list[Row] = []
            unwritable: dict[str, str] = {}
            unknown = ""
            for message in messages:
                made = the_plan.row(message)
                if isinstance(made, Unwritable):
                    unwritable[made.message_id] = made.reason
                    if made.unknown and not unknown:
                        unknown = made.reason
                else:
                    rows.append(made)
            failed = commit_rows(cur, the_plan, name.dataset, name.table, rows)
            unwritable.update(failed)
        written = tuple(r.message_id for r in rows if r.message_id not in failed)
        self._record(target, name.local, written, unwritable)
        status = (
            TargetStatus(SCHEMA_MISMATCH, f"a message was not written: {unknown}")
            if unknown
            else TargetStatus(ACTIVE)
        )
        self._states[target.subscription] = status
        return WriteResult(status.state, status.reason, written, unwritable)

    def activity(self) -> list[TableActivity]:
        """What subscriptions wrote, per table (what a dashboard shows)."""
        with self._lock:
            return sorted(
                (
                    TableActivity(
                        a.table,
                        a.messages_written,
                        a.unwritable,
                        a.writes,
                        a.last_write,
                        set(a.subscriptions),
                    )
                    for a in self._activity.values()
                ),
                key=lambda a: a.table,
            )

    def last_state(self, subscription: str) -> TargetStatus | None:
        """The state the subscription's last ``write`` ended in (None before the first)."""
        return self._states.get(subscription)

    # ------------------------------------------------------------- helpers

    def _plan(
        self, cur: duckdb.DuckDBPyConnection, target: BigQueryTarget, dataset: str, table: str
    ) -> tuple[TargetStatus, Plan | None]:
        if not catalog.dataset_exists(cur, dataset):
            return TargetStatus(
                NOT_FOUND,
                f"the dataset {dataset} of the table {target.table} does not exist (make it: "
                f"eoclient bigquery mk-dataset {dataset})",
            ), None
        schema = catalog.describe(cur, dataset, table)
        if schema is None:
            return TargetStatus(
                NOT_FOUND,
                f"the table {target.table} does not exist (make it: eoclient bigquery mk "
                f"{dataset}.{table} --schema FILE)",
            ), None
        try:
            return TargetStatus(ACTIVE), plan(target, schema)
        except Mismatch as error:
            return TargetStatus(SCHEMA_MISMATCH, str(error)), None

    def _record(
        self,
        target: BigQueryTarget,
        table: str,
        written: Iterable[str],
        unwritable: dict[str, str],
    ) -> None:
        count = sum(1 for _ in written)
        with self._lock:
            activity = self._activity.setdefault(table, TableActivity(table))
            activity.messages_written += count
            activity.unwritable += len(unwritable)
            activity.writes += 1
            activity.subscriptions.add(target.subscription)
            if count:
                activity.last_write = self._clock.now()

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self._clock.now(), dt.UTC)


_READ_ONLY_STARTS = (
    "select",
    "with",
    "from",
    "describe",
    "show",
    "summarize",
    "explain",
    "pragma",
    "values",
    "table",
)


def _changes_data(sql: str) -> bool:
    """Whether a statement may change data (then it is serialized with the writer)."""
    first = sql.lstrip().split(None, 1)[0].lower() if sql.strip() else ""
    return first not in _READ_ONLY_STARTS


@contextmanager
def _nothing() -> Iterator[None]:
    yield
