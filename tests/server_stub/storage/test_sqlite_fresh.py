"""The fresh rows (``sqlite_fresh.FreshRows``) against reads of the table: on random
sequences of publishes (some through a filter that lets every other message in), window
refills from each subscription's cursor, reads from anywhere, acks, ended leases, seeks,
deletions, messages deleted behind the store's back, garbage collection, commits and
restarts, a store that answers refills from what it saw published returns exactly the rows
of one that reads every refill from ``backlog``."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient.server_stub.core.model import StoredMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.core.store import SubscriptionRecord
from eoclient.server_stub.storage.sqlite import SqliteStore
from eoclient.server_stub.storage.sqlite_fresh import FreshRows

from .test_sqlite_cache import SUBS, TOPICS
from .test_sqlite_cache import Pair as CachePair


def _message(seq: int) -> StoredMessage:
    return StoredMessage(f"id-{seq}", f"body {seq}".encode(), {}, "", 1e9 + seq, 10)


def _record(name: str) -> SubscriptionRecord:
    """A subscription as test_sqlite_cache's pair creates it."""
    config = SubscriptionConfig(name, SUBS[name], retain_acked_messages=True)
    return SubscriptionRecord(config, 0.0, 0.0)


class Pair(CachePair):
    """The same calls on a store that keeps fresh rows (at most ``runs`` runs a
    subscription) and on one that keeps none, both with a cache of ``cache_bytes`` (the
    topics and subscriptions of test_sqlite_cache's pair); each subscription's window
    cursor."""

    def __init__(self, root: Path, runs: int, cache_bytes: int) -> None:
        self.runs, self.cache_bytes = runs, cache_bytes
        super().__init__(root, cache_bytes)
        self.cursor = dict.fromkeys(SUBS, 0)

    def _open(self) -> tuple[SqliteStore, SqliteStore]:
        fresh, plain = (
            SqliteStore(path, gc_interval=0, cache_bytes=self.cache_bytes, fresh_runs=runs)
            for path, runs in zip(self.paths, (self.runs, 0), strict=True)
        )
        return fresh, plain

    def read(self, subscription: str, after: int, limit: int) -> list[int]:
        fresh, plain = self.stores
        found = fresh.backlog(subscription, after, limit)
        assert found == plain.backlog(subscription, after, limit)
        return [row.seq for row in found]

    def apply(self, operation: tuple[object, ...]) -> None:
        kind, *args = operation
        if kind == "publish":
            topic, count, receivers, every_other = args
            messages = [(self.seq + i + 1, _message(self.seq + i + 1)) for i in range(count)]  # type: ignore[call-overload]
            self.seq += count  # type: ignore[operator]
            seqs = [seq for seq, _ in messages]
            by_filter = {
                name: seqs[::2] if name in every_other else seqs  # type: ignore[operator]
                for name in receivers  # type: ignore[attr-defined]
            }
            for store in self.stores:
                store.publish(topic, messages, by_filter)  # type: ignore[arg-type]
        elif kind == "refill":  # the window, from its cursor
            name, limit = args
            seqs = self.read(name, self.cursor[name], limit)  # type: ignore[index, arg-type]
            if seqs:
                self.cursor[name] = seqs[-1]  # type: ignore[index]
        elif kind == "read":  # a read from anywhere: a snapshot's, the dashboard's
            name, after, limit = args
            self.read(name, after, limit)  # type: ignore[arg-type]
        elif kind == "restart":
            self.restart()
        else:
            for store in self.stores:
                self._apply_to(store, kind, args)

    def _apply_to(self, store: SqliteStore, kind: object, args: list[object]) -> None:
        if kind == "settle":
            name, seqs = args
            store.settle(name, sorted(set(seqs)), [])  # type: ignore[arg-type, call-overload]
        elif kind == "end_lease":
            name, seq, generation = args
            store.end_lease(name, seq, generation, 5.0, generation)  # type: ignore[arg-type]
        elif kind == "seek":
            name, seqs = args
            unacked = [(s, _message(s)) for s in sorted(set(seqs)) if s <= self.seq]  # type: ignore[call-overload]
            store.reset_subscription(name, unacked, [], "uid")  # type: ignore[arg-type]
            self.cursor[name] = 0  # type: ignore[index]
        elif kind == "recreate":
            (name,) = args
            store.delete_subscription(name)  # type: ignore[arg-type]
            store.resources.put_subscription(_record(name))  # type: ignore[arg-type]
            self.cursor[name] = 0  # type: ignore[index]
        elif kind == "lose_messages":  # deleted behind the store's back: the join skips them
            topic, below = args
            store.commit()
            store._messages.delete_messages(store._names.id("topic", topic), 0, below, 100)  # type: ignore[arg-type]
        elif kind == "gc":
            store.collect_garbage()
        elif kind == "commit":
            store.commit()


