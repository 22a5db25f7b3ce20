"""``eoclient bigquery``: datasets, tables and SQL on the BigQuery stand-in.

::

    eoclient bigquery mk-dataset DATASET
    eoclient bigquery mk DATASET.TABLE --schema schema.json [--primary-key id,region]
    eoclient bigquery ls [DATASET]
    eoclient bigquery show DATASET.TABLE
    eoclient bigquery query "SELECT count(*) FROM ds.orders"
    eoclient bigquery rm DATASET.TABLE      eoclient bigquery rm-dataset DATASET [--recursive]

DuckDB lets one process hold a database file for writing, and a running ``eoclient serve``
is that process. So by default every verb goes through the server: the REST door's
``/eoclient/bigquery/`` API (``server_stub/bigquery/page.py``), at ``--rest URL``, else the
REST port next to ``--endpoint`` / ``$PUBSUB_EMULATOR_HOST`` (gRPC port + 1, what ``serve``
picks by default). With ``--db FILE`` a verb opens the file itself instead, which works
only while no server holds it. ``--schema`` takes ``bq mk --schema``'s JSON file (a list
of fields), or a table resource with ``tableConstraints.primaryKey``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from eoclient._endpoint import EMULATOR_HOST_ENV
from eoclient._extras import install_hint
from eoclient.cli.errors import CliError
from eoclient.cli.output import FORMATS, Format, Output
from eoclient.errors import rpc_error_class

PREFIX = "/eoclient/bigquery/"
# A query through the server answers within this long, or the verb gives up.
HTTP_TIMEOUT = 300.0


@dataclass(frozen=True)
class Where:
    """How this run reaches the stand-in: a server's REST door, or a file."""

    rest: str | None
    db: Path | None
    token: str | None
    output: Output

    def call(
        self,
        method: str,
        parts: list[str],
        body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        if self.db is not None:
            return _on_file(self.db, method, parts, body or {}, query or {})
        assert self.rest is not None
        return _on_server(self.rest, self.token, method, parts, body, query or {})


def _on_file(
    db: Path, method: str, parts: list[str], body: dict[str, Any], query: dict[str, str]
) -> dict[str, Any]:
    hint = install_hint("server", "eoclient bigquery --db")
    if hint is not None:
        raise CliError(hint)
    from eoclient.server_stub.bigquery import BigQueryStandIn
    from eoclient.server_stub.bigquery.page import route

    standin = BigQueryStandIn(db)
    try:
        return route(standin, method, parts, body, query)
    finally:
        standin.close()


def _on_server(
    rest: str,
    token: str | None,
    method: str,
    parts: list[str],
    body: dict[str, Any] | None,
    query: dict[str, str],
) -> dict[str, Any]:
    path = PREFIX + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    url = rest.rstrip("/") + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as answer:
            result: dict[str, Any] = json.loads(answer.read() or b"{}")
            return result
    except urllib.error.HTTPError as error:
        try:
            problem = json.loads(error.read())["error"]
            status, message = str(problem["status"]), str(problem["message"])
        except (ValueError, KeyError, TypeError):
            raise CliError(f"{url}: HTTP {error.code} {error.reason}") from None
        raise rpc_error_class(status, message)(message) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise CliError(
            f"cannot reach the server's REST door at {rest} ({reason}): is eoclient serve "
            "running there? (--rest URL names its REST door; --db FILE opens a database "
            "file no server holds)"
        ) from None


def _rest_url(rest: str | None, endpoint: str | None) -> str:
    if rest:
        return rest if "://" in rest else f"http://{rest}"
    target = endpoint or os.environ.get(EMULATOR_HOST_ENV)
    if not target:
        raise click.UsageError(
            f"say where the server is: --endpoint HOST:PORT (or ${EMULATOR_HOST_ENV}), "
            "--rest URL, or --db FILE to open a database file directly"
        )
    host, _, port = target.rpartition(":")
    if not port.isdigit() or not host:
        raise click.UsageError(f"--endpoint {target!r} is not HOST:PORT")
    return f"http://{host}:{int(port) + 1}"


@click.group("bigquery")
@click.option(
    "--endpoint",
    metavar="HOST:PORT",
    help=(
        "The gRPC address of eoclient serve; its REST door, one port up, is used "
        f"(default: ${EMULATOR_HOST_ENV})."
    ),
)
@click.option("--rest", metavar="URL", help="The server's REST door (http://host:port).")
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Open this DuckDB file directly instead (only while no server holds it).",
)
@click.option(
    "--token",
    envvar="EOCLIENT_AUTH_TOKEN",
    show_envvar=True,
    help="Bearer token for a server started with --auth-token-file.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table for people, json for scripts.",
)
@click.pass_context
def bigquery(
    ctx: click.Context,
    endpoint: str | None,
    rest: str | None,
    db: Path | None,
    token: str | None,
    output_format: Format,
) -> None:
    """Datasets, tables and SQL on the server's BigQuery stand-in (a DuckDB file).

    Tables are DATASET.TABLE (BigQuery's project.dataset.table without the project).
    While eoclient serve runs, the verbs go through its REST door; --db FILE opens a
    database file no server holds.
    """
    if db is not None:
        where = Where(None, db, None, Output(output_format))
    else:
        where = Where(_rest_url(rest, endpoint), None, token, Output(output_format))
    ctx.obj = where


