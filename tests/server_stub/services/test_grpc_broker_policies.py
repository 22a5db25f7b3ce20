"""eoclient.broker.v1.BrokerPolicies over raw gRPC: skip by message id,
topic and subscription policies, counters and seek outcomes, and their effects seen
through google.pubsub.v1 (Pull, Acknowledge, Publish) on the in-process reference
server, on a FakeClock the tests advance.

The rules themselves are tested row by row in tests/server_stub/core/test_policies.py;
here every feature is driven through the wire, with the exactly-once consequences a
client sees (INVALID_ACK_ID in the ErrorInfo of a failed Acknowledge).
"""

from __future__ import annotations

import datetime
from typing import Any

import grpc
import pytest
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient._proto import broker_policies_pb2 as bp
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer

from .policies_support import PolicyWire, message, publish

PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"


@pytest.fixture
def policies(wire: Wire) -> PolicyWire:
    return PolicyWire(wire)


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def assert_invalid_ack_id(wire: Wire, sub: str, ack_id: str) -> None:
    error = await rpc_error(
        wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[ack_id]))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = Wire.error_info(error)
    assert info is not None
    assert dict(info.metadata) == {ack_id: PERMANENT}


# ================================================================ skip by message id


async def test_skip_reports_each_id_and_acknowledges_on_that_subscription_only(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, sub = await wire.subscription()
    _, other = await wire.subscription(topic)
    first, second, third = await wire.publish(topic, b"a", b"b", b"c")

    outcomes = await policies.skip(sub, first, third, first, "999999", "not-an-id")
    assert outcomes == {
        first: "SKIPPED",
        third: "SKIPPED",
        "999999": "NOT_FOUND",
        "not-an-id": "NOT_FOUND",
    }
    assert list(outcomes) == [first, third, "999999", "not-an-id"]  # the order asked
    [only] = await wire.pull(sub, 1)
    assert only.message.message_id == second
    await wire.pull_nothing(sub)
    assert len(await wire.pull(other, 3)) == 3  # the other subscription is unaffected

    assert await policies.skip(sub, first) == {first: "ALREADY_ACKNOWLEDGED"}
    counters = await policies.sub_counters(sub)
    assert (counters.skipped, counters.backlog_messages) == (2, 1)
    assert (await policies.sub_counters(other)).skipped == 0


async def test_a_skipped_messages_ack_id_is_invalid_and_it_never_comes_back(
    wire: Wire, policies: PolicyWire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    [message_id] = await wire.publish(topic, b"poison")
    [leased] = await wire.pull(sub, 1)

    assert await policies.skip(sub, message_id) == {message_id: "SKIPPED"}
    await assert_invalid_ack_id(wire, sub, leased.ack_id)
    clock.advance(120)  # past the lease: a skipped message is not redelivered
    reference.tick()
    await wire.pull_nothing(sub)
    history = reference.history(sub, message_id)
    assert len(history.deliveries) == 1
    assert history.successful_acks == []  # the subscriber's ack never succeeded


async def test_skipping_the_head_of_an_ordering_key_releases_the_next(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, sub = await wire.subscription(
        enable_message_ordering=True, enable_exactly_once_delivery=True
    )
    head, _, _ = await wire.publish(topic, b"head", b"next", b"last", ordering_key="k")
    [delivered] = await wire.pull(sub, 1)
    assert delivered.message.message_id == head
    await wire.ModifyAckDeadline(  # nacked: the head waits, and its key behind it
        pb.ModifyAckDeadlineRequest(
            subscription=sub, ack_ids=[delivered.ack_id], ack_deadline_seconds=0
        )
    )
    await policies.skip(sub, head)
    after_skip, last = await wire.pull(sub, 2)
    assert (after_skip.message.data, last.message.data) == (b"next", b"last")

    # Acking "last" before "next" is out of order (transient); skipping "next" lets it in.
    error = await rpc_error(
        wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[last.ack_id]))
    )
    info = Wire.error_info(error)
    assert info is not None
    assert dict(info.metadata) == {last.ack_id: "TRANSIENT_FAILURE_UNORDERED_ACK_ID"}
    await policies.skip(sub, after_skip.message.message_id)
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[last.ack_id]))
    await assert_invalid_ack_id(wire, sub, after_skip.ack_id)


