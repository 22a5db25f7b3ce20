"""Google's JSON error format for the REST door, and its HTTP statuses.

Every error the door answers, whatever found it (routing, the browser policy, parsing,
the broker), has this shape and the canonical HTTP status of ``google/rpc/code.proto``
(note FAILED_PRECONDITION → 400 there, not 412)::

    {"error": {"code": 400, "message": "...", "status": "INVALID_ARGUMENT",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", ...}]}}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.rpc import status_pb2

from eoclient.errors import RpcError
from eoclient.server_stub.services.errors import rich_status

# Canonical status → HTTP status (google/rpc/code.proto "HTTP Mapping").
HTTP_STATUS: Mapping[str, int] = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
}


class HttpProblem(Exception):
    """An error with an HTTP status of its own (a 404 or 405 of routing, a 403 of the
    browser policy), found before or instead of an RPC; ``status`` is its canonical name."""

    def __init__(
        self, http: int, status: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.http = http
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def error_body(http: int, status: str, message: str, details: Iterable[Any] = ()) -> str:
    """Google's JSON error format; ``details`` are ``google.protobuf.Any`` messages."""
    error: dict[str, Any] = {"code": http, "message": message, "status": status}
    rendered = [json_format.MessageToDict(detail) for detail in details]
    if rendered:
        error["details"] = rendered
    return json.dumps({"error": error}, indent=2)


def json_response(
    text: str, http: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        text=text, status=http, content_type="application/json", charset="utf-8", headers=headers
    )


def rpc_error_response(error: RpcError, headers: Mapping[str, str] | None = None) -> web.Response:
    status: status_pb2.Status = rich_status(error)
    http = HTTP_STATUS.get(error.code, 500)
    extra = dict(headers or {})
    if http == 401:  # RFC 6750 §3: say which scheme would be accepted
        extra["WWW-Authenticate"] = 'Bearer realm="eoclient"'
    return json_response(error_body(http, error.code, error.message, status.details), http, extra)


def problem_response(
    problem: HttpProblem, headers: Mapping[str, str] | None = None
) -> web.Response:
    return json_response(
        error_body(problem.http, problem.status, problem.message),
        problem.http,
        {**problem.headers, **(headers or {})},
    )
