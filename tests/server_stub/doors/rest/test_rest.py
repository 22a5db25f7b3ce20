"""The REST/JSON door with a plain HTTP client: one state, two doors.

Every call here is a raw ``aiohttp.ClientSession`` request to ``reference.rest_url``
(docs/protocol.md#rest-mapping: bindings, proto3 JSON and Google's JSON error format); the
mixed tests talk gRPC (``Wire``) to the same server to prove both doors share one
broker. The server runs on a FakeClock.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import grpc
import pytest
from support.processes import eoclient_serve
from support.wire import Wire, unique

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.cli import rest_port_for
from eoclient.server_stub.doors.rest.errors import HTTP_STATUS
from eoclient.server_stub.server import ReferenceServer, run_server

INVALID_TEXT = (
    "Some acknowledgement ids in the request were invalid. This could be because the "
    "acknowledgement ids have expired or the acknowledgement ids were malformed."
)
PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6}|\.\d{9})?Z")


@dataclass
class Answer:
    status: int
    body: Any
    headers: Any

    @property
    def error(self) -> dict[str, Any]:
        assert set(self.body) == {"error"}, self.body
        error: dict[str, Any] = self.body["error"]
        assert error["code"] == self.status
        return error


class Rest:
    """Plain HTTP calls to the REST door; every answer must be JSON."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        params: dict[str, str] | None = None,
    ) -> Answer:
        data = raw if raw is not None else (None if body is None else _dumps(body))
        payload = None if data is None else io.BytesIO(data)  # large bodies: no warning
        async with self.session.request(
            method,
            self.base + path,
            data=payload,
            params=params,
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.content_type == "application/json", await response.text()
            return Answer(response.status, await response.json(), response.headers)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        answer = await self.call(method, path, body, **kw)
        assert answer.status == 200, answer.body
        return answer.body

    # ------------------------------------------------------------ helpers

    async def topic(self, **fields: Any) -> str:
        name = unique("topic")
        await self.ok("PUT", f"/v1/{name}", fields)
        return name

    async def subscription(self, topic: str | None = None, **fields: Any) -> tuple[str, str]:
        topic = topic or await self.topic()
        name = unique("sub")
        await self.ok("PUT", f"/v1/{name}", {"topic": topic, **fields})
        return topic, name

    async def publish(self, topic: str, *messages: dict[str, Any]) -> list[str]:
        body = await self.ok("POST", f"/v1/{topic}:publish", {"messages": list(messages)})
        ids: list[str] = body["messageIds"]
        return ids

    async def pull(self, subscription: str, max_messages: int = 10) -> list[dict[str, Any]]:
        body = await self.ok(
            "POST",
            f"/v1/{subscription}:pull",
            {"maxMessages": max_messages, "returnImmediately": True},
        )
        received: list[dict[str, Any]] = body.get("receivedMessages", [])
        return received


def _dumps(body: Any) -> bytes:
    return json.dumps(body).encode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
async def rest(reference: ReferenceServer) -> AsyncIterator[Rest]:
    async with aiohttp.ClientSession() as session:
        yield Rest(session, reference.rest_url)


# ------------------------------------------------------------------ admin


async def test_topic_and_subscription_admin_round_trip(rest: Rest) -> None:
    topic = unique("topic")
    created = await rest.ok(
        "PUT", f"/v1/{topic}", {"labels": {"team": "a"}, "messageRetentionDuration": "86400s"}
    )
    assert created["name"] == topic
    assert created["labels"] == {"team": "a"}
    assert created["messageRetentionDuration"] == "86400s"
    assert await rest.ok("GET", f"/v1/{topic}") == created

    updated = await rest.ok(
        "PATCH",
        f"/v1/{topic}",
        {"topic": {"labels": {"team": "b"}}, "updateMask": "labels"},
    )
    assert updated["labels"] == {"team": "b"}
    assert updated["messageRetentionDuration"] == "86400s"

    sub = unique("sub")
    created_sub = await rest.ok(
        "PUT",
        f"/v1/{sub}",
        {
            "topic": topic,
            "ackDeadlineSeconds": 20,
            "retryPolicy": {"minimumBackoff": "1.500s", "maximumBackoff": "60s"},
            "labels": {"x": "1"},
        },
    )
    assert created_sub["name"] == sub
    assert created_sub["topic"] == topic
    assert created_sub["ackDeadlineSeconds"] == 20
    assert created_sub["retryPolicy"] == {"minimumBackoff": "1.500s", "maximumBackoff": "60s"}
    assert created_sub["state"] == "ACTIVE"  # enums by name
    # camelCase mask paths in JSON, snake_case for the broker.
    patched = await rest.ok(
        "PATCH",
        f"/v1/{sub}",
        {
            "subscription": {"ackDeadlineSeconds": 45, "labels": {"x": "2"}},
            "updateMask": "ackDeadlineSeconds,labels",
        },
    )
    assert patched["ackDeadlineSeconds"] == 45
    assert patched["labels"] == {"x": "2"}
    assert await rest.ok("GET", f"/v1/{sub}") == patched
    listed = await rest.ok("GET", f"/v1/{topic}/subscriptions")
    assert listed == {"subscriptions": [sub]}

    assert await rest.ok("DELETE", f"/v1/{sub}") == {}
    missing = await rest.call("GET", f"/v1/{sub}")
    assert missing.status == 404
    assert missing.error["status"] == "NOT_FOUND"
    assert await rest.ok("DELETE", f"/v1/{topic}") == {}
    assert (await rest.call("GET", f"/v1/{topic}")).status == 404


async def test_path_names_the_resource_and_empty_body_is_allowed(rest: Rest) -> None:
    topic = unique("topic")
    # No body at all: the request is the path.
    assert (await rest.ok("PUT", f"/v1/{topic}"))["name"] == topic
    # A name in the body is overridden by the path (the path binds the field).
    other = unique("topic")
    created = await rest.ok("PUT", f"/v1/{other}", {"name": "projects/p1/topics/elsewhere"})
    assert created["name"] == other
    # System parameters are accepted anywhere and ignored.
    got = await rest.ok("GET", f"/v1/{topic}", params={"alt": "json", "prettyPrint": "false"})
    assert got["name"] == topic


async def test_detach_subscription(rest: Rest) -> None:
    _, sub = await rest.subscription()
    assert await rest.ok("POST", f"/v1/{sub}:detach") == {}
    assert (await rest.ok("GET", f"/v1/{sub}")).get("detached") is True
    refused = await rest.call("POST", f"/v1/{sub}:pull", {"maxMessages": 1})
    assert refused.status == 400  # FAILED_PRECONDITION maps to 400 (google/rpc/code.proto)
    assert refused.error["status"] == "FAILED_PRECONDITION"


# ----------------------------------------------------------- publish / pull


async def test_snapshots_and_seek(rest: Rest, clock: FakeClock) -> None:
    topic, sub = await rest.subscription(retainAckedMessages=True)
    await rest.publish(topic, {"data": b64(b"one")})
    snapshot = unique("snap").replace("/subscriptions/", "/snapshots/")
    created = await rest.ok("PUT", f"/v1/{snapshot}", {"subscription": sub, "labels": {"a": "1"}})
    assert (created["name"], created["topic"], created["labels"]) == (snapshot, topic, {"a": "1"})
    assert created["expireTime"].endswith("Z")
    assert await rest.ok("GET", f"/v1/{snapshot}") == created
    listed = await rest.ok("GET", f"/v1/{topic}/snapshots")
    assert listed["snapshots"] == [snapshot]
    patched = await rest.ok(
        "PATCH",
        f"/v1/{snapshot}",
        {"snapshot": {"labels": {"a": "2"}}, "updateMask": "labels"},
    )
    assert patched["labels"] == {"a": "2"}
    [received] = await rest.pull(sub)
    await rest.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [received["ackId"]]})
    assert await rest.pull(sub) == []
    await rest.ok("POST", f"/v1/{sub}:seek", {"snapshot": snapshot})
    [again] = await rest.pull(sub)
    assert again["message"]["messageId"] == received["message"]["messageId"]
    future = datetime.fromtimestamp(clock.now() + 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await rest.ok("POST", f"/v1/{sub}:seek", {"time": future})
    assert await rest.pull(sub) == []
    await rest.ok("DELETE", f"/v1/{snapshot}")
    assert (await rest.call("GET", f"/v1/{snapshot}")).status == 404


async def test_publish_pull_ack_with_base64_data_and_attributes(
    rest: Rest, clock: FakeClock
) -> None:
    topic, sub = await rest.subscription()
    payload = bytes(range(256))  # every byte value survives base64
    ids = await rest.publish(
        topic,
        {"data": b64(payload), "attributes": {"k": "v", "empty": ""}},
        {"data": b64(b"second")},
    )
    assert len(ids) == 2
    assert all(isinstance(i, str) for i in ids)

    received = await rest.pull(sub)
    assert [r["message"]["messageId"] for r in received] == ids
    first = received[0]
    assert set(first) == {"ackId", "message"}  # deliveryAttempt omitted without dead letters
    assert base64.b64decode(first["message"]["data"]) == payload
    assert first["message"]["attributes"] == {"k": "v", "empty": ""}
    assert "orderingKey" not in first["message"]  # default values are omitted
    publish_time = first["message"]["publishTime"]
    assert RFC3339.fullmatch(publish_time), publish_time
    parsed = datetime.fromisoformat(publish_time.replace("Z", "+00:00"))
    assert parsed == datetime.fromtimestamp(clock.now(), UTC)

    ack_ids = [r["ackId"] for r in received]
    assert await rest.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": ack_ids}) == {}
    clock.advance(30)
    assert await rest.pull(sub) == []
    # An empty pull answers {} (receivedMessages omitted), like the emulator.
    assert (
        await rest.ok("POST", f"/v1/{sub}:pull", {"maxMessages": 1, "returnImmediately": True})
        == {}
    )


async def test_modify_ack_deadline_and_nack(rest: Rest, clock: FakeClock) -> None:
    topic, sub = await rest.subscription(ackDeadlineSeconds=10)
    await rest.publish(topic, {"data": b64(b"m")})
    [first] = await rest.pull(sub)
    body = {"ackIds": [first["ackId"]], "ackDeadlineSeconds": 120}
    assert await rest.ok("POST", f"/v1/{sub}:modifyAckDeadline", body) == {}
    clock.advance(60)
    assert await rest.pull(sub) == []  # the lease was extended
    nack = {"ackIds": [first["ackId"]], "ackDeadlineSeconds": 0}
    assert await rest.ok("POST", f"/v1/{sub}:modifyAckDeadline", nack) == {}
    [again] = await rest.pull(sub)
    assert again["message"]["messageId"] == first["message"]["messageId"]


async def test_ordering_key_and_delivery_attempt(rest: Rest) -> None:
    dead = await rest.topic()
    topic, sub = await rest.subscription(
        enableMessageOrdering=True,
        deadLetterPolicy={"deadLetterTopic": dead, "maxDeliveryAttempts": 5},
    )
    await rest.publish(topic, {"data": b64(b"a"), "orderingKey": "k"})
    [received] = await rest.pull(sub)
    assert received["message"]["orderingKey"] == "k"
    assert received["deliveryAttempt"] == 1


async def test_large_publish_body_is_accepted(rest: Rest) -> None:
    topic, sub = await rest.subscription()
    payload = b"x" * (3 * 2**20)  # 4 MiB of base64 JSON: beyond aiohttp's 1 MiB default
    await rest.publish(topic, {"data": b64(payload)})
    [received] = await rest.pull(sub)
    assert base64.b64decode(received["message"]["data"]) == payload


# ------------------------------------------------------------- formatting


async def test_durations_timestamps_and_camel_case_formatting(rest: Rest) -> None:
    topic = await rest.topic(messageRetentionDuration="600s")
    assert (await rest.ok("GET", f"/v1/{topic}"))["messageRetentionDuration"] == "600s"
    _, sub = await rest.subscription(
        topic,
        messageRetentionDuration="3600.250s",
        expirationPolicy={"ttl": "90000s"},
        labels={"team": "billing"},
    )
    got = await rest.ok("GET", f"/v1/{sub}")
    assert got["messageRetentionDuration"] == "3600.250s"
    assert got["expirationPolicy"] == {"ttl": "90000s"}
    assert got["topicMessageRetentionDuration"] == "600s"
    assert got["labels"] == {"team": "billing"}
    # Keys are lowerCamelCase throughout.
    assert all(re.fullmatch(r"[a-z][A-Za-z]*", key) for key in got)


async def test_exports_and_ingestion_the_server_cannot_do_are_refused(rest: Rest) -> None:
    """A resource that would silently not export, ingest or transform is refused (501,
    UNIMPLEMENTED, naming the field), and nothing is stored."""
    topic = await rest.topic()
    name = unique("sub")
    answer = await rest.call(
        "PUT",
        f"/v1/{name}",
        {"topic": topic, "bigtableConfig": {"table": "projects/p/instances/i/tables/t"}},
    )
    assert answer.status == 501, answer.body
    assert answer.body["error"]["status"] == "UNIMPLEMENTED"
    assert "subscription.bigtable_config" in answer.body["error"]["message"]
    assert (await rest.call("GET", f"/v1/{name}")).status == 404
    # An empty config asks for nothing (some tools send one): accepted.
    _, sub = await rest.subscription(topic, bigqueryConfig={})
    kinesis = {"awsKinesis": {"streamArn": "arn:aws:kinesis:x", "consumerArn": "c"}}
    answer = await rest.call(
        "PUT", f"/v1/{unique('topic')}", {"ingestionDataSourceSettings": kinesis}
    )
    # Ingestion is served now: settings the service would refuse are INVALID_ARGUMENT.
    assert answer.status == 400, answer.body
    assert "AwsKinesis ingestion settings" in answer.body["error"]["message"]
    answer = await rest.call(
        "PATCH",
        f"/v1/{sub}",
        {"subscription": {"bigqueryConfig": {"table": "p.d.t"}}, "updateMask": "bigqueryConfig"},
    )
    # BigQuery exports need a stand-in to write to; this server has none.
    assert answer.status == 400, answer.body
    assert answer.body["error"]["status"] == "FAILED_PRECONDITION"


# ------------------------------------------------------------- pagination


async def test_pagination_of_topics_and_subscriptions(rest: Rest) -> None:
    project = f"pages-{unique('topic').rsplit('-', 1)[-1]}"
    names = sorted([unique("topic", project) for _ in range(5)])
    for name in names:
        await rest.ok("PUT", f"/v1/{name}")
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        params = {"pageSize": "2"} | ({"pageToken": token} if token else {})
        page = await rest.ok("GET", f"/v1/projects/{project}/topics", params=params)
        pages += 1
        seen.extend(t["name"] for t in page["topics"])
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert sorted(seen) == names
    assert pages == 3

    for _ in range(3):
        await rest.subscription()
    subs_page = await rest.ok("GET", "/v1/projects/p1/subscriptions", params={"pageSize": "1"})
    assert len(subs_page["subscriptions"]) == 1
    assert subs_page["nextPageToken"]

    bad = await rest.call("GET", f"/v1/projects/{project}/topics", params={"pageSize": "many"})
    assert bad.status == 400
    assert "pageSize" in bad.error["message"]
    unknown = await rest.call("GET", f"/v1/projects/{project}/topics", params={"size": "2"})
    assert unknown.status == 400
    assert 'Unknown name "size"' in unknown.error["message"]


# ----------------------------------------------------------------- errors


async def test_not_found_and_already_exists(rest: Rest) -> None:
    missing = await rest.call("GET", "/v1/projects/p1/topics/never-created")
    assert missing.status == 404
    assert missing.error["status"] == "NOT_FOUND"
    assert "details" not in missing.error
    topic = await rest.topic()
    again = await rest.call("PUT", f"/v1/{topic}")
    assert again.status == 409
    assert again.error["status"] == "ALREADY_EXISTS"
    no_topic = await rest.call(
        "PUT", f"/v1/{unique('sub')}", {"topic": "projects/p1/topics/never-created"}
    )
    assert no_topic.status == 404


async def test_malformed_json_is_a_400_that_names_the_problem(rest: Rest) -> None:
    topic = unique("topic")
    broken = await rest.call("PUT", f"/v1/{topic}", raw=b'{"labels": ')
    assert broken.status == 400
    assert broken.error["status"] == "INVALID_ARGUMENT"
    assert broken.error["message"].startswith("Invalid JSON payload received.")
    assert "line 1 column" in broken.error["message"]

    unknown = await rest.call("PUT", f"/v1/{topic}", {"lables": {"a": "b"}})
    assert unknown.status == 400
    assert 'Unknown name "lables"' in unknown.error["message"]

    wrong_type = await rest.call("PUT", f"/v1/{unique('sub')}", {"ackDeadlineSeconds": "soon"})
    assert wrong_type.status == 400
    assert "ackDeadlineSeconds" in wrong_type.error["message"]

    not_object = await rest.call("PUT", f"/v1/{topic}", raw=b"[]")
    assert not_object.status == 400
    assert "Expected a JSON object" in not_object.error["message"]

    not_base64 = await rest.call(
        "POST", f"/v1/{topic}:publish", {"messages": [{"data": "aGk="}, {"data": "no way!"}]}
    )
    assert not_base64.status == 400
    assert "'messages[1].data' (TYPE_BYTES)" in not_base64.error["message"]

    not_utf8 = await rest.call("PUT", f"/v1/{topic}", raw=b'{"name": "\xff"}')
    assert not_utf8.status == 400
    assert "UTF-8" in not_utf8.error["message"]

    query_on_body_call = await rest.call(
        "POST", f"/v1/{topic}:publish", {"messages": []}, params={"topic": "x"}
    )
    assert query_on_body_call.status == 400
    assert "Cannot bind query parameter" in query_on_body_call.error["message"]
    # Nothing was created by the failed calls.
    assert (await rest.call("GET", f"/v1/{topic}")).status == 404


async def test_unknown_route_is_404_and_wrong_method_is_405(rest: Rest) -> None:
    # "/" is the dashboard (tests/server_stub/observe/dashboard).
    for path in ("/v1/nothing", "/v2/projects/p1/topics", "/v1/projects/p1/topics/abc:bogus"):
        answer = await rest.call("GET", path)
        assert answer.status == 404, path
        assert answer.error["status"] == "NOT_FOUND"
    topic = await rest.topic()
    wrong = await rest.call("POST", f"/v1/{topic}")
    assert wrong.status == 405
    assert set(wrong.headers["Allow"].split(", ")) == {"PUT", "PATCH", "GET", "DELETE"}
    assert "POST" in wrong.error["message"]
    assert (await rest.call("GET", f"/v1/{topic}:publish")).status == 405
    # StreamingPull has no REST binding.
    assert (await rest.call("POST", "/v1/projects/p1/subscriptions/abc:streamingPull")).status == (
        404
    )


# One call per binding, on resources that do not exist: whatever the gRPC door answers
# (NOT_FOUND today, or UNIMPLEMENTED for features not built yet), the REST door answers
# the same status with its canonical HTTP code.
_GHOST_TOPIC = "projects/p1/topics/ghost-topic"
_GHOST_SUB = "projects/p1/subscriptions/ghost-sub"
_GHOST_SNAP = "projects/p1/snapshots/ghost-snap"
_AGREEMENT: list[tuple[str, Any, str, str, Any]] = [
    ("GetTopic", pb.GetTopicRequest(topic=_GHOST_TOPIC), "GET", f"/v1/{_GHOST_TOPIC}", None),
    (
        "Publish",
        pb.PublishRequest(topic=_GHOST_TOPIC, messages=[pb.PubsubMessage(data=b"x")]),
        "POST",
        f"/v1/{_GHOST_TOPIC}:publish",
        {"messages": [{"data": "eA=="}]},
    ),
    (
        "ListTopicSnapshots",
        pb.ListTopicSnapshotsRequest(topic=_GHOST_TOPIC),
        "GET",
        f"/v1/{_GHOST_TOPIC}/snapshots",
        None,
    ),
    (
        "DetachSubscription",
        pb.DetachSubscriptionRequest(subscription=_GHOST_SUB),
        "POST",
        f"/v1/{_GHOST_SUB}:detach",
        None,
    ),
    (
        "ModifyPushConfig",
        pb.ModifyPushConfigRequest(subscription=_GHOST_SUB),
        "POST",
        f"/v1/{_GHOST_SUB}:modifyPushConfig",
        {},
    ),
    (
        "GetSnapshot",
        pb.GetSnapshotRequest(snapshot=_GHOST_SNAP),
        "GET",
        f"/v1/{_GHOST_SNAP}",
        None,
    ),
    (
        "CreateSnapshot",
        pb.CreateSnapshotRequest(name=_GHOST_SNAP, subscription=_GHOST_SUB),
        "PUT",
        f"/v1/{_GHOST_SNAP}",
        {"subscription": _GHOST_SUB},
    ),
    (
        "DeleteSnapshot",
        pb.DeleteSnapshotRequest(snapshot=_GHOST_SNAP),
        "DELETE",
        f"/v1/{_GHOST_SNAP}",
        None,
    ),
    (
        "Seek",
        pb.SeekRequest(subscription=_GHOST_SUB, snapshot=_GHOST_SNAP),
        "POST",
        f"/v1/{_GHOST_SUB}:seek",
        {"snapshot": _GHOST_SNAP},
    ),
]


@pytest.mark.parametrize(
    ("rpc", "request_pb", "method", "path", "body"), _AGREEMENT, ids=[a[0] for a in _AGREEMENT]
)
async def test_both_doors_answer_the_same_error(
    rest: Rest, wire: Wire, rpc: str, request_pb: Any, method: str, path: str, body: Any
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(wire, rpc)(request_pb)
    code = caught.value.code().name
    answer = await rest.call(method, path, body)
    assert answer.error["status"] == code
    assert answer.status == HTTP_STATUS[code]
    assert answer.error["message"] == caught.value.details()


# ---------------------------------------------------------- exactly-once


def assert_eod_error(answer: Answer, expected: dict[str, str]) -> None:
    assert answer.status == 400
    error = answer.error
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"] == INVALID_TEXT
    info = error["details"][0]
    assert info == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "EXACTLY_ONCE_ACKID_FAILURE",
        "domain": "pubsub.googleapis.com",
        "metadata": expected,
    }


async def test_stale_ack_id_fails_with_error_info_details(rest: Rest) -> None:
    topic, sub = await rest.subscription(enableExactlyOnceDelivery=True)
    await rest.publish(topic, {"data": b64(b"a")}, {"data": b64(b"b")})
    first, second = await rest.pull(sub)
    nack = {"ackIds": [first["ackId"]], "ackDeadlineSeconds": 0}
    await rest.ok("POST", f"/v1/{sub}:modifyAckDeadline", nack)
    [first_again] = await rest.pull(sub)

    # Partial success: only the stale id is listed, the valid one is applied.
    answer = await rest.call(
        "POST", f"/v1/{sub}:acknowledge", {"ackIds": [first["ackId"], second["ackId"]]}
    )
    assert_eod_error(answer, {first["ackId"]: PERMANENT})
    answer = await rest.call("POST", f"/v1/{sub}:acknowledge", {"ackIds": [second["ackId"]]})
    assert_eod_error(answer, {second["ackId"]: PERMANENT})

    modack = {"ackIds": [first["ackId"]], "ackDeadlineSeconds": 30}
    answer = await rest.call("POST", f"/v1/{sub}:modifyAckDeadline", modack)
    assert_eod_error(answer, {first["ackId"]: PERMANENT})
    await rest.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [first_again["ackId"]]})


