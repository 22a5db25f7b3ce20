"""The pure dispatch core (``subscriber/dispatch.py``) and the ledger's routing, by tables and
Hypothesis: no event loop, no transport, time passed in."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient._proto import pubsub_pb2
from eoclient.subscriber.ack_records import Operation, Position
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.dispatch import Dispatcher
from eoclient.subscriber.ledger import AckLedger, AckMode
from eoclient.subscriber.message import Message
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    StreamSettings,
)
from eoclient.subscriber.waiters import deliver

T0 = 1000.0


class Sink:
    """The session's place as the messages' settlement sink, routed back to the core."""

    def __init__(self) -> None:
        self.dispatch: Dispatcher | None = None
        self.now = T0

    def settle(self, message: Message, operation: Operation, seconds: int) -> Position:
        assert self.dispatch is not None
        return self.dispatch.settle(message, operation, seconds, self.now)

    def extend(self, message: Message, seconds: int) -> Position:
        assert self.dispatch is not None
        return self.dispatch.extend(message, seconds, self.now)


def make(
    max_messages: int = 1000, *, max_lease: float = 3600.0
) -> tuple[Dispatcher, AckLedger, Sink]:
    ledger = AckLedger(AckRetrySettings())
    ledger.mode = AckMode.STREAM  # exactly-once results come as stream confirmations
    sink = Sink()
    dispatch = Dispatcher(
        ledger,
        sink,
        flow_control=FlowControl(max_messages=max_messages),
        lease=LeaseSettings(max_lease=max_lease),
        stream=StreamSettings(),
    )
    sink.dispatch = dispatch
    return dispatch, ledger, sink


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


def pending(ledger: AckLedger) -> list[tuple[str, Operation, int]]:
    """What the ledger sends now on an open stream, as (ack id, operation, seconds): acks
    first, then nacks and modacks, as on the wire."""
    sent: list[tuple[str, Operation, int]] = []
    for request in ledger.take(T0, stream_open=True, stopping=False).stream:
        sent += [(ack_id, Operation.ACK, 0) for ack_id in request.ack_ids]
        sent += [
            (ack_id, Operation.NACK if seconds == 0 else Operation.MODACK, seconds)
            for ack_id, seconds in zip(
                request.modify_deadline_ack_ids, request.modify_deadline_seconds, strict=True
            )
        ]
    return sent


def confirm(
    ledger: AckLedger, *, ack_ids: tuple[str, ...] = (), invalid: tuple[str, ...] = ()
) -> None:
    """The server's modify_ack_deadline_confirmation, handed back as the sender would."""
    response = pubsub_pb2.StreamingPullResponse()
    response.modify_ack_deadline_confirmation.ack_ids.extend(ack_ids)
    response.modify_ack_deadline_confirmation.invalid_ack_ids.extend(invalid)
    resolved, retry = ledger.on_confirmation(response)
    assert retry == []
    deliver(resolved)


# ---------------------------------------------------------------- tables


def test_plain_delivery_is_admitted_up_to_flow_control_and_modacked_on_receipt() -> None:
    dispatch, ledger, _ = make(max_messages=2)
    dispatch.on_response(response("a", "b", "c"), T0)
    assert [m.ack_id for m in take_all(dispatch)] == ["a", "b"]
    assert list(dispatch.held) == ["c"]
    # Receipt modacks with the lease deadline (10 s floor without exactly-once).
    assert pending(ledger) == [(i, Operation.MODACK, 10) for i in "abc"]


def test_settling_releases_room_for_a_held_message() -> None:
    dispatch, ledger, _ = make(max_messages=1)
    dispatch.on_response(response("a", "b"), T0)
    (a,) = take_all(dispatch)
    pending(ledger)
    a.ack()
    assert [m.ack_id for m in take_all(dispatch)] == ["b"]
    assert pending(ledger) == [("a", Operation.ACK, 0)]
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
    dispatch, ledger, _ = make()
    dispatch.on_response(response("a", exactly_once=True), T0)
    assert dispatch.take() is None  # waiting for the receipt's result
    assert pending(ledger) == [("a", Operation.MODACK, 60)]
    if status is AcknowledgeStatus.SUCCESS:
        confirm(ledger, ack_ids=("a",))
    elif status is AcknowledgeStatus.INVALID_ACK_ID:
        confirm(ledger, invalid=("a",))
    else:
        deliver(ledger.fail_all("gone"))
    assert [m.ack_id for m in take_all(dispatch)] == (["a"] if admitted else [])
    assert ("a" in dispatch.leases) is admitted


def test_ordered_messages_wait_for_their_key_and_their_receipts_in_order() -> None:
    dispatch, ledger, _ = make()
    dispatch.on_response(response("k1", exactly_once=True, key="key"), T0)
    dispatch.on_response(response("k2", exactly_once=True, key="key"), T0)
    assert [i for i, _, _ in pending(ledger)] == ["k1", "k2"]  # two receipt records
    confirm(ledger, ack_ids=("k2",))
    assert dispatch.take() is None  # k2 must not overtake k1
    confirm(ledger, ack_ids=("k1",))
    (k1,) = take_all(dispatch)
    assert k1.ack_id == "k1"  # k2 parked behind it: one out per key
    k1.ack()
    assert [m.ack_id for m in take_all(dispatch)] == ["k2"]


