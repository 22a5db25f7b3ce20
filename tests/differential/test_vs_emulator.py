"""The same scenarios against ``eoclient serve`` and Google's emulator (0.8.20).

Where the emulator behaves like the real service, each scenario runs against both (the
``target`` fixture) and asserts the same observable outcome. Where it does not, one test per
defect runs the scenario on both and asserts the emulator's wrong answer next to our right
one (docs/protocol.md#where-the-emulator-differs); if Google fixes the emulator, that test
fails and the note can go.

The emulator lives for the whole session, so every test uses fresh resource names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb

pytestmark = pytest.mark.emulator

PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"
UNORDERED = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
REAL_INVALID_TEXT = (
    "Some acknowledgement ids in the request were invalid. This could be because the "
    "acknowledgement ids have expired or the acknowledgement ids were malformed."
)


@pytest.fixture(params=["reference", "emulator"])
def target(request: pytest.FixtureRequest, wire_factory: Callable[[str], Wire]) -> Wire:
    """A Wire to ``eoclient serve`` (subprocess) or to Google's emulator."""
    address = request.getfixturevalue("served" if request.param == "reference" else "emulator")
    return wire_factory(address)


@pytest.fixture
def ours(served: str, wire_factory: Callable[[str], Wire]) -> Wire:
    return wire_factory(served)