_subscription = st.sampled_from(sorted(SUBS))
_seq = st.integers(1, 80)
_operation = st.one_of(
    st.tuples(
        st.just("publish"),
        st.sampled_from(TOPICS),
        st.integers(1, 8),
        st.lists(_subscription, unique=True),
        st.lists(_subscription, unique=True),
    ),
    st.tuples(st.just("refill"), _subscription, st.integers(1, 12)),
    st.tuples(st.just("refill"), _subscription, st.integers(1, 12)),
    st.tuples(st.just("read"), _subscription, st.integers(0, 80), st.integers(1, 12)),
    st.tuples(st.just("settle"), _subscription, st.lists(_seq, max_size=6)),
    st.tuples(st.just("end_lease"), _subscription, _seq, st.integers(1, 5)),
    st.tuples(st.just("seek"), _subscription, st.lists(_seq, max_size=8)),
    st.tuples(st.just("recreate"), _subscription),
    st.tuples(st.just("lose_messages"), st.sampled_from(TOPICS), _seq),
    st.tuples(st.just("gc")),
    st.tuples(st.just("commit")),
    st.tuples(st.just("restart")),
)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 4),
    st.sampled_from([0, 2_000, 1 << 20]),
    st.lists(_operation, min_size=1, max_size=40),
)
def test_refills_from_fresh_rows_equal_reads_of_the_table(
    runs: int, cache_bytes: int, operations: list[tuple[object, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        pair = Pair(Path(directory), runs, cache_bytes)
        try:
            for operation in operations:
                pair.apply(operation)
            for name in SUBS:  # every row left, from the start and from each cursor
                pair.read(name, 0, 100)
                pair.read(name, pair.cursor[name], 100)
        finally:
            pair.close()


def test_a_subscriber_keeping_up_refills_without_reading_the_table(tmp_path: Path) -> None:
    name, topic = "projects/p/subscriptions/s", TOPICS[0]
    store = SqliteStore(tmp_path, gc_interval=0)
    try:
        store.resources.put_topic(TopicConfig(topic))
        store.resources.put_subscription(_record(name))
        for start in range(1, 2_001, 100):
            batch = [(seq, _message(seq)) for seq in range(start, start + 100)]
            store.publish(topic, batch, {name: [seq for seq, _ in batch]})
        store.commit()
        statements: list[str] = []
        read = store._writes.read
        store._writes.read = lambda sql, *args: statements.append(sql) or read(sql, *args)  # type: ignore[method-assign, func-returns-value]
        cursor, delivered = 0, []
        while rows := store.backlog(name, cursor, 300):
            cursor = rows[-1].seq
            delivered += [row.seq for row in rows]
            store.settle(name, [row.seq for row in rows], [])
            store.commit()
        assert delivered == list(range(1, 2_001))
        assert statements == []
        # An ack of a message no refill has reached yet: the next refill reads the table.
        batch = [(seq, _message(seq)) for seq in range(2_001, 2_011)]
        store.publish(topic, batch, {name: [seq for seq, _ in batch]})
        store.settle(name, [2_005], [])
        assert [row.seq for row in store.backlog(name, cursor, 300)] == [
            2_001, 2_002, 2_003, 2_004, 2_006, 2_007, 2_008, 2_009, 2_010
        ]  # fmt: skip
        assert len(statements) == 1
    finally:
        store.close()


def test_consecutive_publishes_are_one_run_and_broken_up_seqs_past_the_cap_forget() -> None:
    fresh = FreshRows(max_runs=2)
    fresh.published(1, range(11, 21), last_seq=10)
    fresh.published(1, range(21, 31), last_seq=20)  # right after the last run: it grows
    assert fresh.after(1, 10, 100) == list(range(11, 31))
    assert fresh.after(1, 9, 100) is None  # below the claim: it does not say
    fresh.read(1, 15, complete=False)  # the window read up to 15
    assert fresh.after(1, 15, 3) == [16, 17, 18]
    assert fresh.after(1, 14, 3) is None
    fresh.published(1, [35, 37], last_seq=34)  # two more runs: three in all, over the cap
    assert fresh.after(1, 15, 3) is None
    fresh.read(1, 40, complete=True)  # a read that saw every row: none above 40
    assert fresh.after(1, 40, 3) == []
    fresh.published(1, [41], last_seq=40)
    fresh.changed(1, [12])  # a settle below the claim: it still holds
    assert fresh.after(1, 40, 3) == [41]
    fresh.changed(1, [41])  # a settle of a row it names: forgotten
    assert fresh.after(1, 40, 3) is None
    fresh.read(1, 41, complete=True)
    fresh.published(1, [41, 42], last_seq=42)  # not above what it names: forgotten
    assert fresh.after(1, 41, 3) is None


def test_runs_read_past_are_compacted_away_and_the_rest_still_answer() -> None:
    fresh = FreshRows(max_runs=1_000)
    for seq in range(2, 1_202, 2):  # 600 runs of one seq: a filter letting every other in
        fresh.published(1, [seq], last_seq=seq - 1)
    fresh.read(1, 800, complete=False)  # 400 runs read past: the lists are compacted
    assert fresh.after(1, 800, 3) == [802, 804, 806]
    assert fresh.after(1, 1_196, 5) == [1_198, 1_200]
    fresh.read(1, 1_198, complete=False)
    assert fresh.after(1, 1_198, 5) == [1_200]
