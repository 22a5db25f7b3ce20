"""Backlog (core/delivery/window.py): the window, the cold rows and the messages returned
from a lease, over a real SqliteStore — a Hypothesis model of which message is where, and
table tests of the loading rules."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eoclient.server_stub.core.delivery.entries import Entry, Returned
from eoclient.server_stub.core.delivery.window import Backlog, Loaded
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import SubscriptionStorage
from eoclient.server_stub.storage.memory import MemoryStore
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p/topics/t"
SUB = "projects/p/subscriptions/s"
WINDOW = "window"
COLD = "cold"
RETURNED = "returned"
LEASED = "leased"


def message(seq: int) -> StoredMessage:
    return StoredMessage(str(seq), b"x" * (seq % 7), {}, "", 1000.0 + seq, seq % 7 + 1)


class Rows:
    """A SqliteStore holding one subscription's rows, published as the test goes."""

    def __init__(self, directory: Path, window: int) -> None:
        self.store = SqliteStore(directory, window=window, gc_interval=0)
        self.storage = SubscriptionStorage(self.store, SUB)
        self.seq = 0

    def publish(self, count: int) -> list[int]:
        seqs = list(range(self.seq + 1, self.seq + count + 1))
        self.seq += count
        self.store.publish(TOPIC, [(s, message(s)) for s in seqs], {SUB: seqs})
        return seqs

    def settle(self, seq: int) -> None:
        self.storage.settle((seq,))


@pytest.fixture
def rows(tmp_path: Path) -> Iterator[Rows]:
    made = Rows(tmp_path / "data", window=5)
    yield made
    made.store.close()


def publish(backlog: Backlog, rows: Rows, count: int) -> list[int]:
    """New messages, as SubscriptionDelivery.add takes them."""
    seqs = rows.publish(count)
    for seq in seqs:
        if backlog.accepts():
            backlog.add(Entry(seq, message(seq)))
        else:
            backlog.add_cold(message(seq).size)
    return seqs


def admit(backlog: Backlog, loaded: list[Loaded]) -> list[int]:
    for item in loaded:
        backlog.add(Entry(item.seq, item.message, generation=item.generation))
    return [item.seq for item in loaded]


def returned(seq: int, generation: int = 1) -> Returned:
    return Returned(0.0, generation, 1, message(seq).size, message(seq).publish_time)


class BacklogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._directory = tempfile.TemporaryDirectory()
        self.rows = Rows(Path(self._directory.name), window=4)
        self.backlog = Backlog(self.rows.storage)
        self.backlog.MIN_LOAD = 2
        self.where: dict[int, str] = {}  # unacknowledged seq -> where the model says it is

    def teardown(self) -> None:
        self.rows.store.close()
        self._directory.cleanup()

    def _held(self, seq: int) -> bool:
        return self.where.get(seq) == LEASED

    @rule(count=st.integers(1, 6))
    def publish(self, count: int) -> None:
        for seq in publish(self.backlog, self.rows, count):
            self.where[seq] = WINDOW if seq in self.backlog.entries else COLD

    @rule(want=st.integers(0, 4))
    def load(self, want: int) -> None:
        before = dict(self.where)
        loaded = self.backlog.load(want, self._held)
        seqs = [item.seq for item in loaded]
        assert seqs == sorted(seqs)
        for item in loaded:
            assert before[item.seq] in (COLD, RETURNED)
            assert item.returned == (before[item.seq] == RETURNED)
            assert item.message == message(item.seq)
        if loaded:
            # Seq order: whatever is still cold past the cursor comes after all of it.
            cold = [s for s, where in before.items() if where == COLD and s not in seqs]
            assert all(s > seqs[-1] for s in cold)
        admit(self.backlog, loaded)
        for seq in seqs:
            self.where[seq] = WINDOW

    @precondition(lambda self: WINDOW in self.where.values())
    @rule(data=st.data())
    def lease(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(s for s, w in self.where.items() if w == WINDOW)))
        entry = self.backlog.take(seq)
        assert entry is not None
        assert entry.seq == seq
        self.where[seq] = LEASED

    @precondition(lambda self: LEASED in self.where.values())
    @rule(data=st.data())
    def give_back(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(s for s, w in self.where.items() if w == LEASED)))
        self.backlog.give_back(seq, returned(seq))
        self.where[seq] = RETURNED

    @precondition(lambda self: self.where)
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.where)))
        where = self.where.pop(seq)
        if where == WINDOW:
            assert self.backlog.take(seq) is not None
        elif where == RETURNED:
            assert self.backlog.take_returned(seq) is not None
        elif where == COLD:
            row = self.backlog.take_cold(seq, self._held)
            if row is None:  # below the cursor: cold rows there are only ever returned
                pytest.fail(f"cold message {seq} could not be taken")
        self.rows.settle(seq)

    @invariant()
    def counts_agree(self) -> None:
        waiting = [s for s, w in self.where.items() if w != LEASED]
        assert self.backlog.waiting() == len(waiting)
        assert self.backlog.bytes == sum(message(s).size for s in waiting)
        assert sorted(self.backlog.entries) == sorted(
            s for s, w in self.where.items() if w == WINDOW
        )
        in_memory = [s for s, w in self.where.items() if w in (WINDOW, RETURNED)]
        expected = min((message(s).publish_time, s) for s in in_memory) if in_memory else None
        assert self.backlog.oldest() == expected
        assert self.backlog.cold() == sum(1 for w in self.where.values() if w in (COLD, RETURNED))

    @invariant()
    def bounded(self) -> None:
        limit = self.backlog.limit
        assert limit is not None
        # A load starts only below twice the window plus a request's want (4 at most
        # here) and brings at most that want or MIN_LOAD more.
        assert len(self.backlog.entries) <= 2 * limit + 2 * 4 + self.backlog.MIN_LOAD