def test_a_nack_drops_the_keys_parked_messages() -> None:
    dispatch, ledger, _ = make()
    dispatch.on_response(response("k1", "k2", "k3", key="key"), T0)
    (k1,) = take_all(dispatch)
    pending(ledger)
    k1.nack()
    assert take_all(dispatch) == []
    assert len(dispatch.leases) == 0  # the server redelivers the key in order
    assert pending(ledger) == [("k1", Operation.NACK, 0)]


def test_stop_nacks_what_was_never_handed_out_and_admits_nothing_more() -> None:
    dispatch, ledger, _ = make(max_messages=1)
    dispatch.on_response(response("a", "b"), T0)
    dispatch.on_response(response("e", exactly_once=True), T0)
    assert ("e", Operation.MODACK, 60) in pending(ledger)
    dispatch.stop()
    assert sorted(i for i, op, _ in pending(ledger) if op is Operation.NACK) == ["a", "b"]
    confirm(ledger, ack_ids=("e",))
    assert pending(ledger) == [("e", Operation.NACK, 0)]
    dispatch.on_response(response("late"), T0)
    assert pending(ledger) == [("late", Operation.NACK, 0)]
    assert dispatch.take() is None


def test_nack_outstanding_settles_what_the_application_holds_as_other() -> None:
    dispatch, ledger, _ = make()
    dispatch.on_response(response("a"), T0)
    (a,) = take_all(dispatch)
    pending(ledger)
    dispatch.nack_outstanding()
    assert pending(ledger) == [("a", Operation.NACK, 0)]
    assert a.settled == "nack"
    a.ack()  # too late: reports the shutdown's nack
    position = a._settlement_position()
    assert position is not None
    record, index = position
    assert record.result(index) == AckResult(
        AcknowledgeStatus.OTHER, "shutdown initiated, already nacked"
    )
    assert pending(ledger) == []


def test_leases_are_renewed_when_due_and_released_past_max_lease() -> None:
    dispatch, ledger, _ = make(max_lease=30)
    dispatch.on_response(response("a"), T0)
    take_all(dispatch)
    pending(ledger)
    dispatch.due(T0 + 1)
    assert pending(ledger) == []  # nothing due yet
    dispatch.due(T0 + 9)
    assert pending(ledger) == [("a", Operation.MODACK, 10)]
    dispatch.due(T0 + 31)
    assert pending(ledger) == []
    assert dispatch.statistics().expired == 1
    assert dispatch.statistics().outstanding_messages == 0


def test_a_batch_is_released_message_by_message_and_entered_as_one_record() -> None:
    dispatch, ledger, _ = make(max_messages=2)
    dispatch.on_response(response("a", "b", "c"), T0)
    batch = dispatch.take_up_to(5)
    assert [m.ack_id for m in batch] == ["a", "b"]  # c waits for room
    pending(ledger)
    positions = dispatch.settle_batch(batch, Operation.ACK, 0, T0 + 1)
    assert [index for _, index in positions] == [0, 1]
    assert positions[0][0] is positions[1][0]
    assert [m.ack_id for m in take_all(dispatch)] == ["c"]  # both slots freed
    assert pending(ledger) == [("a", Operation.ACK, 0), ("b", Operation.ACK, 0)]
    assert "a" not in dispatch.leases


def test_a_failed_session_resolves_settlements_other_without_sending() -> None:
    dispatch, ledger, _ = make()
    dispatch.on_response(response("a"), T0)
    (a,) = take_all(dispatch)
    pending(ledger)
    dispatch.fail("stream refused")
    record, index = dispatch.settle(a, Operation.ACK, 0, T0)
    assert record.result(index) == AckResult(
        AcknowledgeStatus.OTHER, "the subscriber failed: stream refused"
    )
    assert pending(ledger) == []


# ------------------------------------------------------------- Hypothesis

steps = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.integers(1, 5), st.sampled_from(["", "k1", "k2"])),
        st.tuples(st.just("take"), st.integers(1, 5), st.just("")),
        st.tuples(st.sampled_from(["ack", "nack"]), st.integers(0, 9), st.just("")),
        st.tuples(st.just("advance"), st.integers(1, 40), st.just("")),
        st.tuples(st.sampled_from(["ack batch", "nack batch"]), st.integers(1, 5), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps=steps, max_messages=st.integers(1, 4))
def test_every_message_is_in_exactly_one_place_and_flow_control_holds(
    steps: list[tuple[str, int, str]], max_messages: int
) -> None:
    dispatch, ledger, sink = make(max_messages=max_messages, max_lease=60)
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
        elif action.endswith("batch"):
            batch = dispatch.take_up_to(n)
            operation = Operation.ACK if action == "ack batch" else Operation.NACK
            positions = dispatch.settle_batch(batch, operation, 0, sink.now)
            assert len({record for record, _ in positions}) <= 1  # one record for the batch
            for message, position in zip(batch, positions, strict=True):
                message._record_settlement(operation, position)
        elif taken:
            message = taken.pop(n % len(taken))
            message.ack() if action == "ack" else message.nack()
        pending(ledger)
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
