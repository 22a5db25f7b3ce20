"""``eoclient bigquery``: datasets, tables and SQL through a running server's REST door,
and directly on a database file no server holds (DuckDB lets one process hold a file)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from eoclient.cli import cli
from eoclient.pytest_plugin import ServerThread

from .support import assert_one_line_error

SCHEMA = [
    {"name": "id", "type": "STRING", "mode": "REQUIRED"},
    {"name": "amount", "type": "NUMERIC"},
    {"name": "where", "type": "RECORD", "fields": [{"name": "city", "type": "STRING"}]},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    db = tmp_path_factory.mktemp("bq") / "bigquery.duckdb"
    with ServerThread(bigquery_db=db) as running:
        yield running


def eo(*args: str, env: dict[str, str | None] | None = None) -> Result:
    runner = CliRunner(env={"PUBSUB_EMULATOR_HOST": None, **(env or {})})
    return runner.invoke(cli, list(args), catch_exceptions=False)


def ok(*args: str) -> Result:
    result = eo(*args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def test_make_list_show_and_query_through_the_server(server: ServerThread, tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    rest = ("bigquery", "--rest", server.rest_url)
    ok(*rest, "mk-dataset", "shop")
    ok(*rest, "mk", "shop.orders", "--schema", str(schema), "--primary-key", "id")
    assert ok(*rest, "ls").stdout.split() == ["shop"]
    assert ok(*rest, "ls", "shop").stdout.split() == ["shop.orders"]
    shown = ok(*rest, "show", "shop.orders").stdout
    assert "where.city" in shown
    assert "primary key: id" in shown
    assert "rows: 0" in shown
    ok(*rest, "query", "INSERT INTO shop.orders VALUES ('a', 1.5, {'city': 'Lyon'})")
    answer = json.loads(
        ok(*rest, "--format", "json", "query", 'SELECT id, amount, "where" FROM shop.orders').stdout
    )
    assert answer["rows"] == [["a", "1.500000000", {"city": "Lyon"}]]
    table = ok(*rest, "query", 'SELECT id, "where" FROM shop.orders').stdout
    assert "Lyon" in table
    # The server's own stand-in saw it: what the export writes, the command reads.
    assert server.call(lambda srv: srv.bigquery.row_count("shop", "orders")) == 1  # type: ignore[union-attr]
    ok(*rest, "rm", "shop.orders")
    ok(*rest, "rm-dataset", "shop")
    assert ok(*rest, "--format", "json", "ls").stdout.strip().startswith("{")


def test_the_endpoint_names_the_rest_door_one_port_up(server: ServerThread) -> None:
    host = server.address.rsplit(":", 1)[0]
    rest_port = int(server.rest_url.rsplit(":", 1)[1])
    result = eo("bigquery", "ls", env={"PUBSUB_EMULATOR_HOST": f"{host}:{rest_port - 1}"})
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("query", "SELECT * FROM nowhere.t"), "INVALID_ARGUMENT: Query failed"),
        (("show", "ds.absent"), "NOT_FOUND"),
        (("mk-dataset", "bad-name"), "Invalid dataset id"),
        (("show", "justone"), "DATASET.TABLE"),
    ],
)
def test_errors_are_one_line(server: ServerThread, args: tuple[str, ...], text: str) -> None:
    result = eo("bigquery", "--rest", server.rest_url, *args)
    assert result.exit_code != 0
    assert text in result.stderr
    assert_one_line_error(result.stderr)


def test_no_server_is_a_one_line_error() -> None:
    result = eo("bigquery", "--rest", "http://127.0.0.1:9", "ls")
    assert result.exit_code == 1
    assert "is eoclient serve running" in result.stderr
    assert_one_line_error(result.stderr)


def test_directly_on_a_file(tmp_path: Path) -> None:
    db = str(tmp_path / "direct.duckdb")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"schema": {"fields": SCHEMA}}))
    ok("bigquery", "--db", db, "mk-dataset", "shop")
    ok("bigquery", "--db", db, "mk", "shop.orders", "--schema", str(schema))
    ok("bigquery", "--db", db, "query", "INSERT INTO shop.orders (id) VALUES ('x')")
    answer = json.loads(
        ok(
            "bigquery",
            "--db",
            db,
            "--format",
            "json",
            "query",
            "SELECT count(*) AS n FROM shop.orders",
        ).stdout
    )
    assert answer["rows"] == [[1]]


def test_a_file_a_server_holds_is_refused_with_a_hint(server: ServerThread) -> None:
    # Another process: within one, DuckDB shares the open database instead of refusing it.
    db = server.call(lambda srv: srv.bigquery.path)  # type: ignore[union-attr]
    result = subprocess.run(
        [sys.executable, "-m", "eoclient.cli", "bigquery", "--db", db, "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "go through the server" in result.stderr
    assert_one_line_error(result.stderr)