async def test_injected_ack_failure_reaches_rest(rest: Rest, reference: ReferenceServer) -> None:
    topic, sub = await rest.subscription(enableExactlyOnceDelivery=True)
    [message_id] = await rest.publish(topic, {"data": b64(b"m")})
    [received] = await rest.pull(sub)
    reference.inject_ack_failure(sub, message_id, "TRANSIENT_FAILURE_OTHER", operations=["ack"])
    answer = await rest.call("POST", f"/v1/{sub}:acknowledge", {"ackIds": [received["ackId"]]})
    assert answer.status == 400
    assert answer.error["details"][0]["metadata"] == {received["ackId"]: "TRANSIENT_FAILURE_OTHER"}
    assert answer.error["message"] != INVALID_TEXT  # transient failures have their own text
    await rest.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [received["ackId"]]})


# -------------------------------------------------------- fault injection


@pytest.mark.parametrize(
    ("code", "http"),
    [
        ("UNAVAILABLE", 503),
        ("RESOURCE_EXHAUSTED", 429),
        ("FAILED_PRECONDITION", 400),
        ("ABORTED", 409),
        ("INTERNAL", 500),
        ("DEADLINE_EXCEEDED", 504),
        ("PERMISSION_DENIED", 403),
    ],
)
async def test_rpc_fault_injection_applies_to_rest(
    rest: Rest, reference: ReferenceServer, code: str, http: int
) -> None:
    topic = await rest.topic()
    reference.faults.fail("Publish", code, "planned outage", times=1)
    failed = await rest.call("POST", f"/v1/{topic}:publish", {"messages": [{"data": "eA=="}]})
    assert failed.status == http
    assert failed.error == {"code": http, "message": "planned outage", "status": code}
    await rest.publish(topic, {"data": "eA=="})  # only once