@pytest.fixture
def google(emulator: str, wire_factory: Callable[[str], Wire]) -> Wire:
    return wire_factory(emulator)


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def eod_failures(call: Any) -> dict[str, str]:
    """Assert the common exactly-once failure shape; return the ErrorInfo metadata."""
    error = await rpc_error(call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = Wire.rich_status(error)
    assert status is not None
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert status.message == error.details()
    info = Wire.error_info(error)
    assert info is not None
    assert info.reason == "EXACTLY_ONCE_ACKID_FAILURE"
    assert info.domain == "pubsub.googleapis.com"
    return dict(info.metadata)


def ack(sub: str, *ids: str) -> pb.AcknowledgeRequest:
    return pb.AcknowledgeRequest(subscription=sub, ack_ids=ids)


def modack(sub: str, seconds: int, *ids: str) -> pb.ModifyAckDeadlineRequest:
    return pb.ModifyAckDeadlineRequest(subscription=sub, ack_ids=ids, ack_deadline_seconds=seconds)


# ============================================================ agreement


async def test_publish_pull_ack_round_trip(target: Wire) -> None:
    topic, sub = await target.subscription()
    request = pb.PublishRequest(
        topic=topic,
        messages=[pb.PubsubMessage(data=b"%d" % i, attributes={"i": str(i)}) for i in range(3)],
    )
    ids = list((await target.Publish(request)).message_ids)
    received = await target.pull(sub, 3)
    assert sorted(m.message.message_id for m in received) == sorted(ids)
    for m in received:
        assert m.message.attributes["i"] == m.message.data.decode()
        assert m.message.publish_time.seconds > 0
        assert m.delivery_attempt == 0  # no dead-letter policy
    await target.Acknowledge(ack(sub, *[m.ack_id for m in received]))
    await target.pull_nothing(sub)


async def test_superseded_ack_id_is_permanent_failure(target: Wire) -> None:
    topic, sub = await target.subscription(enable_exactly_once_delivery=True)
    await target.publish(topic, b"m")
    [old] = await target.pull(sub, 1)
    await target.ModifyAckDeadline(modack(sub, 0, old.ack_id))
    [new] = await target.pull(sub, 1)
    assert new.ack_id != old.ack_id
    assert await eod_failures(target.Acknowledge(ack(sub, old.ack_id))) == {old.ack_id: PERMANENT}
    assert await eod_failures(target.ModifyAckDeadline(modack(sub, 30, old.ack_id))) == {
        old.ack_id: PERMANENT
    }
    await target.Acknowledge(ack(sub, new.ack_id))
    assert await eod_failures(target.Acknowledge(ack(sub, new.ack_id))) == {new.ack_id: PERMANENT}


async def test_partial_success(target: Wire) -> None:
    topic, sub = await target.subscription(enable_exactly_once_delivery=True)
    await target.publish(topic, b"a", b"b")
    a, b = await target.pull(sub, 2)
    await target.ModifyAckDeadline(modack(sub, 0, a.ack_id))
    [a2] = await target.pull(sub, 1)
    assert await eod_failures(target.Acknowledge(ack(sub, a.ack_id, b.ack_id))) == {
        a.ack_id: PERMANENT
    }
    # b was applied despite the failure in the same request.
    assert await eod_failures(target.Acknowledge(ack(sub, b.ack_id))) == {b.ack_id: PERMANENT}
    await target.Acknowledge(ack(sub, a2.ack_id))
    await target.pull_nothing(sub)


async def test_ordering_with_exactly_once_rejects_out_of_order_acks(target: Wire) -> None:
    topic, sub = await target.subscription(
        enable_exactly_once_delivery=True, enable_message_ordering=True
    )
    await target.publish(topic, b"1", b"2", b"3", ordering_key="k")
    one, two, three = await target.pull(sub, 3)
    assert [m.message.data for m in (one, two, three)] == [b"1", b"2", b"3"]
    assert await eod_failures(target.Acknowledge(ack(sub, two.ack_id))) == {two.ack_id: UNORDERED}
    await target.Acknowledge(ack(sub, one.ack_id))
    await target.Acknowledge(ack(sub, two.ack_id, three.ack_id))
    await target.pull_nothing(sub)


async def test_without_exactly_once_stale_ids_are_accepted(target: Wire) -> None:
    topic, sub = await target.subscription()
    await target.publish(topic, b"m")
    [old] = await target.pull(sub, 1)
    await target.ModifyAckDeadline(modack(sub, 0, old.ack_id))
    [new] = await target.pull(sub, 1)
    await target.ModifyAckDeadline(modack(sub, 10, old.ack_id))
    await target.Acknowledge(ack(sub, old.ack_id))
    await target.Acknowledge(ack(sub, new.ack_id))
    await target.Acknowledge(ack(sub, new.ack_id))
    await target.pull_nothing(sub)


async def test_delivery_attempt_with_a_dead_letter_policy(target: Wire) -> None:
    dead_letter = await target.topic()
    topic, sub = await target.subscription(
        dead_letter_policy=pb.DeadLetterPolicy(dead_letter_topic=dead_letter)
    )
    await target.publish(topic, b"m")
    [first] = await target.pull(sub, 1)
    await target.ModifyAckDeadline(modack(sub, 0, first.ack_id))
    [second] = await target.pull(sub, 1)
    assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
    got = await target.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert got.dead_letter_policy.max_delivery_attempts == 5  # 0 means 5


async def test_not_found_and_already_exists(target: Wire) -> None:
    topic, sub = await target.subscription()
    missing_topic, missing_sub = unique("topic"), unique("sub")
    calls = [
        (target.GetTopic(pb.GetTopicRequest(topic=missing_topic)), grpc.StatusCode.NOT_FOUND),
        (
            target.GetSubscription(pb.GetSubscriptionRequest(subscription=missing_sub)),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            target.CreateSubscription(pb.Subscription(name=unique("sub"), topic=missing_topic)),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            target.Publish(
                pb.PublishRequest(topic=missing_topic, messages=[pb.PubsubMessage(data=b"x")])
            ),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            target.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=missing_sub)),
            grpc.StatusCode.NOT_FOUND,
        ),
        (target.CreateTopic(pb.Topic(name=topic)), grpc.StatusCode.ALREADY_EXISTS),
        (
            target.CreateSubscription(pb.Subscription(name=sub, topic=topic)),
            grpc.StatusCode.ALREADY_EXISTS,
        ),
    ]
    for call, code in calls:
        assert (await rpc_error(call)).code() == code


@pytest.mark.parametrize(
    ("attempts", "message"),
    [
        (3, "The value for max_delivery_attempts is too small. You passed 3 in the request, "
         "but the minimum value is 5."),
        (101, "The value for max_delivery_attempts is too large. You passed 101 in the "
         "request, but the maximum value is 100."),
    ],
)  # fmt: skip
async def test_max_delivery_attempts_out_of_range(
    target: Wire, attempts: int, message: str
) -> None:
    topic = await target.topic()
    dead_letter = await target.topic()
    policy = pb.DeadLetterPolicy(dead_letter_topic=dead_letter, max_delivery_attempts=attempts)
    error = await rpc_error(
        target.CreateSubscription(
            pb.Subscription(name=unique("sub"), topic=topic, dead_letter_policy=policy)
        )
    )
    assert error.code() == grpc.StatusCode.OUT_OF_RANGE
    assert error.details() == message


