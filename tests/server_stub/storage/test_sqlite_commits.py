"""What a SqliteStore commit runs, and where: acks buffered as ranges
(``Writes.write_ranges``: one request's in-order ids as one stretch, any other request cut
into its stretches) give the rows the one-seq-at-a-time rule gives; a commit without a
publish writes no last seq; the commit's thread runs the buffered statements and the
COMMIT, not the BEGIN, and of an exactly-once Pull's commit (the store's own bookkeeping
rows: leases, activity clocks) only the COMMIT; a failed commit leaves the last seq to be
written again."""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.storage.sqlite import SqliteStore
from eoclient.server_stub.storage.sqlite_writes import Writes

TOPIC = "projects/p/topics/t"
SUB = "projects/p/subscriptions/s"
OTHER = "projects/p/subscriptions/other"
MESSAGE = StoredMessage("1", b"x", {}, "", 1e9, 1)
SETTLE = "DELETE FROM backlog WHERE subscription = ? AND seq BETWEEN ? AND ?"


@contextlib.contextmanager
def _store() -> Iterator[SqliteStore]:
    # Hypothesis runs the test body many times: a directory each, not pytest's tmp_path.
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(directory, gc_interval=0)
        try:
            yield store
        finally:
            store.close()


def _one_at_a_time(ops: list[tuple[str, list[Any]]], sql: str, key: int, seq: int) -> None:
    """The rule ``write_ranges`` keeps: a seq right after the last row's range, of the
    same key and statement, extends it; any other seq is a row of its own."""
    if ops and ops[-1][0] is sql and ops[-1][1][-1][0] == key and ops[-1][1][-1][2] == seq - 1:
        ops[-1][1][-1][2] = seq
    elif ops and ops[-1][0] is sql:
        ops[-1][1].append([key, seq, seq])
    else:
        ops.append((sql, [[key, seq, seq]]))


# A request's seqs: a run counting up by one (one Pull's ids, in order), or any list (ids
# of several Pulls, repeated, reversed).
_requests = st.one_of(
    st.builds(lambda first, count: list(range(first, first + count)), st.integers(1, 30),
              st.integers(0, 12)),
    st.lists(st.integers(1, 40), max_size=12),
)  # fmt: skip


@given(st.lists(st.tuples(st.sampled_from([SETTLE, "OTHER"]), st.integers(1, 2), _requests)))
def test_ranges_buffered_a_request_at_a_time_are_the_rows_of_one_seq_at_a_time(
    calls: list[tuple[str, int, list[int]]],
) -> None:
    writes = Writes(sqlite3.connect(":memory:"))
    expected: list[tuple[str, list[Any]]] = []
    for sql, key, seqs in calls:
        writes.write_ranges(sql, key, seqs)
        for seq in seqs:
            _one_at_a_time(expected, sql, key, seq)
    assert writes._ops == expected
    writes.db.close()


@given(st.integers(1, 40), st.lists(_requests, max_size=6), st.integers(0, 2))
def test_acks_a_request_at_a_time_settle_exactly_the_acked_rows(
    count: int, requests: list[list[int]], commit_every: int
) -> None:
    with _store() as store:
        seqs = list(range(1, count + 1))
        store.publish(TOPIC, [(seq, MESSAGE) for seq in seqs], {SUB: seqs, OTHER: seqs})
        acked = set()
        for index, request in enumerate(requests):
            request = [seq for seq in request if seq <= count]
            store.settle(SUB, request, ())
            store.settle(OTHER, request[::-1], ())  # interleaved, in reverse
            acked.update(request)
            if commit_every and index % commit_every == 0:
                store.commit()
        store.commit()
        left = [row.seq for row in store.backlog(SUB, 0, count)]
        left_other = [row.seq for row in store.backlog(OTHER, 0, count)]
    assert left == left_other == [seq for seq in seqs if seq not in acked]


def test_a_commit_without_a_publish_runs_only_its_changes_and_the_commit_in_its_thread() -> None:
    with _store() as store:
        store.publish(TOPIC, [(1, MESSAGE), (2, MESSAGE)], {SUB: [1, 2]})
        store.commit()
        statements: list[str] = []
        store._writes.db.set_trace_callback(statements.append)
        store.lease_many(SUB, [1, 2], [1, 1], 100.0)  # an exactly-once Pull's change
        store.resources.touch_subscription(SUB, 1e9)
        store.begin_commit()  # on the loop: its own few rows, in the next transaction
        assert [sql.split()[0] for sql in statements] == ["BEGIN", "UPDATE", "INSERT"]
        assert "INTO leases" in statements[2]
        statements.clear()
        store.finish_commit()  # in the commit's thread
        assert statements == ["COMMIT"]
        statements.clear()
        store.settle(SUB, [1, 2], ())  # an exactly-once Acknowledge's
        store.commit()
        assert [sql.split()[0] for sql in statements] == ["BEGIN", "DELETE", "COMMIT"]
        statements.clear()
        store.publish(TOPIC, [(3, MESSAGE)], {SUB: [3]})
        store.commit()
        assert "UPDATE meta" in " ".join(statements)  # a publish moves the last seq


def test_after_a_failed_commit_the_next_one_writes_the_last_seq(tmp_path: Path) -> None:
    # The last seq's UPDATE comes after the publish's rows; a statement before it fails,
    # so it never ran: the commit that retries the transaction must write it.
    store = SqliteStore(tmp_path)
    try:
        store.publish(TOPIC, [(1, MESSAGE)], {SUB: [1]})
        store._writes.write("INSERT INTO meta (key, value) VALUES ('a', '1')", ())
        store._writes.write("INSERT INTO meta (key, value) VALUES ('a', '2')", ())  # duplicate
        store.begin_commit()
        with pytest.raises(sqlite3.IntegrityError):
            store.finish_commit()
        store.commit()
    finally:
        store.close()
    reopened = SqliteStore(tmp_path)
    try:
        assert reopened._messages.last_seq == 1
    finally:
        reopened.close()
