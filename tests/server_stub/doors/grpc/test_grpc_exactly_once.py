"""Every exactly-once rule over the wire: unary Acknowledge / ModifyAckDeadline.

The failure shape is the real service's (docs/protocol.md#exactly-once-error-details):
INVALID_ARGUMENT, the real message text, and a google.rpc.Status in
``grpc-status-details-bin`` whose code and message equal the call's and whose details[0] is
ErrorInfo(EXACTLY_ONCE_ACKID_FAILURE, pubsub.googleapis.com, ack id → failure). The server
runs on a FakeClock.
"""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer

# The real service's texts (docs/protocol.md#exactly-once-error-details).
INVALID_TEXT = (
    "Some acknowledgement ids in the request were invalid. This could be because the "
    "acknowledgement ids have expired or the acknowledgement ids were malformed."
)
UNORDERED_TEXT = "Some acknowledgement ids in the request were sent out of order"
PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"
UNORDERED = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"


def ack(sub: str, *ids: str) -> pb.AcknowledgeRequest:
    return pb.AcknowledgeRequest(subscription=sub, ack_ids=ids)


def modack(sub: str, seconds: int, *ids: str) -> pb.ModifyAckDeadlineRequest:
    return pb.ModifyAckDeadlineRequest(subscription=sub, ack_ids=ids, ack_deadline_seconds=seconds)


def assert_eod_failure(
    error: grpc.aio.AioRpcError, expected: dict[str, str], text: str = INVALID_TEXT
) -> None:
    """The exact real-service shape, as the official client's ``rpc_status.from_call`` needs."""
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == text
    status = Wire.rich_status(error)
    assert status is not None, "no grpc-status-details-bin trailer"
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert status.message == error.details()
    info = Wire.error_info(error)
    assert info is not None, "details[0] is not an ErrorInfo"
    assert info.reason == "EXACTLY_ONCE_ACKID_FAILURE"
    assert info.domain == "pubsub.googleapis.com"
    assert dict(info.metadata) == expected


async def eod_failure(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


# ------------------------------------------------------------------ defaults


async def test_exactly_once_subscription_defaults_to_60_second_deadline(wire: Wire) -> None:
    topic, eod = await wire.subscription(enable_exactly_once_delivery=True)
    _, plain = await wire.subscription(topic)
    _, explicit = await wire.subscription(
        topic, enable_exactly_once_delivery=True, ack_deadline_seconds=20
    )
    got = [
        (await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=s))).ack_deadline_seconds
        for s in (eod, plain, explicit)
    ]
    assert got == [60, 10, 20]


