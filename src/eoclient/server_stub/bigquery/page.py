"""The stand-in on the REST door: a small JSON API under ``/eoclient/bigquery/`` that the
``eoclient bigquery`` command uses while a server holds the DuckDB file (DuckDB lets one
process open a file for writing; the server is that process, so others go through it).

| method and path | what it does |
|---|---|
| GET ``datasets`` | ``{"datasets": [...]}`` |
| POST ``datasets`` ``{"dataset", "existsOk"}`` | make a dataset |
| DELETE ``datasets/D[?deleteContents=true]`` | delete it |
| GET ``datasets/D/tables`` | ``{"tables": [...]}`` |
X
| GET ``datasets/D/tables/T`` | the table resource: ``schema``, ``tableConstraints``, ``numRows`` |
| DELETE ``datasets/D/tables/T`` | delete it |
| POST ``query`` ``{"query", "maxRows"}`` | ``{"columns", "rows", "truncated"}`` |
| GET ``activity`` | what subscriptions wrote, per table |

A table's ``schema`` is ``bq``'s JSON schema. The door's browser policy and bearer tokens
apply first, as to every path; a token limited to some projects may not use it (tables
here belong to no project). Errors are Google's JSON error format. The stand-in's calls
run on a worker thread, off the door's loop.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

from aiohttp import web

from eoclient.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.bigquery.standin import DEFAULT_MAX_ROWS, BigQueryStandIn
from eoclient.server_stub.bigquery.table_schema import parse_schema
from eoclient.server_stub.doors.rest.errors import HttpProblem, json_response

PREFIX = "/eoclient/bigquery/"
# A body larger than this is no schema or query anyone types (the door's own limit is 10 MB).
MAX_BODY_BYTES = 1 << 20


class BigQueryPage:
    """The JSON API over the server's stand-in (``standin()``: None when it has none)."""

    def __init__(self, standin: Callable[[], BigQueryStandIn | None]) -> None:
        self._standin = standin

    def matches(self, path: str) -> bool:
        return path.startswith(PREFIX) or path == PREFIX.rstrip("/")

    async def response(
        self, request: web.Request, grant: Grant | None, cors: dict[str, str]
    ) -> web.Response:
        if grant is not None and not grant.every_project:
            raise PermissionDenied(
                "The BigQuery stand-in's API needs a token that may use every project."
            )
        standin = self._standin()
        if standin is None:
            raise FailedPrecondition(
                "This server has no BigQuery stand-in (eoclient serve --bigquery-db PATH)."
            )
        parts = [urllib.parse.unquote(p) for p in request.path[len(PREFIX) :].split("/") if p]
        body: dict[str, Any] = {}
        if request.method in ("POST", "PUT"):
            body = await _body(request)
        answer = await asyncio.to_thread(
            route, standin, request.method, parts, body, dict(request.query)
        )
        return json_response(json.dumps(answer), 200, cors)


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise HttpProblem(413, "INVALID_ARGUMENT", f"The body is over {MAX_BODY_BYTES} bytes.")
    try:
        body = json.loads(raw or b"{}")
    except ValueError as error:
        raise InvalidArgument(f"The body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise InvalidArgument("The body is a JSON object.")
    return body


def route(
    standin: BigQueryStandIn,
    method: str,
    parts: list[str],
    body: dict[str, Any],
    query: dict[str, str],
) -> dict[str, Any]:
    match method, parts:
        case "GET", ["datasets"]:
            return {"datasets": standin.list_datasets()}
        case "POST", ["datasets"]:
            standin.create_dataset(
                str(body.get("dataset", "")), exists_ok=bool(body.get("existsOk"))
            )
            return {"dataset": body.get("dataset")}
        case "DELETE", ["datasets", dataset]:
            standin.delete_dataset(dataset, delete_contents=query.get("deleteContents") == "true")
            return {}
        case "GET", ["datasets", dataset, "tables"]:
            return {"tables": standin.list_tables(dataset)}
        case "POST", ["datasets", dataset, "tables"]:
            schema = parse_schema(
                body.get("schema"), [str(c) for c in body.get("primaryKey") or []]
            )
            table = str(body.get("table", ""))
            standin.create_table(dataset, table, schema, exists_ok=bool(body.get("existsOk")))
            return {"table": f"{dataset}.{table}", **schema.to_json()}
        case "GET", ["datasets", dataset, "tables", table]:
            described = standin.describe(dataset, table)
            if described is None:
                raise NotFound(f"Not found: Table {dataset}.{table}")
            count = standin.row_count(dataset, table)
            return {"table": f"{dataset}.{table}", **described.to_json(), "numRows": count}
        case "DELETE", ["datasets", dataset, "tables", table]:
            standin.delete_table(dataset, table)
            return {}
        case "POST", ["query"]:
            sql = body.get("query")
            if not isinstance(sql, str) or not sql.strip():
                raise InvalidArgument('The body needs "query": the SQL to run.')
            limit = int(body.get("maxRows") or DEFAULT_MAX_ROWS)
            return standin.query(sql, max_rows=max(1, limit)).to_json()
        case "GET", ["activity"]:
            return {
                "tables": [
                    {
                        "table": a.table,
                        "messagesWritten": a.messages_written,
                        "unwritable": a.unwritable,
                        "writes": a.writes,
                        "lastWrite": a.last_write,
                        "subscriptions": sorted(a.subscriptions),
                    }
                    for a in standin.activity()
                ]
            }
    raise HttpProblem(
        404, "NOT_FOUND", f"No BigQuery stand-in route for {method} {PREFIX}{'/'.join(parts)}."
    )
