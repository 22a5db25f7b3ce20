"""The window's refill in bulk against its general path (core/delivery/waiting.py).

``Waiting.refill`` admits the rows a load brings past the cursor at once when nothing is
returned and they lie past every lease (``Backlog.load_fresh``, ``Waiting._admit_fresh``,
``Backlog.add_run``, ``Schedule.push_run``); the general path (``Backlog.load``) looks at
each row and admits each alone (``Waiting._admit``). On random backlogs — publish times
that rise, stand still or fall, delayed deliveries, ordering keys, rows delivered before a
restart, messages taken out between refills, retention and TTL cutoffs that catch some of
the loaded rows — two ``Waiting`` objects, one with the bulk path switched off, must
answer every refill alike and hold the same window, schedule and key order after it.
"""

from __future__ import annotations

import math
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient.server_stub.core.delivery.lease_table import LeaseTable
from eoclient.server_stub.core.delivery.waiting import Waiting
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import BacklogRow, SubscriptionStorage


class _Rows:
    """A store's rows of one subscription (what ``Backlog`` reads of a store)."""

    def __init__(self, rows: list[BacklogRow], window: int) -> None:
        self._rows = rows
        self.window = window

    def backlog(self, after_seq: int, limit: int) -> list[BacklogRow]:
        return [row for row in self._rows if row.seq > after_seq][:limit]

    def rows(self, seqs: list[int]) -> list[BacklogRow]:
        wanted = set(seqs)
        return [row for row in self._rows if row.seq in wanted]


_row = st.tuples(
    st.sampled_from([0.0, 0.0, 1.0, -1.0]),  # publish time step from the previous row
    st.sampled_from(["", "", "k1", "k2"]),  # ordering key (in a keyed backlog)
    # Delayed delivery until (the clock starts at 10; rare, as a row delayed sends its
    # whole load down the one-at-a-time path).
    st.sampled_from([0.0] * 9 + [15.0]),
    st.integers(0, 2),  # generation of a lease ended before a restart
    st.integers(0, 2),  # failed attempts
)
_step = st.one_of(
    st.tuples(st.just("refill"), st.integers(0, 6), st.sampled_from([0.0, 1000.5, 1003.0])),
    st.tuples(st.just("take"), st.integers(1, 12), st.just(0.0)),
    st.tuples(st.just("wait"), st.integers(1, 8), st.just(0.0)),
    # The lease of the count-th leased message (in seq order) ends: it waits again, its
    # body in the store only (returned: the next loads take the one-at-a-time path).
    st.tuples(st.just("give back"), st.integers(0, 5), st.just(0.0)),
)


def _build(rows: list[Any], ordered: bool, keyed: bool, window: int, restarted: bool) -> Waiting:
    stored: list[BacklogRow] = []
    publish_time = 1000.0
    for seq, (step, key, deliver_at, generation, failed) in enumerate(rows, start=1):
        publish_time += step
        size = 1 + seq % 5
        key = key if keyed else ""
        message = StoredMessage(str(seq), b"x", {}, key, publish_time, size, deliver_at)
        stored.append(BacklogRow(seq, message, failed, generation))
    storage = cast(SubscriptionStorage, _Rows(stored, window))
    waiting = Waiting(storage, ordered=ordered)
    if restarted:  # every row cold, the cursor at 0
        waiting.restore(len(stored), sum(row.message.size for row in stored), [])
    else:  # published while the server ran: the window takes what it has room for
        for row in stored:
            waiting.add(row.seq, row.message, 10.0, 10.0)
    return waiting


def _state(waiting: Waiting) -> Any:
    window, schedule = waiting.window, waiting.schedule
    entries = window.entries
    live_records = [seq for seq in window._by_publish_run if seq in entries]
    heap_records = sorted(record for record in window._by_publish if record[1] in entries)
    ready_run = [seq for seq in schedule._run if seq in entries]
    ready_heap = sorted(seq for seq in schedule._ready if seq in entries)
    delayed = sorted(
        (at, seq) for at, seq in schedule._delayed if seq in entries and entries[seq].ready_at == at
    )
    return (
        # Before ``oldest``, which makes the bound exact.
        window.oldest_bound(),
        [
            (seq, e.message, e.ready_at, e.generation, e.failed_attempts, e.key_position)
            for seq, e in entries.items()
        ],
        (window.waiting(), window.cold(), window.bytes, window._cursor),
        (live_records, heap_records, window.window_head(), window.oldest()),
        (ready_run, ready_heap, delayed),
        dict(waiting._keys._keys),
        dict(waiting._keys._key_of),
        set(waiting._keys._gone),
    )


def _step_through(waiting: Waiting, leased: LeaseTable, step: Any, clock: list[float]) -> Any:
    kind, count, cutoff = step
    now = clock[0]
    if kind == "wait":
        clock[0] += count
        waiting.schedule.release_due(clock[0])
        return None
    if kind == "give back":
        seqs = [lease.seq for lease in leased]
        if count >= len(seqs):
            return None
        lease = leased.remove(seqs[count])
        assert lease is not None
        waiting.give_back(lease, None, now, lease.failed_attempts + 1, now)
        return lease.seq
    if kind == "take":
        taken = []
        for _ in range(count):
            if waiting.schedule.exhausted():
                break
            entry = waiting.schedule.pop(now)
            if entry is None:
                continue
            waiting.deliver(entry, now)
            message = entry.message
            leased.add(entry.seq, 1, now + 10, message.size, 0, 0, message.publish_time)
            taken.append(entry.seq)
        return taken
    # refill: ``cutoff`` catches none (0), some of the oldest, or many of the rows; the
    # TTL's cutoff lies a little before it.
    return waiting.refill(now, count, leased, cutoff, cutoff - 1.0 if cutoff else -math.inf)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_row, max_size=40),
    st.booleans(),
    st.booleans(),
    st.integers(1, 6),
    st.booleans(),
    st.lists(_step, max_size=20),
)
def test_a_refill_in_bulk_leaves_what_the_general_path_leaves(
    rows: list[Any],
    ordered: bool,
    keyed: bool,
    window: int,
    restarted: bool,
    steps: list[Any],
) -> None:
    bulk, general = (_build(rows, ordered, keyed, window, restarted) for _ in range(2))
    general.window.load_fresh = lambda want, *, held_below, most=None: None  # type: ignore[method-assign]
    bulk.window.MIN_LOAD = general.window.MIN_LOAD = 2
    tables = [LeaseTable(), LeaseTable()]
    clocks = [[10.0], [10.0]]
    assert _state(bulk) == _state(general)
    for step in steps:
        answers = [
            _step_through(waiting, table, step, clock)
            for waiting, table, clock in zip((bulk, general), tables, clocks, strict=True)
        ]
        assert answers[0] == answers[1], step
        assert _state(bulk) == _state(general), step
