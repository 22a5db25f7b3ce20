"""The REST/JSON door against Google's emulator (0.8.20), which serves REST on its gRPC port.

A publish/pull/ack round trip gives JSON of the same shape from both (keys, JSON types,
base64 data, string message ids, RFC 3339 publish times, ``{}`` for Acknowledge and for
an empty Pull). Where the emulator is wrong the test says so and asserts both answers
(docs/protocol.md#rest-mapping): its REST errors drop the details — an exactly-once ack failure
comes back as ``{"error": {"code": 400, "message": "", "status": "INVALID_ARGUMENT"}}``
without the ErrorInfo the real service sends, which ours keeps.

Ours runs in-process (``run_server()`` on the system clock); the emulator lives for the
whole session, so every test uses fresh resource names.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from support.wire import unique

from eoclient.server_stub.server import run_server

pytestmark = pytest.mark.emulator

PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


class Rest:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else io.BytesIO(json.dumps(body).encode())
        headers = {"Content-Type": "application/json"}  # the emulator routes on it
        async with self.session.request(
            method, self.base + path, data=data, headers=headers
        ) as response:
            text = await response.text()
            if response.content_type != "application/json":
                return response.status, text
            return response.status, json.loads(text)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = await self.call(method, path, body)
        assert status == 200, answer
        return answer

    async def pull(self, sub: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        received: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(received) < count:
            assert time.monotonic() < deadline, f"pulled {len(received)} of {count}"
            body = {"maxMessages": count - len(received), "returnImmediately": True}
            answer = await self.ok("POST", f"/v1/{sub}:pull", body)
            received.extend(answer.get("receivedMessages", []))
            if not answer:
                await asyncio.sleep(0.05)
        return received


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
async def ours(session: aiohttp.ClientSession) -> AsyncIterator[Rest]:
    async with run_server() as server:
        yield Rest(session, server.rest_url)


@pytest.fixture
def google(emulator: str, session: aiohttp.ClientSession) -> Rest:
    return Rest(session, f"http://{emulator}")


def shape(value: Any) -> Any:
    """The JSON structure with every leaf replaced by its JSON type."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


async def round_trip(rest: Rest) -> dict[str, Any]:
    """Create, publish two messages, pull them, ack them, pull nothing: every answer."""
    topic, sub = unique("topic"), unique("sub")
    await rest.ok("PUT", f"/v1/{topic}", {})
    await rest.ok("PUT", f"/v1/{sub}", {"topic": topic, "ackDeadlineSeconds": 30})
    messages = [
        {"data": base64.b64encode(b"hi").decode(), "attributes": {"a": "b"}},
        {"data": base64.b64encode(bytes(range(256))).decode()},
    ]
    published = await rest.ok("POST", f"/v1/{topic}:publish", {"messages": messages})
    received = await rest.pull(sub, 2)
    received.sort(key=lambda r: published["messageIds"].index(r["message"]["messageId"]))
    acked = await rest.ok(
        "POST", f"/v1/{sub}:acknowledge", {"ackIds": [r["ackId"] for r in received]}
    )
    empty = await rest.ok("POST", f"/v1/{sub}:pull", {"maxMessages": 5, "returnImmediately": True})
    return {"published": published, "received": received, "acked": acked, "empty": empty}


async def test_round_trip_json_has_the_emulators_shape(ours: Rest, google: Rest) -> None:
    mine, theirs = await round_trip(ours), await round_trip(google)
    assert shape(mine) == shape(theirs)
    for answers in (mine, theirs):
        assert answers["acked"] == {}
        assert answers["empty"] == {}
        first, second = answers["received"]
        assert set(first) == {"ackId", "message"}
        assert set(first["message"]) == {"data", "attributes", "messageId", "publishTime"}
        assert set(second["message"]) == {"data", "messageId", "publishTime"}  # no attributes
        assert base64.b64decode(first["message"]["data"]) == b"hi"
        assert base64.b64decode(second["message"]["data"]) == bytes(range(256))
        assert first["message"]["attributes"] == {"a": "b"}
        assert [r["message"]["messageId"] for r in answers["received"]] == answers["published"][
            "messageIds"
        ]
        for received in answers["received"]:
            assert RFC3339.fullmatch(received["message"]["publishTime"])


async def test_common_errors_have_the_same_code_and_status(ours: Rest, google: Rest) -> None:
    for rest in (ours, google):
        topic = unique("topic")
        status, missing = await rest.call("GET", f"/v1/{topic}")
        assert status == 404
        assert {k: missing["error"][k] for k in ("code", "status")} == {
            "code": 404,
            "status": "NOT_FOUND",
        }
        await rest.ok("PUT", f"/v1/{topic}", {})
        status, again = await rest.call("PUT", f"/v1/{topic}", {})
        assert status == 409
        assert again["error"]["status"] == "ALREADY_EXISTS"
        status, broken = await rest.call("PUT", f"/v1/{unique('topic')}", {"lables": {}})
        assert status == 400
        assert broken["error"]["status"] == "INVALID_ARGUMENT"


async def stale_ack_error(rest: Rest) -> tuple[str, Any]:
    topic, sub = unique("topic"), unique("sub")
    await rest.ok("PUT", f"/v1/{topic}", {})
    await rest.ok("PUT", f"/v1/{sub}", {"topic": topic, "enableExactlyOnceDelivery": True})
    await rest.ok("POST", f"/v1/{topic}:publish", {"messages": [{"data": "bQ=="}]})
    [old] = await rest.pull(sub, 1)
    nack = {"ackIds": [old["ackId"]], "ackDeadlineSeconds": 0}
    await rest.ok("POST", f"/v1/{sub}:modifyAckDeadline", nack)
    [new] = await rest.pull(sub, 1)
    assert new["ackId"] != old["ackId"]
    status, answer = await rest.call("POST", f"/v1/{sub}:acknowledge", {"ackIds": [old["ackId"]]})
    assert status == 400
    return old["ackId"], answer


async def test_emulator_rest_errors_drop_the_exactly_once_details(ours: Rest, google: Rest) -> None:
    # Emulator defect (docs/protocol.md#rest-mapping): no message, no details over REST, although
    # its gRPC door sends the ErrorInfo for the same failure.
    _, theirs = await stale_ack_error(google)
    assert theirs == {"error": {"code": 400, "message": "", "status": "INVALID_ARGUMENT"}}
    # Ours: the real service's message and ErrorInfo first
    # (docs/protocol.md#exactly-once-error-details).
    stale, mine = await stale_ack_error(ours)
    assert mine["error"]["code"] == 400
    assert mine["error"]["status"] == "INVALID_ARGUMENT"
    assert mine["error"]["message"].startswith("Some acknowledgement ids in the request were")
    assert mine["error"]["details"] == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "EXACTLY_ONCE_ACKID_FAILURE",
            "domain": "pubsub.googleapis.com",
            "metadata": {stale: PERMANENT},
        }
    ]


async def test_emulator_answers_unknown_routes_in_plain_text(ours: Rest, google: Rest) -> None:
    # Emulator difference: a path with no binding is a text/plain "Not Found"; ours is
    # Google's JSON error, so REST clients parse every failure the same way.
    status, theirs = await google.call("GET", "/v1/no/such/route")
    assert (status, theirs.strip()) == (404, "Not Found")
    status, mine = await ours.call("GET", "/v1/no/such/route")
    assert status == 404
    assert mine["error"]["status"] == "NOT_FOUND"
