"""REST/JSON door of the reference server: the google.pubsub.v1 HTTP mapping on aiohttp.

One state, two doors: every binding (wire-contract §1.1) becomes the same request
proto the gRPC door receives (JSON body parsed with ``json_format``, the resource name
from the path, query parameters on GET/DELETE), runs through the same
``PubSubService.call`` (so injected faults, validation and exactly-once rules are the
gRPC door's), and the response proto is answered as proto3 JSON (camelCase, base64
bytes, ``"600s"`` durations, RFC 3339 timestamps, int64 as strings, default values
omitted, as the emulator does).

Errors use Google's JSON error format with the canonical HTTP status of
``google/rpc/code.proto`` (note FAILED_PRECONDITION → 400 there, not 412)::

    {"error": {"code": 400, "message": "...", "status": "INVALID_ARGUMENT",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", ...}]}}

Exactly-once ack failures keep their ErrorInfo details (the emulator's REST door drops
them, wire-contract §1.4). A path no binding matches is a 404 error, a known path with
another HTTP method a 405 (``Allow`` lists the methods), malformed JSON a 400 that names
the problem. StreamingPull has no REST binding; IAM and SchemaService answer 501.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.rpc import status_pb2

from eoclient.errors import InvalidArgument, RpcError, Unimplemented
from eoclient.server_stub.service import PubSubService, rich_status

logger = logging.getLogger("eoclient.server_stub.rest")

# Publish requests may be 10 MB of data, i.e. ~13.4 MB of base64 JSON (plus framing).
MAX_BODY_BYTES = 32 * 2**20

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

# Google's system parameters: accepted on any call, never bound to the request.
SYSTEM_PARAMETERS = frozenset(
    {
        "$.xgafv",
        "access_token",
        "alt",
        "callback",
        "fields",
        "key",
        "oauth_token",
        "prettyPrint",
        "quotaUser",
        "upload_protocol",
        "uploadType",
    }
)

_PROJECT = "projects/[^/:]+"
_TOPIC = f"{_PROJECT}/topics/[^/:]+"
_SUBSCRIPTION = f"{_PROJECT}/subscriptions/[^/:]+"
_SNAPSHOT = f"{_PROJECT}/snapshots/[^/:]+"


@dataclass(frozen=True)
class Binding:
    """One HTTP rule: ``http_method`` on a path matching ``pattern`` runs ``rpc``.

    The pattern's one group is a resource name, stored in the request field ``field``
    (dotted for nested fields); ``body`` says whether the JSON body is the request
    (``body: "*"``) or query parameters fill it instead.
    """

    http_method: str
    pattern: re.Pattern[str]
    rpc: str
    field: str
    body: bool


def _bind(
    http_method: str, resource: str, rpc: str, field: str, *, body: bool, suffix: str = ""
) -> Binding:
    return Binding(
        http_method, re.compile(f"/v1/({resource}){re.escape(suffix)}"), rpc, field, body
    )


# wire-contract §1.1, from the 2.44.0 client's rest_base.py transports.
BINDINGS: tuple[Binding, ...] = (
    # Publisher
    _bind("PUT", _TOPIC, "CreateTopic", "name", body=True),
    _bind("PATCH", _TOPIC, "UpdateTopic", "topic.name", body=True),
    _bind("POST", _TOPIC, "Publish", "topic", body=True, suffix=":publish"),
    _bind("GET", _TOPIC, "GetTopic", "topic", body=False),
    _bind("GET", _PROJECT, "ListTopics", "project", body=False, suffix="/topics"),
    _bind("GET", _TOPIC, "ListTopicSubscriptions", "topic", body=False, suffix="/subscriptions"),
    _bind("GET", _TOPIC, "ListTopicSnapshots", "topic", body=False, suffix="/snapshots"),
    _bind("DELETE", _TOPIC, "DeleteTopic", "topic", body=False),
    _bind(
        "POST", _SUBSCRIPTION, "DetachSubscription", "subscription", body=False, suffix=":detach"
    ),
    # Subscriber
    _bind("PUT", _SUBSCRIPTION, "CreateSubscription", "name", body=True),
    _bind("GET", _SUBSCRIPTION, "GetSubscription", "subscription", body=False),
    _bind("PATCH", _SUBSCRIPTION, "UpdateSubscription", "subscription.name", body=True),
    _bind("GET", _PROJECT, "ListSubscriptions", "project", body=False, suffix="/subscriptions"),
    _bind("DELETE", _SUBSCRIPTION, "DeleteSubscription", "subscription", body=False),
    _bind(
        "POST",
        _SUBSCRIPTION,
        "ModifyAckDeadline",
        "subscription",
        body=True,
        suffix=":modifyAckDeadline",
    ),
    _bind("POST", _SUBSCRIPTION, "Acknowledge", "subscription", body=True, suffix=":acknowledge"),
    _bind("POST", _SUBSCRIPTION, "Pull", "subscription", body=True, suffix=":pull"),
    _bind(
        "POST",
        _SUBSCRIPTION,
        "ModifyPushConfig",
        "subscription",
        body=True,
        suffix=":modifyPushConfig",
    ),
    _bind("GET", _SNAPSHOT, "GetSnapshot", "snapshot", body=False),
    _bind("GET", _PROJECT, "ListSnapshots", "project", body=False, suffix="/snapshots"),
    _bind("PUT", _SNAPSHOT, "CreateSnapshot", "name", body=True),
    _bind("PATCH", _SNAPSHOT, "UpdateSnapshot", "snapshot.name", body=True),
    _bind("DELETE", _SNAPSHOT, "DeleteSnapshot", "snapshot", body=False),
    _bind("POST", _SUBSCRIPTION, "Seek", "subscription", body=True, suffix=":seek"),
)

# Bound by the real service, not served here (wire-contract §1.1): 501 like gRPC's answer.
_IAM = re.compile(
    rf"/v1/(?:{_TOPIC}|{_SUBSCRIPTION}|{_SNAPSHOT}|{_PROJECT}/schemas/[^/:]+)"
    r":(getIamPolicy|setIamPolicy|testIamPermissions)"
)
_SCHEMAS = re.compile(rf"/v1/{_PROJECT}/schemas(?:[/:].*)?")


class _HttpProblem(Exception):
    """An error found before any RPC ran (routing): its HTTP status and canonical name."""

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


def _json(text: str, http: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        text=text,
        status=http,
        content_type="application/json",
        charset="utf-8",
        headers=headers,
    )


def rpc_error_response(error: RpcError) -> web.Response:
    status: status_pb2.Status = rich_status(error)
    http = HTTP_STATUS.get(error.code, 500)
    return _json(error_body(http, error.code, error.message, status.details), http)


class RestDoor:
    """The aiohttp application of one ``PubSubService``."""

    def __init__(self, service: PubSubService) -> None:
        self.service = service

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{path:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        try:
            binding, name = self._route(request.method, request.path)
            message = self.service.methods[binding.rpc].request()
            if binding.body:
                await _parse_body(request, message)
                _refuse_query(request.query)
            else:
                _bind_query(message, request.query)
            _set_field(message, binding.field, name)
            response = await self.service.call(binding.rpc, message)
        except _HttpProblem as problem:
            body = error_body(problem.http, problem.status, problem.message)
            return _json(body, problem.http, problem.headers)
        except RpcError as error:
            return rpc_error_response(error)
        except Exception:
            logger.exception("REST %s %s failed", request.method, request.path)
            return _json(error_body(500, "INTERNAL", "Internal error."), 500)
        return _json(json_format.MessageToJson(response, indent=2))

    @staticmethod
    def _route(http_method: str, path: str) -> tuple[Binding, str]:
        allowed: list[str] = []
        for binding in BINDINGS:
            found = binding.pattern.fullmatch(path)
            if found is None:
                continue
            if binding.http_method == http_method:
                return binding, found.group(1)
            allowed.append(binding.http_method)
        if allowed:
            raise _HttpProblem(
                405,
                "UNIMPLEMENTED",
                f"HTTP method {http_method} is not allowed on {path} "
                f"(allowed: {', '.join(allowed)}).",
                {"Allow": ", ".join(allowed)},
            )
        iam = _IAM.fullmatch(path)
        if iam is not None:
            raise Unimplemented(
                f"{iam.group(1)} is not implemented: the reference server has no IAM "
                "(neither does Google's emulator)."
            )
        if _SCHEMAS.fullmatch(path):
            raise Unimplemented(
                "google.pubsub.v1 SchemaService is not implemented by the eoclient "
                "reference server."
            )
        raise _HttpProblem(
            404, "NOT_FOUND", f"No google.pubsub.v1 HTTP binding matches {http_method} {path}."
        )


# ------------------------------------------------------------------ request


async def _parse_body(request: web.Request, message: Message) -> None:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as error:
        raise InvalidArgument(
            f"Request payload size exceeds the limit: {MAX_BODY_BYTES} bytes."
        ) from error
    if not raw.strip():
        return  # no body: the request is the path (and defaults)
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InvalidArgument(
            f"Invalid JSON payload received. The body is not UTF-8: {error.reason}."
        ) from error
    except json.JSONDecodeError as error:
        raise InvalidArgument(
            f"Invalid JSON payload received. {error.msg} at line {error.lineno} "
            f"column {error.colno}."
        ) from error
    if not isinstance(document, dict):
        raise InvalidArgument(
            f"Invalid JSON payload received. Expected a JSON object, got {type(document).__name__}."
        )
    _check_base64(document, message.DESCRIPTOR, "")
    try:
        json_format.ParseDict(document, message)
    except json_format.ParseError as error:
        raise InvalidArgument(_parse_error_text(error)) from error


# Standard or URL-safe alphabet, optional padding: what proto3 JSON parsers accept.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


def _check_base64(document: Any, descriptor: Any, path: str) -> None:
    """Reject bytes fields that are not base64 (protobuf's parser silently skips junk)."""
    if not isinstance(document, dict):
        return
    for key, value in document.items():
        field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)
        if field is None:
            continue  # ParseDict names unknown fields
        where = f"{path}.{key}" if path else key
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            at = where if index is None else f"{where}[{index}]"
            if field.type == FieldDescriptor.TYPE_BYTES and isinstance(item, str):
                if not _BASE64.fullmatch(item) or len(item.rstrip("=")) % 4 == 1:
                    raise InvalidArgument(
                        f"Invalid value at '{at}' (TYPE_BYTES), Base64 decoding failed for "
                        f'"{item}"'
                    )
            elif field.message_type is not None:
                _check_base64(item, field.message_type, at)


