"""The pure dispatch core (``subscriber/dispatch.py``) and the ledger's routing, by tables and
Hypothesis: no event loop, no transport, time passed in."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient._proto import pubsub_pb2
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.acker import Acker, AckMode, AckRequest, Operation, _resolve
from eoclient.subscriber.dispatch import Dispatcher
from eoclient.subscriber.message import Message
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    StreamSettings,
)

T0 = 1000.0


class Sink:
    """The session's place as the messages' settlement sink, routed back to the core."""

    def __init__(self) -> None:
        self.dispatch: Dispatcher | None = None
        self.now = T0

    def settle(self, message: Message, operation: Operation, seconds: int) -> AckRequest:
        assert self.dispatch is not None
        return self.dispatch.settle(message, operation, seconds, self.now)

    def extend(self, message: Message, seconds: int) -> AckRequest:
        assert self.dispatch is not None
        return self.dispatch.extend(message, seconds, self.now)


def make(max_messages: int = 1000, *, max_lease: float = 3600.0) -> tuple[Dispatcher, Acker, Sink]:
    acker = Acker("projects/p/subscriptions/s", transport=Any, retry=AckRetrySettings())  # type: ignore[arg-type]
    sink = Sink()
    dispatch = Dispatcher(
        acker,
        sink,
        flow_control=FlowControl(max_messages=max_messages),
        lease=LeaseSettings(max_lease=max_lease),
        stream=StreamSettings(),
    )
    sink.dispatch = dispatch
    return dispatch, acker, sink


def response(*ack_ids: str, exactly_once: bool = False, key: str = "") -> Any:
    r = pubsub_pb2.StreamingPullResponse(
        received_messages=[
            pubsub_pb2.ReceivedMessage(
                ack_id=a,
                message=pubsub_pb2.PubsubMessage(data=b"x", message_id=f"m-{a}", ordering_key=key),
            )
            for a in ack_ids
        ]
    )
    r.subscription_properties.exactly_once_delivery_enabled = exactly_once
    return r


def take_all(dispatch: Dispatcher) -> list[Message]:
    taken: list[Message] = []
    while (message := dispatch.take()) is not None:
        taken.append(message)
    return taken


def pending(acker: Acker) -> list[tuple[str, Operation, int]]:
    return [(r.ack_id, r.operation, r.seconds) for r in acker.take_pending()]


# ---------------------------------------------------------------- tables


def test_plain_delivery_is_admitted_up_to_flow_control_and_modacked_on_receipt() -> None:
    dispatch, acker, _ = make(max_messages=2)
    dispatch.on_response(response("a", "b", "c"), T0)
    assert [m.ack_id for m in take_all(dispatch)] == ["a", "b"]
    assert list(dispatch.held) == ["c"]
    # Receipt modacks with the lease deadline (10 s floor without exactly-once).
    assert pending(acker) == [(i, Operation.MODACK, 10) for i in "abc"]


def test_settling_releases_room_for_a_held_message() -> None:
    dispatch, acker, _ = make(max_messages=1)
    dispatch.on_response(response("a", "b"), T0)
    (a,) = take_all(dispatch)
    acker.take_pending()
    a.ack()
    assert [m.ack_id for m in take_all(dispatch)] == ["b"]
    assert pending(acker) == [("a", Operation.ACK, 0)]
    assert "a" not in dispatch.leases


@pytest.mark.parametrize(
    ("status", "admitted"),
    [
        (AcknowledgeStatus.SUCCESS, True),
        (AcknowledgeStatus.INVALID_ACK_ID, False),
        (AcknowledgeStatus.OTHER, False),
    ],
)
def test_exactly_once_admits_only_after_a_successful_receipt(
    status: AcknowledgeStatus, admitted: bool
) -> None:
    dispatch, acker, _ = make()
    dispatch.on_response(response("a", exactly_once=True), T0)
    assert dispatch.take() is None  # waiting for the receipt's result
    (receipt,) = acker.take_pending()
    _resolve(receipt, AckResult(status))
    assert [m.ack_id for m in take_all(dispatch)] == (["a"] if admitted else [])
    assert ("a" in dispatch.leases) is admitted


def test_ordered_messages_wait_for_their_key_and_their_receipts_in_order() -> None:
    dispatch, acker, _ = make()
    dispatch.on_response(response("k1", "k2", exactly_once=True, key="key"), T0)
    first, second = acker.take_pending()
    _resolve(second, AckResult(AcknowledgeStatus.SUCCESS))
    assert dispatch.take() is None  # k2 must not overtake k1
    _resolve(first, AckResult(AcknowledgeStatus.SUCCESS))
    (k1,) = take_all(dispatch)
    assert k1.ack_id == "k1"  # k2 parked behind it: one out per key
    k1.ack()
    assert [m.ack_id for m in take_all(dispatch)] == ["k2"]


def test_a_nack_drops_the_keys_parked_messages() -> None:
    dispatch, acker, _ = make()
    dispatch.on_response(response("k1", "k2", "k3", key="key"), T0)
    (k1,) = take_all(dispatch)
    acker.take_pending()
    k1.nack()
    assert take_all(dispatch) == []
    assert len(dispatch.leases) == 0  # the server redelivers the key in order
    assert pending(acker) == [("k1", Operation.NACK, 0)]


def test_stop_nacks_what_was_never_handed_out_and_admits_nothing_more() -> None:
    dispatch, acker, _ = make(max_messages=1)
    dispatch.on_response(response("a", "b"), T0)
    dispatch.on_response(response("e", exactly_once=True), T0)
    (receipt_e,) = [r for r in acker.take_pending() if r.ack_id == "e"]
    dispatch.stop()
    assert sorted(i for i, op, _ in pending(acker) if op is Operation.NACK) == ["a", "b"]
    _resolve(receipt_e, AckResult(AcknowledgeStatus.SUCCESS))
    assert pending(acker) == [("e", Operation.NACK, 0)]
    dispatch.on_response(response("late"), T0)
    assert pending(acker) == [("late", Operation.NACK, 0)]
    assert dispatch.take() is None


def test_nack_outstanding_settles_what_the_application_holds_as_other() -> None:
    dispatch, acker, _ = make()
    dispatch.on_response(response("a"), T0)
    (a,) = take_all(dispatch)
    acker.take_pending()
    dispatch.nack_outstanding()
    assert pending(acker) == [("a", Operation.NACK, 0)]
    assert a.settled == "nack"
    a.ack()  # too late: reports the shutdown's nack
    assert a._settlement is not None
    assert a._settlement.result == AckResult(
        AcknowledgeStatus.OTHER, "shutdown initiated, already nacked"
    )
    assert acker.take_pending() == []


def test_leases_are_renewed_when_due_and_released_past_max_lease() -> None:
    dispatch, acker, _ = make(max_lease=30)
    dispatch.on_response(response("a"), T0)
    take_all(dispatch)
    acker.take_pending()
    dispatch.due(T0 + 1)
    assert acker.take_pending() == []  # nothing due yet
    dispatch.due(T0 + 9)
    assert pending(acker) == [("a", Operation.MODACK, 10)]
    dispatch.due(T0 + 31)
    assert acker.take_pending() == []
    assert dispatch.statistics().expired == 1
    assert dispatch.statistics().outstanding_messages == 0


def test_a_failed_session_resolves_settlements_other_without_sending() -> None:
    dispatch, acker, _ = make()
    dispatch.on_response(response("a"), T0)
    (a,) = take_all(dispatch)
    acker.take_pending()
    dispatch.failure = "stream refused"
    request = dispatch.settle(a, Operation.ACK, 0, T0)
    assert request.result == AckResult(
        AcknowledgeStatus.OTHER, "the subscriber failed: stream refused"
    )
    assert acker.take_pending() == []


# (exactly_once, mode, stream_open, stopping) -> (on the stream, by unary, left pending)
ROUTES = [
    (False, AckMode.UNKNOWN, True, False, ("all", "none", "none")),
    (False, AckMode.UNKNOWN, False, False, ("none", "none", "all")),
    (False, AckMode.UNKNOWN, False, True, ("none", "all", "none")),
    (True, AckMode.STREAM, True, False, ("all", "none", "none")),
    (True, AckMode.STREAM, False, False, ("none", "none", "all")),
    (True, AckMode.UNARY, True, False, ("none", "all", "none")),
    (True, AckMode.UNARY, False, False, ("none", "all", "none")),
    (True, AckMode.UNKNOWN, True, False, ("modacks", "all", "none")),
    (True, AckMode.UNKNOWN, False, False, ("none", "all", "none")),
]


@pytest.mark.parametrize(("exactly_once", "mode", "stream_open", "stopping", "expected"), ROUTES)
def test_routing_table(
    exactly_once: bool,
    mode: AckMode,
    stream_open: bool,
    stopping: bool,
    expected: tuple[str, str, str],
) -> None:
    _, acker, _ = make()
    acker.exactly_once, acker.mode = exactly_once, mode
    batch = [
        AckRequest("a", Operation.ACK, 0),
        AckRequest("n", Operation.NACK, 0),
        AckRequest("m", Operation.MODACK, 30),
    ]
    stream, unary = acker.route(list(batch), stream_open=stream_open, stopping=stopping)
    parts = {"all": batch, "none": [], "modacks": [batch[2]]}
    assert (stream, unary, acker.pending) == tuple(parts[e] for e in expected)


# ------------------------------------------------------------- Hypothesis

steps = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.integers(1, 5), st.sampled_from(["", "k1", "k2"])),
        st.tuples(st.just("take"), st.integers(1, 5), st.just("")),
        st.tuples(st.sampled_from(["ack", "nack"]), st.integers(0, 9), st.just("")),
        st.tuples(st.just("advance"), st.integers(1, 40), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps=steps, max_messages=st.integers(1, 4))
def test_every_message_is_in_exactly_one_place_and_flow_control_holds(
    steps: list[tuple[str, int, str]], max_messages: int
) -> None:
    dispatch, acker, sink = make(max_messages=max_messages, max_lease=60)
    taken: list[Message] = []
    counter = 0
    for action, n, key in steps:
        if action == "deliver":
            ids = [f"a{counter + i}" for i in range(n)]
            counter += n
            dispatch.on_response(response(*ids, key=key), sink.now)
        elif action == "take":
            for _ in range(n):
                message = dispatch.take()
                if message is not None:
                    taken.append(message)
        elif action == "advance":
            sink.now += n
            dispatch.due(sink.now)
        elif taken:
            message = taken.pop(n % len(taken))
            message.ack() if action == "ack" else message.nack()
        acker.take_pending()
        stats = dispatch.statistics()
        # Flow control counts what is out and what is ready to be taken; never too many.
        assert stats.outstanding_messages == len(dispatch.out) + len(dispatch.ready)
        assert stats.outstanding_messages <= max_messages
        ready = {m.ack_id for m in dispatch.ready}
        out = set(dispatch.out)
        held = set(dispatch.held)
        assert not ready & out
        assert not ready & held
        assert not out & held
        # Everything the core still tracks is leased (until acked, nacked or expired).
        assert all(a in dispatch.leases for a in ready | out | held)
        # One message out per ordering key at most.
        keys = [m.ordering_key for m in [*dispatch.out.values(), *dispatch.ready] if m.ordering_key]
        assert len(keys) == len(set(keys))