@pytest.mark.parametrize(
    ("minimum", "maximum", "message"),
    [
        (1, 700, "The value for maximum_backoff is out of bounds. You passed 700s in the "
         "request, but the value must be between 0s and 600s."),
        (700, 700, "The value for minimum_backoff is out of bounds. You passed 700s in the "
         "request, but the value must be between 0s and 600s."),
        (100, 10, "The value for maximum_backoff is too small. You passed 10s in the "
         "request, but the minimum value is 100s."),
    ],
)  # fmt: skip
async def test_retry_policy_validation(
    target: Wire, minimum: int, maximum: int, message: str
) -> None:
    topic = await target.topic()
    sub = pb.Subscription(name=unique("sub"), topic=topic)
    sub.retry_policy.minimum_backoff.seconds = minimum
    sub.retry_policy.maximum_backoff.seconds = maximum
    error = await rpc_error(target.CreateSubscription(sub))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == message


async def test_request_validation_codes(target: Wire) -> None:
    topic, sub = await target.subscription()
    await target.publish(topic, b"m")
    [m] = await target.pull(sub, 1)
    invalid = [
        target.Acknowledge(ack(sub)),
        target.Acknowledge(ack(sub, "bogus")),
        target.ModifyAckDeadline(modack(sub, -1, m.ack_id)),
        target.Pull(pb.PullRequest(subscription=sub)),
        target.Publish(pb.PublishRequest(topic=topic, messages=[pb.PubsubMessage()])),
        target.CreateTopic(pb.Topic(name="projects/p1/topics/ab")),
        target.CreateSubscription(
            pb.Subscription(name=unique("sub"), topic=topic, ack_deadline_seconds=601)
        ),
    ]
    for call in invalid:
        error = await rpc_error(call)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details()


@pytest.mark.parametrize(
    ("first", "code"),
    [
        ({"subscription": ""}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"stream_ack_deadline_seconds": 0}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"stream_ack_deadline_seconds": 5}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"stream_ack_deadline_seconds": 601}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"modify_deadline_seconds": [10]}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"subscription": "projects/p1/subscriptions/nonexist"}, grpc.StatusCode.NOT_FOUND),
    ],
)
async def test_streaming_pull_first_request_codes(
    target: Wire, first: dict[str, Any], code: grpc.StatusCode
) -> None:
    _, sub = await target.subscription()
    fields = {"stream_ack_deadline_seconds": 10, **first}
    stream = target.stream(fields.pop("subscription", sub), **fields)
    error = await stream.ended()
    assert error is not None
    assert error.code() == code


async def test_streaming_pull_delivers_with_subscription_properties(target: Wire) -> None:
    topic, sub = await target.subscription(
        enable_exactly_once_delivery=True, enable_message_ordering=True
    )
    stream = target.stream(sub)
    for i in range(5):
        await target.publish(topic, b"%d" % i, ordering_key="k")
    received: list[pb.ReceivedMessage] = []
    while len(received) < 5:
        response = await stream.next()
        assert response.subscription_properties.exactly_once_delivery_enabled
        assert response.subscription_properties.message_ordering_enabled
        received.extend(response.received_messages)
    assert [m.message.data for m in received] == [b"%d" % i for i in range(5)]
    await target.Acknowledge(ack(sub, *[m.ack_id for m in received]))


async def test_deleted_topic_leaves_subscriptions_behind(target: Wire) -> None:
    topic, sub = await target.subscription()
    await target.DeleteTopic(pb.DeleteTopicRequest(topic=topic))
    got = await target.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert got.topic == "_deleted-topic_"


# ===================================================== emulator defects


async def test_defect_expired_ack_id_still_acks_on_the_emulator(ours: Wire, google: Wire) -> None:
    """Real service: an id whose deadline passed is invalid for Acknowledge and
    ModifyAckDeadline even before any redelivery (exactly-once doc,
    docs/protocol.md#exactly-once-semantics). Emulator 0.8.20: both succeed until the
    message is redelivered (measured here: even the modack, which
    docs/protocol.md#ack-id-state-machine records as failing)."""

    async def scenario(wire: Wire) -> tuple[dict[str, str] | None, dict[str, str] | None, int]:
        topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
        await wire.publish(topic, b"a", b"b")
        a, b = await wire.pull(sub, 2)
        await wire.ModifyAckDeadline(modack(sub, 1, a.ack_id, b.ack_id))  # lease: 1 s
        await asyncio.sleep(1.5)
        calls = [
            wire.Acknowledge(ack(sub, a.ack_id)),
            wire.ModifyAckDeadline(modack(sub, 60, b.ack_id)),
        ]
        outcomes: list[dict[str, str] | None] = []
        for call in calls:
            try:
                await call
                outcomes.append(None)
            except grpc.aio.AioRpcError as error:
                info = Wire.error_info(error)
                outcomes.append(dict(info.metadata) if info else {"code": error.code().name})
        redelivered = await wire.Pull(
            pb.PullRequest(subscription=sub, max_messages=10, return_immediately=True)
        )
        return outcomes[0], outcomes[1], len(redelivered.received_messages)

    (
        (emu_ack, emu_modack, emu_redelivered),
        (our_ack, our_modack, our_redelivered),
    ) = await asyncio.gather(scenario(google), scenario(ours))
    assert (emu_ack, emu_modack, emu_redelivered) == (None, None, 0)  # wrong: acked, extended
    assert our_ack is not None
    assert our_modack is not None
    assert set(our_ack.values()) == set(our_modack.values()) == {PERMANENT}
    assert our_redelivered == 2