async def test_faults_are_shared_by_both_doors(
    rest: Rest, wire: Wire, reference: ReferenceServer
) -> None:
    reference.faults.fail("GetTopic", "UNAVAILABLE", times=2)
    topic = await rest.topic()
    assert (await rest.call("GET", f"/v1/{topic}")).status == 503
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.GetTopic(pb.GetTopicRequest(topic=topic))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    await rest.ok("GET", f"/v1/{topic}")


# ------------------------------------------------------ one state, two doors


async def test_publish_over_rest_pull_over_grpc_and_back(
    rest: Rest, wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await rest.subscription(enableExactlyOnceDelivery=True)
    # The gRPC door sees what REST created.
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert got.topic == topic
    assert got.enable_exactly_once_delivery

    [rest_id] = await rest.publish(topic, {"data": b64(b"from-rest"), "attributes": {"a": "1"}})
    [over_grpc] = await wire.pull(sub, 1)
    assert over_grpc.message.message_id == rest_id
    assert over_grpc.message.data == b"from-rest"
    assert dict(over_grpc.message.attributes) == {"a": "1"}
    # A lease taken over gRPC can be acked over REST (one ack-id space).
    await rest.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [over_grpc.ack_id]})

    [grpc_id] = await wire.publish(topic, b"from-grpc")
    [over_rest] = await rest.pull(sub)
    assert over_rest["message"]["messageId"] == grpc_id
    assert base64.b64decode(over_rest["message"]["data"]) == b"from-grpc"
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[over_rest["ackId"]]))
    # Acked once through each door: the history agrees.
    for message_id in (rest_id, grpc_id):
        assert len(reference.history(sub, message_id).successful_acks) == 1
    await wire.pull_nothing(sub)
    assert await rest.pull(sub) == []


