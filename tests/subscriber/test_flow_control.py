"""Client flow control: limits, FIFO holding, the single-oversized-message rule."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from eoclient.subscriber.flow_control import FlowGate, FlowGateStatistics
from eoclient.subscriber.settings import FlowControl


def test_admits_up_to_max_messages_then_holds_fifo() -> None:
    gate = FlowGate(FlowControl(max_messages=2, max_bytes=0))
    assert [gate.offer(key, 1) for key in "abcd"] == [True, True, False, False]
    assert gate.statistics() == FlowGateStatistics(2, 2, 2, 2)
    assert gate.release("a") == ["c"]
    assert gate.release("b") == ["d"]
    assert gate.release("c") == []
    assert gate.statistics() == FlowGateStatistics(1, 1, 0, 0)


def test_bytes_limit_and_fifo_blocks_smaller_messages_behind_a_large_one() -> None:
    gate = FlowGate(FlowControl(max_messages=0, max_bytes=100))
    assert gate.offer("a", 60)
    assert not gate.offer("big", 50)  # 110 > 100
    assert not gate.offer("small", 10)  # would fit, but must not overtake "big"
    assert gate.release("a") == ["big", "small"]
    assert gate.statistics() == FlowGateStatistics(2, 60, 0, 0)


def test_a_message_larger_than_max_bytes_passes_when_nothing_is_outstanding() -> None:
    gate = FlowGate(FlowControl(max_messages=10, max_bytes=100))
    assert gate.offer("huge", 1000)
    assert not gate.offer("next", 1)
    assert gate.release("huge") == ["next"]
    gate2 = FlowGate(FlowControl(max_messages=10, max_bytes=100))
    assert gate2.offer("a", 1)
    assert not gate2.offer("huge", 1000)
    assert gate2.release("a") == ["huge"]


def test_unlimited() -> None:
    gate = FlowGate(FlowControl(max_messages=0, max_bytes=0))
    assert all(gate.offer(str(i), 10**9) for i in range(100))


def test_release_is_idempotent_and_unknown_keys_are_ignored() -> None:
    gate = FlowGate(FlowControl(max_messages=1))
    assert gate.offer("a", 5)
    assert gate.release("a") == []
    assert gate.release("a") == []
    assert gate.release("never-seen") == []
    assert gate.statistics() == FlowGateStatistics(0, 0, 0, 0)


def test_releasing_a_held_message_can_unblock_the_next() -> None:
    gate = FlowGate(FlowControl(max_messages=0, max_bytes=10))
    assert gate.offer("a", 5)
    assert not gate.offer("big", 9)
    assert not gate.offer("small", 5)
    assert gate.release("big") == ["small"]  # e.g. discarded by the ordering gate


def test_drain_held_returns_held_keys_in_order_and_keeps_outstanding() -> None:
    gate = FlowGate(FlowControl(max_messages=1))
    for key in "abc":
        gate.offer(key, 3)
    assert gate.drain_held() == ["b", "c"]
    assert gate.statistics() == FlowGateStatistics(1, 3, 0, 0)
    assert "a" in gate
    assert "b" not in gate
    assert gate.is_outstanding("a")


def test_offer_rejects_duplicates_and_negative_sizes() -> None:
    gate = FlowGate(FlowControl(max_messages=1))
    gate.offer("a", 1)
    gate.offer("b", 1)
    with pytest.raises(ValueError, match="'a' is already in the gate"):
        gate.offer("a", 1)
    with pytest.raises(ValueError, match="'b' is already in the gate"):
        gate.offer("b", 1)
    with pytest.raises(ValueError, match="size must be >= 0"):
        gate.offer("c", -1)


def test_repr() -> None:
    gate = FlowGate(FlowControl(max_messages=1, max_bytes=0))
    gate.offer("a", 7)
    gate.offer("b", 3)
    assert repr(gate) == (
        "<FlowGate outstanding=1/1 messages, 7/unlimited bytes; held=1 messages, 3 bytes>"
    )


class FlowGateMachine(RuleBasedStateMachine):
    """A model of every key's state, checked against the gate after each step."""

    offered = Bundle("offered")

    def __init__(self) -> None:
        super().__init__()
        self.gate = FlowGate(FlowControl())
        self.sizes: dict[str, int] = {}
        self.outstanding: set[str] = set()
        self.held: list[str] = []
        self.gone: set[str] = set()
        self.counter = 0

    @initialize(max_messages=st.integers(0, 4), max_bytes=st.integers(0, 50))
    def configure(self, max_messages: int, max_bytes: int) -> None:
        self.gate = FlowGate(FlowControl(max_messages=max_messages, max_bytes=max_bytes))

    @rule(target=offered, size=st.integers(0, 30))
    def offer(self, size: int) -> str:
        key = f"m{self.counter}"
        self.counter += 1
        self.sizes[key] = size
        if self.gate.offer(key, size):
            assert not self.held, "a message overtook held ones"
            self.outstanding.add(key)
        else:
            self.held.append(key)
        return key

    @rule(key=consumes(offered))
    def release(self, key: str) -> None:
        if key in self.gone:  # drained earlier: releasing it again changes nothing
            before = self.gate.statistics()
            assert self.gate.release(key) == []
            assert self.gate.statistics() == before
            return
        admitted = self.gate.release(key)
        self._forget(key)
        assert admitted == self.held[: len(admitted)], "not FIFO"
        del self.held[: len(admitted)]
        self.outstanding.update(admitted)
        # Released as far as possible: the next held one really does not fit.
        if self.held:
            assert self.outstanding, "held messages while nothing is outstanding"

    @rule()
    def release_unknown(self) -> None:
        before = self.gate.statistics()
        assert self.gate.release("unknown") == []
        assert self.gate.statistics() == before

    @rule()
    def drain(self) -> None:
        drained = self.gate.drain_held()
        assert drained == self.held
        self.gone.update(drained)
        self.held.clear()

    def _forget(self, key: str) -> None:
        assert key not in self.gone, "a key left the gate twice"
        self.outstanding.discard(key)
        if key in self.held:
            self.held.remove(key)
        self.gone.add(key)

    @invariant()
    def matches_the_model(self) -> None:
        stats = self.gate.statistics()
        limits = self.gate.limits
        outstanding_bytes = sum(self.sizes[k] for k in self.outstanding)
        assert stats == FlowGateStatistics(
            outstanding_messages=len(self.outstanding),
            outstanding_bytes=outstanding_bytes,
            held_messages=len(self.held),
            held_bytes=sum(self.sizes[k] for k in self.held),
        )
        assert min(stats.outstanding_bytes, stats.held_bytes, stats.held_messages) >= 0
        if len(self.outstanding) > 1:  # limits hold except for one lone oversized message
            assert not limits.max_messages or len(self.outstanding) <= limits.max_messages
            assert not limits.max_bytes or outstanding_bytes <= limits.max_bytes
        # Each offered key is in exactly one place.
        assert len(self.outstanding) + len(self.held) + len(self.gone) == len(self.sizes)
        assert all(key in self.gate for key in self.outstanding | set(self.held))
        assert not any(key in self.gate for key in self.gone)


FlowGateMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30)
TestFlowGateMachine = FlowGateMachine.TestCase
