"""LeaseTable: the compact lease columns against a plain dict model (Hypothesis), and the
bounds its rebuilds keep (stale slots and records stay within a constant of the live
leases)."""

from __future__ import annotations

from array import array
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eoclient.server_stub.core.delivery.lease_deadlines import DeadlineRecords
from eoclient.server_stub.core.delivery.lease_run import EndedRun, Extended, Settled
from eoclient.server_stub.core.delivery.lease_table import Lease, LeaseTable, NewLeases


def lease(seq: int, generation: int = 1, deadline: float = 10.0, size: int = 5) -> Lease:
    return Lease(seq, generation, deadline, size, 0, 0, float(seq))


class LeaseTableMachine(RuleBasedStateMachine):
    """Random adds (in order, out of order, reusing dead slots), removals, deadline moves
    and expiries; the table must agree with a dict after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.table = LeaseTable()
        # Small thresholds so that rebuilds and overflow merges happen within a run.
        self.table.SLACK = 3
        self.table.OVERFLOW_MIN = 2
        self.model: dict[int, Lease] = {}
        self.now = 0.0
        self.top = 0  # the largest seq ever leased

    @rule(
        ahead=st.booleans(),
        seq=st.integers(1, 60),
        generation=st.integers(1, 5),
        ttl=st.sampled_from([1.0, 2.0, 5.0]),
        size=st.integers(0, 100),
        failed=st.integers(0, 3),
        stream=st.integers(0, 3),
    )
    def add(
        self,
        ahead: bool,
        seq: int,
        generation: int,
        ttl: float,
        size: int,
        failed: int,
        stream: int,
    ) -> None:
        if ahead:
            seq = self.top + seq  # above every seq so far: an append
        if seq in self.model:
            return
        self.top = max(self.top, seq)
        new = Lease(seq, generation, self.now + ttl, size, failed, stream, seq / 10)
        self.table.add(*new)
        self.model[seq] = new

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.model)))
        assert self.table.remove(seq) == self.model.pop(seq)
        assert self.table.remove(seq) is None

    @precondition(lambda self: len(self.model) >= 2)
    @rule(data=st.data())
    def redeliver_old(self, data: st.DataObject) -> None:
        """Nack the oldest leases and lease them again (a redelivery): their dead slots
        lie at or before the run's head, and must be found again."""
        count = data.draw(st.integers(1, len(self.model)))
        for seq in sorted(self.model)[:count]:
            ended = self.table.remove(seq)
            assert ended is not None
            again = ended._replace(generation=ended.generation + 1)
            self.table.add(*again)
            self.model[seq] = again
        probe = data.draw(st.permutations(sorted(self.model)))
        for seq in probe:  # in any order, not only the one the finger follows
            assert self.table.current(seq) == (self.model[seq].generation, self.model[seq].deadline)

    @rule(seq=st.integers(1, 500))
    def remove_unknown(self, seq: int) -> None:
        if seq not in self.model:
            assert self.table.remove(seq) is None
            assert self.table.set_deadline(seq, 1.0) is False

    @precondition(lambda self: self.model)
    @rule(data=st.data(), ttl=st.sampled_from([0.5, 1.0, 3.0, 8.0]))
    def move(self, data: st.DataObject, ttl: float) -> None:
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.model)), min_size=1, max_size=5))
        for seq in seqs:
            assert self.table.set_deadline(seq, self.now + ttl)
            self.model[seq] = self.model[seq]._replace(deadline=self.now + ttl)

    @rule(step=st.sampled_from([0.5, 1.0, 2.0]))
    def expire(self, step: float) -> None:
        self.now += step
        due = sorted(
            (lease for lease in self.model.values() if lease.deadline <= self.now),
            key=lambda lease: (lease.deadline, lease.seq),
        )
        expired = list(self.table.expire(self.now))
        assert sorted(expired, key=lambda lease: (lease.deadline, lease.seq)) == due
        # By deadline, whatever the order within one.
        assert [lease.deadline for lease in expired] == sorted(lease.deadline for lease in expired)
        for lease in due:
            del self.model[lease.seq]

    @invariant()
    def agrees(self) -> None:
        table, model = self.table, self.model
        assert len(table) == len(model)
        assert table.bytes == sum(lease.size for lease in model.values())
        assert list(table) == [model[seq] for seq in sorted(model)]
        for seq in range(1, self.top + 2):
            assert table.get(seq) == model.get(seq)
            assert (seq in table) == (seq in model)
        assert table.oldest() == (model[min(model)] if model else None)
        if model:
            deadline = table.next_deadline()
            assert deadline is not None
            assert deadline <= min(lease.deadline for lease in model.values())
        assert table.records() <= 2 * len(model) + table.SLACK + 1