async def test_skipping_a_dead_lettered_message_is_already_acknowledged(
    wire: Wire, policies: PolicyWire
) -> None:
    dead_topic = await wire.topic()
    topic, sub = await wire.subscription(
        dead_letter_policy=pb.DeadLetterPolicy(
            dead_letter_topic=dead_topic, max_delivery_attempts=5
        )
    )
    [message_id] = await wire.publish(topic, b"m")
    for _ in range(5):
        [m] = await wire.pull(sub, 1)
        await wire.ModifyAckDeadline(
            pb.ModifyAckDeadlineRequest(
                subscription=sub, ack_ids=[m.ack_id], ack_deadline_seconds=0
            )
        )
    await wire.pull_nothing(sub)  # forwarded after the fifth attempt
    assert await policies.skip(sub, message_id) == {message_id: "ALREADY_ACKNOWLEDGED"}


async def test_seek_and_snapshots_bring_a_skipped_message_back_like_an_acked_one(
    wire: Wire, policies: PolicyWire, clock: FakeClock
) -> None:
    topic, sub = await wire.subscription(retain_acked_messages=True)
    snapshot = f"projects/p1/snapshots/snap-{sub.rsplit('-', 1)[-1]}"
    [message_id] = await wire.publish(topic, b"m")
    await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=snapshot, subscription=sub))
    await policies.skip(sub, message_id)
    await wire.pull_nothing(sub)

    await wire.Seek(pb.SeekRequest(subscription=sub, snapshot=snapshot))
    [again] = await wire.pull(sub, 1)
    assert again.message.message_id == message_id
    await policies.skip(sub, message_id)
    before = pb.SeekRequest(subscription=sub)
    before.time.FromSeconds(int(clock.now()) - 60)
    await wire.Seek(before)  # skipped = acknowledged: retained, so replayed
    [replayed] = await wire.pull(sub, 1)
    assert replayed.message.message_id == message_id