_UNKNOWN_FIELD = re.compile(r'has no field named "([^"]+)" at "([^"]*)"')


def _parse_error_text(error: json_format.ParseError) -> str:
    text = str(error)
    unknown = _UNKNOWN_FIELD.search(text)
    if unknown is not None:  # Google's wording, without protobuf's list of fields
        return (
            f'Invalid JSON payload received. Unknown name "{unknown.group(1)}" at '
            f"'{unknown.group(2)}': Cannot find field."
        )
    return f"Invalid JSON payload received. {text}"


def _cannot_bind(key: str) -> InvalidArgument:
    return InvalidArgument(
        f'Invalid JSON payload received. Unknown name "{key}": Cannot bind query parameter. '
        f"Field '{key}' could not be found in request message."
    )


def _refuse_query(query: Mapping[str, str]) -> None:
    for key in query:
        if key not in SYSTEM_PARAMETERS:
            raise _cannot_bind(key)


def _bind_query(message: Message, query: Any) -> None:
    """GET/DELETE: query parameters fill request fields (json or proto names, dotted)."""
    document: dict[str, Any] = {}
    for key, value in query.items():
        if key in SYSTEM_PARAMETERS:
            continue
        field = _field_path(message.DESCRIPTOR, key)
        if field is None:
            raise _cannot_bind(key)
        converted: Any = value
        if field.type == FieldDescriptor.TYPE_BOOL:
            if value not in ("true", "false"):
                raise InvalidArgument(
                    f"Invalid value at '{key}' (TYPE_BOOL), \"{value}\": expected true or false."
                )
            converted = value == "true"
        target = document
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        if field.is_repeated:
            target.setdefault(leaf, []).append(converted)
        else:
            target[leaf] = converted
    try:
        json_format.ParseDict(document, message)
    except json_format.ParseError as error:
        raise InvalidArgument(_parse_error_text(error)) from error


def _field_path(descriptor: Any, dotted: str) -> FieldDescriptor | None:
    field: FieldDescriptor | None = None
    current: Descriptor | None = descriptor
    for part in dotted.split("."):
        if current is None:
            return None
        field = current.fields_by_name.get(part) or current.fields_by_camelcase_name.get(part)
        if field is None:
            return None
        current = field.message_type
    if field is not None and field.message_type is not None:
        return None  # only scalar (and repeated scalar) fields bind to query parameters
    return field


def _set_field(message: Message, dotted: str, value: str) -> None:
    *parents, leaf = dotted.split(".")
    target = message
    for parent in parents:
        target = getattr(target, parent)
    setattr(target, leaf, value)
