"""AdminClient's message transforms: the typed dataclasses, their conversion (no protobuf in
the public API), update masks, and a round trip through the reference server that then
applies them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from eoclient import PublisherClient, SubscriberClient
from eoclient._proto import pubsub_pb2 as pb
from eoclient.admin import (
    AdminClient,
    JavaScriptUdf,
    MessageTransform,
    Subscription,
    Topic,
    convert,
    rpc_requests,
    subscription_path,
    topic_path,
)
from eoclient.errors import InvalidArgument
from eoclient.server_stub.server import ReferenceServer, run_server

UPPER = MessageTransform(
    JavaScriptUdf("upper", "function upper(m) { m.data = m.data.toUpperCase(); return m; }")
)
TAG = MessageTransform(
    JavaScriptUdf("tag", "function tag(m, md) { m.attributes.id = md.message_id; return m; }")
)


def test_transforms_convert_both_ways() -> None:
    topic = Topic("projects/p/topics/t", message_transforms=[UPPER, TAG])
    assert topic.message_transforms == (UPPER, TAG)  # a list is kept as a tuple
    message = convert.topic_to_pb(topic)
    assert [t.javascript_udf.function_name for t in message.message_transforms] == [
        "upper",
        "tag",
    ]
    assert convert.topic_from_pb(message).message_transforms == (UPPER, TAG)
    sub = Subscription(
        "projects/p/subscriptions/s",
        "projects/p/topics/t",
        message_transforms=[MessageTransform(TAG.javascript_udf, disabled=True)],
    )
    back = convert.subscription_from_pb(convert.subscription_to_pb(sub))
    assert back.message_transforms == (MessageTransform(TAG.javascript_udf, disabled=True),)


def test_a_transform_of_another_kind_reads_as_no_udf() -> None:
    message = convert.topic_to_pb(Topic("projects/p/topics/t"))
    message.message_transforms.add().compression.compression_algorithm = 1
    assert convert.topic_from_pb(message).message_transforms == (MessageTransform(None),)


def test_update_masks_name_message_transforms() -> None:
    topic = rpc_requests.update_topic("projects/p/topics/t", {"message_transforms": ()}).message
    assert isinstance(topic, pb.UpdateTopicRequest)
    assert list(topic.update_mask.paths) == ["message_transforms"]
    assert list(topic.topic.message_transforms) == []  # the mask names it: all removed
    sub = rpc_requests.update_subscription(
        "projects/p/subscriptions/s", {"message_transforms": (UPPER,)}
    ).message
    assert isinstance(sub, pb.UpdateSubscriptionRequest)
    assert list(sub.update_mask.paths) == ["message_transforms"]
    assert len(sub.subscription.message_transforms) == 1


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv


async def test_round_trip_and_the_server_applies_them(server: ReferenceServer) -> None:
    topic, sub = topic_path("p1", "transformed"), subscription_path("p1", "transformed")
    async with AdminClient(server.address) as admin:
        created = await admin.create_topic(topic, message_transforms=[UPPER])
        assert created.message_transforms == (UPPER,)
        made = await admin.create_subscription(sub, topic, message_transforms=[TAG])
        assert made.message_transforms == (TAG,)
        with pytest.raises(InvalidArgument, match="does not define the function upper"):
            await admin.update_topic(
                topic,
                message_transforms=[MessageTransform(JavaScriptUdf("upper", "var x = 1;"))],
            )
        assert (await admin.get_topic(topic)).message_transforms == (UPPER,)
        async with PublisherClient(server.address) as publisher:
            message_id = await publisher.publish(topic, b"hello")
        async with SubscriberClient(server.address) as subscriber:
            got = await subscriber.pull(sub, max_messages=1)
        assert [(m.data, dict(m.attributes)) for m in got] == [(b"HELLO", {"id": message_id})]
        await admin.update_topic(topic, message_transforms=())
        assert (await admin.get_topic(topic)).message_transforms == ()
        updated = await admin.update_subscription(
            sub, message_transforms=[MessageTransform(TAG.javascript_udf, disabled=True)]
        )
        assert updated.message_transforms[0].disabled