def _where() -> Where:
    where = click.get_current_context().find_object(Where)
    assert where is not None
    return where


def _split(name: str) -> list[str]:
    parts = name.split(".")
    if len(parts) == 3:
        parts = parts[1:]  # project.dataset.table: the project is not kept
    if len(parts) != 2 or not all(parts):
        raise click.BadParameter(f"{name!r} is not DATASET.TABLE")
    return parts


@bigquery.command("mk-dataset")
@click.argument("dataset")
@click.option("--exists-ok", is_flag=True, help="No error if it already exists.")
def mk_dataset(dataset: str, exists_ok: bool) -> None:
    """Make a dataset (a DuckDB schema)."""
    where = _where()
    answer = where.call("POST", ["datasets"], {"dataset": dataset, "existsOk": exists_ok})
    where.output.done("made", "dataset", dataset, answer)


@bigquery.command("mk")
@click.argument("table")
@click.option(
    "--schema",
    "schema_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="bq's JSON schema file: a list of {name, type, mode, fields}.",
)
@click.option(
    "--primary-key",
    metavar="COLUMNS",
    default="",
    help="Comma-separated key columns (change data capture applies changes by them).",
)
@click.option("--exists-ok", is_flag=True, help="No error if the table already exists.")
def mk(table: str, schema_file: Path, primary_key: str, exists_ok: bool) -> None:
    """Make a table from a BigQuery JSON schema file."""
    dataset, name = _split(table)
    try:
        schema = json.loads(schema_file.read_text(encoding="utf-8"))
    except ValueError as error:
        raise CliError(f"{schema_file} is not JSON: {error}") from None
    keys = [k.strip() for k in primary_key.split(",") if k.strip()]
    where = _where()
    answer = where.call(
        "POST",
        ["datasets", dataset, "tables"],
        {"table": name, "schema": schema, "primaryKey": keys, "existsOk": exists_ok},
    )
    where.output.done("made", "table", f"{dataset}.{name}", answer)


@bigquery.command("ls")
@click.argument("dataset", required=False)
def ls(dataset: str | None) -> None:
    """List the datasets, or the tables of DATASET."""
    where = _where()
    if dataset is None:
        answer = where.call("GET", ["datasets"])
        items = answer["datasets"]
    else:
        answer = where.call("GET", ["datasets", dataset, "tables"])
        items = [f"{dataset}.{t}" for t in answer["tables"]]
    if where.output.json:
        where.output.document(answer)
    elif not items:
        where.output.note("no tables" if dataset else "no datasets")
    else:
        for item in items:
            where.output.line(item)


@bigquery.command("show")
@click.argument("table")
def show(table: str) -> None:
    """A table's BigQuery schema, primary key and row count."""
    dataset, name = _split(table)
    where = _where()
    answer = where.call("GET", ["datasets", dataset, "tables", name])
    if where.output.json:
        where.output.document(answer)
        return
    grid = _grid(["COLUMN", "TYPE", "MODE"])
    for path, field in _flatten(answer["schema"]["fields"], ""):
        grid.add_row(Text(path), Text(field["type"]), Text(field.get("mode", "NULLABLE")))
    where.output.console.print(grid)
    key = answer.get("tableConstraints", {}).get("primaryKey", {}).get("columns")
    if key:
        where.output.line(f"primary key: {', '.join(key)}")
    where.output.line(f"rows: {answer['numRows']}")


def _flatten(fields: list[dict[str, Any]], prefix: str) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for field in fields:
        path = prefix + field["name"]
        out.append((path, field))
        out.extend(_flatten(field.get("fields", []), path + "."))
    return out


@bigquery.command("query")
@click.argument("sql")
@click.option("--max-rows", type=click.IntRange(min=1), default=1000, show_default=True)
def query(sql: str, max_rows: int) -> None:
    """Run SQL (DuckDB's dialect; tables are dataset.table)."""
    where = _where()
    answer = where.call("POST", ["query"], {"query": sql, "maxRows": max_rows})
    if where.output.json:
        where.output.document(answer)
        return
    if not answer["columns"]:
        where.output.note("done")
        return
    grid = _grid([c["name"] for c in answer["columns"]])
    for row in answer["rows"]:
        grid.add_row(*(Text(_cell(v)) for v in row))
    where.output.console.print(grid)
    if answer.get("truncated"):
        where.output.note(f"(only the first {max_rows} rows; --max-rows for more)")


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


@bigquery.command("rm")
@click.argument("table")
def rm(table: str) -> None:
    """Delete a table."""
    dataset, name = _split(table)
    where = _where()
    answer = where.call("DELETE", ["datasets", dataset, "tables", name])
    where.output.done("deleted", "table", f"{dataset}.{name}", answer)


@bigquery.command("rm-dataset")
@click.argument("dataset")
@click.option("-r", "--recursive", is_flag=True, help="Delete its tables too.")
def rm_dataset(dataset: str, recursive: bool) -> None:
    """Delete a dataset (with --recursive, its tables too)."""
    where = _where()
    answer = where.call(
        "DELETE", ["datasets", dataset], query={"deleteContents": "true"} if recursive else {}
    )
    where.output.done("deleted", "dataset", dataset, answer)


def _grid(headers: list[str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header)
    return table