async def test_pull_lease_uses_the_subscription_deadline(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    await wire.publish(topic, b"m")
    [first] = await wire.pull(sub, 1)
    clock.advance(59)
    await wire.pull_nothing(sub)  # no redelivery while the lease is live (60 s default)
    clock.advance(1.5)
    [again] = await wire.pull(sub, 1)
    assert again.ack_id != first.ack_id
    assert again.message.message_id == first.message.message_id
    assert len(reference.history(sub, first.message.message_id).deliveries) == 2


# ------------------------------------------------------- the failure shape


async def test_superseded_ack_id_fails_with_the_real_shape(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    await wire.publish(topic, b"m")
    [old] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(modack(sub, 0, old.ack_id))  # nack
    [new] = await wire.pull(sub, 1)
    assert new.ack_id != old.ack_id

    error = await eod_failure(wire.Acknowledge(ack(sub, old.ack_id)))
    assert_eod_failure(error, {old.ack_id: PERMANENT})
    error = await eod_failure(wire.ModifyAckDeadline(modack(sub, 30, old.ack_id)))
    assert_eod_failure(error, {old.ack_id: PERMANENT})

    await wire.Acknowledge(ack(sub, new.ack_id))  # the latest id still works


async def test_partial_success_applies_the_valid_ids(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    await wire.publish(topic, b"a", b"b")
    first, second = await wire.pull(sub, 2)
    await wire.ModifyAckDeadline(modack(sub, 0, first.ack_id))
    [first_again] = await wire.pull(sub, 1)

    error = await eod_failure(wire.Acknowledge(ack(sub, first.ack_id, second.ack_id)))
    assert_eod_failure(error, {first.ack_id: PERMANENT})
    # second was applied: acking it again is invalid, and it is never redelivered.
    error = await eod_failure(wire.Acknowledge(ack(sub, second.ack_id)))
    assert_eod_failure(error, {second.ack_id: PERMANENT})
    history = reference.history(sub, second.message.message_id)
    assert [a.ack_id for a in history.successful_acks] == [second.ack_id]

    # ModifyAckDeadline: the same per-id rule.
    error = await eod_failure(
        wire.ModifyAckDeadline(modack(sub, 30, first.ack_id, first_again.ack_id))
    )
    assert_eod_failure(error, {first.ack_id: PERMANENT})
    modacks = reference.history(sub, first.message.message_id).modacks
    assert [(m.ack_id, m.seconds, m.failure) for m in modacks][-2:] == [
        (first.ack_id, 30, PERMANENT),
        (first_again.ack_id, 30, ""),
    ]


async def test_expired_id_is_invalid_even_before_redelivery(wire: Wire, clock: FakeClock) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    await wire.publish(topic, b"a", b"b")
    first, second = await wire.pull(sub, 2)
    clock.advance(10.5)  # both leases expired; nothing pulled them again yet
    error = await eod_failure(wire.Acknowledge(ack(sub, first.ack_id)))
    assert_eod_failure(error, {first.ack_id: PERMANENT})
    error = await eod_failure(wire.ModifyAckDeadline(modack(sub, 60, second.ack_id)))
    assert_eod_failure(error, {second.ack_id: PERMANENT})
    # The failed ack did not settle anything: both come back.
    again = await wire.pull(sub, 2)
    assert sorted(m.message.data for m in again) == [b"a", b"b"]


async def test_modack_extends_the_lease(wire: Wire, clock: FakeClock) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    await wire.publish(topic, b"a")
    [m] = await wire.pull(sub, 1)
    clock.advance(8)
    await wire.ModifyAckDeadline(modack(sub, 30, m.ack_id))
    clock.advance(25)  # 33 s after delivery, 25 s after the extension to 30 s
    await wire.pull_nothing(sub)
    await wire.Acknowledge(ack(sub, m.ack_id))
    clock.advance(60)
    await wire.pull_nothing(sub)


async def test_acked_id_cannot_be_acked_or_modacked_again(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    await wire.publish(topic, b"m")
    [m] = await wire.pull(sub, 1)
    await wire.Acknowledge(ack(sub, m.ack_id))
    error = await eod_failure(wire.Acknowledge(ack(sub, m.ack_id)))
    assert_eod_failure(error, {m.ack_id: PERMANENT})
    error = await eod_failure(wire.ModifyAckDeadline(modack(sub, 0, m.ack_id)))
    assert_eod_failure(error, {m.ack_id: PERMANENT})
    await wire.pull_nothing(sub)


async def test_unknown_and_foreign_ids_are_permanent_failures(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    _, other = await wire.subscription(topic, enable_exactly_once_delivery=True)
    await wire.publish(topic, b"m")
    [foreign] = await wire.pull(other, 1)
    [mine] = await wire.pull(sub, 1)
    ids = ["bogus", foreign.ack_id, mine.ack_id]
    error = await eod_failure(wire.Acknowledge(ack(sub, *ids)))
    assert_eod_failure(error, {"bogus": PERMANENT, foreign.ack_id: PERMANENT})
    await wire.Acknowledge(ack(other, foreign.ack_id))  # untouched on its own subscription


# ------------------------------------------------------------------ ordering


async def test_ordering_out_of_order_ack_is_transient_then_succeeds_in_order(
    wire: Wire,
) -> None:
    topic, sub = await wire.subscription(
        enable_exactly_once_delivery=True, enable_message_ordering=True
    )
    await wire.publish(topic, b"1", b"2", b"3", ordering_key="k")
    one, two, three = await wire.pull(sub, 3)
    assert [m.message.data for m in (one, two, three)] == [b"1", b"2", b"3"]

    error = await eod_failure(wire.Acknowledge(ack(sub, two.ack_id)))
    assert_eod_failure(error, {two.ack_id: UNORDERED}, UNORDERED_TEXT)
    # The rejected ack was not applied; acking in order now works, in one request too.
    await wire.Acknowledge(ack(sub, one.ack_id))
    await wire.Acknowledge(ack(sub, two.ack_id, three.ack_id))
    await wire.pull_nothing(sub)


async def test_ordering_nack_redelivers_the_rest_of_the_key_in_order(
    wire: Wire, clock: FakeClock
) -> None:
    topic, sub = await wire.subscription(
        enable_exactly_once_delivery=True, enable_message_ordering=True, ack_deadline_seconds=10
    )
    await wire.publish(topic, b"1", b"2", b"3", ordering_key="k")
    await wire.publish(topic, b"x", ordering_key="other")
    first = await wire.pull(sub, 4)
    by_data = {m.message.data: m for m in first}
    await wire.ModifyAckDeadline(modack(sub, 0, by_data[b"1"].ack_id))
    again = await wire.pull(sub, 3)
    assert [m.message.data for m in again] == [b"1", b"2", b"3"]
    # The later messages' earlier ids were superseded by their redelivery.
    error = await eod_failure(wire.Acknowledge(ack(sub, by_data[b"2"].ack_id)))
    assert_eod_failure(error, {by_data[b"2"].ack_id: PERMANENT})
    await wire.Acknowledge(ack(sub, *[m.ack_id for m in again], by_data[b"x"].ack_id))
    # Expiry rewinds a key the same way: 4 lapses while 5 is extended; both come back.
    await wire.publish(topic, b"4", b"5", ordering_key="k")
    _, five = await wire.pull(sub, 2)
    await wire.ModifyAckDeadline(modack(sub, 60, five.ack_id))
    clock.advance(11)
    assert [m.message.data for m in await wire.pull(sub, 2)] == [b"4", b"5"]


async def test_permanent_and_unordered_failures_in_one_request(wire: Wire) -> None:
    topic, sub = await wire.subscription(
        enable_exactly_once_delivery=True, enable_message_ordering=True
    )
    await wire.publish(topic, b"1", b"2", ordering_key="k")
    _, two = await wire.pull(sub, 2)
    error = await eod_failure(wire.Acknowledge(ack(sub, "bogus", two.ack_id)))
    # Any permanent failure makes it the "invalid" text; the metadata lists both.
    assert_eod_failure(error, {"bogus": PERMANENT, two.ack_id: UNORDERED})


async def test_unordered_ack_on_different_keys_succeeds(wire: Wire) -> None:
    topic, sub = await wire.subscription(
        enable_exactly_once_delivery=True, enable_message_ordering=True
    )
    await wire.publish(topic, b"a1", ordering_key="a")
    await wire.publish(topic, b"b1", ordering_key="b")
    received = await wire.pull(sub, 2)
    by_data = {m.message.data: m.ack_id for m in received}
    await wire.Acknowledge(ack(sub, by_data[b"b1"]))
    await wire.Acknowledge(ack(sub, by_data[b"a1"]))


# --------------------------------------------------------- without exactly-once


async def test_without_exactly_once_stale_ids_are_accepted(wire: Wire) -> None:
    topic, sub = await wire.subscription()
    await wire.publish(topic, b"m")
    [old] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(modack(sub, 0, old.ack_id))
    [new] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(modack(sub, 30, old.ack_id))  # OK, ignored
    await wire.Acknowledge(ack(sub, old.ack_id))  # OK: settles the message
    await wire.Acknowledge(ack(sub, new.ack_id))  # OK: already settled
    await wire.pull_nothing(sub)


async def test_without_exactly_once_malformed_id_is_plain_invalid_argument(wire: Wire) -> None:
    _, sub = await wire.subscription()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.Acknowledge(ack(sub, "bogus"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "bogus" in (caught.value.details() or "")
    assert Wire.error_info(caught.value) is None


@pytest.mark.parametrize("exactly_once", [False, True])
async def test_request_validation(wire: Wire, exactly_once: bool) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=exactly_once)
    await wire.publish(topic, b"m")
    [m] = await wire.pull(sub, 1)
    cases = [
        (wire.Acknowledge(ack(sub)), grpc.StatusCode.INVALID_ARGUMENT),
        (wire.ModifyAckDeadline(modack(sub, 10)), grpc.StatusCode.INVALID_ARGUMENT),
        (wire.ModifyAckDeadline(modack(sub, -1, m.ack_id)), grpc.StatusCode.INVALID_ARGUMENT),
        (wire.ModifyAckDeadline(modack(sub, 601, m.ack_id)), grpc.StatusCode.INVALID_ARGUMENT),
        (wire.Acknowledge(ack(sub + "-gone", m.ack_id)), grpc.StatusCode.NOT_FOUND),
    ]
    for call, code in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == code
        assert caught.value.details()
        assert Wire.error_info(caught.value) is None
    await wire.ModifyAckDeadline(modack(sub, 600, m.ack_id))  # the bounds are inclusive
    await wire.Acknowledge(ack(sub, m.ack_id))


# ------------------------------------------------------ injected ack failures


async def test_injected_transient_failure_is_invalid_argument_not_unavailable(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    [message_id] = await wire.publish(topic, b"m")
    reference.inject_ack_failure(sub, message_id, "TRANSIENT_FAILURE_OTHER", operations=["ack"])
    [m] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(modack(sub, 30, m.ack_id))  # modacks are not affected
    error = await eod_failure(wire.Acknowledge(ack(sub, m.ack_id)))
    status = Wire.rich_status(error)
    assert status is not None
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert status.message == error.details()
    info = Wire.error_info(error)
    assert info is not None
    assert dict(info.metadata) == {m.ack_id: "TRANSIENT_FAILURE_OTHER"}
    await wire.Acknowledge(ack(sub, m.ack_id))  # times=1: the retry succeeds
    assert [a.failure for a in reference.history(sub, message_id).acks] == [
        "TRANSIENT_FAILURE_OTHER",
        "",
    ]


async def test_injected_permanent_failure(wire: Wire, reference: ReferenceServer) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    [message_id] = await wire.publish(topic, b"m")
    reference.inject_ack_failure(sub, message_id, "PERMANENT_FAILURE_OTHER", times=-1)
    [m] = await wire.pull(sub, 1)
    error = await eod_failure(wire.Acknowledge(ack(sub, m.ack_id)))
    assert_eod_failure(error, {m.ack_id: "PERMANENT_FAILURE_OTHER"})


# ------------------------------------------------------------ delivery_attempt


async def test_delivery_attempt_counts_nacks_and_expiries_with_a_dead_letter_policy(
    wire: Wire, clock: FakeClock
) -> None:
    dead_letter = await wire.topic()
    topic, sub = await wire.subscription(
        enable_exactly_once_delivery=True,
        ack_deadline_seconds=10,
        dead_letter_policy=pb.DeadLetterPolicy(
            dead_letter_topic=dead_letter, max_delivery_attempts=10
        ),
    )
    _, plain = await wire.subscription(topic, enable_exactly_once_delivery=True)
    await wire.publish(topic, b"m")
    [first] = await wire.pull(sub, 1)
    await wire.ModifyAckDeadline(modack(sub, 0, first.ack_id))
    [second] = await wire.pull(sub, 1)
    clock.advance(11)
    [third] = await wire.pull(sub, 1)
    assert [m.delivery_attempt for m in (first, second, third)] == [1, 2, 3]

    [p] = await wire.pull(plain, 1)
    assert p.delivery_attempt == 0  # only populated with a dead-letter policy


# --------------------------------------------------------------- RPC faults


@pytest.mark.parametrize("method", ["Acknowledge", "ModifyAckDeadline", "Pull"])
async def test_injected_rpc_fault_fails_the_next_call_only(
    wire: Wire, reference: ReferenceServer, method: str
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    await wire.publish(topic, b"m")
    [m] = await wire.pull(sub, 1)
    calls = {
        "Acknowledge": lambda: wire.Acknowledge(ack(sub, m.ack_id)),
        "ModifyAckDeadline": lambda: wire.ModifyAckDeadline(modack(sub, 20, m.ack_id)),
        "Pull": lambda: wire.Pull(pb.PullRequest(subscription=sub, max_messages=1)),
    }
    reference.faults.fail(method, "UNAVAILABLE", "try again", times=1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await calls[method]()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == "try again"
    if method != "Pull":
        await calls[method]()  # not applied the first time: the retry succeeds
    assert reference.history(sub, m.message.message_id).deliveries[0].ack_id == m.ack_id
