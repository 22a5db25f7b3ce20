"""The source's pure decisions: admission, settlement, leases, claims, plans, give-backs."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.spark._decisions import (
    CLOCK_SKEW_SECONDS,
    Admission,
    Known,
    Verdict,
    assign_settles,
    give_back,
    grace_until,
    may_claim_unverified,
    plan_partitions,
    unconfirmed,
)
from eoclient.spark._keeper import StringColumn
from eoclient.subscriber import LeaseGroups


def _admit(admission: Admission, *deliveries: tuple[str, str, int]) -> list[Verdict]:
    message_ids, ack_ids, published = zip(*deliveries, strict=True) if deliveries else ((), (), ())
    return admission.admit(list(message_ids), list(ack_ids), list(published))


_chunks = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from("mnopqrstuv"), st.text(min_size=1, max_size=3), st.integers(0, 9)
        ),
        max_size=8,
    ),
    max_size=5,
)


@given(_chunks, st.one_of(st.none(), st.integers(0, 9)), st.booleans())
def test_a_chunk_admitted_at_once_is_admitted_as_delivery_by_delivery(
    chunks: list[list[tuple[str, str, int]]], cutoff: int | None, dedupe: bool
) -> None:
    """The whole-chunk path (no committed id among the chunk) decides what the loop
    does: the loop is forced by a lookup that always finds an id the chunk does not hold."""
    at_once = Admission(Known(cutoff_ns=cutoff, dedupe=dedupe))
    one_by_one = Admission(
        Known(cutoff_ns=cutoff, dedupe=dedupe, committed=lambda ids: {"never delivered"})
    )
    for number, chunk in enumerate(chunks):
        # Ack ids are unique per delivery on the wire: numbered.
        deliveries = [(m, f"{a}-{number}-{i}", p) for i, (m, a, p) in enumerate(chunk)]
        assert _admit(at_once, *deliveries) == _admit(one_by_one, *deliveries)
    # Deferred chunks, asked only what a read task asks before it needs the maps.
    assert at_once.emitted_count >= len(one_by_one.emitted)  # at most, before confirm
    assert at_once.confirm() == len(one_by_one.emitted)
    every_delivery = len(one_by_one.emitted) == one_by_one.delivered
    assert at_once.all_emitted() == every_delivery
    for name in ("emitted", "emitted_ack_ids", "ack_now", "release", "superseded", "delivered"):
        assert getattr(at_once, name) == getattr(one_by_one, name), name
    assert list(at_once.emitted) == list(one_by_one.emitted)  # the same order too
    if every_delivery:  # all rows, in arrival order
        rows = [(chunk, row) for chunk, c in enumerate(chunks) for row in range(len(c))]
        assert list(at_once.emitted.values()) == rows


@pytest.mark.parametrize(
    ("known", "message_id", "published", "verdict"),
    [
        (Known(), "m", 5, Verdict.EMIT),
        (Known(cutoff_ns=4), "m", 5, Verdict.RELEASE),
        (Known(cutoff_ns=5), "m", 5, Verdict.EMIT),  # published at the cutoff: this run's
        (Known(committed=lambda ids: {"m"}), "m", 5, Verdict.ACK_NOW),
        # committed wins over the cutoff: a committed message is acked whatever its time
        (Known(committed=lambda ids: {"m"}, cutoff_ns=0), "m", 5, Verdict.ACK_NOW),
        # the negative control emits redeliveries again
        (Known(committed=lambda ids: {"m"}, dedupe=False), "m", 5, Verdict.EMIT),
    ],
)
def test_admission_table(known: Known, message_id: str, published: int, verdict: Verdict) -> None:
    assert _admit(Admission(known), (message_id, "a1", published)) == [verdict]


def test_committed_messages_are_looked_up_once_a_response() -> None:
    asked: list[list[str]] = []

    def committed(message_ids: object) -> set[str]:
        asked.append(list(message_ids))  # type: ignore[call-overload]
        return {"m"} & set(asked[-1])

    admission = Admission(Known(committed=committed))
    assert _admit(admission, ("m", "a1", 5), ("n", "b1", 5)) == [Verdict.ACK_NOW, Verdict.EMIT]
    assert asked == [["m", "n"]]
    assert admission.ack_now == {"a1": "m"}
    assert list(admission.emitted) == ["n"]


def test_committed_messages_are_acked_now_whatever_their_time() -> None:
    admission = Admission(Known(cutoff_ns=10))
    _admit(admission, ("m", "a1", 5), ("n", "b1", 5), ("m", "a2", 5))
    assert admission.ack_committed({"m", "x"}) == ["m"]
    # The newest delivery is acked; the older one is superseded.
    assert admission.ack_now == {"a2": "m"}
    assert admission.superseded == ["a1"]
    assert list(admission.emitted) == ["n"]
    assert admission.delivered == 3
    # The negative control emits redeliveries again.
    control = Admission(Known(dedupe=False))
    _admit(control, ("m", "a1", 5))
    assert control.ack_committed({"m"}) == []


def test_a_message_delivered_twice_in_one_pull_keeps_its_newest_delivery() -> None:
    admission = Admission(Known())
    _admit(admission, ("m", "a1", 1), ("n", "b1", 1))
    _admit(admission, ("m", "a2", 1))
    assert admission.emitted == {"m": (1, 0), "n": (0, 1)}
    assert admission.emitted_ack_ids == {"m": "a2", "n": "b1"}
    assert admission.superseded == ["a1"]
    assert sorted(admission.leased()) == ["a2", "b1"]


def test_withdraw_and_drop() -> None:
    admission = Admission(Known())
    _admit(admission, ("m", "a1", 1), ("n", "b1", 1), ("o", "c1", 1))
    assert admission.withdraw({"n", "x"}) == ["n"]  # journaled by another part meanwhile
    assert admission.after_commit == {"b1": "n"}
    assert admission.drop(["o", "x"]) == ["c1"]  # its lease was lost
    assert admission.emitted == {"m": (0, 0)}
    assert Admission(Known(dedupe=False)).withdraw({"m"}) == []


_ids = st.sampled_from([f"m{i}" for i in range(8)])


@given(
    st.lists(st.lists(st.tuples(_ids, st.integers(0, 9)), max_size=6), max_size=5),
    st.frozensets(_ids),
    st.frozensets(_ids),
    st.one_of(st.none(), st.integers(0, 9)),
)
def test_every_delivery_is_accounted_for_once(
    chunks: list[list[tuple[str, int]]],
    committed: frozenset[str],
    uncommitted: frozenset[str],
    cutoff: int | None,
) -> None:
    admission = Admission(Known(cutoff))
    ack_ids = []
    for c, chunk in enumerate(chunks):
        deliveries = [(m, f"{m}-{c}-{r}", t) for r, (m, t) in enumerate(chunk)]
        ack_ids += [a for _, a, _ in deliveries]
        _admit(admission, *deliveries)
    admission.ack_committed(committed)
    admission.withdraw(uncommitted)
    # Each ack id ends up in exactly one place ...
    places = [
        *admission.emitted_ack_ids.values(),
        *admission.ack_now,
        *admission.after_commit,
        *admission.release,
        *admission.superseded,
    ]
    assert sorted(places) == sorted(ack_ids)
    # ... a message is emitted at most once, never a committed or uncommitted one.
    assert not set(admission.emitted) & (committed | uncommitted)
    assert set(admission.emitted) == set(admission.emitted_ack_ids)
    assert admission.delivered == len(ack_ids)


def test_a_settled_message_is_confirmed_by_any_of_its_ack_ids() -> None:
    rows = (["m", "n", "n", "o"], ["a1", "b1", "b2", "c1"])
    assert unconfirmed(*rows, failed=set()) == []
    # n: one of its two ack ids failed (superseded), the other succeeded; o: failed.
    assert unconfirmed(*rows, failed={"b1", "c1"}) == ["o"]
    assert unconfirmed(*rows, failed={"a1", "b1", "b2", "c1"}) == ["m", "n", "o"]


def test_leases_extend_a_group_before_its_deadline_by_the_sdk_rules() -> None:
    """The keeper's groups, their ends counted CLOCK_SKEW_SECONDS early (``_keeper``)."""
    leases = LeaseGroups(lease_seconds=60)
    leases.add("0/1", ["a", "b"], leased_until=110.0 - CLOCK_SKEW_SECONDS, now=100.0)
    assert "0/1" in leases
    # 10 s until the end (9 counting the clock skew); the SDK's renewal margin for a 9 s
    # lease is 4.5 s: due from 104.5.
    assert leases.due(104.0) == {}
    assert leases.due(104.6) == {"0/1": ["a", "b"]}
    assert leases.due(105.0) == {}  # extended to 164.6
    leases.lost("0/1", ["a"])
    assert leases.due(160.0) == {"0/1": ["b"]}
    leases.remove("0/1")
    assert len(leases) == 0
    # A group found with its lease already over is due at once (its modack will tell).
    leases.add("0/2", ["c"], leased_until=50.0 - CLOCK_SKEW_SECONDS, now=100.0)
    assert leases.next_wakeup(100.0) == pytest.approx(100.0, abs=1e-3)
    assert leases.due(100.001) == {"0/2": ["c"]}
    assert CLOCK_SKEW_SECONDS == 1.0