async def test_defect_exactly_once_default_ack_deadline(ours: Wire, google: Wire) -> None:
    """Real service: 60 s when unset on an exactly-once subscription [doc]; emulator: 10 s."""

    async def default_deadline(wire: Wire) -> int:
        _, sub = await wire.subscription(enable_exactly_once_delivery=True)
        got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
        return int(got.ack_deadline_seconds)

    assert await default_deadline(google) == 10
    assert await default_deadline(ours) == 60


async def test_defect_max_outstanding_messages_ignored(ours: Wire, google: Wire) -> None:
    """StreamingPull max_outstanding_messages is server-side flow control; the emulator
    sends everything regardless."""

    async def delivered_with_limit_one(wire: Wire) -> int:
        topic, sub = await wire.subscription()
        await wire.publish(topic, b"1", b"2", b"3")
        stream = wire.stream(sub, max_outstanding_messages=1)
        received = list((await stream.next()).received_messages)
        while True:  # whatever else arrives promptly
            try:
                response = await asyncio.wait_for(stream.responses.get(), 0.5)
            except TimeoutError:
                return len(received)
            received.extend(response.received_messages)

    emulator_count, our_count = await asyncio.gather(
        delivered_with_limit_one(google), delivered_with_limit_one(ours)
    )
    assert emulator_count == 3
    assert our_count == 1


async def test_defect_ack_deadline_5_accepted(ours: Wire, google: Wire) -> None:
    """ack_deadline_seconds must be 10..600; the emulator accepts 5 (it rejects 601)."""
    for wire, accepted in ((google, True), (ours, False)):
        topic = await wire.topic()
        create = wire.CreateSubscription(
            pb.Subscription(name=unique("sub"), topic=topic, ack_deadline_seconds=5)
        )
        if accepted:
            assert (await create).ack_deadline_seconds == 5
        else:
            assert (await rpc_error(create)).code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_defect_modack_601_accepted(ours: Wire, google: Wire) -> None:
    """ModifyAckDeadline seconds must be 0..600; the emulator accepts 601."""
    for wire, accepted in ((google, True), (ours, False)):
        topic, sub = await wire.subscription()
        await wire.publish(topic, b"m")
        [m] = await wire.pull(sub, 1)
        call = wire.ModifyAckDeadline(modack(sub, 601, m.ack_id))
        if accepted:
            await call
        else:
            assert (await rpc_error(call)).code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_defect_mixed_ordering_keys_in_one_publish_accepted(ours: Wire, google: Wire) -> None:
    """All messages of one PublishRequest must share an ordering key [proto]; the emulator
    accepts two keys."""
    messages = [
        pb.PubsubMessage(data=b"a", ordering_key="k1"),
        pb.PubsubMessage(data=b"b", ordering_key="k2"),
    ]
    for wire, accepted in ((google, True), (ours, False)):
        topic = await wire.topic()
        call = wire.Publish(pb.PublishRequest(topic=topic, messages=messages))
        if accepted:
            assert len((await call).message_ids) == 2
        else:
            assert (await rpc_error(call)).code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_defect_empty_status_message_on_exactly_once_failure(
    ours: Wire, google: Wire
) -> None:
    """The real service says why (docs/protocol.md#exactly-once-error-details); the
    emulator's message is empty."""

    async def failure_message(wire: Wire) -> str:
        topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
        await wire.publish(topic, b"m")
        [m] = await wire.pull(sub, 1)
        await wire.Acknowledge(ack(sub, m.ack_id))
        error = await rpc_error(wire.Acknowledge(ack(sub, m.ack_id)))
        status = Wire.rich_status(error)
        assert status is not None
        assert status.message == error.details()  # consistent on both
        return error.details() or ""

    assert await failure_message(google) == ""
    assert await failure_message(ours) == REAL_INVALID_TEXT