test_lease_table_agrees_with_a_dict = LeaseTableMachine.TestCase
LeaseTableMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60)


def test_a_lease_per_message() -> None:
    table = LeaseTable()
    table.add(*lease(5))
    with pytest.raises(ValueError, match="message 5 is leased already"):
        table.add(*lease(5, generation=2))
    with pytest.raises(ValueError, match="generation starts at 1"):
        table.add(*lease(7, generation=0))


def test_leases_of_one_request_share_one_record() -> None:
    table = LeaseTable()
    for seq in range(1, 1001):
        table.add(*lease(seq, deadline=60.0))
    assert len(table._due) == 1
    for seq in range(1, 1001):
        table.set_deadline(seq, 120.0)  # one ModifyAckDeadline of all of them
    assert len(table._due) == 2


def test_stale_records_and_dead_slots_stay_within_a_constant_of_the_live_leases() -> None:
    """50,000 leases acked long before their 600 s deadlines: without rebuilds the
    records and slots would hold all 50,000 until the deadlines pass."""
    table = LeaseTable()
    seq = 0
    for _ in range(50):
        batch = range(seq + 1, seq + 1001)
        for n in batch:
            table.add(*lease(n, deadline=600.0))
        for n in batch:
            table.remove(n)
        seq += 1000
    assert len(table) == 0
    assert table.records() <= table.SLACK + 1
    assert len(table._seqs) <= table.SLACK + 1