def test_a_group_held_as_an_arrow_column_is_extended_as_strings() -> None:
    """A read task's part hands its ack id column over as it is (``StringColumn``)."""
    leases = LeaseGroups(lease_seconds=60)
    column = pa.chunked_array([pa.array(["b", "a"]), pa.array(["c"])])
    leases.add("0/1", StringColumn(column), leased_until=109.0, now=100.0)
    leases.lost("0/1", ["c", "x"])
    assert leases.due(104.6) == {"0/1": ["a", "b"]}
    assert "a" in StringColumn(column)
    assert len(StringColumn(column)) == 3


@pytest.mark.parametrize(
    ("elapsed", "deadline", "unverified"),
    [(0.0, 10, True), (4.9, 10, True), (5.0, 10, False), (53.9, 60, True), (54.0, 60, False)],
)
def test_a_part_may_be_claimed_unverified_within_the_deadline_less_the_margin(
    elapsed: float, deadline: int, unverified: bool
) -> None:
    assert may_claim_unverified(1000.0 + elapsed, 1000.0, deadline) is unverified


@pytest.mark.parametrize(
    ("probed", "drained", "max_rows", "partitions", "quotas"),
    [
        (2000, False, 50_000, 4, (12_000, 12_000, 12_000, 12_000)),
        (2000, False, 8001, 3, (2001, 2000, 2000)),
        (1500, True, 50_000, 4, ()),  # the probe found the subscription nearly drained
        # redeliveries of committed messages were taken out: not drained, more to pull
        (1500, False, 50_000, 2, (24_250, 24_250)),
        (2000, False, 2000, 4, ()),  # max_rows fits the probe
        (2000, False, 2002, 4, (1, 1)),  # never a task with nothing to pull
    ],
)
def test_plan_partitions(
    probed: int, drained: bool, max_rows: int, partitions: int, quotas: tuple[int, ...]
) -> None:
    plan = plan_partitions(probed, drained, max_rows, partitions)
    assert plan == quotas
    assert probed + sum(plan) <= max_rows


def test_committed_parts_are_dealt_round_robin() -> None:
    units = [(4, 0), (4, 1), (4, 2)]
    assert assign_settles(units, 2) == [((4, 0), (4, 2)), ((4, 1),)]
    assert assign_settles(units, 4) == [((4, 0),), ((4, 1),), ((4, 2),), ()]
    assert assign_settles([], 2) == [(), ()]


def test_a_dead_puller_gives_back_what_is_not_journaled_and_calls_in_flight_wait() -> None:
    assert give_back(["a", "b", "c", "a"], journaled={"b"}) == ["a", "c"]
    # The latest call in flight + its timeout (10 s) + the deadline + 2 s.
    assert grace_until([100.0, 90.0], call_timeout=10.0, ack_deadline=10) == 122.0
    assert grace_until([], call_timeout=10.0, ack_deadline=10) == 0.0