test_backlog_agrees_with_a_model = BacklogMachine.TestCase
BacklogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_new_messages_go_cold_while_anything_older_is(rows: Rows) -> None:
    backlog = Backlog(rows.storage)
    publish(backlog, rows, 7)  # window of 5: 1-5 in memory, 6-7 cold
    assert sorted(backlog.entries) == [1, 2, 3, 4, 5]
    assert backlog.cold() == 2
    backlog.take(1)
    publish(backlog, rows, 1)  # room in the window, but 6 and 7 are older: 8 is cold too
    assert 8 not in backlog.entries
    assert admit(backlog, backlog.load(1, lambda seq: False)) == [6, 7, 8]


def test_returned_messages_come_back_first_in_seq_order(rows: Rows) -> None:
    backlog = Backlog(rows.storage)
    backlog.MIN_LOAD = 1
    publish(backlog, rows, 8)
    for seq in (4, 2):
        backlog.take(seq)
        backlog.give_back(seq, returned(seq, generation=3))
    assert backlog.oldest() == (message(1).publish_time, 1)
    for seq in (1, 3, 5):
        backlog.take(seq)
    loaded = backlog.load(0, lambda seq: False)
    assert [(item.seq, item.returned, item.generation) for item in loaded[:2]] == [
        (2, True, 3),
        (4, True, 3),
    ]
    assert [item.seq for item in loaded] == [2, 4, 6, 7, 8]


def test_rows_of_leased_messages_are_passed_over(rows: Rows) -> None:
    """After a restart every row is cold, leased ones too: the cursor passes over those
    (the lease table holds them) and the count is the store's rows minus the leases."""
    rows.publish(10)
    backlog = Backlog(rows.storage)
    leased = {1, 2, 3, 4, 5, 6, 8}
    backlog.restore(10 - len(leased), sum(message(s).size for s in range(1, 11) if s not in leased))
    loaded = backlog.load(1, leased.__contains__)
    assert [item.seq for item in loaded] == [7, 9, 10]
    assert backlog.cold() == 0


def test_a_returned_message_above_the_cursor_is_read_when_the_cursor_gets_there(
    rows: Rows,
) -> None:
    rows.publish(20)
    backlog = Backlog(rows.storage)
    backlog.MIN_LOAD = 1
    leased = {15}
    backlog.restore(19, sum(message(s).size for s in range(1, 21) if s != 15))
    leased.clear()  # message 15's restored lease ended: waiting again, above the cursor
    backlog.give_back(15, returned(15, generation=2))
    first = admit(backlog, backlog.load(0, leased.__contains__))
    assert first == [1, 2, 3, 4, 5]
    for seq in first:
        backlog.take(seq)
    rest: list[Loaded] = []
    while loaded := backlog.load(0, leased.__contains__):
        rest += loaded
        for item in loaded:
            backlog.add(Entry(item.seq, item.message))
            backlog.take(item.seq)
    assert [item.seq for item in rest] == list(range(6, 21))
    assert [item.seq for item in rest if item.returned] == [15]
    assert backlog.waiting() == 0


def test_the_window_grows_to_twice_its_size_plus_the_request_then_waits(rows: Rows) -> None:
    backlog = Backlog(rows.storage)
    backlog.MIN_LOAD = 1
    publish(backlog, rows, 40)
    assert len(backlog.entries) == 5
    while admit(backlog, backlog.load(3, lambda seq: False)):
        pass
    # Loads of 3 (the want) while below 2 x 5 + 3: at most one load past that.
    assert 13 <= len(backlog.entries) < 13 + 3
    assert backlog.cold() == 40 - len(backlog.entries)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(1, 40), st.sampled_from([0.0, 1.0, 2.0, 5.0])),
        max_size=80,
    )
)
def test_the_window_head_is_the_oldest_entry(steps: list[tuple[bool, int, float]]) -> None:
    """``window_head`` (its records in seq order, O(1) a stale one, and a heap of the rest)
    against the minimum over the window's entries, whatever order they come and go in:
    publish times rising with the seqs, equal, or earlier (given back, loaded again)."""
    backlog = Backlog(SubscriptionStorage(MemoryStore(), SUB))
    backlog._compact_at = 8  # and the stale records dropped now and then
    published: dict[int, float] = {}
    for add, seq, publish_time in steps:
        if add and seq not in backlog.entries:
            publish_time = published.setdefault(seq, publish_time + seq / 100)
            message = StoredMessage(str(seq), b"x", {}, "", publish_time, 1)
            backlog.add(Entry(seq, message))
        elif not add:
            backlog.take(seq)
        expected = min(
            ((entry.message.publish_time, s) for s, entry in backlog.entries.items()),
            default=None,
        )
        assert backlog.window_head() == expected
