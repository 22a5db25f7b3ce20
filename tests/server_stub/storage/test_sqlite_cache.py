"""The tail cache (``sqlite_cache.TailCache``) against reads without it: on random
sequences of publishes, acks, ended leases, seeks, garbage collection, commits and
restarts, a store whose refills take messages from a small cache (evicting all the time)
reads exactly the rows and messages of a store that reads every one back with the join."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient.server_stub.core.model import StoredMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.core.store import Acked, SubscriptionRecord
from eoclient.server_stub.storage.sqlite import SqliteStore
from eoclient.server_stub.storage.sqlite_cache import BATCH_OVERHEAD, ENTRY_OVERHEAD, TailCache

TOPICS = ("projects/p/topics/t", "projects/p/topics/u")
SUBS = {
    "projects/p/subscriptions/s": TOPICS[0],
    "projects/p/subscriptions/r": TOPICS[0],
    "projects/p/subscriptions/q": TOPICS[1],
}


def _message(seq: int) -> StoredMessage:
    data = f"body {seq}".encode()
    attributes = {"n": str(seq)} if seq % 3 else {}
    size = len(data) + sum(len(k) + len(v) for k, v in attributes.items())
    return StoredMessage(f"id-{seq}", data, attributes, "", 1e9 + seq, size)


class Pair:
    """The same calls on a cached store and on one whose cache holds nothing."""

    def __init__(self, root: Path, cache_bytes: int) -> None:
        self.paths = (root / "cached", root / "plain")
        self.budgets = (cache_bytes, 0)
        self.stores = self._open()
        self.seq = 0
        self.published: dict[str, list[int]] = {topic: [] for topic in TOPICS}
        for store in self.stores:
            for topic in TOPICS:
                store.resources.put_topic(TopicConfig(topic))
            for name, topic in SUBS.items():
                config = SubscriptionConfig(name, topic, retain_acked_messages=True)
                store.resources.put_subscription(SubscriptionRecord(config, 0.0, 0.0))

    def _open(self) -> tuple[SqliteStore, SqliteStore]:
        cached, plain = (
            SqliteStore(path, gc_interval=0, cache_bytes=budget)
            for path, budget in zip(self.paths, self.budgets, strict=True)
        )
        return cached, plain

    def restart(self) -> None:
        self.close()
        self.stores = self._open()

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def publish(self, topic: str, count: int, receivers: list[str]) -> None:
        messages = [(self.seq + i + 1, _message(self.seq + i + 1)) for i in range(count)]
        self.seq += count
        self.published[topic] += [seq for seq, _ in messages]
        seqs = [seq for seq, _ in messages]
        for store in self.stores:
            store.publish(topic, messages, dict.fromkeys(receivers, seqs))

    def check(self, subscription: str, after: int, limit: int, some: list[int]) -> None:
        cached, plain = self.stores
        assert cached.backlog(subscription, after, limit) == plain.backlog(
            subscription, after, limit
        )
        assert cached.rows(subscription, some) == plain.rows(subscription, some)


_subscription = st.sampled_from(sorted(SUBS))
_operation = st.one_of(
    st.tuples(
        st.just("publish"),
        st.sampled_from(TOPICS),
        st.integers(1, 6),
        st.lists(_subscription, unique=True),
    ),
    st.tuples(st.just("settle"), _subscription, st.lists(st.integers(1, 60), max_size=8)),
    st.tuples(st.just("end_lease"), _subscription, st.integers(1, 60), st.integers(1, 5)),
    st.tuples(st.just("seek"), _subscription, st.lists(st.integers(1, 60), max_size=10)),
    st.tuples(st.just("gc")),
    st.tuples(st.just("commit")),
    st.tuples(st.just("restart")),
)
_read = st.tuples(
    _subscription,
    st.integers(0, 60),
    st.integers(1, 20),
    st.lists(st.integers(1, 60), max_size=10),
)


def _apply(pair: Pair, operation: tuple[object, ...]) -> None:
    kind, *args = operation
    if kind == "publish":
        topic, count, receivers = args
        pair.publish(topic, count, receivers)  # type: ignore[arg-type]
    elif kind == "restart":
        pair.restart()
    for store in pair.stores:
        if kind == "settle":
            name, seqs = args
            mine = sorted(set(seqs))  # type: ignore[call-overload]
            retain = [Acked(seq, 1e9 + seq, None) for seq in mine[::2]]
            store.settle(name, mine, retain)  # type: ignore[arg-type]
        elif kind == "end_lease":
            name, seq, generation = args
            store.end_lease(name, seq, generation, 5.0, generation)  # type: ignore[arg-type]
        elif kind == "seek":
            name, seqs = args
            # A seek names messages the topic published (and those garbage collection may
            # have deleted since: the join then leaves them out, and so must the cache).
            topic = SUBS[name]  # type: ignore[index]
            unacked = [(s, _message(s)) for s in sorted(set(seqs)) if s in pair.published[topic]]  # type: ignore[call-overload]
            store.reset_subscription(name, unacked, [], "uid")  # type: ignore[arg-type]
        elif kind == "gc":
            store.collect_garbage()
        elif kind == "commit":
            store.commit()


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 12 * (ENTRY_OVERHEAD + 20) + 6 * BATCH_OVERHEAD),
    st.lists(st.tuples(_operation, _read), min_size=1, max_size=25),
)
def test_cached_reads_equal_reads_of_the_join(
    cache_bytes: int, steps: list[tuple[tuple[object, ...], tuple[str, int, int, list[int]]]]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        pair = Pair(Path(directory), cache_bytes)
        try:
            for operation, (subscription, after, limit, some) in steps:
                _apply(pair, operation)
                pair.check(subscription, after, limit, sorted(set(some)))
        finally:
            pair.close()


def test_a_message_garbage_collection_deleted_is_not_served_from_the_cache(
    tmp_path: Path,
) -> None:
    # Rows naming deleted messages cannot happen through the broker (the low-water mark
    # keeps what a backlog names); deleted behind its back, the join leaves them out, and
    # so must a cached read.
    pair = Pair(tmp_path, 1 << 20)
    try:
        pair.publish(TOPICS[0], 10, ["projects/p/subscriptions/s"])
        pair.publish(TOPICS[1], 10, ["projects/p/subscriptions/q"])
        for store in pair.stores:
            store.commit()
            topic = store._names.id("topic", TOPICS[0])
            store._messages.delete_messages(topic, 0, 8, 100)
            store.commit()
        cached, plain = pair.stores
        assert len(cached._messages.cache.messages) == 13  # 3 of t, 10 of u
        for name in ("projects/p/subscriptions/s", "projects/p/subscriptions/q"):
            for after in (0, 5):
                expected = plain.backlog(name, after, 100)
                assert cached.backlog(name, after, 100) == expected
            assert cached.rows(name, list(range(1, 21))) == plain.rows(name, list(range(1, 21)))
        assert [row.seq for row in cached.backlog("projects/p/subscriptions/s", 0, 100)] == [
            8,
            9,
            10,
        ]
        # Each batch's one subscription has read past it: none is kept.
        assert cached._messages.cache.messages == {}
    finally:
        pair.close()


def test_a_seek_reads_the_rows_it_set_with_their_messages(tmp_path: Path) -> None:
    name = "projects/p/subscriptions/s"
    pair = Pair(tmp_path, 1 << 20)
    try:
        pair.publish(TOPICS[0], 10, [name])
        cached, _ = pair.stores
        cached.settle(name, list(range(1, 11)), [])
        assert cached.backlog(name, 0, 100) == []
        cached.reset_subscription(name, [(3, _message(3)), (7, _message(7))], [], "uid")
        rows = cached.backlog(name, 0, 100)
        assert [(row.seq, row.message) for row in rows] == [(3, _message(3)), (7, _message(7))]
    finally:
        pair.close()


def test_the_cache_keeps_the_latest_batches_within_its_budget() -> None:
    entry = ENTRY_OVERHEAD + len(b"body 12") + BATCH_OVERHEAD  # _message(12): no attributes
    cache = TailCache(budget=3 * entry)
    assert cache.low is None
    for seq in (10, 11, 12, 13):
        cache.add(1, [(seq, _message(12))])
        assert cache.size <= cache.budget
    assert sorted(cache.messages) == [11, 12, 13]
    assert cache.low == 11
    cache.add(1, [(14 + i, _message(12)) for i in range(5)])  # over the whole budget
    assert sorted(cache.messages) == [11, 12, 13]
    cache.drop(1, 0, 13)  # 11 and 12 gone and their bytes freed
    cache.drop(2, 0, 100)  # another topic's: nothing
    assert sorted(cache.messages) == [13]
    assert cache.size == entry
    assert cache.low == 13


@contextlib.contextmanager
def _store(directory: Path, cache_bytes: int) -> Iterator[SqliteStore]:
    store = SqliteStore(directory, cache_bytes=cache_bytes)
    try:
        yield store
    finally:
        store.close()


def test_a_refill_reads_below_the_cache_with_the_join_and_above_it_from_the_cache(
    tmp_path: Path,
) -> None:
    name = "projects/p/subscriptions/s"
    budget = 5 * (ENTRY_OVERHEAD + 20)
    with _store(tmp_path, budget) as store:
        for seq in range(1, 21):
            store.publish(TOPICS[0], [(seq, _message(seq))], {name: [seq]})
        low = store._messages.cache.low
        assert low is not None
        assert low > 10
        rows = store.backlog(name, 0, 20)
        assert [(row.seq, row.message) for row in rows] == [
            (seq, _message(seq)) for seq in range(1, 21)
        ]
        cached = store._messages.cache.messages
        assert all(
            rows[i].message is cached[seq] for i, seq in enumerate(range(1, 21)) if seq in cached
        )


def test_rows_read_from_the_cache_keep_their_failed_attempts_and_generations(
    tmp_path: Path,
) -> None:
    # Above the cache's lowest seq a refill reads the backlog's columns as one JSON array: a row
    # a lease ended without an ack carries its counts in it; the others are their seq alone.
    name = "projects/p/subscriptions/s"
    pair = Pair(tmp_path, 1 << 20)
    try:
        pair.publish(TOPICS[0], 12, [name])
        for store in pair.stores:
            store.end_lease(name, 3, 2, 5.0, 1)
            store.end_lease(name, 11, 7, 5.0, 4)
            store.settle(name, [5, 6], [])
        cached, plain = pair.stores
        rows = cached.backlog(name, 0, 8)
        assert [(row.seq, row.failed_attempts, row.generation) for row in rows] == [
            (1, 0, 0), (2, 0, 0), (3, 1, 2), (4, 0, 0), (7, 0, 0), (8, 0, 0), (9, 0, 0), (10, 0, 0)
        ]  # fmt: skip
        assert rows == plain.backlog(name, 0, 8)
        assert cached.backlog(name, 10, 8) == plain.backlog(name, 10, 8)
        assert [(row.seq, row.generation) for row in cached.backlog(name, 10, 8)] == [
            (11, 7),
            (12, 0),
        ]
        assert cached.backlog(name, 12, 8) == []
    finally:
        pair.close()


def test_a_batch_leaves_once_every_subscription_it_went_to_has_read_past_it() -> None:
    cache = TailCache(budget=1 << 20)
    cache.add(1, [(1, _message(1)), (2, _message(2))], [10, 11])
    cache.add(1, [(3, _message(3))], [10])
    cache.read(10, 2)
    assert sorted(cache.messages) == [1, 2, 3]  # 11 has not read 1-2 yet
    cache.read(11, 1)  # part of the batch only
    assert sorted(cache.messages) == [1, 2, 3]
    cache.read(11, 2)
    assert sorted(cache.messages) == [3]
    assert cache.low == 3
    cache.forget(10)  # deleted: 3 had no other reader
    assert cache.messages == {}
    assert cache.size == 0
    assert cache.low is None


def test_reads_past_batches_the_budget_or_garbage_collection_released_already() -> None:
    entry = ENTRY_OVERHEAD + len(b"body 12") + BATCH_OVERHEAD  # a batch of one message
    cache = TailCache(budget=3 * entry)
    for seq in range(1, 6):  # 1 and 2 evicted by the budget
        cache.add(1, [(seq, _message(12))], [10])
    cache.drop(1, 4, 5)  # 4 collected
    assert sorted(cache.messages) == [3, 5]
    cache.read(10, 4)
    assert sorted(cache.messages) == [5]
    assert cache.size == entry
    cache.read(10, 5)
    assert (cache.messages, cache.size, cache.low) == ({}, 0, None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 3), st.sets(st.integers(1, 3))),
            st.tuples(st.just("read"), st.integers(1, 3), st.integers(0, 8)),
            st.tuples(st.just("forget"), st.integers(1, 3), st.just(0)),
            st.tuples(st.just("drop"), st.integers(0, 30), st.integers(0, 6)),
        ),
        max_size=40,
    )
)
def test_the_cache_counts_exactly_what_it_holds(operations: list[tuple[str, int, object]]) -> None:
    # Whatever the order of publishes, reads, deletions and collections: the bytes
    # counted cover the messages held, within the budget, and a message is held only
    # while some subscription its batch went to has not read past the whole batch.
    entry = ENTRY_OVERHEAD + len(b"body 12")
    cache = TailCache(budget=6 * entry)
    seq, read_to, gone = 0, dict.fromkeys((1, 2, 3), 0), set()
    readers_of: dict[int, set[int]] = {}
    last_of: dict[int, int] = {}  # a message's batch's last seq
    for kind, a, b in operations:
        if kind == "add":
            readers = cast(set[int], b) - gone
            batch = [(seq + i + 1, _message(12)) for i in range(a)]
            seq += a
            if readers:  # (the store keeps no batch that no subscription receives)
                cache.add(1, batch, sorted(readers))
                readers_of.update((s, set(readers)) for s, _ in batch)
                last_of.update((s, seq) for s, _ in batch)
        elif kind == "read":
            if a not in gone:
                through = min(read_to[a] + cast(int, b), seq)
                cache.read(a, through)
                read_to[a] = max(read_to[a], through)
        elif kind == "forget":
            cache.forget(a)
            gone.add(a)
            read_to[a] = 10**9
        else:
            cache.drop(1, a, a + cast(int, b))
        held = set(cache.messages)
        assert cache.size <= cache.budget
        assert cache.size >= len(held) * entry
        for s in held:
            assert any(read_to[r] < last_of[s] for r in readers_of[s])
        for s, readers in readers_of.items():  # and one read past by all is not
            if all(read_to[r] >= last_of[s] for r in readers):
                assert s not in held


def test_every_read_hands_out_new_row_objects(tmp_path: Path) -> None:
    # The core keeps the rows it loads as its window's entries and changes them
    # (core/store.py, BacklogRow): a row object is never handed out twice, cached or not.
    name = "projects/p/subscriptions/s"
    with _store(tmp_path, 5 * (ENTRY_OVERHEAD + 20)) as store:
        for seq in range(1, 21):
            store.publish(TOPICS[0], [(seq, _message(seq))], {name: [seq]})
        reads = [store.backlog(name, 0, 20), store.backlog(name, 0, 20)]
        reads += [store.rows(name, list(range(1, 21))), store.rows(name, list(range(1, 21)))]
        objects = [id(row) for read in reads for row in read]
        assert len(objects) == 4 * 20
        assert len(set(objects)) == len(objects)


@given(
    st.integers(0, 8 * (ENTRY_OVERHEAD + 20) + 4 * BATCH_OVERHEAD),
    st.lists(
        st.tuples(st.booleans(), st.integers(1, 2), st.integers(1, 4), st.integers(0, 40)),
        max_size=30,
    ),
)
def test_garbage_collection_drops_exactly_its_topics_range(
    budget: int, steps: list[tuple[bool, int, int, int]]
) -> None:
    cache = TailCache(budget)
    topic_of: dict[int, int] = {}
    seq = 0
    for is_drop, topic, count, bound in steps:
        if is_drop:
            before = dict(cache.messages)
            cache.drop(topic, bound // 2, bound)
            for held in before:
                gone = topic_of[held] == topic and bound // 2 <= held < bound
                assert (held in cache.messages) != gone
        else:
            messages = [(seq + i + 1, _message(seq + i + 1)) for i in range(count)]
            seq += count
            topic_of.update((s, topic) for s, _ in messages)
            cache.add(topic, messages)
        assert cache.size <= budget
        low = cache.low
        assert all(held >= low for held in cache.messages) if low is not None else True
        assert all(cache.messages[s] == _message(s) for s in cache.messages)


def test_a_subscriber_draining_its_backlog_leaves_the_cache_empty(tmp_path: Path) -> None:
    # The window takes the first messages when they are published and refills from its
    # cursor: the batches it has read past leave, though it never read the first ones.
    name = "projects/p/subscriptions/s"
    with _store(tmp_path, 1 << 20) as store:
        for start in range(1, 101, 10):
            batch = [(seq, _message(seq)) for seq in range(start, start + 10)]
            store.publish(TOPICS[0], batch, {name: [seq for seq, _ in batch]})
        cache = store._messages.cache
        assert len(cache.messages) == 100
        rows = store.backlog(name, 20, 30)  # the window held 1-20 from the publish
        assert [row.seq for row in rows] == list(range(21, 51))
        assert sorted(cache.messages) == list(range(51, 101))
        assert store.backlog(name, 50, 100)[-1].seq == 100
        assert (cache.messages, cache.size) == ({}, 0)


def test_a_refill_above_the_caches_low_that_misses_reads_those_messages(tmp_path: Path) -> None:
    # The cache's oldest batch (held for q) lies below a batch s alone read past (released):
    # a seek of s back onto that batch's messages asks for seqs above the cache's lowest
    # that it no longer holds, with no failed attempt or generation: they are read back.
    s, q = "projects/p/subscriptions/s", "projects/p/subscriptions/q"
    pair = Pair(tmp_path, 1 << 20)
    try:
        pair.publish(TOPICS[1], 3, [q])  # seqs 1-3, unread by q: the cache's low stays 1
        pair.publish(TOPICS[0], 4, [s])  # seqs 4-7
        cached, _ = pair.stores
        pair.check(s, 0, 100, [])  # s reads past 4-7: released
        assert sorted(cached._messages.cache.messages) == [1, 2, 3]
        for store in pair.stores:
            store.reset_subscription(s, [(5, _message(5)), (6, _message(6))], [], "uid")
        pair.check(s, 0, 100, [5, 6])
        assert [row.seq for row in cached.backlog(s, 0, 100)] == [5, 6]
    finally:
        pair.close()
