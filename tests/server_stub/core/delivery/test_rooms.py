"""The delivery engine's rooms on their own (docs/architecture.md#the-delivery-engine):
the waiting messages, the leases and settlement each change only their own data and hand
back what left them; the schedule takes the next ready message in seq order whether it
came in ascending (the run) or out of order (the heap)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from eoclient.server_stub.core.delivery.entries import Entry, Left
from eoclient.server_stub.core.delivery.key_order import KeyOrder
from eoclient.server_stub.core.delivery.leases import Leases
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.delivery.schedule import Schedule
from eoclient.server_stub.core.delivery.settlement import Settlement
from eoclient.server_stub.core.delivery.stream_flow import StreamFlow
from eoclient.server_stub.core.delivery.waiting import Waiting
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import Store, SubscriptionStorage
from eoclient.server_stub.storage.memory import MemoryStore
from eoclient.server_stub.storage.sqlite import SqliteStore

SUB = "projects/p1/subscriptions/sub-a"


def message(seq: int, key: str = "", published: float = 0.0) -> StoredMessage:
    return StoredMessage(str(seq), b"x" * 10, {}, key, published, 10 + len(key))


def memory() -> SubscriptionStorage:
    return SubscriptionStorage(MemoryStore(), SUB)


# ---------------------------------------------------------------- the waiting messages


def test_a_delivered_head_schedules_its_keys_next_message() -> None:
    waiting = Waiting(memory(), ordered=True)
    for seq in (1, 2, 3):
        waiting.add(seq, message(seq, key="k"), 0.0, 0.0)
    first = waiting.schedule.pop(0.0)
    assert first is not None
    assert first.seq == 1
    assert waiting.schedule.exhausted()  # only a key's head is ever scheduled
    waiting.deliver(first, 0.0)
    second = waiting.schedule.pop(0.0)
    assert second is not None
    assert second.seq == 2


def test_a_rewind_names_the_later_delivered_messages_of_the_key() -> None:
    waiting = Waiting(memory(), ordered=True)
    for seq in (1, 2, 3):
        waiting.add(seq, message(seq, key="k"), 0.0, 0.0)
    for _ in range(2):
        entry = waiting.schedule.pop(0.0)
        assert entry is not None
        waiting.deliver(entry, 0.0)
    assert waiting.rewind(1) == [2]
    assert Waiting(memory(), ordered=False).rewind(1) == []


def test_a_waiting_message_that_leaves_hands_back_what_settling_needs() -> None:
    waiting = Waiting(memory(), ordered=True)
    waiting.add(1, message(1, key="k", published=5.0), 0.0, 0.0)
    waiting.add(2, message(2, key="k"), 0.0, 0.0)
    left = waiting.remove(1, 0.0)
    assert left == Left(1, 5.0, message(1, key="k", published=5.0))
    assert waiting.remove(1, 0.0) is None  # gone already
    # Its key's next message took its place as the head (past seq 1's stale entry).
    assert waiting.schedule.has_ready(0.0)
    entry = waiting.schedule.pop(0.0)
    assert entry is not None
    assert entry.seq == 2


# ---------------------------------------------------------------- the leases


def test_a_lease_counts_on_its_stream_until_it_ends() -> None:
    leases = Leases(memory())
    stream = StreamFlow(stream_id=7, ack_deadline=10, max_messages=0, max_bytes=0)
    leases.streams.open(stream)
    generation = leases.lease(Entry(1, message(1)), 10.0, stream)
    assert generation == 1
    assert (stream.outstanding_messages, stream.outstanding_bytes) == (1, 10)
    # The memory store keeps no bodies: the leases keep it until the lease ends.
    assert leases.bodies() == [(1, message(1))]
    assert leases.settle(1) == (0.0, message(1))
    assert (stream.outstanding_messages, stream.outstanding_bytes) == (0, 0)
    assert leases.bodies() == []
    assert leases.settle(1) is None


@given(
    st.integers(0, 4),
    st.integers(0, 40),
    st.integers(0, 5),
    st.integers(0, 30),
    st.lists(st.integers(1, 12), max_size=10),
)
def test_a_stream_takes_of_a_run_what_it_would_one_at_a_time(
    max_messages: int, max_bytes: int, outstanding: int, outstanding_bytes: int, sizes: list[int]
) -> None:
    """``StreamFlow.fitting`` and ``message_room`` (a StreamingPull's run) against
    ``has_room`` asked before each message, as one-at-a-time delivery does."""
    stream = StreamFlow(7, 10, max_messages, max_bytes, outstanding, outstanding_bytes)
    if not stream.has_room():
        return  # the engine asks has_room before it takes a run
    one_by_one = StreamFlow(7, 10, max_messages, max_bytes, outstanding, outstanding_bytes)
    went = 0
    for size in sizes:
        if not one_by_one.has_room():
            break
        one_by_one.outstanding_messages += 1
        one_by_one.outstanding_bytes += size
        went += 1
    taken = sizes[: stream.message_room(len(sizes))]
    assert stream.fitting(taken) == went


def test_a_nacked_lease_ends_as_a_failed_attempt_and_a_rewound_one_does_not() -> None:
    leases = Leases(memory())
    leases.lease(Entry(1, message(1), failed_attempts=2), 10.0, None)
    leases.lease(Entry(2, message(2)), 10.0, None)
    nacked = leases.end(1, failed=True)
    assert nacked is not None
    assert nacked[1] == message(1)
    rewound = leases.end(2, failed=False)
    assert rewound is not None
    assert rewound[0].failed_attempts == 0
    assert len(leases.table) == 0


def test_a_durable_store_is_handed_every_lease_change(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "data", window=10)
    try:
        leases = Leases(SubscriptionStorage(store, SUB))
        leases.lease(Entry(1, message(1)), 10.0, None)
        assert leases.bodies() == []  # the store keeps the body, not the leases
        store.commit()
        assert store.statistics()["leases"] == 1
        ended = leases.end(1, failed=True)
        assert ended is not None
        assert ended[1] is None
    finally:
        store.close()


class _RecordingStore:
    """Records the lease calls a durable store is handed (only those are used here)."""

    window = 10

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def lease(self, subscription: str, seq: int, generation: int, deadline: float) -> None:
        self.calls.append(("lease", subscription, seq, generation, deadline))


class _BulkRecordingStore(_RecordingStore):
    def lease_many(
        self, subscription: str, seqs: Sequence[int], generations: Sequence[int], deadline: float
    ) -> None:
        self.calls.append(("lease_many", subscription, list(seqs), list(generations), deadline))


def test_a_pulls_leases_go_to_the_store_in_one_call_if_it_takes_them_so() -> None:
    taken = [Entry(1, message(1)), Entry(2, message(2), generation=3), Entry(4, message(4))]
    plain, bulk = _RecordingStore(), _BulkRecordingStore()
    for store in (plain, bulk):
        leases = Leases(SubscriptionStorage(cast(Store, store), SUB))
        assert leases.lease_run(taken, 30.0, None) == [1, 4, 1]
    assert bulk.calls == [("lease_many", SUB, [1, 2, 4], [1, 4, 1], 30.0)]
    assert plain.calls == [
        ("lease", SUB, 1, 1, 30.0),
        ("lease", SUB, 2, 4, 30.0),
        ("lease", SUB, 4, 1, 30.0),
    ]


# ---------------------------------------------------------------- settlement


def test_settling_retains_only_what_was_acknowledged_within_the_retention() -> None:
    store = MemoryStore()
    rules = DeliveryRules(retention=100.0, retain_acked=True)
    settlement = Settlement(rules, SubscriptionStorage(store, SUB))
    settlement.settled(Left(1, 50.0, message(1, published=50.0)), acked=True, now=60.0)
    settlement.settled(Left(2, 55.0, message(2, published=55.0)), acked=False, now=60.0)
    settlement.settled(Left(3, 0.0, message(3)), acked=True, now=150.0)  # past retention
    assert [seq for seq, _ in settlement.retained()] == [1]
    assert settlement.oldest_retained() == 50.0
    settlement.set_retain_acked(False)
    assert settlement.retained() == []


# ---------------------------------------------------------------- the schedule


def test_the_schedule_takes_ready_seqs_in_order_from_the_run_and_the_heap() -> None:
    entries = {seq: Entry(seq, message(seq)) for seq in range(1, 9)}
    schedule = Schedule(entries, KeyOrder(entries), ordered=False)
    for seq in (2, 4, 6, 8):  # ascending: the run
        schedule.push(entries[seq], 0.0)
    for seq in (5, 1, 7, 3):  # out of order: the heap
        schedule.push(entries[seq], 0.0)
    taken = []
    while not schedule.exhausted():
        entry = schedule.pop(0.0)
        assert entry is not None
        taken.append(entry.seq)
        if entry.seq == 4:
            schedule.put_back(4)  # not delivered after all: still the next
            again = schedule.pop(0.0)
            assert again is not None
            assert again.seq == 4
    assert taken == [1, 2, 3, 4, 5, 6, 7, 8]
    assert schedule.entries() == (0, 0)


def test_has_ready_drops_stale_entries_of_the_run_and_the_heap() -> None:
    entries = {seq: Entry(seq, message(seq)) for seq in range(1, 5)}
    schedule = Schedule(entries, KeyOrder(entries), ordered=False)
    for seq in (1, 2, 4):
        schedule.push(entries[seq], 0.0)
    schedule.push(entries[3], 0.0)  # into the heap: below the run's tail
    for seq in (1, 2, 3):
        del entries[seq]  # left the window: their schedule entries are stale
    assert schedule.has_ready(0.0)
    entry = schedule.pop(0.0)
    assert entry is not None
    assert entry.seq == 4
    assert not schedule.has_ready(0.0)


class _EndsRecordingStore(_RecordingStore):
    def end_lease(
        self, subscription: str, seq: int, generation: int, deadline: float, failed: int
    ) -> None:
        self.calls.append(("end_lease", subscription, seq, generation, deadline, failed))


class _BulkEndsRecordingStore(_EndsRecordingStore):
    def end_leases(
        self,
        subscription: str,
        seqs: Sequence[int],
        generations: Sequence[int],
        deadlines: Sequence[float],
        failed: Sequence[int],
    ) -> None:
        self.calls.append(
            (
                "end_leases",
                subscription,
                list(seqs),
                list(generations),
                list(deadlines),
                list(failed),
            )
        )


def test_a_requests_nacks_go_to_the_store_in_one_call_if_it_takes_them_so() -> None:
    taken = [Entry(1, message(1)), Entry(2, message(2), failed_attempts=2), Entry(4, message(4))]
    plain, bulk = _EndsRecordingStore(), _BulkEndsRecordingStore()
    for store in (plain, bulk):
        leases = Leases(SubscriptionStorage(cast(Store, store), SUB))
        for entry in taken:
            leases.lease(entry, 30.0, None)
        ended, bodies = leases.end_many([4, 2, 1], [1, 1, 1], 0.0)
        assert (ended.seqs, ended.misses, bodies) == ([4, 2, 1], [], None)
    assert bulk.calls[3:] == [("end_leases", SUB, [4, 2, 1], [1, 1, 1], [30.0] * 3, [1, 3, 1])]
    assert plain.calls[3:] == [
        ("end_lease", SUB, 4, 1, 30.0, 1),
        ("end_lease", SUB, 2, 1, 30.0, 3),
        ("end_lease", SUB, 1, 1, 30.0, 1),
    ]
