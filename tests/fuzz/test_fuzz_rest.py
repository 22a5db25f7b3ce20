"""Random and mutated requests on every REST route of the google.pubsub.v1 HTTP mapping.

Each example is one HTTP request to a route (its method, and a path naming a resource of
the right kind, an existing one, a new one or a malformed one), with random query
parameters (system parameters included), headers (Content-Type, Content-Encoding, Origin,
Host) and a body: the JSON of a drawn request, that JSON damaged, or random bytes. The
answer must be a documented status in Google's JSON error shape (never a 5xx other than
501 UNIMPLEMENTED), and the server must stay whole (``Target.check_alive``).
"""

from __future__ import annotations

import gzip
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import field_mask_pb2, json_format
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient.server_stub.doors.rest.routes import BINDINGS, Binding

from ._harness import Target, assert_http_documented
from ._strategies import BAD_NAMES, NEW, PROJECT, SNAPSHOTS, SUBSCRIPTIONS, TOPICS, request_of
from .test_fuzz_grpc import FUZZ_SETTINGS, _request_class

REST_SETTINGS = settings(FUZZ_SETTINGS, max_examples=max(FUZZ_SETTINGS.max_examples * 3 // 5, 5))


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    fuzzed = Target()
    yield fuzzed
    fuzzed.close()


_POOL = {"topics": TOPICS, "subscriptions": SUBSCRIPTIONS, "snapshots": SNAPSHOTS}


def _kind(binding: Binding) -> str:
    for kind in ("topics", "subscriptions", "snapshots"):
        if f"/{kind}/" in binding.pattern.pattern:
            return kind
    return "projects"


def _suffix(binding: Binding) -> str:
    tail = binding.pattern.pattern.rsplit(")", 1)[1]
    return re.sub(r"\\(.)", r"\1", tail)


def _names(binding: Binding) -> st.SearchStrategy[str]:
    kind = _kind(binding)
    good = [PROJECT] if kind == "projects" else [*_POOL[kind], NEW[kind]]
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(BAD_NAMES))


_QUERY_KEYS = [
    "alt",
    "$alt",
    "fields",
    "$fields",
    "prettyPrint",
    "key",
    "quotaUser",
    "callback",
    "access_token",
    "$.xgafv",
    "pageSize",
    "pageToken",
    "page_size",
    "subscription",
]
_QUERY_VALUES = [
    "json",
    "json;enum-encoding=int",
    "proto",
    "false",
    "true",
    "name,labels",
    "receivedMessages(ackId,message/data)",
    "*",
    "a(",
    "-1",
    "99999999999999999999",
    "",
]
_CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    "application/x-www-form-urlencoded",
    "",
]


def _body_json(message: Message) -> Any:
    _make_renderable(message)
    return json_format.MessageToDict(message)


def _mask_path_renders(path: str) -> bool:
    try:
        field_mask_pb2.FieldMask(paths=[path]).ToJsonString()
    except ValueError:
        return False
    return True


def _make_renderable(message: Message) -> None:
    """Bring drawn Timestamps, Durations and Struct numbers into what JSON can hold
    (values past them cannot be written as JSON, so they are not a REST input)."""
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.FieldMask":
        paths = message.paths  # type: ignore[attr-defined]
        paths[:] = [p for p in paths if _mask_path_renders(p)]
        return
    if name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        message.nanos = min(max(message.nanos, 0), 999_999_999)  # type: ignore[attr-defined]
        bound = 253_402_300_799 if name.endswith("Timestamp") else 315_576_000_000
        floor = -62_135_596_800 if name.endswith("Timestamp") else 0
        message.seconds = min(max(message.seconds, floor), bound)  # type: ignore[attr-defined]
        return
    if name == "google.protobuf.Value":
        if message.WhichOneof("kind") == "number_value" and not (
            abs(message.number_value) < float("inf")  # type: ignore[attr-defined]
        ):
            message.number_value = 0  # type: ignore[attr-defined]
        elif message.WhichOneof("kind") is None:
            message.null_value = 0  # type: ignore[attr-defined]
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for item in value.values():
                    _make_renderable(item)
        elif field.is_repeated:
            for item in value:
                _make_renderable(item)
        else:
            _make_renderable(value)