async def test_rest_long_pull_wakes_on_grpc_publish(rest: Rest, wire: Wire) -> None:
    topic, sub = await rest.subscription()
    pending = asyncio.ensure_future(
        rest.ok("POST", f"/v1/{sub}:pull", {"maxMessages": 5})  # returnImmediately false
    )
    await asyncio.sleep(0.1)
    await wire.publish(topic, b"wake")
    body = await asyncio.wait_for(pending, 5)
    assert [base64.b64decode(r["message"]["data"]) for r in body["receivedMessages"]] == [b"wake"]
    await wire.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=sub))
    assert (await rest.call("GET", f"/v1/{sub}")).status == 404


# ------------------------------------------------------------------ serving


async def test_rest_port_in_use_fails_start_and_frees_grpc() -> None:
    async with run_server() as busy:
        with pytest.raises(OSError):
            async with run_server(rest_port=busy.rest_port):
                pass


async def test_run_server_without_rest() -> None:
    async with run_server(rest_port=None) as server:
        with pytest.raises(RuntimeError):
            _ = server.rest_address
    async with run_server() as server:
        assert server.rest_port not in (None, 0, server.port)
        assert server.rest_url == f"http://127.0.0.1:{server.rest_port}"


def test_cli_rest_port_defaults() -> None:
    assert rest_port_for(8085, None, no_rest=False) == 8086
    assert rest_port_for(0, None, no_rest=False) == 0
    assert rest_port_for(8085, 9000, no_rest=False) == 9000
    assert rest_port_for(8085, None, no_rest=True) is None


@pytest.fixture(scope="module")
def served_cli() -> Iterator[tuple[str, str]]:
    """``eoclient serve --port 0`` in a subprocess; yields (gRPC host:port, REST URL)."""
    with eoclient_serve() as serve:
        address = serve.wait_for(r"export PUBSUB_EMULATOR_HOST=(\S+)").group(1)
        url = serve.wait_for(r"REST/JSON on (http://\S+)/v1/").group(1)
        yield address, url


async def test_eoclient_serve_prints_and_serves_rest(
    served_cli: tuple[str, str], wire_factory: Any
) -> None:
    address, url = served_cli
    wire: Wire = wire_factory(address)
    topic = await wire.topic()
    async with aiohttp.ClientSession() as session:
        rest = Rest(session, url)
        assert (await rest.ok("GET", f"/v1/{topic}"))["name"] == topic
