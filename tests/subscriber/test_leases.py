"""Lease table on a fake clock: extensions due, batching, max_lease, and the no-lapse property."""

from __future__ import annotations

import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eoclient.subscriber.leases import (
    LeaseActions,
    LeaseStatistics,
    LeaseTable,
    ReleasedLease,
    renewal_margin,
)

T0 = 1000.0


@pytest.mark.parametrize(
    ("lease", "margin"),
    [(4, 2), (10, 5), (50, 5), (60, 6), (600, 60)],
)
def test_renewal_margin(lease: float, margin: float) -> None:
    assert renewal_margin(lease) == pytest.approx(margin)


def test_single_message_is_extended_margin_before_its_deadline() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 100, T0, deadline=60)
    assert table.next_wakeup(T0) == T0 + 54  # 60 - max(5, 6)
    assert not table.due(T0 + 53, 60)
    actions = table.due(T0 + 54, 60)
    assert actions == LeaseActions(extend=("a",), deadline_seconds=60)
    assert table.next_wakeup(T0 + 54) == T0 + 54 + 54


def test_receipt_modack_is_recorded_by_extended() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=10)  # stream ack deadline 10 s
    assert table.next_wakeup(T0) == T0 + 5
    table.extended(["a", "unknown"], 60, T0 + 0.1)  # receipt modack for 60 s
    assert table.next_wakeup(T0) == pytest.approx(T0 + 0.1 + 54)


def test_ids_due_within_the_window_are_batched() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=60)
    table.add("b", 1, T0 + 3, deadline=60)  # due 3 s after "a": within the 6 s window
    table.add("c", 1, T0 + 7, deadline=60)  # due 7 s after "a": not yet
    actions = table.due(T0 + 54, 60)
    assert actions.extend == ("a", "b")
    assert table.next_wakeup(T0 + 54) == T0 + 61
    assert table.due(T0 + 61, 60).extend == ("c",)


def test_nothing_due_extends_nothing_even_within_the_window() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=60)
    assert table.due(T0 + 50, 60) == LeaseActions(deadline_seconds=60)


def test_deadline_is_rounded_up_to_whole_seconds() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=10)
    assert table.due(T0 + 5, 42.2).deadline_seconds == 43


def test_explicit_margin() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=60)
    assert table.next_wakeup(T0, margin=1) == T0 + 59
    assert not table.due(T0 + 58, 60, margin=1)
    assert table.due(T0 + 59, 60, margin=1).extend == ("a",)
    with pytest.raises(ValueError, match=r"margin must be in \[0, deadline=60\)"):
        table.due(T0, 60, margin=60)


def test_max_lease_releases_without_extending() -> None:
    table = LeaseTable(max_lease=100)
    table.add("a", 7, T0, deadline=60, ordering_key="k")
    table.add("b", 3, T0 + 50, deadline=60)
    assert table.due(T0 + 54, 60).extend == ("a",)
    assert table.next_wakeup(T0 + 54) == T0 + 100  # a's max_lease, before b's renewal at 104
    actions = table.due(T0 + 100, 60)
    assert actions.released == (ReleasedLease("a", 7, "k", T0),)
    assert actions.extend == ()  # b is due only at 104; a release does not pull it forward
    assert "a" not in table
    assert table.due(T0 + 104, 60).extend == ("b",)
    assert table.statistics() == LeaseStatistics(
        leased_messages=1,
        leased_bytes=3,
        released_for_max_lease=1,
        extensions=2,
        late_extensions=0,
    )


def test_late_extensions_are_counted() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=10)
    table.due(T0 + 11, 60)
    assert table.statistics().late_extensions == 1


def test_remove_is_idempotent_and_updates_statistics() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 5, T0, deadline=10)
    table.add("b", 6, T0, deadline=10)
    assert table.remove("a")
    assert not table.remove("a")
    assert not table.remove("never")
    assert len(table) == 1
    assert table.statistics().leased_bytes == 6
    assert repr(table) == "<LeaseTable leased=1 bytes=6 max_lease=3600 released_for_max_lease=0>"
    table.remove("b")
    assert table.next_wakeup(T0) is None
    assert not table.due(T0 + 1000, 60)


def test_next_wakeup_is_never_before_now() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=10)
    assert table.next_wakeup(T0 + 100) == T0 + 100


