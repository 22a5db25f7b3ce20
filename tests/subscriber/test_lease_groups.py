"""``LeaseGroups``: when a consumer holding ack ids itself extends them, by the session's rules."""

from __future__ import annotations

import pytest

from eoclient.subscriber import LeaseGroups, renewal_margin


def test_a_group_is_due_its_renewal_margin_before_its_end() -> None:
    leases = LeaseGroups(lease_seconds=60)
    leases.add("batch-1", ["b", "a"], leased_until=110.0, now=100.0)
    assert "batch-1" in leases
    assert len(leases) == 1
    # 10 s left; the renewal margin of a 10 s lease is 5 s: due from 105.
    assert renewal_margin(10) == 5.0
    assert leases.next_wakeup(100.0) == pytest.approx(105.0)
    assert leases.due(104.9) == {}
    assert leases.due(105.0) == {"batch-1": ["a", "b"]}
    # Taken as extended by lease_seconds from then: next due 60 - 6 s later.
    assert leases.due(106.0) == {}
    assert leases.next_wakeup(106.0) == pytest.approx(105.0 + 60 - renewal_margin(60))


def test_lost_ids_are_left_out_and_a_removed_group_is_forgotten() -> None:
    leases = LeaseGroups(lease_seconds=30)
    leases.add("g", ["a", "b", "c"], leased_until=100.0, now=100.0)  # over: due at once
    leases.lost("g", ["b", "x"])
    assert leases.due(100.01) == {"g": ["a", "c"]}
    leases.remove("g")
    assert len(leases) == 0
    assert leases.next_wakeup(100.0) is None
    leases.lost("g", ["a"])  # a group no longer held: nothing to do


def test_lease_seconds_must_be_a_modack_deadline() -> None:
    with pytest.raises(ValueError, match=r"10\.\.600"):
        LeaseGroups(lease_seconds=5)
