"""REST system parameters, and the official client in REST mode.

google-cloud-pubsub with ``transport="rest"`` sends ``$alt=json;enum-encoding=int`` on
every call; it used to fail on its first call with 400 "Cannot bind query parameter".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from google.api_core import exceptions as api_exceptions
from google.protobuf import field_mask_pb2, timestamp_pb2
from support.official_clients import OfficialClients, in_thread
from support.wire import unique

from eoclient.errors import InvalidArgument
from eoclient.server_stub.doors.rest.system_parameters import parse_fields, select, split_query
from eoclient.server_stub.server import ReferenceServer, run_server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def get(
    session: aiohttp.ClientSession,
    server: ReferenceServer,
    path: str,
    method: str = "GET",
    body: Any = None,
) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    async with session.request(
        method, server.rest_url + path, data=data, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.content_type == "application/json"
        return response.status, await response.text()


async def make_subscription(
    session: aiohttp.ClientSession, server: ReferenceServer
) -> tuple[str, str]:
    topic, sub = unique("topic"), unique("sub")
    assert (await get(session, server, f"/v1/{topic}", "PUT", {}))[0] == 200
    status, _ = await get(
        session, server, f"/v1/{sub}", "PUT", {"topic": topic, "labels": {"team": "a"}}
    )
    assert status == 200
    return topic, sub


# ---------------------------------------------------------------- parameters


async def test_alt_json_with_numeric_enums(
    reference: ReferenceServer, session: aiohttp.ClientSession
) -> None:
    _, sub = await make_subscription(session, reference)
    for query in ("$alt=json;enum-encoding=int", "alt=json%3Benum-encoding%3Dint"):
        status, text = await get(session, reference, f"/v1/{sub}?{query}")
        assert status == 200, text
        assert json.loads(text)["state"] == 1  # Subscription.State.ACTIVE
    for query in ("", "?alt=json", "?$alt=json;enum-encoding=string"):
        status, text = await get(session, reference, f"/v1/{sub}{query}")
        assert json.loads(text)["state"] == "ACTIVE"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("alt=proto", "JSON only"),
        ("$alt=media", "JSON only"),
        ("$alt=json;enum-encoding=roman", "enum-encoding"),
        ("callback=steal", "JSONP"),
        ("$callback=steal", "JSONP"),
        ("$unknown=1", "Unknown system parameter"),
        ("prettyPrint=maybe", "true or false"),
        ("fields=nope", "no field 'nope'"),
        ("fields=name/x", "has no fields to select"),
        ("fields=labels(team", "not closed"),
        ("fields=,name", "missing"),
    ],
)
async def test_refused_system_parameters_say_why(
    reference: ReferenceServer, session: aiohttp.ClientSession, query: str, words: str
) -> None:
    _, sub = await make_subscription(session, reference)
    status, text = await get(session, reference, f"/v1/{sub}?{query}")
    assert status == 400, text
    error = json.loads(text)["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert words in error["message"], error


async def test_fields_select_a_partial_response(
    reference: ReferenceServer, session: aiohttp.ClientSession
) -> None:
    topic, sub = await make_subscription(session, reference)
    status, text = await get(session, reference, f"/v1/{sub}?fields=name,labels")
    assert json.loads(text) == {"name": sub, "labels": {"team": "a"}}
    status, text = await get(session, reference, f"/v1/{sub}?$fields=ack_deadline_seconds")
    assert json.loads(text) == {"ackDeadlineSeconds": 10}
    body = {"messages": [{"data": "aGk=", "attributes": {"k": "v", "o": "w"}}]}
    assert (await get(session, reference, f"/v1/{topic}:publish", "POST", body))[0] == 200
    status, text = await get(
        session,
        reference,
        f"/v1/{sub}:pull?fields=receivedMessages(ackId,message/data,message/attributes/k)",
        "POST",
        {"maxMessages": 1},
    )
    assert status == 200, text
    [received] = json.loads(text)["receivedMessages"]
    assert set(received) == {"ackId", "message"}
    assert received["message"] == {"data": "aGk=", "attributes": {"k": "v"}}
    status, text = await get(
        session, reference, f"/v1/{topic.rsplit('/topics', 1)[0]}/subscriptions?fields=*"
    )
    assert status == 200
    assert "subscriptions" in json.loads(text)


async def test_pretty_print_and_ignored_parameters(
    reference: ReferenceServer, session: aiohttp.ClientSession
) -> None:
    _, sub = await make_subscription(session, reference)
    status, compact = await get(
        session, reference, f"/v1/{sub}?prettyPrint=false&key=k&quotaUser=u&$.xgafv=2"
    )
    assert status == 200
    assert "\n" not in compact
    status, pretty = await get(session, reference, f"/v1/{sub}?prettyPrint=true")
    assert "\n" in pretty
    assert json.loads(compact) == json.loads(pretty)


def test_field_selection_grammar() -> None:
    assert parse_fields("a,b/c,d(e,f/g)") == {
        "a": None,
        "b": {"c": None},
        "d": {"e": None, "f": {"g": None}},
    }
    assert parse_fields("a/b,a") == {"a": None}  # the whole field wins
    document = {"a": 1, "b": {"c": 2, "x": 3}, "d": [{"e": 1, "z": 2}, {"f": {"g": 3}}]}
    assert select(document, parse_fields("b/c,d(e,f/g)")) == {
        "b": {"c": 2},
        "d": [{"e": 1}, {"f": {"g": 3}}],
    }
    system, rest = split_query([("$alt", "json;enum-encoding=int"), ("pageSize", "3")])
    assert system.numeric_enums
    assert rest == [("pageSize", "3")]
    with pytest.raises(InvalidArgument):
        parse_fields("a)")


# --------------------------------------------- the official client in REST mode


async def test_official_client_in_rest_mode() -> None:
    """publish, pull, ack, modack, seek and snapshots with transport="rest"."""
    async with run_server() as server:
        clients = OfficialClients(server, "rest")
        publisher, subscriber = clients.publisher, clients.subscriber
        topic, sub = unique("topic"), unique("sub")
        snapshot = f"projects/p1/snapshots/snap-{sub.rsplit('/', 1)[1]}"
        try:
            await in_thread(lambda: publisher.create_topic(name=topic))
            created = await in_thread(
                lambda: subscriber.create_subscription(
                    request={"name": sub, "topic": topic, "enable_exactly_once_delivery": True}
                )
            )
            assert created.enable_exactly_once_delivery
            assert created.state == created.State.ACTIVE  # numeric enums, parsed back
            futures = [publisher.publish(topic, f"m{i}".encode(), k="v") for i in range(3)]
            ids = [await in_thread(f.result) for f in futures]
            assert len(set(ids)) == 3

            pulled = await in_thread(
                lambda: subscriber.pull(subscription=sub, max_messages=10, timeout=10)
            )
            assert sorted(m.message.data for m in pulled.received_messages) == [
                b"m0",
                b"m1",
                b"m2",
            ]
            assert all(m.message.attributes["k"] == "v" for m in pulled.received_messages)
            ack_ids = [m.ack_id for m in pulled.received_messages]
            await in_thread(
                lambda: subscriber.modify_ack_deadline(
                    subscription=sub, ack_ids=ack_ids, ack_deadline_seconds=30
                )
            )
            await in_thread(lambda: subscriber.create_snapshot(name=snapshot, subscription=sub))
            await in_thread(lambda: subscriber.acknowledge(subscription=sub, ack_ids=ack_ids))
            # A second ack of the same ids is an exactly-once failure, as over gRPC.
            with pytest.raises(api_exceptions.BadRequest) as caught:
                await in_thread(lambda: subscriber.acknowledge(subscription=sub, ack_ids=ack_ids))
            assert "EXACTLY_ONCE_ACKID_FAILURE" in str(caught.value)  # the details came through
            assert server.broker.backlog(sub) == 0

            listed = await in_thread(
                lambda: list(subscriber.list_snapshots(request={"project": "projects/p1"}))
            )
            assert snapshot in [s.name for s in listed]
            got = await in_thread(lambda: subscriber.get_snapshot(snapshot=snapshot))
            assert got.topic == topic
            updated = await in_thread(
                lambda: subscriber.update_snapshot(
                    snapshot={"name": snapshot, "labels": {"a": "b"}},
                    update_mask=field_mask_pb2.FieldMask(paths=["labels"]),
                )
            )
            assert dict(updated.labels) == {"a": "b"}
            # Seek back to the snapshot: the three messages are unacked again.
            to_snapshot = {"subscription": sub, "snapshot": snapshot}
            await in_thread(lambda: subscriber.seek(request=to_snapshot))
            assert server.broker.backlog(sub) == 3
            # Seek to a time in the future purges them.
            future = timestamp_pb2.Timestamp(seconds=4_000_000_000)
            await in_thread(lambda: subscriber.seek(request={"subscription": sub, "time": future}))
            assert server.broker.backlog(sub) == 0
            await in_thread(lambda: subscriber.delete_snapshot(snapshot=snapshot))

            topics = await in_thread(lambda: list(publisher.list_topics(project="projects/p1")))
            assert topic in [t.name for t in topics]
            names = await in_thread(lambda: list(publisher.list_topic_subscriptions(topic=topic)))
            assert sub in names
            await in_thread(lambda: subscriber.delete_subscription(subscription=sub))
            await in_thread(lambda: publisher.delete_topic(topic=topic))
            with pytest.raises(api_exceptions.NotFound):
                await in_thread(lambda: publisher.get_topic(topic=topic))
        finally:
            await in_thread(clients.close)
