"""StreamingPull over the wire: first-request rules, server-side flow control, exactly-once
confirmations, subscription_properties, keep-alives, dropped streams and injected faults.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer
from eoclient.server_stub.services.streaming_pull import StreamingPullSession

PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"


# ------------------------------------------------------------ first request


@pytest.mark.parametrize(
    ("first", "code", "words"),
    [
        ({"subscription": ""}, grpc.StatusCode.INVALID_ARGUMENT, "subscription"),
        ({"stream_ack_deadline_seconds": 0}, grpc.StatusCode.INVALID_ARGUMENT, "stream_ack"),
        ({"stream_ack_deadline_seconds": 9}, grpc.StatusCode.INVALID_ARGUMENT, "between 10"),
        ({"stream_ack_deadline_seconds": 601}, grpc.StatusCode.INVALID_ARGUMENT, "between 10"),
        (
            {"modify_deadline_seconds": [10], "modify_deadline_ack_ids": []},
            grpc.StatusCode.INVALID_ARGUMENT,
            "same length",
        ),
        (
            {"subscription": "projects/p1/subscriptions/does-not-exist"},
            grpc.StatusCode.NOT_FOUND,
            "does-not-exist",
        ),
        ({"subscription": "not/a/name"}, grpc.StatusCode.INVALID_ARGUMENT, "not/a/name"),
    ],
)
async def test_first_request_is_validated(
    wire: Wire, first: dict[str, Any], code: grpc.StatusCode, words: str
) -> None:
    _, sub = await wire.subscription()
    fields: dict[str, Any] = {"stream_ack_deadline_seconds": 30, **first}
    subscription = fields.pop("subscription", sub)
    stream = wire.stream(subscription, **fields)
    error = await stream.ended()
    assert error is not None
    assert error.code() == code
    assert words in (error.details() or "")


@pytest.mark.parametrize(
    "later",
    [
        {"subscription": "SAME"},
        {"max_outstanding_messages": 5},
        {"max_outstanding_bytes": 5},
        {"modify_deadline_ack_ids": ["x"]},
        {"stream_ack_deadline_seconds": 5},
    ],
)
async def test_later_requests_may_not_set_first_request_fields(
    wire: Wire, later: dict[str, Any]
) -> None:
    topic, sub = await wire.subscription()
    stream = wire.stream(sub)
    await wire.publish(topic, b"m")
    await stream.messages(1)
    if later.get("subscription") == "SAME":
        later = {"subscription": sub}
    stream.send(**later)
    error = await stream.ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_half_close_ends_the_call_with_ok(wire: Wire) -> None:
    _, sub = await wire.subscription()
    stream = wire.stream(sub)
    stream.half_close()
    assert await stream.ended() is None


async def test_stream_ack_deadline_may_be_updated(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription()
    stream = wire.stream(sub, stream_ack_deadline_seconds=10, protocol_version=1)
    stream.send(stream_ack_deadline_seconds=100)
    await stream.next()  # (answered like a keep-alive) the update is applied
    await wire.publish(topic, b"m")
    [m] = await stream.messages(1)
    clock.advance(50)
    reference.tick()
    await stream.quiet()  # leased for 100 s, not 10
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[m.ack_id]))


# ------------------------------------------------------------- flow control


async def test_max_outstanding_messages_is_honoured(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    stream = wire.stream(sub, max_outstanding_messages=2)
    await wire.publish(topic, *[b"%d" % i for i in range(5)])
    first_two = await stream.messages(2)
    await stream.quiet()
    stream.send(ack_ids=[first_two[0].ack_id])
    confirmation = await stream.next()
    assert list(confirmation.acknowledge_confirmation.ack_ids) == [first_two[0].ack_id]
    [third] = await stream.messages(1)
    await stream.quiet()
    # A nack (modack 0) frees room too; the nacked message comes back.
    stream.send(modify_deadline_ack_ids=[third.ack_id], modify_deadline_seconds=[0])
    await stream.next()  # its modify_ack_deadline_confirmation
    redelivered = await stream.messages(1)
    assert redelivered[0].message.data in {b"2", b"3"}
    await stream.quiet()


async def test_max_outstanding_bytes_is_honoured(wire: Wire) -> None:
    topic, sub = await wire.subscription()
    # 100-byte messages, limit 250: the server stops once 250 bytes or more are out
    # (the third message may overshoot, as the proto comment allows).
    stream = wire.stream(sub, max_outstanding_bytes=250)
    await wire.publish(topic, *[bytes([65 + i]) * 100 for i in range(5)])
    received = await stream.messages(3)
    await stream.quiet()
    stream.send(ack_ids=[received[0].ack_id])
    await stream.messages(1)
    await stream.quiet()


async def test_a_message_larger_than_max_bytes_is_still_delivered(wire: Wire) -> None:
    topic, sub = await wire.subscription()
    stream = wire.stream(sub, max_outstanding_bytes=10)
    await wire.publish(topic, b"x" * 100, b"y" * 100)
    [big] = await stream.messages(1)
    await stream.quiet()
    stream.send(ack_ids=[big.ack_id])
    await stream.messages(1)


async def test_zero_or_negative_limits_mean_unlimited(wire: Wire) -> None:
    topic, sub = await wire.subscription()
    stream = wire.stream(sub, max_outstanding_messages=-1, max_outstanding_bytes=0)
    await wire.publish(topic, *[b"m"] * 50)
    await stream.messages(50)


# ------------------------------------------------ confirmations (exactly-once)


async def test_acks_and_modacks_on_the_stream_are_confirmed(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    stream = wire.stream(sub)
    await wire.publish(topic, b"a", b"b", b"c")
    a, b, c = await stream.messages(3)
    stream.send(ack_ids=[a.ack_id, "bogus"])
    response = await stream.next()
    assert not response.received_messages
    confirmation = response.acknowledge_confirmation
    assert list(confirmation.ack_ids) == [a.ack_id]
    assert list(confirmation.invalid_ack_ids) == ["bogus"]
    assert not confirmation.unordered_ack_ids
    assert not confirmation.temporary_failed_ack_ids
    assert response.subscription_properties.exactly_once_delivery_enabled

    stream.send(
        modify_deadline_ack_ids=[b.ack_id, a.ack_id, c.ack_id],
        modify_deadline_seconds=[30, 30, 0],
    )
    response = await stream.next()
    modacks = response.modify_ack_deadline_confirmation
    assert sorted(modacks.ack_ids) == sorted([b.ack_id, c.ack_id])
    assert list(modacks.invalid_ack_ids) == [a.ack_id]  # acked already
    [c_again] = await stream.messages(1)  # the nacked one comes back with a new id
    assert c_again.message.message_id == c.message.message_id
    assert c_again.ack_id != c.ack_id


async def test_unordered_and_temporary_failures_are_confirmed_in_their_lists(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(
        enable_exactly_once_delivery=True, enable_message_ordering=True
    )
    stream = wire.stream(sub)
    first_id, _ = await wire.publish(topic, b"1", b"2", ordering_key="k")
    one, two = await stream.messages(2)
    reference.inject_ack_failure(sub, first_id, "TRANSIENT_FAILURE_OTHER")
    stream.send(ack_ids=[two.ack_id, one.ack_id])
    response = await stream.next()
    confirmation = response.acknowledge_confirmation
    assert list(confirmation.unordered_ack_ids) == [two.ack_id]
    assert list(confirmation.temporary_failed_ack_ids) == [one.ack_id]
    assert not confirmation.ack_ids
    assert response.subscription_properties.message_ordering_enabled

    reference.inject_ack_failure(sub, first_id, "TRANSIENT_FAILURE_OTHER", operations=["modack"])
    stream.send(modify_deadline_ack_ids=[one.ack_id], modify_deadline_seconds=[30])
    response = await stream.next()
    modacks = response.modify_ack_deadline_confirmation
    assert list(modacks.temporary_failed_ack_ids) == [one.ack_id]
    assert not modacks.ack_ids

    stream.send(ack_ids=[one.ack_id, two.ack_id])  # in order: both confirmed
    response = await stream.next()
    assert list(response.acknowledge_confirmation.ack_ids) == [one.ack_id, two.ack_id]


async def test_no_confirmations_without_exactly_once(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription()
    stream = wire.stream(sub, protocol_version=1)
    [message_id] = await wire.publish(topic, b"a")
    [a] = await stream.messages(1)
    stream.send(ack_ids=[a.ack_id], modify_deadline_ack_ids=[a.ack_id], modify_deadline_seconds=[9])
    await stream.sync()  # the next response answers the keep-alive: no confirmation came
    history = reference.history(sub, message_id)
    assert [x.ack_id for x in history.successful_acks] == [a.ack_id]


async def test_malformed_ack_id_on_a_plain_stream_is_ignored(wire: Wire) -> None:
    # A bad ack id fails alone; it never ends the stream nor drops the other acks
    # of its request (the proto's "aborted with INVALID_ARGUMENT" is not followed).
    topic, sub = await wire.subscription()
    stream = wire.stream(sub, protocol_version=1)
    await wire.publish(topic, b"a")
    [a] = await stream.messages(1)
    stream.send(ack_ids=["bogus", a.ack_id, "x-\u00b2-1"])
    await stream.sync()
    await wire.pull_nothing(sub)  # a was acknowledged
    await wire.publish(topic, b"b")
    await stream.messages(1)  # the stream still delivers


async def test_acks_for_another_streams_messages_are_accepted(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    one = wire.stream(sub)
    await wire.publish(topic, b"m")
    [m] = await one.messages(1)
    other = wire.stream(sub)
    other.send(ack_ids=[m.ack_id])
    response = await other.next()
    assert list(response.acknowledge_confirmation.ack_ids) == [m.ack_id]


# ------------------------------------------------- properties and keep-alive


@pytest.mark.parametrize(("exactly_once", "ordering"), [(False, False), (True, True)])
async def test_subscription_properties_in_every_response(
    wire: Wire, exactly_once: bool, ordering: bool
) -> None:
    topic, sub = await wire.subscription(
        enable_exactly_once_delivery=exactly_once, enable_message_ordering=ordering
    )
    stream = wire.stream(sub, protocol_version=1)
    await wire.publish(topic, b"m")
    responses = [await stream.next()]
    stream.send()  # keep-alive
    responses.append(await stream.next())
    stream.send(ack_ids=[responses[0].received_messages[0].ack_id])
    if exactly_once:
        responses.append(await stream.next())  # the confirmation
    for response in responses:
        assert response.HasField("subscription_properties")
        properties = response.subscription_properties
        assert properties.exactly_once_delivery_enabled == exactly_once
        assert properties.message_ordering_enabled == ordering


async def test_keepalive_is_answered_only_under_protocol_version_1(wire: Wire) -> None:
    _, sub = await wire.subscription()
    old = wire.stream(sub)
    old.send()
    await old.quiet()
    new = wire.stream(sub, protocol_version=1)
    new.send()
    response = await new.next()
    assert not response.received_messages
    assert response.HasField("subscription_properties")


# ------------------------------------------------------ expiry and redelivery


async def test_expired_stream_lease_is_redelivered_with_a_new_id(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    stream = wire.stream(sub, stream_ack_deadline_seconds=10, max_outstanding_messages=1)
    await wire.publish(topic, b"m")
    [first] = await stream.messages(1)
    clock.advance(10.5)
    reference.tick()
    [second] = await stream.messages(1)
    assert second.message.message_id == first.message.message_id
    stream.send(ack_ids=[first.ack_id, second.ack_id])
    response = await stream.next()
    assert list(response.acknowledge_confirmation.invalid_ack_ids) == [first.ack_id]
    assert list(response.acknowledge_confirmation.ack_ids) == [second.ack_id]


async def test_ordered_stream_delivers_each_key_in_order(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_message_ordering=True)
    stream = wire.stream(sub)
    for i in range(10):
        await wire.publish(topic, b"a%d" % i, ordering_key="a")
        await wire.publish(topic, b"b%d" % i, ordering_key="b")
    received = await stream.messages(20)
    for key in ("a", "b"):
        data = [m.message.data for m in received if m.message.ordering_key == key]
        assert data == [b"%s%d" % (key.encode(), i) for i in range(10)]


# ----------------------------------------------------- faults and shutdown


async def test_dropped_stream_ends_with_unavailable_and_leases_survive(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    stream = wire.stream(sub)
    await wire.publish(topic, b"m")
    [m] = await stream.messages(1)
    assert reference.open_streams() == 1
    assert reference.drop_streams("UNAVAILABLE") == 1
    error = await stream.ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    # The lease outlives its stream: the id can still be acked by a unary call.
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[m.ack_id]))
    assert reference.open_streams() == 0


async def test_a_dropped_stream_sends_the_confirmations_already_decided(
    wire: Wire, reference: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server drops a stream just after applying an ack (a drop
    # arriving between the ack and its confirmation). The confirmation must still reach
    # the client before the status: lost, the client would retry the ack by unary call,
    # find it settled, and have to report OTHER instead of SUCCESS.
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    stream = wire.stream(sub)
    await wire.publish(topic, b"m")
    [m] = await stream.messages(1)
    receive = StreamingPullSession.receive

    def receive_then_drop(session: Any, request: pb.StreamingPullRequest) -> None:
        receive(session, request)
        if request.ack_ids:
            reference.drop_streams("UNAVAILABLE")

    monkeypatch.setattr(StreamingPullSession, "receive", receive_then_drop)
    stream.send(ack_ids=[m.ack_id])
    confirmation = (await stream.next()).acknowledge_confirmation
    assert list(confirmation.ack_ids) == [m.ack_id]
    error = await stream.ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_injected_streaming_pull_fault(wire: Wire, reference: ReferenceServer) -> None:
    _, sub = await wire.subscription()
    reference.faults.fail("StreamingPull", "UNAVAILABLE", "go away", times=1)
    failed = wire.stream(sub)
    error = await failed.ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert error.details() == "go away"
    ok = wire.stream(sub, protocol_version=1)
    ok.send()
    await ok.next()


async def test_deleting_the_subscription_ends_its_streams(wire: Wire) -> None:
    _, sub = await wire.subscription()
    stream = wire.stream(sub, protocol_version=1)
    stream.send()
    await stream.next()
    await wire.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=sub))
    error = await stream.ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_server_shutdown_ends_streams_with_unavailable(
    wire_factory: Any, clock: FakeClock
) -> None:
    from eoclient.server_stub.server import run_server

    async with run_server(clock=clock) as server:
        client: Wire = wire_factory(server.address)
        _, sub = await client.subscription()
        stream = client.stream(sub, protocol_version=1)
        stream.send()
        await stream.next()
    error = await stream.ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_large_deliveries_fit_the_default_4_mib_receive_limit(wire: Wire) -> None:
    # The raw channel keeps gRPC's default 4 MiB receive limit: six 1 MB messages leased
    # together must arrive in several responses, not one 6 MB response.
    topic, sub = await wire.subscription()
    for i in range(6):
        await wire.publish(topic, bytes([65 + i]) * 1_000_000)
    stream = wire.stream(sub)
    received = await stream.messages(6)
    assert sorted(m.message.data[:1] for m in received) == [bytes([65 + i]) for i in range(6)]
