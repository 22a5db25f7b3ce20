"""Message transforms driven by google-cloud-pubsub's own clients, over both doors, on a
reference server with the real engine: a topic's UDF changes and filters what is stored,
a subscription's UDF changes what is delivered (and sees the message's metadata), a
disabled UDF does nothing, bad code is INVALID_ARGUMENT and stores nothing, and a runaway
UDF fails only its own messages while the server goes on answering."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import pubsub_v1
from google.protobuf import field_mask_pb2
from google.pubsub_v1.types import (
    DeadLetterPolicy,
    JavaScriptUDF,
    MessageTransform,
    Subscription,
    Topic,
    UpdateSubscriptionRequest,
    UpdateTopicRequest,
)
from support.official_clients import OfficialClients, in_thread
from support.wire import unique

from eoclient.server_stub.server import ReferenceServer, run_server

from .conftest import LIMITS

TOPIC_UDF = """
function shout(message, metadata) {
  if (message.data === "skip") {
    return null;
  }
  const attributes = message.attributes;
  attributes["shouted"] = "yes";
  return {data: message.data.toUpperCase(), attributes: attributes};
}
"""
SUBSCRIPTION_UDF = """
function stamp(message, metadata) {
  message.attributes["seen_id"] = metadata.message_id;
  message.attributes["seen_time"] = metadata.publish_time;
  return message;
}
"""
SPIN_UDF = """
function spin(message, metadata) {
  if (message.data === "spin") {
    while (true) {}
  }
  return message;
}
"""


def udf(name: str, code: str, *, disabled: bool = False) -> MessageTransform:
    return MessageTransform(
        javascript_udf=JavaScriptUDF(function_name=name, code=code), disabled=disabled
    )


def pull_all(c: OfficialClients, subscription: str, want: int) -> list[Any]:
    """Pull until ``want`` messages came (acking them), or 10 s passed."""
    got: list[Any] = []
    for _ in range(max(want, 1) * 5):
        answer = c.subscriber.pull(subscription=subscription, max_messages=100, timeout=10)
        if answer.received_messages:
            got.extend(answer.received_messages)
            c.subscriber.acknowledge(
                subscription=subscription, ack_ids=[m.ack_id for m in answer.received_messages]
            )
        if len(got) >= want:
            break
    return got


def publish(c: OfficialClients, topic: str, *payloads: bytes) -> list[str]:
    futures = [c.publisher.publish(topic, p) for p in payloads]
    return [f.result(timeout=10) for f in futures]


async def test_a_topic_udf_changes_and_filters_what_is_stored(clients: OfficialClients) -> None:
    topic, sub = unique("topic"), unique("sub")

    def flow() -> tuple[Topic, list[str], list[Any]]:
        created = clients.publisher.create_topic(
            request=Topic(name=topic, message_transforms=[udf("shout", TOPIC_UDF)])
        )
        clients.subscriber.create_subscription(name=sub, topic=topic)
        ids = publish(clients, topic, b"one", b"skip", b"two")
        return created, ids, pull_all(clients, sub, 2)

    created, ids, got = await in_thread(flow)
    assert created.message_transforms[0].javascript_udf.function_name == "shout"
    assert len(set(ids)) == 3  # the filtered message has an id of its own too
    assert sorted(m.message.data for m in got) == [b"ONE", b"TWO"]
    assert all(m.message.attributes["shouted"] == "yes" for m in got)
    filtered_id = ids[1]
    assert filtered_id not in {m.message.message_id for m in got}
    # Never delivered later either: nothing else is waiting.
    later = await in_thread(
        lambda: clients.subscriber.pull(subscription=sub, max_messages=10, timeout=10)
    )
    assert list(later.received_messages) == []
    fetched = await in_thread(lambda: clients.publisher.get_topic(topic=topic))
    assert fetched.message_transforms == created.message_transforms


async def test_a_subscription_udf_sees_the_metadata_on_pull_and_streaming_pull(
    clients: OfficialClients,
) -> None:
    topic, pulled, streamed = unique("topic"), unique("sub"), unique("sub")

    def flow() -> tuple[list[Any], list[Any]]:
        clients.publisher.create_topic(name=topic)
        for name in (pulled, streamed):
            clients.subscriber.create_subscription(
                request=Subscription(
                    name=name, topic=topic, message_transforms=[udf("stamp", SUBSCRIPTION_UDF)]
                )
            )
        publish(clients, topic, b"a", b"b")
        return pull_all(clients, pulled, 2), []

    got, _ = await in_thread(flow)
    for received in got:
        message = received.message
        assert message.attributes["seen_id"] == message.message_id
        seconds = message.publish_time.timestamp()
        assert message.attributes["seen_time"].endswith("Z")
        assert message.attributes["seen_time"][:19] == _utc(seconds)
    if clients._channel is None:
        return  # StreamingPull is gRPC only
    received: list[pubsub_v1.subscriber.message.Message] = []
    done = threading.Event()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        received.append(message)
        message.ack()
        if len(received) >= 2:
            done.set()

    def stream() -> None:
        future = clients.subscriber.subscribe(streamed, callback)
        try:
            assert done.wait(10), f"streamed {len(received)} of 2"
        finally:
            future.cancel()
            future.result(timeout=10)

    await in_thread(stream)
    assert all(m.attributes["seen_id"] == m.message_id for m in received)


def _utc(seconds: float) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


async def test_a_disabled_transform_does_nothing(grpc_clients: OfficialClients) -> None:
    c = grpc_clients
    topic, sub = unique("topic"), unique("sub")

    def flow() -> list[Any]:
        c.publisher.create_topic(
            request=Topic(name=topic, message_transforms=[udf("shout", TOPIC_UDF, disabled=True)])
        )
        c.subscriber.create_subscription(
            request=Subscription(
                name=sub,
                topic=topic,
                message_transforms=[udf("stamp", SUBSCRIPTION_UDF, disabled=True)],
            )
        )
        publish(c, topic, b"quiet", b"skip")
        return pull_all(c, sub, 2)

    got = await in_thread(flow)
    assert sorted(m.message.data for m in got) == [b"quiet", b"skip"]
    assert all(dict(m.message.attributes) == {} for m in got)


@pytest.mark.parametrize(
    ("transform", "says"),
    [
        (udf("shout", "function shout(message, metadata) {"), "does not parse"),
        (udf("shout", "function other(message) { return message; }"), "does not define"),
        (udf("shout", "var shout = 3;"), "not a function"),
        (udf("", TOPIC_UDF), "function_name is required"),
        (udf("shout", ""), "code is required"),
        (udf("shout", "// " + "x" * 21_000 + "\n" + TOPIC_UDF), "the limit is 20480 bytes"),
    ],
)
async def test_code_that_does_not_load_is_invalid_argument(
    clients: OfficialClients, transform: MessageTransform, says: str
) -> None:
    topic, sub = unique("topic"), unique("sub")
    with pytest.raises(api_exceptions.BadRequest, match=says):
        await in_thread(
            lambda: clients.publisher.create_topic(
                request=Topic(name=topic, message_transforms=[transform])
            )
        )
    with pytest.raises(api_exceptions.NotFound):  # nothing was stored
        await in_thread(lambda: clients.publisher.get_topic(topic=topic))
    await in_thread(lambda: clients.publisher.create_topic(name=topic))
    with pytest.raises(api_exceptions.BadRequest, match=says):
        await in_thread(
            lambda: clients.subscriber.create_subscription(
                request=Subscription(name=sub, topic=topic, message_transforms=[transform])
            )
        )
    # An update is checked the same way, and leaves the resource as it was.
    with pytest.raises(api_exceptions.BadRequest, match=says):
        await in_thread(
            lambda: clients.publisher.update_topic(
                request=UpdateTopicRequest(
                    topic=Topic(name=topic, message_transforms=[transform]),
                    update_mask=field_mask_pb2.FieldMask(paths=["message_transforms"]),
                )
            )
        )
    fetched = await in_thread(lambda: clients.publisher.get_topic(topic=topic))
    assert list(fetched.message_transforms) == []


async def test_too_many_transforms_and_duplicate_names_are_invalid_argument(
    grpc_clients: OfficialClients,
) -> None:
    c = grpc_clients
    six = [udf(f"f{i}", f"function f{i}(m) {{ return m; }}") for i in range(6)]
    with pytest.raises(api_exceptions.BadRequest, match="at most 5"):
        await in_thread(
            lambda: c.publisher.create_topic(
                request=Topic(name=unique("topic"), message_transforms=six)
            )
        )
    twice = [udf("shout", TOPIC_UDF), udf("shout", TOPIC_UDF)]
    with pytest.raises(api_exceptions.BadRequest, match="unique function_name"):
        await in_thread(
            lambda: c.publisher.create_topic(
                request=Topic(name=unique("topic"), message_transforms=twice)
            )
        )


async def test_several_transforms_run_in_order(grpc_clients: OfficialClients) -> None:
    c = grpc_clients
    topic, sub = unique("topic"), unique("sub")
    first = udf("first", "function first(m) { m.data = m.data + '1'; return m; }")
    second = udf("second", "function second(m) { m.data = m.data + '2'; return m; }")

    def flow() -> list[Any]:
        c.publisher.create_topic(request=Topic(name=topic, message_transforms=[first, second]))
        c.subscriber.create_subscription(
            request=Subscription(
                name=sub,
                topic=topic,
                message_transforms=[
                    udf("third", "function third(m) { m.data = m.data + '3'; return m; }")
                ],
            )
        )
        publish(c, topic, b"x")
        return pull_all(c, sub, 1)

    got = await in_thread(flow)
    assert [m.message.data for m in got] == [b"x123"]


async def test_an_update_replaces_the_running_transforms(grpc_clients: OfficialClients) -> None:
    c = grpc_clients
    topic, sub = unique("topic"), unique("sub")

    def flow() -> list[bytes]:
        c.publisher.create_topic(name=topic)
        c.subscriber.create_subscription(
            request=Subscription(
                name=sub,
                topic=topic,
                message_transforms=[udf("a", "function a(m) { m.data = 'a'; return m; }")],
            )
        )
        publish(c, topic, b"x")
        before = [m.message.data for m in pull_all(c, sub, 1)]
        c.subscriber.update_subscription(
            request=UpdateSubscriptionRequest(
                subscription=Subscription(
                    name=sub,
                    message_transforms=[udf("b", "function b(m) { m.data = 'b'; return m; }")],
                ),
                update_mask=field_mask_pb2.FieldMask(paths=["message_transforms"]),
            )
        )
        publish(c, topic, b"x")
        return before + [m.message.data for m in pull_all(c, sub, 1)]

    assert await in_thread(flow) == [b"a", b"b"]


async def test_a_failing_topic_transform_refuses_the_publish(clients: OfficialClients) -> None:
    topic, sub = unique("topic"), unique("sub")
    thrower = udf(
        "picky",
        "function picky(m) { if (m.data === 'bad') { throw new Error('no bad'); } return m; }",
    )

    def flow() -> list[Any]:
        clients.publisher.create_topic(request=Topic(name=topic, message_transforms=[thrower]))
        clients.subscriber.create_subscription(name=sub, topic=topic)
        with pytest.raises(api_exceptions.BadRequest, match="no bad"):
            clients.publisher.publish(topic, b"bad").result(timeout=10)
        publish(clients, topic, b"good")
        return pull_all(clients, sub, 1)

    assert [m.message.data for m in await in_thread(flow)] == [b"good"]


async def test_a_runaway_udf_fails_only_its_own_messages(
    server: ReferenceServer, grpc_clients: OfficialClients
) -> None:
    """``while (true) {}``: the publish of that message fails after the time limit,
    the other messages of a subscription are delivered, the runaway one is nacked until
    it is dead-lettered, and the server answers other calls all the while."""
    c = grpc_clients
    spinning, plain = unique("topic"), unique("topic")
    sub, dead, dead_sub = unique("sub"), unique("topic"), unique("sub")

    def setup() -> None:
        c.publisher.create_topic(
            request=Topic(name=spinning, message_transforms=[udf("spin", SPIN_UDF)])
        )
        c.publisher.create_topic(name=plain)
        c.publisher.create_topic(name=dead)
        c.subscriber.create_subscription(name=dead_sub, topic=dead)
        c.subscriber.create_subscription(
            request=Subscription(
                name=sub,
                topic=plain,
                message_transforms=[udf("spin", SPIN_UDF)],
                dead_letter_policy=DeadLetterPolicy(
                    dead_letter_topic=dead, max_delivery_attempts=5
                ),
            )
        )

    await in_thread(setup)

    async def spin_publish() -> None:
        with pytest.raises(api_exceptions.BadRequest, match="longer than"):
            await in_thread(lambda: c.publisher.publish(spinning, b"spin").result(timeout=10))

    spinner = asyncio.create_task(spin_publish())
    # Meanwhile the server answers: a publish elsewhere and a GetTopic.
    ids = await in_thread(lambda: publish(c, plain, b"a", b"spin", b"b"))
    await in_thread(lambda: c.publisher.get_topic(topic=plain))
    await spinner
    got = await in_thread(lambda: pull_all(c, sub, 2))
    assert sorted(m.message.data for m in got) == [b"a", b"b"]
    # The runaway message is nacked on each delivery, then dead-lettered (untransformed):
    # each Pull of the subscription is one more delivery attempt.

    def until_dead_lettered() -> list[Any]:
        for _ in range(10):
            assert pull_all(c, sub, 0) == []  # the runaway message fails, nothing leaves
            dead_lettered = c.subscriber.pull(
                subscription=dead_sub, max_messages=10
            ).received_messages
            if dead_lettered:
                return list(dead_lettered)
        return []

    dead_lettered = await in_thread(until_dead_lettered)
    assert [m.message.data for m in dead_lettered] == [b"spin"]
    assert ids[1] not in {m.message.message_id for m in got}
    counts = server.services.transforms.subscription_counts[sub]
    assert (counts.transformed, counts.failed) == (2, 5)
    assert server.services.transforms.topic_counts[spinning].failed == 1


async def test_transforms_survive_a_restart_with_data_dir(tmp_path: Path) -> None:
    topic, sub = unique("topic"), unique("sub")
    async with run_server(data_dir=tmp_path, transform_limits=LIMITS) as first:
        c = OfficialClients(first, "grpc")
        try:
            await in_thread(
                lambda: c.publisher.create_topic(
                    request=Topic(name=topic, message_transforms=[udf("shout", TOPIC_UDF)])
                )
            )
            await in_thread(
                lambda: c.subscriber.create_subscription(
                    request=Subscription(
                        name=sub, topic=topic, message_transforms=[udf("stamp", SUBSCRIPTION_UDF)]
                    )
                )
            )
        finally:
            c.close()
    async with run_server(data_dir=tmp_path, transform_limits=LIMITS) as second:
        c = OfficialClients(second, "grpc")
        try:
            fetched = await in_thread(lambda: c.publisher.get_topic(topic=topic))
            assert fetched.message_transforms[0].javascript_udf.code == TOPIC_UDF
            await in_thread(lambda: publish(c, topic, b"back", b"skip"))
            got = await in_thread(lambda: pull_all(c, sub, 1))
        finally:
            c.close()
    assert [m.message.data for m in got] == [b"BACK"]
    assert got[0].message.attributes["seen_id"] == got[0].message.message_id


async def test_metrics_count_what_the_transforms_did(
    server: ReferenceServer, grpc_clients: OfficialClients
) -> None:
    c = grpc_clients
    topic, sub = unique("topic"), unique("sub")

    def flow() -> None:
        c.publisher.create_topic(
            request=Topic(name=topic, message_transforms=[udf("shout", TOPIC_UDF)])
        )
        c.subscriber.create_subscription(
            request=Subscription(
                name=sub,
                topic=topic,
                message_transforms=[
                    udf("drop_one", "function drop_one(m) { return m.data === 'ONE' ? null : m; }")
                ],
            )
        )
        publish(c, topic, b"one", b"skip", b"two")
        assert [m.message.data for m in pull_all(c, sub, 1)] == [b"TWO"]

    await in_thread(flow)
    async with aiohttp.ClientSession() as http, http.get(f"{server.rest_url}/metrics") as answer:
        text = await answer.text()
    lines = set(text.splitlines())
    for outcome, value in (("transformed", 2), ("filtered", 1), ("failed", 0)):
        assert (
            f'eoclient_topic_message_transforms_total{{outcome="{outcome}",topic="{topic}"}} '
            f"{value:.1f}" in lines
        ), outcome
    assert (
        "eoclient_subscription_message_transforms_total"
        f'{{outcome="filtered",subscription="{sub}",topic="{topic}"}} 1.0' in lines
    )
