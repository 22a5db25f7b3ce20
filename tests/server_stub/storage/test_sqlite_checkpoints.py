"""The store's WAL is checkpointed outside its commits (``sqlite_checkpoints.py``): no
commit runs one itself, passive checkpoints on their own thread keep the WAL near its
bound, and when they cannot keep up the commit thread's RESTART keeps it under the
limit; nothing committed is lost along the way."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.storage.sqlite import SqliteStore
from eoclient.server_stub.storage.sqlite_checkpoints import WAL_LIMIT
from eoclient.server_stub.storage.sqlite_files import DATABASE_FILE

TOPIC = "projects/p/topics/t"
SUB = "projects/p/subscriptions/s"
BOUND = 64 * 1024
BATCH = 50  # messages a commit
# WAL bytes of one such commit, with room to spare: 24 pages of 4 KiB and their frame
# headers (98,880 bytes measured).
ONE_COMMIT = 2 * BATCH * 1100


def _publish_batches(store: SqliteStore, batches: int, wal: Path) -> int:
    """Publish and commit ``batches`` batches of 1 KB messages; the WAL's largest size."""
    largest = 0
    seq = store._messages.last_seq
    for _ in range(batches):
        messages = [
            (seq + i + 1, StoredMessage(f"id-{seq + i + 1}", os.urandom(1000), {}, "", 1e9, 1000))
            for i in range(BATCH)
        ]
        seq += BATCH
        store.publish(TOPIC, messages, {SUB: [s for s, _ in messages]})
        store.commit()
        largest = max(largest, wal.stat().st_size)
    return largest


def _backlog(directory: Path) -> int:
    store = SqliteStore(directory)
    try:
        return len(store.backlog(SUB, 0, 1_000_000))
    finally:
        store.close()


def test_commits_never_checkpoint_themselves(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    try:
        assert store._writes.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    finally:
        store.close()


def test_passive_checkpoints_keep_the_wal_near_its_bound(tmp_path: Path) -> None:
    wal = tmp_path / f"{DATABASE_FILE}-wal"
    store = SqliteStore(tmp_path, checkpoint_bytes=BOUND)
    try:
        # ~60 KB a commit, 200 commits: 12 MB through a WAL of 64 KB.
        largest = 0
        for _ in range(20):
            largest = max(largest, _publish_batches(store, 10, wal))
            time.sleep(0.01)  # pauses, as a server has between requests
        checkpoints = store._checkpoints
        assert checkpoints is not None
        deadline = time.monotonic() + 30
        while not checkpoints.passive and time.monotonic() < deadline:
            time.sleep(0.01)  # the thread may not have had its turn yet on a loaded machine
        assert checkpoints.passive > 0
        assert largest <= WAL_LIMIT * BOUND + ONE_COMMIT
        # Copied into the database file: far more than the WAL holds.
        assert (tmp_path / DATABASE_FILE).stat().st_size > 5 * WAL_LIMIT * BOUND
    finally:
        store.close()
    assert _backlog(tmp_path) == 200 * BATCH


def test_the_commit_thread_checkpoints_when_passive_ones_fall_behind(tmp_path: Path) -> None:
    wal = tmp_path / f"{DATABASE_FILE}-wal"
    store = SqliteStore(tmp_path, checkpoint_bytes=BOUND)
    checkpoints = store._checkpoints
    assert checkpoints is not None
    waited_on = checkpoints._wanted
    checkpoints._wanted = threading.Event()  # the thread waits on the old one: never wakes
    try:
        largest = _publish_batches(store, 200, wal)
        assert checkpoints.passive == 0
        assert checkpoints.restarts > 0
        # Under the limit, but for the commit that crossed it (10 MB went through).
        assert largest <= WAL_LIMIT * BOUND + ONE_COMMIT
    finally:
        checkpoints._wanted = waited_on  # close() wakes the thread to end it
        store.close()
    assert _backlog(tmp_path) == 200 * BATCH


def test_a_reader_that_holds_the_wal_costs_one_wait_a_limit_not_one_a_commit(
    tmp_path: Path,
) -> None:
    wal = tmp_path / f"{DATABASE_FILE}-wal"
    store = SqliteStore(tmp_path, checkpoint_bytes=BOUND)
    checkpoints = store._checkpoints
    assert checkpoints is not None
    waited_on = checkpoints._wanted
    checkpoints._wanted = threading.Event()  # no passive checkpoint: only the RESTARTs
    store._writes.db.execute("PRAGMA busy_timeout=50")  # how long a RESTART waits for readers
    reader = sqlite3.connect(tmp_path / DATABASE_FILE, isolation_level=None)
    try:
        _publish_batches(store, 5, wal)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM messages").fetchone()  # holds its snapshot
        _publish_batches(store, 200, wal)  # ~20 MB: past the limit ~19 times over
        assert checkpoints.restarts == 0
        # One refusal each time the WAL grows by another limit, not one for each of the
        # ~190 commits past it.
        assert 1 <= checkpoints.refused <= wal.stat().st_size // (WAL_LIMIT * BOUND) + 1
        reader.execute("COMMIT")
        _publish_batches(store, 200, wal)
        assert checkpoints.restarts >= 1
    finally:
        reader.close()
        checkpoints._wanted = waited_on
        store.close()
    assert _backlog(tmp_path) == 405 * BATCH
