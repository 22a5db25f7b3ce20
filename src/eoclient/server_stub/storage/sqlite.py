"""``SqliteStore``: the broker's state in a data directory (``eoclient serve --data-dir``).

One SQLite database (standard library ``sqlite3``) in WAL mode with ``synchronous=FULL``
(``sqlite_files.py`` opens it, locks the directory and refuses others' files). The store
is the ``Store`` the core sees; each call belongs to one family of tables, whose
statements live in a module of their own:

* ``sqlite_resources.py`` — topics, subscriptions (config, clocks, ack-id uid), documents;
* ``sqlite_backlog.py`` — messages, backlog rows, leases, retained acknowledged
  messages (``sqlite_rows.py``: rows read back as the core's objects);
* ``sqlite_snapshots.py`` — snapshots and the messages they retain;
* ``sqlite_writes.py`` — the write buffer and the group commit all of them share.

* **Why it is crash-safe.** In WAL mode a transaction is committed once its commit frame
  is in the WAL file; ``synchronous=FULL`` fsyncs the WAL at every commit, so a
  committed transaction survives a killed process *and* a power failure, and an
  uncommitted one is rolled back at the next open. (``NORMAL`` would survive a killed
  process — the frames are written before COMMIT returns — but not a power failure;
  the fsync is what grouping amortises.) The server answers nothing before its commit,
  so a client never hears SUCCESS for a change a crash can undo. The WAL is copied back
  into the database file by a thread of its own, not inside commits
  (``sqlite_checkpoints.py``).
* **Bounded memory.** Bodies live in ``messages``; the broker holds at most a window of
  each subscription's waiting messages (``window``) and reads the rest in seq order; a
  leased message's body is read back when it is redelivered. The messages published
  last are also kept in memory, within ``cache_bytes`` (``sqlite_cache.py``), so that a
  refill of a subscriber keeping up reads no message back; which rows such a refill
  gets, the rows published to it since its last read, the store knows without a read
  (``sqlite_fresh.py``; ``fresh_runs`` 0 turns that off).
* **Garbage collection by low-water mark** (as a Pulsar cursor's mark-delete position
  frees ledgers): a message can only be named by rows of subscriptions created on its
  topic (backlog, retained) and by snapshots of that topic (their messages, and the
  topic log after their position). So below the smallest seq any of those still name,
  every message of the topic is unreferenced and is deleted, a bounded batch per pass.
  The price: one old message left unacknowledged keeps its topic's later messages on
  disk until it goes (acked, dead-lettered, or dropped by retention).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from eoclient.server_stub.core.store import (
    Acked,
    BacklogRow,
    SeqMessage,
    SnapshotRecord,
    StoredState,
    StoredSubscription,
)
from eoclient.server_stub.storage.sqlite_backlog import BacklogTables
from eoclient.server_stub.storage.sqlite_cache import CACHE_BYTES
from eoclient.server_stub.storage.sqlite_checkpoints import CHECKPOINT_BYTES, Checkpoints
from eoclient.server_stub.storage.sqlite_files import (
    DATABASE_FILE,
    StoreError,
    lock_directory,
    open_database,
)
from eoclient.server_stub.storage.sqlite_fresh import MAX_RUNS
from eoclient.server_stub.storage.sqlite_resources import ResourceTables
from eoclient.server_stub.storage.sqlite_snapshots import SnapshotTables
from eoclient.server_stub.storage.sqlite_writes import KindIds, Names, Writes

__all__ = ["DATABASE_FILE", "DEFAULT_WINDOW", "SqliteStore", "StoreError"]

# Waiting messages of each subscription's backlog the broker holds in memory. 10,000
# 100-byte messages cost the broker about 6 MB a subscription (entry, message, heaps),
# and a load of that size is one indexed range read of a few milliseconds; small enough
# to keep RSS flat under a backlog of millions, large enough that a subscriber keeping
# up never waits for the store.
DEFAULT_WINDOW = 10_000
# Garbage collection runs at most this often, deleting at most this many messages a
# topic a pass: a pass stays within a few milliseconds of the event loop.
GC_INTERVAL = 2.0
GC_BATCH = 20_000


class SqliteStore:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        window: int = DEFAULT_WINDOW,
        gc_interval: float = GC_INTERVAL,
        cache_bytes: int = CACHE_BYTES,
        checkpoint_bytes: int = CHECKPOINT_BYTES,
        fresh_runs: int = MAX_RUNS,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1 (got {window})")
        self.directory = Path(directory)
        self._window = window
        self._gc_interval = gc_interval
        self._last_gc = float("-inf")
        self._gc_floor: dict[int, int] = {}  # topic id -> seq below which all is deleted
        self._lock_fd = lock_directory(self.directory)
        self._checkpoints: Checkpoints | None = None
        try:
            db = open_database(self.directory)
            try:
                Checkpoints.configure(db, checkpoint_bytes)
                self._checkpoints = Checkpoints(self.directory / DATABASE_FILE, checkpoint_bytes)
                self._writes = Writes(db, self._checkpoints)
                self._names = Names(self._writes)
                # Every store call names a subscription: its id by one subscript.
                self._subscription = KindIds(self._names, "subscription")
                self._resources = ResourceTables(self._writes, self._names)
                self._messages = BacklogTables(self._writes, cache_bytes, fresh_runs)
                # The last seq the database holds, or is to hold once the commit in flight
                # ends (None after a failed commit): a commit writes it only when it moved,
                # so one without a publish (every exactly-once Pull and Acknowledge) runs
                # a statement less in the commit's thread and writes a page less.
                self._written_seq: int | None = self._messages.last_seq
                self._snapshots = SnapshotTables(self._writes, self._names)
                self._state = self._read()
            except sqlite3.DatabaseError as error:
                self._close_checkpoints()
                db.close()
                path = self.directory / DATABASE_FILE
                raise StoreError(f"{path} is corrupt: {error}") from None
            except BaseException:
                self._close_checkpoints()
                db.close()
                raise
        except BaseException:
            os.close(self._lock_fd)
            raise

    def __repr__(self) -> str:
        return f"<SqliteStore {self.directory}>"

    def _read(self) -> StoredState:
        """Everything the broker rebuilds its memory from (once, at open)."""
        counts = self._messages.counts()
        leases, acks = self._messages.restored_leases()
        subscriptions = []
        for id_, record in self._resources.subscriptions():
            rows, size = counts.get(id_, (0, 0))
            subscriptions.append(
                StoredSubscription(record, rows, size, leases.get(id_, ()), acks.get(id_, ()))
            )
        return StoredState(
            self._resources.topics(),
            subscriptions,
            self._snapshots.records(),
            self._messages.last_seq,
            self._resources.documents(),
        )

    # ---------------------------------------------------------------- Store

    @property
    def window(self) -> int | None:
        return self._window

    def load(self) -> StoredState:
        return self._state

    # ---- resources

    @property
    def resources(self) -> ResourceTables:
        return self._resources

    def delete_subscription(self, name: str) -> None:
        id_ = self._subscription[name]
        self._resources.delete_subscription(id_)
        self._messages.delete(id_)

    # ---- messages

    def publish(
        self,
        topic: str,
        messages: Sequence[SeqMessage],
        receivers: Mapping[str, Sequence[int]],
    ) -> None:
        if messages:
            by_id = {self._subscription[name]: seqs for name, seqs in receivers.items()}
            self._messages.publish(self._names.id("topic", topic), messages, by_id)

    def backlog(self, subscription: str, after_seq: int, limit: int) -> list[BacklogRow]:
        return self._messages.backlog(self._subscription[subscription], after_seq, limit)

    def rows(self, subscription: str, seqs: Sequence[int]) -> list[BacklogRow]:
        return self._messages.rows(self._subscription[subscription], seqs)

    def settle(self, subscription: str, seqs: Sequence[int], retain: Sequence[Acked]) -> None:
        self._messages.settle(self._subscription[subscription], seqs, retain)

    def lease(self, subscription: str, seq: int, generation: int, deadline: float) -> None:
        self._messages.lease(self._subscription[subscription], seq, generation, deadline)

    def lease_many(
        self, subscription: str, seqs: Sequence[int], generations: Sequence[int], deadline: float
    ) -> None:
        """``lease`` of each of ``seqs`` with its generation, in order (one Pull's)."""
        self._messages.lease_many(self._subscription[subscription], seqs, generations, deadline)

    def end_lease(
        self, subscription: str, seq: int, generation: int, deadline: float, failed_attempts: int
    ) -> None:
        id_ = self._subscription[subscription]
        self._messages.end_leases(id_, (seq,), (generation,), (deadline,), (failed_attempts,))

    def end_leases(
        self,
        subscription: str,
        seqs: Sequence[int],
        generations: Sequence[int],
        deadlines: Sequence[float],
        failed_attempts: Sequence[int],
    ) -> None:
        """``end_lease`` of each of ``seqs`` (one request's nacks), in order."""
        id_ = self._subscription[subscription]
        self._messages.end_leases(id_, seqs, generations, deadlines, failed_attempts)

    def forget_leases(self, subscription: str, now: float) -> None:
        self._messages.forget_leases(self._subscription[subscription], now)

    def retained(self, subscription: str) -> list[SeqMessage]:
        return self._messages.retained(self._subscription[subscription])

    def oldest_retained(self, subscription: str) -> float | None:
        return self._messages.oldest_retained(self._subscription[subscription])

    def prune_retained(self, subscription: str, cutoff: float) -> None:
        self._messages.prune_retained(self._subscription[subscription], cutoff)

    def drop_retained(self, subscription: str) -> None:
        self._messages.drop_retained(self._subscription[subscription])

    def reset_subscription(
        self,
        subscription: str,
        unacked: Sequence[SeqMessage],
        retained: Sequence[SeqMessage],
        uid: str,
    ) -> None:
        id_ = self._subscription[subscription]
        self._messages.reset(id_, unacked)
        self._messages.set_retained(id_, retained)
        self._resources.set_uid(id_, uid)

    # ---- snapshots

    def put_snapshot(
        self, record: SnapshotRecord, subscription: str, window: Sequence[SeqMessage]
    ) -> None:
        self._snapshots.put(record, self._subscription[subscription])

    @property
    def snapshots(self) -> SnapshotTables:
        return self._snapshots

    # ---------------------------------------------------------------- lifecycle

    @property
    def dirty(self) -> bool:
        return self._writes.dirty or self._resources.dirty or self._messages.dirty

    def commit(self) -> None:
        if self.begin_commit():
            self.finish_commit()

    def begin_commit(self) -> bool:
        """Take what is pending for a commit; True if there is one (then
        ``finish_commit`` must follow, in any thread; until it returns, reads wait and
        writes are only buffered for the next commit)."""
        if not self.dirty:
            return False
        bookkeeping_only = not self._writes.pending
        self._resources.flush_touched()
        self._messages.flush_leases()
        if self._messages.last_seq != self._written_seq:
            self._messages.write_last_seq()
            self._written_seq = self._messages.last_seq
        if bookkeeping_only:
            # Only what this method writes itself: a row per touched subscription and per
            # lease batch (an exactly-once Pull's commit). Run here, on the caller's
            # thread (tens of microseconds), so the commit's thread has only the COMMIT
            # to run: each statement there waits for the GIL while the Pull encodes.
            self._writes.flush()
        self._writes.begin_commit()
        return True

    def finish_commit(self) -> None:
        """The COMMIT and its fsync (``sqlite_writes.Writes.finish_commit``)."""
        try:
            self._writes.finish_commit()
        except BaseException:
            self._written_seq = None  # it may have been rolled back: the next commit writes it
            raise

    def collect_garbage(self) -> None:
        """Delete each topic's messages below its low-water mark (module docstring)."""
        now = time.monotonic()
        if now - self._last_gc < self._gc_interval:
            return
        self._last_gc = now
        self._writes.flush()
        subscriptions_of: dict[int, list[int]] = {}
        for subscription, topic in self._resources.source_topic.items():
            subscriptions_of.setdefault(topic, []).append(subscription)
        snapshots_of: dict[int, list[tuple[int, int]]] = {}
        for snapshot, (topic, position) in self._snapshots.pins.items():
            snapshots_of.setdefault(topic, []).append((snapshot, position))
        for (kind, _), topic in list(self._names.ids.items()):
            if kind != "topic":
                continue
            floor = self._messages.last_seq + 1
            for subscription in subscriptions_of.get(topic, ()):
                low = self._messages.lowest_seq(subscription)
                if low is not None:
                    floor = min(floor, low)
            for snapshot, position in snapshots_of.get(topic, ()):
                floor = min(floor, self._snapshots.floor(snapshot, position))
            start = self._gc_floor.get(topic, 0)
            if floor > start:
                # Buffered: the deletes run in the next commit's thread, off the loop.
                self._gc_floor[topic] = self._messages.delete_messages(
                    topic, start, floor, GC_BATCH
                )

    def close(self) -> None:
        """Commit what is pending and release the directory (idempotent)."""
        if self._lock_fd < 0:
            return
        try:
            with contextlib.suppress(sqlite3.Error):
                self._writes.wait_idle()
                self.commit()
                if self._writes.db.in_transaction:  # a failed commit's: not to be kept
                    self._writes.db.execute("ROLLBACK")
            self._close_checkpoints()
            self._writes.db.close()  # the last connection: SQLite checkpoints the WAL whole
        finally:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _close_checkpoints(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()
            self._checkpoints = None

    def statistics(self) -> Mapping[str, int]:
        """Row counts (inspection and tests)."""
        self._messages.flush_leases()
        tables = ("messages", "backlog", "retained", "snapshot_messages", "leases")
        return {
            table: int(self._writes.read(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in tables
        }
