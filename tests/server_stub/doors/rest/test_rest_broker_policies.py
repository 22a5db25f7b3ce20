"""The policy extension on the REST door: the Pub/Sub-shaped bindings of
eoclient.broker.v1.BrokerPolicies (proto3 JSON, Google's error format), and the
Pulsar-shaped ``skipByMessageIds`` alias with its three body formats, Pulsar's 400 texts,
404s and 204, behind the door's browser policy. Plain aiohttp requests to
``reference.rest_url``; gRPC (``Wire``) to the same server shows the effects.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient._proto import pulsar_message_id_pb2
from eoclient.server_stub.server import ReferenceServer


class Http:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json"} if data is not None else {}
        sent.update(headers or {})
        async with self.session.request(method, self.base + path, data=data, headers=sent) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text else None)


@pytest.fixture
async def http(reference: ReferenceServer) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as session:
        yield Http(session, reference.rest_url)


def short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def alias(topic: str, sub: str, *, tenant: str = "p1", namespace: str = "default") -> str:
    return (
        f"/admin/v2/persistent/{tenant}/{namespace}/{short(topic)}/subscription/"
        f"{short(sub)}/skipByMessageIds"
    )


def b64_id(ledger: int, entry: int, **fields: int) -> str:
    data = pulsar_message_id_pb2.MessageIdData(ledgerId=ledger, entryId=entry, **fields)
    return base64.b64encode(data.SerializeToString()).decode()


# ================================================================ Pub/Sub-shaped routes


async def test_topic_policies_over_rest(http: Http, wire: Wire) -> None:
    topic = await wire.topic()
    assert await http("GET", f"/v1/{topic}/policies") == (200, {"topic": topic})
    put = {
        "policies": {
            "retention": {"timeSeconds": 10800, "sizeBytes": "10737418240"},
            "backlogQuota": {"limitBytes": "2147483648", "action": "PRODUCER_EXCEPTION"},
        }
    }
    status, body = await http("PUT", f"/v1/{topic}/policies", put)
    assert status == 200
    assert body["retention"] == {"timeSeconds": "10800", "sizeBytes": "10737418240"}
    patch = {"policies": {"messageTtl": "120s"}, "updateMask": "messageTtl"}
    status, body = await http("PATCH", f"/v1/{topic}/policies", patch)
    assert status == 200
    assert body == {
        "topic": topic,
        "retention": {"timeSeconds": "10800", "sizeBytes": "10737418240"},
        "backlogQuota": {
            "limitBytes": "2147483648",
            "action": "PRODUCER_EXCEPTION",
            "holdTimeout": "30s",
        },
        "messageTtl": "120s",
    }
    status, body = await http("PATCH", f"/v1/{topic}/policies", {"updateMask": "backlogQuota"})
    assert status == 200
    assert "backlogQuota" not in body

    status, counters = await http("GET", f"/v1/{topic}/policyCounters")
    assert status == 200
    assert counters == {"topic": topic}  # all zero: proto3 JSON leaves them out


async def test_rest_policy_errors_are_googles_json(http: Http, wire: Wire) -> None:
    topic = await wire.topic()
    bad = {"policies": {"retention": {"timeSeconds": 0, "sizeBytes": 1024}}}
    status, body = await http("PUT", f"/v1/{topic}/policies", bad)
    assert status == 400
    assert body["error"]["status"] == "INVALID_ARGUMENT"
    assert "set both limits" in body["error"]["message"]
    status, body = await http("PATCH", f"/v1/{topic}/policies", {"updateMask": "labels"})
    assert (status, body["error"]["status"]) == (400, "INVALID_ARGUMENT")
    status, body = await http("GET", "/v1/projects/p1/topics/missing-topic/policies")
    assert (status, body["error"]["status"]) == (404, "NOT_FOUND")
    status, body = await http("DELETE", f"/v1/{topic}/policies")
    assert status == 405


async def test_subscription_policies_skip_and_seek_over_rest(
    http: Http, wire: Wire, clock: FakeClock
) -> None:
    topic, sub = await wire.subscription()
    status, body = await http(
        "PATCH",
        f"/v1/{sub}/policies",
        {"policies": {"messageTtl": "60s"}, "updateMask": "messageTtl"},
    )
    assert (status, body) == (
        200,
        {"subscription": sub, "messageTtl": "60s", "effectiveMessageTtl": "60s"},
    )
    first, _ = await wire.publish(topic, b"a", b"b")
    status, body = await http("POST", f"/v1/{sub}:skipMessages", {"messageIds": [first, "404"]})
    assert (status, body) == (
        200,
        {
            "results": [
                {"messageId": first, "outcome": "SKIPPED"},
                {"messageId": "404", "outcome": "NOT_FOUND"},
            ]
        },
    )
    status, counters = await http("GET", f"/v1/{sub}/policyCounters")
    assert status == 200
    assert (counters["skipped"], counters["backlogMessages"]) == ("1", "1")

    status, outcome = await http(
        "POST", f"/v1/{sub}:seekWithOutcome", {"time": "2001-01-01T00:00:00Z"}
    )
    assert status == 200
    assert outcome["complete"] is False
    assert outcome["replayableFrom"].startswith("2026-01-01T00:00:00")  # FakeClock's start
    status, body = await http("POST", f"/v1/{sub}:skipMessages", {"messageIds": []})
    assert (status, body["error"]["status"]) == (400, "INVALID_ARGUMENT")


# ================================================================ the Pulsar alias


@pytest.mark.parametrize(
    "body_of",
    [
        pytest.param(lambda ids: [b64_id(0, int(i)) for i in ids], id="base64-array"),
        pytest.param(
            lambda ids: {"type": "byteArray", "messageIds": [b64_id(0, int(i)) for i in ids]},
            id="byteArray",
        ),
        pytest.param(
            lambda ids: {"messageIds": [b64_id(0, int(i), batch_index=-1) for i in ids]},
            id="byteArray-untyped",
        ),
        pytest.param(
            lambda ids: {
                "type": "messageId",
                "messageIds": [{"ledgerId": 0, "entryId": int(i), "batchIndex": 0} for i in ids],
            },
            id="messageId",
        ),
        pytest.param(
            lambda ids: {
                "type": "messageId",
                "messageIds": [{"ledgerId": "0", "entryId": i} for i in ids],
            },
            id="messageId-strings",
        ),
    ],
)
async def test_the_alias_skips_in_every_body_format(http: Http, wire: Wire, body_of: Any) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    first, second, third = await wire.publish(topic, b"a", b"b", b"c")
    status, body = await http("POST", alias(topic, sub), body_of([first, third]))
    assert (status, body) == (204, None)
    [left] = await wire.pull(sub, 1)
    assert left.message.message_id == second
    await wire.pull_nothing(sub)


async def test_the_alias_answers_pulsars_400_texts(http: Http, wire: Wire) -> None:
    topic, sub = await wire.subscription()
    cases = [
        (b"", "Invalid skipByMessageIds payload: empty body"),
        (b"{}", "Invalid skipByMessageIds payload: missing messageIds"),
        (
            b'{"messageIds": {"1": "2"}}',
            "Invalid skipByMessageIds payload: messageIds must be an array",
        ),
        (
            b'{"type": "ids", "messageIds": []}',
            "Invalid skipByMessageIds payload: unsupported type for array",
        ),
        (
            b'{"type": "messageId", "messageIds": ["x"]}',
            "Invalid skipByMessageIds payload: messageIds elements must be objects",
        ),
        (
            b'{"type": "messageId", "messageIds": [{"entryId": 1}]}',
            "Invalid skipByMessageIds payload: missing ledgerId",
        ),
        (
            b'{"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": "one"}]}',
            "Invalid skipByMessageIds payload: invalid entryId",
        ),
        (b'["%%%"]', "Invalid skipByMessageIds payload: invalid base64 messageId"),
        (b'[""]', "Invalid skipByMessageIds payload: invalid base64 messageId (empty)"),
        (b"42", "Invalid skipByMessageIds payload: unsupported top-level JSON"),
    ]
    for raw, reason in cases:
        assert await http("POST", alias(topic, sub), raw=raw) == (400, {"reason": reason}), raw


async def test_the_alias_refuses_ids_that_name_no_message_here_and_skips_nothing(
    http: Http, wire: Wire
) -> None:
    topic, sub = await wire.subscription()
    [message_id] = await wire.publish(topic, b"a")
    for ids in (
        [{"ledgerId": 0, "entryId": int(message_id)}, {"ledgerId": 12345, "entryId": 100}],
        [{"ledgerId": 0, "entryId": int(message_id), "batchIndex": 3}],
    ):
        status, body = await http(
            "POST", alias(topic, sub), {"type": "messageId", "messageIds": ids}
        )
        assert status == 400
        assert body["reason"].startswith("Invalid message id ")
    assert len(await wire.pull(sub, 1)) == 1  # nothing was skipped


async def test_the_alias_answers_404_for_what_does_not_exist(http: Http, wire: Wire) -> None:
    topic, sub = await wire.subscription()
    other_topic, _ = await wire.subscription()
    body = {"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": 1}]}
    t, s = short(topic), short(sub)
    cases = [
        (
            alias("missing-topic", sub),
            "Topic persistent://p1/default/missing-topic not found",
        ),
        (
            alias(topic, "missing-sub"),
            f"Subscription missing-sub not found for topic persistent://p1/default/{t}",
        ),
        (  # a subscription of another topic
            alias(other_topic, sub),
            f"Subscription {s} not found for topic persistent://p1/default/{short(other_topic)}",
        ),
        (
            alias(topic, sub, tenant="other-project"),
            f"Topic persistent://other-project/default/{t} not found",
        ),
    ]
    for path, reason in cases:
        assert await http("POST", path, body) == (404, {"reason": reason}), path
    status, answer = await http("POST", alias(topic, sub, namespace="ns1"), body)
    assert status == 404
    assert answer["reason"].startswith("Namespace p1/ns1 not found")
    status, answer = await http("GET", alias(topic, sub))
    assert status == 405
    # The body is read first (Pulsar deserializes it before looking anything up).
    assert (await http("POST", alias("missing-topic", sub), raw=b"{}"))[0] == 400


async def test_the_alias_is_behind_the_browser_policy(http: Http, wire: Wire) -> None:
    topic, sub = await wire.subscription()
    [message_id] = await wire.publish(topic, b"a")
    body = json.dumps([b64_id(0, int(message_id))]).encode()
    status, answer = await http(
        "POST", alias(topic, sub), raw=body, headers={"Origin": "https://evil.example"}
    )
    assert status == 403
    assert answer["error"]["status"] == "PERMISSION_DENIED"
    status, _ = await http(
        "POST", alias(topic, sub), raw=body, headers={"Content-Type": "text/plain"}
    )
    assert status == 415
    assert len(await wire.pull(sub, 1)) == 1  # neither skipped it