async def test_skip_refusals(wire: Wire, policies: PolicyWire) -> None:
    _, sub = await wire.subscription()
    error = await rpc_error(policies.SkipMessages(bp.SkipMessagesRequest(subscription=sub)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at least one message id" in (error.details() or "")
    error = await rpc_error(
        policies.SkipMessages(bp.SkipMessagesRequest(subscription=sub, message_ids=["1"] * 10_001))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 10000" in (error.details() or "")
    error = await rpc_error(
        policies.SkipMessages(
            bp.SkipMessagesRequest(subscription="projects/p1/subscriptions/nope", message_ids=["1"])
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND


# ================================================================ delayed delivery


async def test_a_delayed_message_waits_and_skip_cancels_another(
    wire: Wire, policies: PolicyWire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    at = datetime.datetime.fromtimestamp(clock.now() + 30, datetime.UTC)
    later, cancelled, now = await publish(
        wire,
        topic,
        message(b"later", **{"eoclient-deliver-at": at.isoformat().replace("+00:00", "Z")}),
        message(b"cancelled", **{"eoclient-deliver-after": "10s"}),
        message(b"now"),
    )
    [first] = await wire.pull(sub, 1)
    assert first.message.message_id == now
    await wire.pull_nothing(sub)
    assert (await policies.sub_counters(sub)).delayed_pending == 2

    assert await policies.skip(sub, cancelled) == {cancelled: "SKIPPED"}
    clock.advance(31)
    reference.tick()
    [due] = await wire.pull(sub, 1)
    assert due.message.message_id == later
    assert due.message.attributes["eoclient-deliver-at"]  # attributes are delivered as sent
    await wire.pull_nothing(sub)
    assert (await policies.sub_counters(sub)).delayed_pending == 0


@pytest.mark.parametrize(
    ("attributes", "text"),
    [
        ({"eoclient-deliver-after": "ten seconds"}, "eoclient-deliver-after='ten seconds'"),
        ({"eoclient-deliver-after": "-3s"}, "is not a duration"),
        ({"eoclient-deliver-at": "2026-11-23 18:00"}, "RFC 3339 time with a zone"),
        ({"eoclient-deliver-after": "40d"}, "is not a duration"),
        ({"eoclient-deliver-after": "2764800s"}, "more than 31 days"),
        (
            {"eoclient-deliver-at": "2030-01-01T00:00:00Z", "eoclient-deliver-after": "1s"},
            "not both",
        ),
    ],
)
async def test_a_malformed_delay_is_refused_at_publish_and_nothing_is_stored(
    wire: Wire, attributes: dict[str, str], text: str
) -> None:
    topic, sub = await wire.subscription()
    error = await rpc_error(publish(wire, topic, message(b"ok"), message(b"bad", **attributes)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert text in (error.details() or "")
    await wire.pull_nothing(sub)  # the good message of the request was not stored either


# ================================================================ policies


async def test_topic_policies_round_trip_and_masks_change_only_what_they_name(
    wire: Wire, policies: PolicyWire
) -> None:
    topic = await wire.topic()
    assert await policies.topic_policies(topic) == {"topic": topic}

    await policies.set_topic(
        topic, {"retention": {"timeSeconds": "10800", "sizeBytes": "-1"}}, "retention"
    )
    await policies.set_topic(topic, {"messageTtl": "120s"}, "message_ttl")
    await policies.set_topic(
        topic,
        {
            "backlogQuota": {
                "limitBytes": "2048",
                "limitAge": "3600s",
                "action": "CONSUMER_BACKLOG_EVICTION",
            }
        },
        "backlog_quota",
    )
    assert await policies.topic_policies(topic) == {
        "topic": topic,
        "retention": {"timeSeconds": "10800", "sizeBytes": "-1"},
        "backlogQuota": {
            "limitBytes": "2048",
            "limitAge": "3600s",
            "action": "CONSUMER_BACKLOG_EVICTION",
            "holdTimeout": "30s",  # the default, made explicit
        },
        "messageTtl": "120s",
    }
    await policies.set_topic(topic, {}, "message_ttl")  # named and unset: removed
    # 0 and 0 is Pulsar's "disabled": no policy
    await policies.set_topic(
        topic, {"retention": {"timeSeconds": "0", "sizeBytes": "0"}}, "retention"
    )
    got = await policies.topic_policies(topic)
    assert set(got) == {"topic", "backlogQuota"}
    await policies.set_topic(topic, {})  # no mask: replace all
    assert await policies.topic_policies(topic) == {"topic": topic}


@pytest.mark.parametrize(
    ("policy", "text"),
    [
        ({"retention": {"timeSeconds": "0", "sizeBytes": "1024"}}, "set both limits"),
        ({"retention": {"timeSeconds": "3600", "sizeBytes": "0"}}, "set both limits"),
        ({"retention": {"timeSeconds": "-2", "sizeBytes": "-1"}}, "must be -1 (infinite)"),
        ({"backlogQuota": {"action": "PRODUCER_EXCEPTION"}}, "a size limit, an age limit or both"),
        ({"backlogQuota": {"limitBytes": "0"}}, "limit_bytes must be > 0"),
        ({"backlogQuota": {"limitAge": "0s"}}, "limit_age must be > 0"),
        ({"backlogQuota": {"limitBytes": "1", "holdTimeout": "601s"}}, "hold_timeout must be in"),
        ({"messageTtl": "0s"}, "message_ttl must be > 0"),
        ({"messageTtl": "-5s"}, "message_ttl must be > 0"),
    ],
)
async def test_invalid_topic_policies_are_refused_naming_the_rule(
    wire: Wire, policies: PolicyWire, policy: dict[str, Any], text: str
) -> None:
    topic = await wire.topic()
    error = await rpc_error(policies.set_topic(topic, policy))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert text in (error.details() or "")
    assert await policies.topic_policies(topic) == {"topic": topic}  # nothing changed


async def test_policy_calls_refuse_unknown_masks_and_resources(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, sub = await wire.subscription()
    error = await rpc_error(policies.set_topic(topic, {}, "retention", "labels"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "update_mask" in (error.details() or "")
    assert "labels" in (error.details() or "")
    error = await rpc_error(policies.set_subscription(sub, {}, "backlog_quota"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    missing = "projects/p1/topics/missing-topic"
    for call in (
        policies.GetTopicPolicies(bp.GetTopicPoliciesRequest(topic=missing)),
        policies.set_topic(missing, {"messageTtl": "5s"}),
        policies.topic_counters(missing),
        policies.sub_counters("projects/p1/subscriptions/missing-sub"),
    ):
        assert (await rpc_error(call)).code() == grpc.StatusCode.NOT_FOUND
    error = await rpc_error(policies.GetTopicPolicies(bp.GetTopicPoliciesRequest(topic="nope")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_subscription_ttl_wins_over_the_topics_and_expires_unacked_messages(
    wire: Wire, policies: PolicyWire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    _, other = await wire.subscription(topic)
    await policies.set_topic(topic, {"messageTtl": "600s"}, "message_ttl")
    got = await policies.set_subscription(sub, {"messageTtl": "60s"}, "message_ttl")
    assert (got.message_ttl.seconds, got.effective_message_ttl.seconds) == (60, 60)
    inherited = await policies.GetSubscriptionPolicies(
        bp.GetSubscriptionPoliciesRequest(subscription=other)
    )
    assert not inherited.HasField("message_ttl")
    assert inherited.effective_message_ttl.seconds == 600

    [message_id] = await wire.publish(topic, b"slow")
    [leased] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(
        pb.ModifyAckDeadlineRequest(
            subscription=sub, ack_ids=[leased.ack_id], ack_deadline_seconds=600
        )
    )
    clock.advance(61)
    reference.tick()
    await assert_invalid_ack_id(wire, sub, leased.ack_id)  # acknowledged by the TTL, leased
    await wire.pull_nothing(sub)
    assert (await policies.sub_counters(sub)).expired_by_ttl == 1
    [kept] = await wire.pull(other, 1)  # the topic's 600 s TTL has not passed there
    assert kept.message.message_id == message_id
    assert (await policies.sub_counters(other)).expired_by_ttl == 0


async def test_retention_replays_from_its_window_and_seek_says_when_it_cannot(
    wire: Wire, policies: PolicyWire, clock: FakeClock
) -> None:
    topic = await wire.topic()
    await policies.set_topic(
        topic, {"retention": {"timeSeconds": "3600", "sizeBytes": "-1"}}, "retention"
    )
    published_at = clock.now()
    [early] = await wire.publish(topic, b"before any subscription")
    clock.advance(10)
    _, sub = await wire.subscription(topic)
    counters = await policies.topic_counters(topic)
    assert (counters.retained_messages, counters.retained_bytes) == (
        1,
        len(b"before any subscription"),
    )
    assert counters.oldest_retained_publish_time.ToMicroseconds() // 1000 == int(
        published_at * 1000
    )

    inside = bp.SeekWithOutcomeRequest(subscription=sub)
    inside.time.FromMicroseconds(int((published_at - 1) * 1e6))
    outcome = await policies.SeekWithOutcome(inside)
    assert outcome.complete is False  # a second before the oldest retained message
    assert outcome.replayable_from.ToMicroseconds() // 1000 == int(published_at * 1000)
    [replayed] = await wire.pull(sub, 1)
    assert replayed.message.message_id == early
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[replayed.ack_id]))

    clock.advance(3600)  # the acknowledged first message leaves the retention window
    [late] = await wire.publish(topic, b"late")
    later = bp.SeekWithOutcomeRequest(subscription=sub)
    later.time.FromMicroseconds(int(published_at * 1e6))
    outcome = await policies.SeekWithOutcome(later)
    assert outcome.complete is False
    [again] = await wire.pull(sub, 1)
    assert again.message.message_id == late

    exact = bp.SeekWithOutcomeRequest(subscription=sub)
    exact.time.FromMicroseconds(int(clock.now() * 1e6))
    assert (await policies.SeekWithOutcome(exact)).complete is True
    error = await rpc_error(policies.SeekWithOutcome(bp.SeekWithOutcomeRequest(subscription=sub)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


# ================================================================ backlog quotas


async def test_an_exception_quota_refuses_publish_naming_the_quota(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, sub = await wire.subscription()
    await policies.set_topic(
        topic,
        {"backlogQuota": {"limitBytes": "10", "action": "PRODUCER_EXCEPTION"}},
        "backlog_quota",
    )
    await wire.publish(topic, b"0123456789ab")  # now 12 bytes over a 10-byte quota
    error = await rpc_error(wire.publish(topic, b"refused"))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    text = error.details() or ""
    assert topic in text
    assert sub in text
    assert "producer_exception" in text
    assert "10 bytes" in text
    assert (await policies.topic_counters(topic)).refused_publishes == 1

    [m] = await wire.pull(sub, 1)
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[m.ack_id]))
    await wire.publish(topic, b"room again")


async def test_eviction_acknowledges_the_laggards_oldest_and_invalidates_its_ack_ids(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, laggard = await wire.subscription(enable_exactly_once_delivery=True)
    _, keeping_up = await wire.subscription(topic)
    await policies.set_topic(
        topic,
        {"backlogQuota": {"limitBytes": "3", "action": "CONSUMER_BACKLOG_EVICTION"}},
        "backlog_quota",
    )
    oldest, *_ = await wire.publish(topic, b"a", b"b", b"c", b"d")  # 4 bytes: over
    [leased] = await wire.pull(laggard, 1)
    assert leased.message.message_id == oldest
    for m in await wire.pull(keeping_up, 4):
        await wire.Acknowledge(pb.AcknowledgeRequest(subscription=keeping_up, ack_ids=[m.ack_id]))

    await wire.publish(topic, b"e")  # the quota is checked at publish: the laggard evicts
    await assert_invalid_ack_id(wire, laggard, leased.ack_id)
    counters = await policies.sub_counters(laggard)
    assert counters.evicted >= 1
    assert counters.backlog_bytes <= 3 + 1
    assert (await policies.sub_counters(keeping_up)).evicted == 0
