"""Admin and publish RPCs over the wire: topic and subscription lifecycles, validation
codes, UNIMPLEMENTED features and per-RPC fault injection.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from support.wire import PROJECT, Wire, unique

from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


# -------------------------------------------------------------------- topics


async def test_topic_lifecycle(wire: Wire) -> None:
    name = unique("topic")
    created = await wire.CreateTopic(pb.Topic(name=name, labels={"team": "a"}))
    assert created.name == name
    assert dict(created.labels) == {"team": "a"}
    assert created.state == pb.Topic.ACTIVE

    got = await wire.GetTopic(pb.GetTopicRequest(topic=name))
    assert got == created

    update = pb.UpdateTopicRequest(
        topic=pb.Topic(name=name, labels={"team": "b"}),
        update_mask={"paths": ["labels", "message_retention_duration"]},
    )
    update.topic.message_retention_duration.seconds = 3600
    updated = await wire.UpdateTopic(update)
    assert dict(updated.labels) == {"team": "b"}
    assert updated.message_retention_duration.seconds == 3600

    error = await rpc_error(wire.CreateTopic(pb.Topic(name=name)))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS

    await wire.DeleteTopic(pb.DeleteTopicRequest(topic=name))
    for call in (
        wire.GetTopic(pb.GetTopicRequest(topic=name)),
        wire.DeleteTopic(pb.DeleteTopicRequest(topic=name)),
        wire.Publish(pb.PublishRequest(topic=name, messages=[pb.PubsubMessage(data=b"x")])),
    ):
        assert (await rpc_error(call)).code() == grpc.StatusCode.NOT_FOUND


async def test_list_topics_pages_through_one_project(wire: Wire) -> None:
    project = "listing-project"
    names = sorted([unique("topic", project) for _ in range(5)])
    for name in names:
        await wire.CreateTopic(pb.Topic(name=name))
    await wire.CreateTopic(pb.Topic(name=unique("topic", "other-project")))
    seen: list[str] = []
    token = ""
    while True:
        page = await wire.ListTopics(
            pb.ListTopicsRequest(project=f"projects/{project}", page_size=2, page_token=token)
        )
        assert len(page.topics) <= 2
        seen.extend(t.name for t in page.topics)
        token = page.next_page_token
        if not token:
            break
    assert seen == names


async def test_topic_subscriptions_and_topic_deletion(wire: Wire) -> None:
    topic, one = await wire.subscription()
    _, two = await wire.subscription(topic)
    listed = await wire.ListTopicSubscriptions(pb.ListTopicSubscriptionsRequest(topic=topic))
    assert sorted(listed.subscriptions) == sorted([one, two])
    await wire.publish(topic, b"before")
    await wire.DeleteTopic(pb.DeleteTopicRequest(topic=topic))
    sub = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=one))
    assert sub.topic == "_deleted-topic_"
    [m] = await wire.pull(one, 1)  # the backlog outlives the topic
    assert m.message.data == b"before"


@pytest.mark.parametrize(
    "name",
    ["projects/p1/topics/ab", "projects/p1/topics/goog-x", "topics/t1", "projects//topics/t"],
)
async def test_bad_topic_names_are_invalid_argument(wire: Wire, name: str) -> None:
    error = await rpc_error(wire.CreateTopic(pb.Topic(name=name)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert name in (error.details() or "")


# ------------------------------------------------------------- subscriptions


async def test_subscription_lifecycle(wire: Wire) -> None:
    topic = await wire.topic()
    name = unique("sub")
    request = pb.Subscription(
        name=name,
        topic=topic,
        enable_exactly_once_delivery=True,
        enable_message_ordering=True,
        labels={"k": "v"},
        push_config=pb.PushConfig(attributes={"x-goog-version": "v1"}),
        filter='attributes.kind = "a"',
    )
    request.retry_policy.minimum_backoff.seconds = 1
    request.retry_policy.maximum_backoff.seconds = 30
    created = await wire.CreateSubscription(request)
    assert created.name == name
    assert created.topic == topic
    assert created.ack_deadline_seconds == 60
    assert created.enable_exactly_once_delivery
    assert created.enable_message_ordering
    assert dict(created.labels) == {"k": "v"}
    assert dict(created.push_config.attributes) == {"x-goog-version": "v1"}  # round-trips
    assert created.filter == 'attributes.kind = "a"'
    assert created.retry_policy.maximum_backoff.seconds == 30
    assert created.state == pb.Subscription.ACTIVE
    assert created.expiration_policy.ttl.seconds == 31 * 24 * 3600  # the real default
    assert created.message_retention_duration.seconds == 7 * 24 * 3600

    assert await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=name)) == created

    update = pb.UpdateSubscriptionRequest(
        subscription=pb.Subscription(name=name, ack_deadline_seconds=120, labels={"k": "w"}),
        update_mask={"paths": ["ack_deadline_seconds", "labels"]},
    )
    updated = await wire.UpdateSubscription(update)
    assert updated.ack_deadline_seconds == 120
    assert dict(updated.labels) == {"k": "w"}
    assert updated.enable_exactly_once_delivery  # untouched

    listed = await wire.ListSubscriptions(
        pb.ListSubscriptionsRequest(project=f"projects/{PROJECT}", page_size=1000)
    )
    assert name in [s.name for s in listed.subscriptions]

    error = await rpc_error(wire.CreateSubscription(pb.Subscription(name=name, topic=topic)))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS

    await wire.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=name))
    for call in (
        wire.GetSubscription(pb.GetSubscriptionRequest(subscription=name)),
        wire.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=name)),
        wire.Pull(pb.PullRequest(subscription=name, max_messages=1)),
    ):
        assert (await rpc_error(call)).code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("paths", "fields"),
    [
        ([], {"ack_deadline_seconds": 20}),
        (["enable_message_ordering"], {"enable_message_ordering": True}),
        (["filter"], {"filter": "attributes:x"}),
        (["no_such_field"], {}),
        (["ack_deadline_seconds"], {"ack_deadline_seconds": 601}),
    ],
)
async def test_bad_subscription_updates_are_invalid_argument(
    wire: Wire, paths: list[str], fields: dict[str, Any]
) -> None:
    _, name = await wire.subscription()
    update = pb.UpdateSubscriptionRequest(
        subscription=pb.Subscription(name=name, **fields),
        update_mask={"paths": paths},
    )
    error = await rpc_error(wire.UpdateSubscription(update))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details()


async def test_turning_exactly_once_on_by_update(wire: Wire) -> None:
    topic, name = await wire.subscription()
    update = pb.UpdateSubscriptionRequest(
        subscription=pb.Subscription(name=name, enable_exactly_once_delivery=True),
        update_mask={"paths": ["enable_exactly_once_delivery"]},
    )
    assert (await wire.UpdateSubscription(update)).enable_exactly_once_delivery
    await wire.publish(topic, b"m")
    [m] = await wire.pull(name, 1)
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=name, ack_ids=[m.ack_id]))
    error = await rpc_error(
        wire.Acknowledge(pb.AcknowledgeRequest(subscription=name, ack_ids=[m.ack_id]))
    )
    assert Wire.error_info(error) is not None


async def test_server_assigns_a_name_when_none_is_given(wire: Wire) -> None:
    topic = await wire.topic()
    created = await wire.CreateSubscription(pb.Subscription(topic=topic))
    assert created.name.startswith(f"projects/{PROJECT}/subscriptions/")
    await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=created.name))


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"topic": "projects/p1/topics/missing-topic"}, grpc.StatusCode.NOT_FOUND),
        ({"ack_deadline_seconds": 5}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"ack_deadline_seconds": 601}, grpc.StatusCode.INVALID_ARGUMENT),
        (
            {"dead_letter_policy": pb.DeadLetterPolicy(dead_letter_topic="projects/p1/topics/dlq")},
            grpc.StatusCode.NOT_FOUND,
        ),
        ({"filter": "x" * 257}, grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
async def test_bad_subscriptions_are_rejected(
    wire: Wire, fields: dict[str, Any], code: grpc.StatusCode
) -> None:
    topic = await wire.topic()
    fields = {"topic": topic, **fields}
    error = await rpc_error(wire.CreateSubscription(pb.Subscription(name=unique("sub"), **fields)))
    assert error.code() == code
    assert error.details()


async def test_detached_subscription_cannot_be_pulled(wire: Wire) -> None:
    topic, name = await wire.subscription()
    await wire.DetachSubscription(pb.DetachSubscriptionRequest(subscription=name))
    assert (await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=name))).detached
    listed = await wire.ListTopicSubscriptions(pb.ListTopicSubscriptionsRequest(topic=topic))
    assert name not in listed.subscriptions
    error = await rpc_error(wire.Pull(pb.PullRequest(subscription=name, max_messages=1)))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    stream = wire.stream(name)
    error2 = await stream.ended()
    assert error2 is not None
    assert error2.code() == grpc.StatusCode.FAILED_PRECONDITION


# ------------------------------------------------------------------ publish


async def test_publish_returns_ids_in_request_order(wire: Wire) -> None:
    topic, sub = await wire.subscription()
    ids = await wire.publish(topic, b"a", b"b", b"c")
    assert len(set(ids)) == 3
    received = await wire.pull(sub, 3)
    by_id = {m.message.message_id: m.message for m in received}
    assert [by_id[i].data for i in ids] == [b"a", b"b", b"c"]
    assert all(m.message.publish_time.seconds > 0 for m in received)


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [pb.PubsubMessage()],
        [pb.PubsubMessage(data=b"a", ordering_key="k1"), pb.PubsubMessage(data=b"b")],
        [pb.PubsubMessage(data=b"a", attributes={"goog-x": "1"})],
        [pb.PubsubMessage(data=b"a", ordering_key="k" * 1025)],
        [pb.PubsubMessage(data=b"a")] * 1001,
    ],
    ids=["none", "empty", "mixed-keys", "goog-attribute", "long-key", "too-many"],
)
async def test_bad_publish_requests_are_invalid_argument(
    wire: Wire, messages: list[pb.PubsubMessage]
) -> None:
    topic = await wire.topic()
    error = await rpc_error(wire.Publish(pb.PublishRequest(topic=topic, messages=messages)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details()


async def test_pull_requires_max_messages(wire: Wire) -> None:
    _, sub = await wire.subscription()
    error = await rpc_error(wire.Pull(pb.PullRequest(subscription=sub)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_pull_waits_briefly_for_a_message(wire: Wire) -> None:
    import asyncio

    topic, sub = await wire.subscription()
    pending = asyncio.ensure_future(wire.Pull(pb.PullRequest(subscription=sub, max_messages=5)))
    await asyncio.sleep(0.05)
    await wire.publish(topic, b"late")
    response = await asyncio.wait_for(pending, 5)
    assert [m.message.data for m in response.received_messages] == [b"late"]


# Every google.pubsub.v1 method is implemented (ModifyPushConfig:
# tests/server_stub/push/test_push.py).


# ------------------------------------------------------------ RPC faults


async def test_rpc_faults_fail_a_planned_number_of_calls(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic = await wire.topic()
    reference.faults.fail("Publish", "UNAVAILABLE", times=2)
    reference.faults.fail("GetTopic", "PERMISSION_DENIED", "nope", times=-1)
    for _ in range(2):
        error = await rpc_error(wire.publish(topic, b"m"))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error.details()
    await wire.publish(topic, b"m")
    for _ in range(3):
        error = await rpc_error(wire.GetTopic(pb.GetTopicRequest(topic=topic)))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error.details() == "nope"
    reference.faults.clear()
    await wire.GetTopic(pb.GetTopicRequest(topic=topic))