@st.composite
def _json_damage(draw: st.DrawFn, document: Any) -> Any:
    """Replace one node of a JSON document with a random JSON value."""
    replacement = draw(
        st.recursive(
            st.one_of(
                st.none(),
                st.booleans(),
                st.integers(-(2**70), 2**70),
                st.floats(allow_nan=False),
                st.text(max_size=10),
            ),
            lambda inner: st.one_of(
                st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
            ),
            max_leaves=6,
        )
    )
    if not isinstance(document, dict) or not document:
        return replacement
    key = draw(st.sampled_from(sorted(document)))
    damaged = dict(document)
    damaged[key] = replacement
    return damaged


def _request(binding: Binding) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        message = draw(request_of(_request_class(binding.rpc)))
        shape = draw(st.sampled_from(["json", "damaged", "bytes", "none"]))
        return {
            "message": message,
            "name": draw(_names(binding)),
            "query": draw(
                st.lists(
                    st.tuples(
                        st.one_of(st.sampled_from(_QUERY_KEYS), st.text(max_size=6)),
                        st.one_of(st.sampled_from(_QUERY_VALUES), st.text(max_size=8)),
                    ),
                    max_size=3,
                )
            ),
            "shape": shape,
            "damage": draw(st.data()),
            "content_type": draw(st.sampled_from(_CONTENT_TYPES)),
            "gzip": draw(st.sampled_from([None, "true", "lie"])),
            "origin": draw(st.sampled_from([None, None, "https://evil.example"])),
            "host": draw(st.sampled_from([None, None, "evil.example", "localhost"])),
        }

    return build()


def _send(target: Target, binding: Binding, drawn: dict[str, Any]) -> tuple[int, str, bytes]:
    message = target.fill_placeholders(drawn["message"])
    path = f"/v1/{target.fill_name(drawn['name'])}{_suffix(binding)}"
    query = urllib.parse.urlencode(drawn["query"])
    url = urllib.parse.quote(path, safe="/:") + (f"?{query}" if query else "")
    body: bytes | None = None
    if drawn["shape"] == "json":
        body = json.dumps(_body_json(message)).encode()
    elif drawn["shape"] == "damaged":
        document = drawn["damage"].draw(_json_damage(_body_json(message)))
        body = json.dumps(document).encode()
    elif drawn["shape"] == "bytes":
        body = drawn["damage"].draw(st.binary(max_size=64))
    headers: dict[str, str] = {}
    if drawn["content_type"]:
        headers["Content-Type"] = drawn["content_type"]
    if drawn["gzip"] and body is not None:
        headers["Content-Encoding"] = "gzip"
        if drawn["gzip"] == "true":
            body = gzip.compress(body)
    if drawn["origin"]:
        headers["Origin"] = drawn["origin"]
    if drawn["host"]:
        headers["Host"] = drawn["host"]
    return target.http(binding.http_method, url, body, headers)


@pytest.mark.parametrize("binding", BINDINGS, ids=[f"{b.http_method}-{b.rpc}" for b in BINDINGS])
def test_rest_routes_survive_random_requests(target: Target, binding: Binding) -> None:
    @REST_SETTINGS
    @given(drawn=_request(binding))
    def run(drawn: dict[str, Any]) -> None:
        target.baseline()
        status, content_type, body = _send(target, binding, drawn)
        assert_http_documented(status, content_type, body, f"{binding.http_method} {binding.rpc}")
        target.check_alive()

    run()


_ANY_METHOD = st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])


def test_unbound_paths_and_methods_answer_json(target: Target) -> None:
    paths = st.one_of(
        st.sampled_from(
            [
                f"/v1/{TOPICS[0]}:getIamPolicy",
                f"/v1/{PROJECT}/schemas",
                f"/v1/{PROJECT}/schemas/s1:validate",
                "/",
                "/v2/projects/fz/topics",
                f"/v1/{TOPICS[0]}:nothing",
            ]
        ),
        st.text(max_size=30).map(lambda t: "/" + t),
    )

    @REST_SETTINGS
    @given(method=_ANY_METHOD, path=paths)
    def run(method: str, path: str) -> None:
        url = urllib.parse.quote(path, safe="/:")
        status, content_type, body = target.http(method, url, None, {})
        if method == "HEAD":  # no body by definition
            assert status < 500 or status == 501, status
        else:
            assert_http_documented(status, content_type, body, f"{method} {path}")
        target.check_alive()

    run()