def test_a_redelivery_of_an_old_message_is_found_and_merged_in_order() -> None:
    table = LeaseTable()
    table.SLACK = 10
    for n in range(1, 5001):
        table.add(*lease(n))
    for n in range(1, 4001):
        table.remove(n)  # most of the run dead: rebuilt without those slots
    assert len(table._seqs) < 2000
    for n in range(1, 4001, 2):
        table.add(*lease(n, generation=2))  # below the run, no slot left: the overflow
    expected = [*range(1, 4001, 2), *range(4001, 5001)]
    assert [entry.seq for entry in table] == expected
    assert table.get(1) == lease(1, generation=2)
    assert table.oldest() == lease(1, generation=2)
    assert len(table._overflow) <= max(table.OVERFLOW_MIN, len(table._seqs) // 8)
    assert all(table.get(n) is None for n in range(2, 4001, 2))


def _pull(table: LeaseTable, first: int, count: int, deadline: float) -> list[int]:
    """One Pull's leases: consecutive seqs under one deadline (``add_many``)."""
    seqs = list(range(first, first + count))
    ones = [1] * count
    table.add_many(deadline, NewLeases(seqs, ones, ones, [0] * count, [float(s) for s in seqs]))
    return seqs


@pytest.mark.parametrize("in_order", [True, False])
def test_rebuilds_after_acks_in_order_and_out_of_order_keep_every_live_lease(
    in_order: bool,
) -> None:
    """Acks of whole Pulls: in the order they were given, the dead slots are the run's
    head and a rebuild drops it; out of that order they are scattered and the rebuild
    compresses. Both leave the same leases, found by seq and falling due at their
    deadlines."""
    table = LeaseTable()
    table.SLACK = 10
    pulls = [_pull(table, 1 + 100 * n, 100, deadline=100.0 + n % 3) for n in range(40)]
    acked = pulls[:30] if in_order else pulls[::4] + pulls[1::4] + pulls[2::4][:10]
    for seqs in acked:
        settled = table.settle_many(seqs, [1] * len(seqs), 0.0, exact=True)
        assert settled.seqs == seqs
        assert not settled.misses
    live = sorted(set(range(1, 4001)) - {seq for seqs in acked for seq in seqs})
    assert len(table._seqs) < 4000  # rebuilt: dead slots dropped
    assert table.records() <= 2 * len(live) + table.SLACK + 1
    assert [lease.seq for lease in table] == live
    assert all(table.current(seq) == (1, 100.0 + (seq - 1) // 100 % 3) for seq in live)
    assert table.oldest() == table.get(live[0])
    table._rebuild_records()  # once more on the state the acks left, whatever its counts
    expired = list(table.expire(101.0))
    assert sorted(lease.seq for lease in expired) == [
        seq for seq in live if (seq - 1) // 100 % 3 < 2
    ]
    assert [lease.seq for lease in table] == [seq for seq in live if (seq - 1) // 100 % 3 == 2]


def test_deadline_records_rebuilt_from_columns_group_each_deadline_once() -> None:
    """Stretches of one deadline need not be adjacent: a deadline met again joins its
    record, and the (seq, deadline) pairs given besides join theirs too."""
    records = DeadlineRecords()
    records.rebuild(
        array("q", [1, 2, 3, 4, 5, 6]),
        array("d", [5.0, 5.0, 7.0, 5.0, 9.0, 9.0]),
        [(10, 7.0), (11, 3.0)],
    )
    assert records.slots == 8
    assert len(records) == 4
    due = []
    while (record := records.pop_due(100.0)) is not None:
        due.append((record[0], sorted(record[1])))
    assert due == [(3.0, [11]), (5.0, [1, 2, 4]), (7.0, [3, 10]), (9.0, [5, 6])]
    empty = DeadlineRecords()
    empty.rebuild(array("q"), array("d"))
    assert empty.slots == 0
    assert empty.pop_due(100.0) is None


@st.composite
def _table_and_request(
    draw: st.DrawFn,
) -> tuple[Callable[[], LeaseTable], list[int], list[int], float]:
    """A table of several Pulls' leases (some ended, some moved to a past deadline), as a
    function building it afresh each call, and a request naming stretches of them in any
    order, with wrong generations, repeats and unknown seqs among them."""
    pulls = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    deadlines = [draw(st.sampled_from([5.0, 10.0])) for _ in pulls]
    top = sum(pulls)
    removed = draw(st.lists(st.integers(1, top), max_size=4))
    moved = draw(st.lists(st.integers(1, top), max_size=2))

    def build() -> LeaseTable:
        table = LeaseTable()
        first = 1
        for count, deadline in zip(pulls, deadlines, strict=True):
            _pull(table, first, count, deadline=deadline)
            first += count
        for seq in removed:
            table.remove(seq)
        for seq in moved:
            table.set_deadline(seq, 1.0)  # past by the request's time
        return table

    seqs: list[int] = []
    for _ in range(draw(st.integers(1, 5))):
        start = draw(st.integers(1, top + 2))
        seqs += range(start, start + draw(st.integers(1, 6)))
    generations = [draw(st.sampled_from([1, 1, 1, 2])) for _ in seqs]
    return build, seqs, generations, 2.0


@settings(max_examples=300)
@given(case=_table_and_request(), exact=st.booleans())
def test_settle_many_by_stretches_matches_id_by_id(
    case: tuple[Callable[[], LeaseTable], list[int], list[int], float], exact: bool
) -> None:
    """Settling a request as slices where its stretches are slices of the run leaves the
    table and answers as the id-by-id loop over the whole request does."""
    build, seqs, generations, now = case
    table, reference = build(), build()
    settled = table.settle_many(seqs, generations, now, exact=exact)
    expected = Settled([], [], [], [])
    reference._settle_each(seqs, generations, 0, len(seqs), now, exact, expected)
    assert settled == expected
    assert sorted(lease.seq for lease in table) == sorted(
        lease.seq for lease in reference if lease.seq not in set(expected.seqs)
    )


@settings(max_examples=300)
@given(case=_table_and_request())
def test_extend_many_by_stretches_matches_id_by_id(
    case: tuple[Callable[[], LeaseTable], list[int], list[int], float],
) -> None:
    build, seqs, generations, now = case
    table, reference = build(), build()
    extended = table.extend_many(seqs, generations, now, 50.0)
    misses: list[int] = []
    found: list[int] = []
    reference._live_each(seqs, generations, 0, len(seqs), now, 50.0, (misses, found, []))
    expected = Extended(misses, [seqs[i] for i in found], [generations[i] for i in found])
    assert extended == expected
    assert [(lease.seq, lease.deadline) for lease in table] == [
        (lease.seq, lease.deadline) for lease in reference
    ]


@settings(max_examples=300)
@given(case=_table_and_request())
def test_end_many_by_stretches_matches_removing_id_by_id(
    case: tuple[Callable[[], LeaseTable], list[int], list[int], float],
) -> None:
    """A request's nacks ended at once (slices where its stretches are slices of the run)
    end the leases, answer and leave the table as ``remove`` of each id that names a live
    lease under its generation before its deadline (``AckIds.resolve``), in the ids' order,
    does."""
    build, seqs, generations, now = case
    table, reference = build(), build()
    ended = table.end_many(seqs, generations, now)
    misses: list[int] = []
    removed: list[Lease] = []
    for i, (seq, generation) in enumerate(zip(seqs, generations, strict=True)):
        current = reference.current(seq)
        if current is None or current[0] != generation or current[1] <= now:
            misses.append(i)
            continue
        gone = reference.remove(seq)
        assert gone is not None
        removed.append(gone)
    columns = [list(column) for column in zip(*removed, strict=True)] or [[]] * 7
    assert ended == EndedRun(misses, *columns)
    assert list(table) == list(reference)
    assert (len(table), table.bytes) == (len(reference), reference.bytes)
    assert table.oldest() == reference.oldest()
