"""SqliteStore's fast paths against the plain ones, on random input: messages read back
(built through StoredMessage's slots, ``sqlite_rows.message_from_row``) equal the
dataclass's own construction field by field; acks buffered as ranges
(``Writes.write_ranges``) settle exactly the acked rows, in any order; garbage collection's
ranged deletes take exactly the topic's messages below the floor, a bounded batch at a
time."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.server_stub.core import policies
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import Acked
from eoclient.server_stub.storage.sqlite import SqliteStore
from eoclient.server_stub.storage.sqlite_cache import CACHE_BYTES

TOPIC = "projects/p/topics/t"
OTHER_TOPIC = "projects/p/topics/u"
SUB = "projects/p/subscriptions/s"

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_attributes = st.dictionaries(_text, _text, max_size=3) | st.builds(
    lambda seconds, rest: {**rest, policies.DELIVER_AFTER_ATTRIBUTE: f"{seconds}s"},
    st.integers(0, 3600),
    st.dictionaries(_text, _text, max_size=2),
)


@st.composite
def _messages(draw: st.DrawFn) -> list[StoredMessage]:
    found = []
    for index in range(draw(st.integers(1, 12))):
        attributes = draw(_attributes)
        data = draw(st.binary(max_size=40))
        key = draw(_text)
        publish_time = draw(st.floats(1e9, 2e9))
        found.append(
            StoredMessage(
                message_id=str(index + 1),
                data=data,
                attributes=attributes,
                ordering_key=key,
                publish_time=publish_time,
                size=len(data) + len(key) + sum(len(k) + len(v) for k, v in attributes.items()),
                deliver_at=policies.deliver_at(attributes, publish_time),
            )
        )
    return found


@contextlib.contextmanager
def _store(cache_bytes: int = CACHE_BYTES) -> Iterator[SqliteStore]:
    # Hypothesis runs the test body many times: a directory each, not pytest's tmp_path.
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(directory, gc_interval=0, cache_bytes=cache_bytes)
        try:
            yield store
        finally:
            store.close()


def _fields(message: StoredMessage) -> dict[str, object]:
    return {item.name: getattr(message, item.name) for item in dataclasses.fields(message)}


# 0: no message cached, every row is read back (the cached ones are the published objects).
@pytest.mark.parametrize("cache_bytes", [0, CACHE_BYTES])
@given(messages=_messages())
def test_messages_read_back_equal_the_dataclass_construction(
    cache_bytes: int, messages: list[StoredMessage]
) -> None:
    published = list(enumerate(messages, start=1))
    seqs = [seq for seq, _ in published]
    with _store(cache_bytes) as store:
        store.publish(TOPIC, published, {SUB: seqs})
        store.commit()
        backlog = store.backlog(SUB, 0, len(seqs))
        some = store.rows(SUB, seqs[::2])
        store.settle(SUB, seqs, [Acked(seq, m.publish_time, m) for seq, m in published])
        retained = store.retained(SUB)
        log = store.snapshots.topic_log(TOPIC, 0)
    assert [row.seq for row in backlog] == seqs
    assert [(row.failed_attempts, row.generation) for row in backlog] == [(0, 0)] * len(seqs)
    for read in (
        [(row.seq, row.message) for row in backlog],
        [(row.seq, row.message) for row in some],
        retained,
        log,
    ):
        expected = [(seq, m) for seq, m in published if seq in {s for s, _ in read}]
        assert [(seq, _fields(m)) for seq, m in read] == [(s, _fields(m)) for s, m in expected]
        assert read == expected  # the dataclass's own equality, type included


@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.integers(1, n), max_size=3 * n))
    ),
    st.integers(0, 3),
)
def test_acks_buffered_as_ranges_settle_exactly_the_acked_rows(
    published_and_acked: tuple[int, list[int]], commit_every: int
) -> None:
    count, acked = published_and_acked
    message = StoredMessage("1", b"x", {}, "", 1e9, 1)
    other = "projects/p/subscriptions/other"
    with _store() as store:
        seqs = list(range(1, count + 1))
        store.publish(TOPIC, [(seq, message) for seq in seqs], {SUB: seqs, other: seqs})
        for index, seq in enumerate(acked):
            store.settle(SUB, (seq,), ())
            if index % 2:
                store.settle(other, (count + 1 - seq,), ())  # interleaved, in reverse
            if commit_every and index % commit_every == 0:
                store.commit()
        store.commit()
        left = [row.seq for row in store.backlog(SUB, 0, count)]
        left_other = [row.seq for row in store.backlog(other, 0, count)]
    assert left == [seq for seq in seqs if seq not in set(acked)]
    acked_other = {count + 1 - seq for index, seq in enumerate(acked) if index % 2}
    assert left_other == [seq for seq in seqs if seq not in acked_other]


@given(
    st.lists(st.booleans(), min_size=1, max_size=40),
    st.integers(0, 41),
    st.integers(1, 7),
)
def test_garbage_collection_deletes_a_topics_messages_below_the_floor_in_batches(
    of_first_topic: list[bool], floor: int, batch: int
) -> None:
    message = StoredMessage("1", b"x", {}, "", 1e9, 1)
    first = [seq for seq, mine in enumerate(of_first_topic, start=1) if mine]
    second = [seq for seq, mine in enumerate(of_first_topic, start=1) if not mine]
    with _store() as store:
        store.publish(TOPIC, [(seq, message) for seq in first], {})
        store.publish(OTHER_TOPIC, [(seq, message) for seq in second], {})
        store.commit()
        topic = store._names.id("topic", TOPIC)
        deleted, start = [], 0
        count = "SELECT COUNT(*) FROM messages"
        while start < floor:
            before = store._writes.read(count).fetchone()[0]
            start = store._messages.delete_messages(topic, start, floor, batch)
            # Buffered for the commit's thread: nothing is deleted yet.
            assert store._writes.db.execute(count).fetchone()[0] == before
            store.commit()
            deleted.append(before - store._writes.read(count).fetchone()[0])
        left = [seq for (seq,) in store._writes.read("SELECT seq FROM messages ORDER BY seq")]
    gone = [seq for seq in first if seq < floor]
    assert sum(deleted) == len(gone)
    assert all(count == batch for count in deleted[:-1])
    assert not deleted or deleted[-1] <= batch
    assert left == sorted(set(first + second) - set(gone))


_lease_calls = st.lists(
    st.tuples(
        st.sampled_from([SUB, "projects/p/subscriptions/other"]),
        st.sampled_from([100.0, 200.0]),
        st.lists(st.tuples(st.integers(1, 12), st.integers(1, 4)), max_size=5),
    ),
    max_size=8,
)


@given(_lease_calls)
def test_leases_in_bulk_write_the_rows_of_leases_one_by_one(
    calls: list[tuple[str, float, list[tuple[int, int]]]],
) -> None:
    message = StoredMessage("1", b"x", {}, "", 1e9, 1)
    seqs = list(range(1, 13))
    tables = []
    for bulk in (False, True):
        with _store() as store:
            receivers = {SUB: seqs, "projects/p/subscriptions/other": seqs}
            store.publish(TOPIC, [(seq, message) for seq in seqs], receivers)
            for subscription, deadline, pairs in calls:
                if bulk:
                    leased = [seq for seq, _ in pairs]
                    generations = [generation for _, generation in pairs]
                    store.lease_many(subscription, leased, generations, deadline)
                else:
                    for seq, generation in pairs:
                        store.lease(subscription, seq, generation, deadline)
            store.commit()
            tables.append(
                store._writes.read(
                    "SELECT subscription, deadline, leases FROM leases ORDER BY id"
                ).fetchall()
            )
    assert tables[0] == tables[1]


_end_calls = st.lists(
    st.tuples(
        st.sampled_from([SUB, "projects/p/subscriptions/other"]),
        # (seq, generation, deadline, failed attempts) of each lease ended by one call:
        # any, or a stretch of seqs (one Pull's leases) ending alike but for one.
        st.one_of(
            st.lists(
                st.tuples(
                    st.integers(1, 12),
                    st.integers(1, 4),
                    st.sampled_from([100.0, 200.0]),
                    st.integers(0, 5),
                ),
                max_size=5,
            ),
            st.tuples(st.integers(1, 12), st.integers(1, 12), st.integers(0, 12)).map(
                lambda case: [
                    (seq, 2, 100.0, 1 + (seq == case[2])) for seq in range(case[0], case[1] + 1)
                ]
            ),
        ),
    ),
    max_size=8,
)


@given(_end_calls, _lease_calls)
def test_lease_ends_in_bulk_write_the_rows_of_ends_one_by_one(
    calls: list[tuple[str, list[tuple[int, int, float, int]]]],
    leases: list[tuple[str, float, list[tuple[int, int]]]],
) -> None:
    """``end_leases`` (one request's nacks) leaves the backlog rows and the lease markers
    as ``end_lease`` of each does, between leases given as usual."""
    message = StoredMessage("1", b"x", {}, "", 1e9, 1)
    seqs = list(range(1, 13))
    tables = []
    for bulk in (False, True):
        with _store() as store:
            receivers = {SUB: seqs, "projects/p/subscriptions/other": seqs}
            store.publish(TOPIC, [(seq, message) for seq in seqs], receivers)
            for i, (subscription, ends) in enumerate(calls):
                if leases:  # leases given between the ends, in turns
                    leased, deadline, pairs = leases[i % len(leases)]
                    for seq, generation in pairs:
                        store.lease(leased, seq, generation, deadline)
                if bulk:
                    columns = [list(column) for column in zip(*ends, strict=True)] or [[]] * 4
                    store.end_leases(subscription, *columns)
                else:
                    for seq, generation, deadline, failed in ends:
                        store.end_lease(subscription, seq, generation, deadline, failed)
            store.commit()
            read = store._writes.read
            tables.append(
                (
                    read(
                        "SELECT subscription, deadline, leases FROM leases ORDER BY id"
                    ).fetchall(),
                    read(
                        "SELECT subscription, seq, generation, failed_attempts FROM backlog "
                        "ORDER BY subscription, seq"
                    ).fetchall(),
                )
            )
    assert tables[0] == tables[1]


def test_a_commit_whose_statement_fails_leaves_what_ran_before_it_to_the_next() -> None:
    # What ran in the open transaction belongs to the commit that takes it (the store is
    # clean meanwhile); if that commit fails with the transaction still open, the store
    # is dirty again and the next commit commits it.
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(directory)
        try:
            writes = store._writes
            writes.write("INSERT INTO meta (key, value) VALUES ('a', '1')", ())
            writes.flush()  # run in the open transaction, not committed
            writes.write("INSERT INTO meta (key, value) VALUES ('a', '2')", ())  # duplicate
            store.begin_commit()
            assert not store.dirty
            with pytest.raises(sqlite3.IntegrityError):
                store.finish_commit()
            assert store.dirty
            store.commit()
        finally:
            store.close()
        reopened = SqliteStore(directory)
        try:
            rows = reopened._writes.read("SELECT value FROM meta WHERE key = 'a'").fetchall()
            assert rows == [("1",)]
        finally:
            reopened.close()
