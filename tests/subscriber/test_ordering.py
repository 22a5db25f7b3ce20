"""Per-ordering-key gate: one message out per key, in arrival order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eoclient.subscriber.ordering import OrderingGate, OrderingGateStatistics


def test_empty_key_passes_through() -> None:
    gate: OrderingGate[str] = OrderingGate()
    assert gate.offer("", "a")
    assert gate.offer("", "b")
    assert gate.done("") is None
    assert gate.statistics() == OrderingGateStatistics(active_keys=0, parked_messages=0)


def test_one_message_out_per_key_in_arrival_order() -> None:
    gate: OrderingGate[str] = OrderingGate()
    assert gate.offer("k", "k1")
    assert gate.offer("j", "j1")  # other keys are independent
    assert not gate.offer("k", "k2")
    assert not gate.offer("k", "k3")
    assert gate.statistics() == OrderingGateStatistics(active_keys=2, parked_messages=2)
    assert repr(gate) == "<OrderingGate active_keys=2 parked_messages=2>"
    assert gate.done("k") == "k2"
    assert gate.done("k") == "k3"
    assert gate.done("k") is None
    assert not gate.is_active("k")
    assert gate.offer("k", "k4")  # an idle key hands out at once


def test_done_on_inactive_key_is_ignored() -> None:
    gate: OrderingGate[int] = OrderingGate()
    assert gate.done("never") is None
    gate.offer("k", 1)
    assert gate.done("k") is None
    assert gate.done("k") is None
    assert gate.offer("k", 2)


def test_nack_sequence_discards_stale_copies_then_takes_redeliveries() -> None:
    gate: OrderingGate[str] = OrderingGate()
    gate.offer("k", "m1")
    gate.offer("k", "m2")
    gate.offer("k", "m3")
    # The application nacks m1: the server will redeliver m1, m2, m3.
    assert gate.discard_key("k") == ["m2", "m3"]
    assert gate.is_active("k")  # m1 is still out until done()
    assert not gate.offer("k", "m1'")  # a redelivery arriving before done() queues
    assert gate.done("k") == "m1'"
    assert gate.discard_key("unknown") == []


def test_drain_returns_parked_messages_in_arrival_order_across_keys() -> None:
    gate: OrderingGate[str] = OrderingGate()
    for key, item in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("a", "a3")]:
        gate.offer(key, item)
    assert gate.drain() == ["a2", "b2", "a3"]
    assert len(gate) == 0
    assert gate.statistics().active_keys == 2  # a1 and b1 are still out
    assert gate.done("a") is None


operations = st.lists(
    st.tuples(st.sampled_from(["offer", "done", "discard"]), st.sampled_from(["", "a", "b", "c"])),
    max_size=60,
)


@given(operations)
def test_per_key_order_is_arrival_order_and_never_two_out(ops: list[tuple[str, str]]) -> None:
    gate: OrderingGate[tuple[str, int]] = OrderingGate()
    arrived: dict[str, list[int]] = {}
    handed_out: dict[str, list[int]] = {}
    discarded: dict[str, list[int]] = {}
    out: dict[str, int] = {}  # key -> the message out
    for number, (op, key) in enumerate(ops):
        if op == "offer":
            arrived.setdefault(key, []).append(number)
            if gate.offer(key, (key, number)):
                if key:
                    assert key not in out, "two messages of one key out"
                    out[key] = number
                handed_out.setdefault(key, []).append(number)
        elif op == "done":
            released = gate.done(key)
            out.pop(key, None)
            if released is not None:
                assert released[0] == key
                out[key] = released[1]
                handed_out.setdefault(key, []).append(released[1])
        else:
            items = gate.discard_key(key)
            assert all(k == key for k, _ in items)
            discarded.setdefault(key, []).extend(n for _, n in items)
    drained = gate.drain()
    assert [n for _, n in drained] == sorted(n for _, n in drained)
    for key, numbers in arrived.items():
        if not key:
            assert handed_out.get(key) == numbers
            continue
        # Every arrival is accounted for once; what was handed out came in arrival order.
        given_out = handed_out.get(key, [])
        assert given_out == sorted(given_out)
        rest = discarded.get(key, []) + [n for k, n in drained if k == key]
        assert sorted(given_out + rest) == numbers
