"""Subscription policies over raw gRPC against the in-process reference server on a fake
clock: filters, dead letters (unordered and ordered), retry backoff, retention, expiration,
updates with field masks, and the unary Pull byte budget."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from support.wire import Wire, unique

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer

DAY = 86400


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def nack(sub: str, *ack_ids: str) -> pb.ModifyAckDeadlineRequest:
    return pb.ModifyAckDeadlineRequest(subscription=sub, ack_ids=ack_ids, ack_deadline_seconds=0)


async def publish(wire: Wire, topic: str, *messages: pb.PubsubMessage) -> list[str]:
    response = await wire.Publish(pb.PublishRequest(topic=topic, messages=messages))
    return list(response.message_ids)


# --------------------------------------------------------------------- filters


async def test_bad_filter_is_invalid_argument_naming_the_column(wire: Wire) -> None:
    topic = await wire.topic()
    name = unique("sub")
    error = await rpc_error(
        wire.CreateSubscription(
            pb.Subscription(name=name, topic=topic, filter='attributes.domain = "com" OR')
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "column 29" in (error.details() or "")
    error = await rpc_error(wire.GetSubscription(pb.GetSubscriptionRequest(subscription=name)))
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_filter_delivers_only_matching_messages(wire: Wire) -> None:
    topic, sub = await wire.subscription(filter='hasPrefix(attributes.lang, "en")')
    ids = await publish(
        wire,
        topic,
        pb.PubsubMessage(data=b"1", attributes={"lang": "en-GB"}),
        pb.PubsubMessage(data=b"2", attributes={"lang": "fr"}),
        pb.PubsubMessage(data=b"3"),
        pb.PubsubMessage(data=b"4", attributes={"lang": "en"}),
    )
    received = await wire.pull(sub, 2)
    assert [m.message.message_id for m in received] == [ids[0], ids[3]]
    await wire.pull_nothing(sub)
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert got.filter == 'hasPrefix(attributes.lang, "en")'


async def test_filter_update_is_refused(wire: Wire) -> None:
    _, sub = await wire.subscription(filter="attributes:x")
    error = await rpc_error(
        wire.UpdateSubscription(
            pb.UpdateSubscriptionRequest(
                subscription=pb.Subscription(name=sub, filter="attributes:y"),
                update_mask={"paths": ["filter"]},
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "filter field in the Subscription is not mutable" in (error.details() or "")


# ---------------------------------------------------------------- dead letters


async def dead_letter_setup(wire: Wire, **fields: Any) -> tuple[str, str, str]:
    """(topic, subscription with a 5-attempt dead-letter policy, dead-letter subscription)."""
    dead_topic, dead_sub = await wire.subscription()
    topic, sub = await wire.subscription(
        dead_letter_policy=pb.DeadLetterPolicy(
            dead_letter_topic=dead_topic, max_delivery_attempts=5
        ),
        **fields,
    )
    return topic, sub, dead_sub


async def test_dead_letter_attributes_through_grpc(wire: Wire, clock: FakeClock) -> None:
    topic, sub, dead_sub = await dead_letter_setup(wire)
    clock.advance(0.2509)
    [original_id] = await publish(
        wire, topic, pb.PubsubMessage(data=b"poison", attributes={"k": "v"})
    )
    attempts = []
    for _ in range(5):
        [received] = await wire.pull(sub, 1)
        attempts.append(received.delivery_attempt)
        original = received.message
        await wire.ModifyAckDeadline(nack(sub, received.ack_id))
    assert attempts == [1, 2, 3, 4, 5]
    await wire.pull_nothing(sub)

    [forwarded] = await wire.pull(dead_sub, 1)
    message = forwarded.message
    assert message.message_id != original_id
    assert message.data == b"poison"
    attributes = dict(message.attributes)
    published = attributes.pop("CloudPubSubDeadLetterSourceTopicPublishTime")
    assert attributes == {
        "k": "v",
        "CloudPubSubDeadLetterSourceDeliveryCount": "5",
        "CloudPubSubDeadLetterSourceSubscription": sub.rsplit("/", 1)[1],
        "CloudPubSubDeadLetterSourceSubscriptionProject": "p1",
    }
    assert published == "2026-01-01T00:00:00.250Z"  # RFC 3339, milliseconds
    assert original.publish_time.ToJsonString().startswith("2026-01-01T00:00:00.250")


async def test_dead_letter_on_an_ordered_subscription(wire: Wire) -> None:
    # Google's emulator fails this with a NullPointerException
    # (docs/protocol.md#where-the-emulator-differs).
    topic, sub, dead_sub = await dead_letter_setup(wire, enable_message_ordering=True)
    await wire.publish(topic, b"k1", b"k2", ordering_key="k")
    for _ in range(5):
        received = await wire.pull(sub, 2)
        assert [m.message.data for m in received] == [b"k1", b"k2"]
        await wire.ModifyAckDeadline(nack(sub, received[0].ack_id))
    [forwarded] = await wire.pull(dead_sub, 1)
    assert forwarded.message.data == b"k1"
    assert forwarded.message.ordering_key == "k"
    [rest] = await wire.pull(sub, 1)
    assert rest.message.data == b"k2"


async def test_dead_letter_after_expiries(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub, dead_sub = await dead_letter_setup(wire, ack_deadline_seconds=10)
    [original_id] = await wire.publish(topic, b"slow")
    for attempt in range(1, 6):
        [received] = await wire.pull(sub, 1)
        assert received.delivery_attempt == attempt
        clock.advance(10)
        reference.tick()
    [forwarded] = await wire.pull(dead_sub, 1)
    assert forwarded.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    [record] = reference.history(sub, original_id).dead_lettered
    assert (record.message_id, record.delivery_count) == (forwarded.message.message_id, 5)


# ---------------------------------------------------------------- retry policy


async def test_retry_policy_delays_redelivery(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(
        retry_policy=pb.RetryPolicy(
            minimum_backoff={"seconds": 20}, maximum_backoff={"seconds": 600}
        )
    )
    await wire.publish(topic, b"m")
    [first] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(nack(sub, first.ack_id))
    await wire.pull_nothing(sub)
    clock.advance(19.9)
    reference.tick()
    await wire.pull_nothing(sub)
    clock.advance(0.1)
    reference.tick()
    [second] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(nack(sub, second.ack_id))
    clock.advance(39.9)  # second failure: 20 s * 2
    reference.tick()
    await wire.pull_nothing(sub)
    clock.advance(0.1)
    reference.tick()
    assert len(await wire.pull(sub, 1)) == 1


# ------------------------------------------------------- retention, expiration


async def test_retention_drops_old_messages(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(message_retention_duration={"seconds": 600})
    await wire.publish(topic, b"old")
    clock.advance(600)
    reference.tick()
    await wire.publish(topic, b"new")
    [received] = await wire.pull(sub, 1)
    assert received.message.data == b"new"
    await wire.pull_nothing(sub)


async def test_topic_retention_is_reported_and_keeps_the_backlog(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic = unique("topic")
    await wire.CreateTopic(pb.Topic(name=topic, message_retention_duration={"seconds": DAY}))
    _, sub = await wire.subscription(topic, message_retention_duration={"seconds": 600})
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert got.topic_message_retention_duration.seconds == DAY
    assert got.state == pb.Subscription.ACTIVE
    await wire.publish(topic, b"kept")
    clock.advance(DAY - 1)
    reference.tick()
    assert len(await wire.pull(sub, 1)) == 1


async def test_idle_subscription_expires(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    _, idle = await wire.subscription(
        expiration_policy={"ttl": {"seconds": DAY}}, message_retention_duration={"seconds": 600}
    )
    _, forever = await wire.subscription(expiration_policy={})
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=forever))
    assert got.HasField("expiration_policy")
    assert not got.expiration_policy.HasField("ttl")
    clock.advance(DAY)
    reference.tick()
    error = await rpc_error(wire.GetSubscription(pb.GetSubscriptionRequest(subscription=idle)))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=forever))


async def test_open_stream_keeps_a_subscription_alive(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(
        expiration_policy={"ttl": {"seconds": DAY}}, message_retention_duration={"seconds": 600}
    )
    stream = wire.stream(sub)
    await wire.publish(topic, b"m")
    await stream.messages(1)
    clock.advance(2 * DAY)
    reference.tick()
    await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    await stream.cancel()


# --------------------------------------------------------------------- updates


async def test_update_subscription_policies_and_push_config(wire: Wire) -> None:
    dead_topic = await wire.topic()
    _, sub = await wire.subscription()
    request = pb.UpdateSubscriptionRequest(
        subscription=pb.Subscription(
            name=sub,
            labels={"team": "a"},
            ack_deadline_seconds=42,
            retain_acked_messages=True,
            message_retention_duration={"seconds": 3600},
            expiration_policy={"ttl": {"seconds": 2 * DAY}},
            dead_letter_policy=pb.DeadLetterPolicy(dead_letter_topic=dead_topic),
            retry_policy=pb.RetryPolicy(minimum_backoff={"seconds": 1}),
            enable_exactly_once_delivery=True,
            push_config=pb.PushConfig(attributes={"x-goog-version": "v1"}),
        ),
        update_mask={
            "paths": [
                "labels",
                "ack_deadline_seconds",
                "retain_acked_messages",
                "message_retention_duration",
                "expiration_policy",
                "dead_letter_policy",
                "retry_policy",
                "enable_exactly_once_delivery",
                "push_config",
            ]
        },
    )
    updated = await wire.UpdateSubscription(request)
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert got == updated
    assert dict(got.labels) == {"team": "a"}
    assert got.ack_deadline_seconds == 42
    assert got.retain_acked_messages
    assert got.message_retention_duration.seconds == 3600
    assert got.expiration_policy.ttl.seconds == 2 * DAY
    assert got.dead_letter_policy.dead_letter_topic == dead_topic
    assert got.dead_letter_policy.max_delivery_attempts == 5
    assert got.retry_policy.minimum_backoff.seconds == 1
    assert got.retry_policy.maximum_backoff.seconds == 600  # unset: the default
    assert got.enable_exactly_once_delivery
    assert dict(got.push_config.attributes) == {"x-goog-version": "v1"}

    sub_path = pb.UpdateSubscriptionRequest(
        subscription=pb.Subscription(
            name=sub, dead_letter_policy=pb.DeadLetterPolicy(max_delivery_attempts=9)
        ),
        update_mask={"paths": ["dead_letter_policy.max_delivery_attempts"]},
    )
    got = await wire.UpdateSubscription(sub_path)
    assert got.dead_letter_policy.dead_letter_topic == dead_topic
    assert got.dead_letter_policy.max_delivery_attempts == 9


async def test_update_subscription_refuses_immutable_fields_and_missing_topics(
    wire: Wire,
) -> None:
    _, sub = await wire.subscription(enable_message_ordering=True)
    error = await rpc_error(
        wire.UpdateSubscription(
            pb.UpdateSubscriptionRequest(
                subscription=pb.Subscription(name=sub, enable_message_ordering=False),
                update_mask={"paths": ["enable_message_ordering"]},
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "enable_message_ordering field in the Subscription is not mutable" in (
        error.details() or ""
    )
    error = await rpc_error(
        wire.UpdateSubscription(
            pb.UpdateSubscriptionRequest(
                subscription=pb.Subscription(
                    name=sub,
                    dead_letter_policy=pb.DeadLetterPolicy(dead_letter_topic=unique("topic")),
                ),
                update_mask={"paths": ["dead_letter_policy"]},
            )
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_update_topic_labels_retention_and_opaque_fields(wire: Wire) -> None:
    topic = await wire.topic()
    request = pb.UpdateTopicRequest(
        topic=pb.Topic(
            name=topic,
            labels={"env": "test"},
            message_retention_duration={"seconds": 7200},
            message_storage_policy=pb.MessageStoragePolicy(
                allowed_persistence_regions=["europe-west1"]
            ),
        ),
        update_mask={"paths": ["labels", "message_retention_duration", "message_storage_policy"]},
    )
    updated = await wire.UpdateTopic(request)
    got = await wire.GetTopic(pb.GetTopicRequest(topic=topic))
    assert got == updated
    assert dict(got.labels) == {"env": "test"}
    assert got.message_retention_duration.seconds == 7200
    assert list(got.message_storage_policy.allowed_persistence_regions) == ["europe-west1"]


# --------------------------------------------------------------- pull budget


async def test_unary_pull_fits_grpcs_default_4_mib_receive_limit(wire: Wire) -> None:
    # ``wire``'s channel keeps gRPC's default 4 MiB receive limit.
    topic, sub = await wire.subscription()
    for _ in range(5):
        await wire.publish(topic, b"x" * 2**20)
    sizes = []
    for _ in range(2):
        response = await wire.Pull(
            pb.PullRequest(subscription=sub, max_messages=100, return_immediately=True)
        )
        sizes.append(len(response.received_messages))
        assert response.ByteSize() < 4 * 2**20
    assert sizes == [3, 2]