@pytest.mark.parametrize("deadline", [0, -1, 601, math.nan])
def test_bad_deadlines_are_rejected(deadline: float) -> None:
    table = LeaseTable(max_lease=3600)
    with pytest.raises(ValueError, match=r"deadline must be in \(0, 600\]"):
        table.add("a", 1, T0, deadline=deadline)
    with pytest.raises(ValueError, match=r"deadline must be in \(0, 600\]"):
        table.extended(["a"], deadline, T0)
    with pytest.raises(ValueError, match=r"deadline must be in \(0, 600\]"):
        table.due(T0, deadline)


def test_duplicate_add_and_bad_max_lease_are_rejected() -> None:
    table = LeaseTable(max_lease=3600)
    table.add("a", 1, T0, deadline=10)
    with pytest.raises(ValueError, match="'a' is already leased"):
        table.add("a", 1, T0, deadline=10)
    with pytest.raises(ValueError, match="max_lease must be > 0"):
        LeaseTable(max_lease=0)


class LeaseMachine(RuleBasedStateMachine):
    """Models the server's deadlines from what the table told the shell to send.

    Time only moves up to ``next_wakeup()``, where ``due()`` is called: then no leased
    id's server deadline may ever pass.
    """

    def __init__(self) -> None:
        super().__init__()
        self.max_lease = 300.0
        self.table = LeaseTable(max_lease=self.max_lease)
        self.now = T0
        self.server_deadline: dict[str, float] = {}
        self.received: dict[str, float] = {}
        self.counter = 0

    @rule(deadline=st.integers(10, 600), size=st.integers(0, 100))
    def receive(self, deadline: int, size: int) -> None:
        ack_id = f"id{self.counter}"
        self.counter += 1
        self.table.add(ack_id, size, self.now, deadline=deadline)
        self.server_deadline[ack_id] = self.now + deadline
        self.received[ack_id] = self.now

    @precondition(lambda self: bool(self.server_deadline))
    @rule(data=st.data(), deadline=st.integers(10, 600))
    def receipt_modack(self, data: st.DataObject, deadline: int) -> None:
        ack_id = data.draw(st.sampled_from(sorted(self.server_deadline)))
        self.table.extended([ack_id], deadline, self.now)
        self.server_deadline[ack_id] = self.now + deadline

    @precondition(lambda self: bool(self.server_deadline))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        ack_id = data.draw(st.sampled_from(sorted(self.server_deadline)))
        assert self.table.remove(ack_id)
        del self.server_deadline[ack_id]

    @rule(fraction=st.floats(0, 1), deadline=st.floats(10, 600))
    def advance_and_tick(self, fraction: float, deadline: float) -> None:
        """Move time forward, at most to next_wakeup, then call due() if it is time."""
        wakeup = self.table.next_wakeup(self.now)
        if wakeup is None:
            self.now += 100 * fraction
            return
        self.now += (wakeup - self.now) * fraction
        self._check_no_lapse()
        if self.now >= wakeup or fraction == 1:
            self.now = max(self.now, wakeup)
            self._apply(self.table.due(self.now, deadline))

    def _apply(self, actions: LeaseActions) -> None:
        for released in actions.released:
            # Same arithmetic as the table (received + max_lease <= now): the difference
            # form can round below max_lease by one ulp.
            assert self.received[released.ack_id] + self.max_lease <= self.now
            del self.server_deadline[released.ack_id]
        for ack_id in actions.extend:
            self.server_deadline[ack_id] = self.now + actions.deadline_seconds
        # due() at next_wakeup() always makes progress.
        assert actions

    def _check_no_lapse(self) -> None:
        for ack_id, deadline in self.server_deadline.items():
            assert deadline > self.now, f"{ack_id}'s server deadline passed"

    @invariant()
    def table_matches_the_model(self) -> None:
        assert len(self.table) == len(self.server_deadline)
        assert all(ack_id in self.table for ack_id in self.server_deadline)
        wakeup = self.table.next_wakeup(self.now)
        if wakeup is not None:
            assert wakeup >= self.now
            # The wakeup comes before any server deadline and before any max_lease.
            assert wakeup < min(self.server_deadline.values())
            assert wakeup <= min(self.received.get(k, math.inf) for k in self.server_deadline) + (
                self.max_lease
            )


LeaseMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40)
TestLeaseMachine = LeaseMachine.TestCase
