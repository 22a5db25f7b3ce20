"""``SqliteStore``: the broker's state in a data directory (``eoclient serve --data-dir``).

One SQLite database (standard library ``sqlite3``) in WAL mode with ``synchronous=FULL``
(``sqlite_files.py`` opens it, locks the directory and refuses others' files).

* **Writes are buffered, then committed in groups.** Every change the broker hands over
  becomes a row of a pending operation (consecutive rows of one statement run as one
  ``executemany``); ``begin_commit()`` runs them inside the open transaction and
  ``finish_commit()`` commits it. The server's shell (``group_commit.py``) runs the
  second half in a thread, so the event loop goes on serving — and buffering the next
  group — during the fsync; reads (``backlog()``, ``retained()``, ...) wait for a commit
  in flight, then run what is pending first, so they see every change made before them.
* **Why it is crash-safe.** In WAL mode a transaction is committed once its commit frame
  is in the WAL file; ``synchronous=FULL`` fsyncs the WAL at every commit, so a
  committed transaction survives a killed process *and* a power failure, and an
  uncommitted one is rolled back at the next open. (``NORMAL`` would survive a killed
  process — the frames are written before COMMIT returns — but not a power failure;
  the fsync is what grouping amortises.) The server answers nothing before its commit,
  so a client never hears SUCCESS for a change a crash can undo.
* **Bounded memory.** Bodies live in ``messages``; the broker holds at most a window of
  each subscription's backlog (``window``) and reads the rest in seq order.
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
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eoclient.server_stub.core import policies
from eoclient.server_stub.core.model import StoredMessage, TopicConfig
from eoclient.server_stub.core.store import (
    BacklogRow,
    SeqMessage,
    SnapshotRecord,
    StoredState,
    StoredSubscription,
    SubscriptionRecord,
)
from eoclient.server_stub.storage import codec
from eoclient.server_stub.storage.sqlite_files import (
    DATABASE_FILE,
    StoreError,
    lock_directory,
    open_database,
)

__all__ = ["DATABASE_FILE", "DEFAULT_WINDOW", "SqliteStore", "StoreError"]

logger = logging.getLogger("eoclient.server_stub.store")

# Messages of each subscription's backlog the broker holds in memory. 10,000 100-byte
# messages cost the broker about 6 MB a subscription (entry, message, heaps), and a
# refill of that size is one indexed range read of a few milliseconds; small enough to
# keep RSS flat under a backlog of millions, large enough that a subscriber keeping up
# never waits for the store.
DEFAULT_WINDOW = 10_000
# Garbage collection runs at most this often, deleting at most this many messages a
# topic a pass: a pass stays within a few milliseconds of the event loop.
GC_INTERVAL = 2.0
GC_BATCH = 20_000

_MESSAGE_COLUMNS = "m.message_id, m.data, m.attributes, m.ordering_key, m.publish_time, m.size"
# The write statements, module constants so consecutive rows of one are recognised
# (by identity) and sent as one executemany.
_INSERT_NAME = "INSERT INTO names (id, kind, name) VALUES (?, ?, ?)"
_PUT_TOPIC = "INSERT OR REPLACE INTO topics (id, config) VALUES (?, ?)"
_DELETE_TOPIC = "DELETE FROM topics WHERE id = ?"
_PUT_SUBSCRIPTION = (
    "INSERT OR REPLACE INTO subscriptions (id, topic, config, created, last_activity) "
    "VALUES (?, ?, ?, ?, ?)"
)
_TOUCH_SUBSCRIPTION = "UPDATE subscriptions SET last_activity = ? WHERE id = ?"
_DELETE_SUBSCRIPTION = "DELETE FROM subscriptions WHERE id = ?"
_DELETE_BACKLOG = "DELETE FROM backlog WHERE subscription = ?"
_DELETE_RETAINED = "DELETE FROM retained WHERE subscription = ?"
_INSERT_MESSAGE = (
    "INSERT INTO messages (seq, topic, message_id, data, attributes, ordering_key, "
    "publish_time, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_BACKLOG = "INSERT INTO backlog (subscription, seq, size) VALUES (?, ?, ?)"
_SETTLE = "DELETE FROM backlog WHERE subscription = ? AND seq = ?"
_RETAIN = "INSERT OR IGNORE INTO retained (subscription, seq, publish_time) VALUES (?, ?, ?)"
_ATTEMPTS = "UPDATE backlog SET failed_attempts = ? WHERE subscription = ? AND seq = ?"
_PRUNE_RETAINED = "DELETE FROM retained WHERE subscription = ? AND publish_time <= ?"
_PUT_SNAPSHOT = (
    "INSERT INTO snapshots (id, topic, expire_time, labels, position) VALUES (?, ?, ?, ?, ?)"
)
_SNAPSHOT_BACKLOG = (
    "INSERT INTO snapshot_messages (snapshot, seq) SELECT ?, seq FROM backlog "
    "WHERE subscription = ?"
)
_UPDATE_SNAPSHOT = "UPDATE snapshots SET expire_time = ?, labels = ? WHERE id = ?"
_DELETE_SNAPSHOT_MESSAGES = "DELETE FROM snapshot_messages WHERE snapshot = ?"
_DELETE_SNAPSHOT = "DELETE FROM snapshots WHERE id = ?"
_LAST_SEQ = "UPDATE meta SET value = ? WHERE key = 'last_seq'"
_PUT_DOCUMENT = "INSERT OR REPLACE INTO documents (kind, name, body) VALUES (?, ?, ?)"
_DELETE_DOCUMENT = "DELETE FROM documents WHERE kind = ? AND name = ?"


def _message(row: Sequence[Any]) -> StoredMessage:
    """A message from the ``_MESSAGE_COLUMNS`` of a row."""
    message_id, data, attributes_json, ordering_key, publish_time, size = row
    attributes = codec.attributes_from_json(attributes_json)
    return StoredMessage(
        message_id=message_id,
        data=data,
        attributes=attributes,
        ordering_key=ordering_key,
        publish_time=publish_time,
        size=size,
        # Checked when it was published: it parses.
        deliver_at=policies.deliver_at(attributes, publish_time) if attributes else 0.0,
    )


class SqliteStore:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        window: int = DEFAULT_WINDOW,
        gc_interval: float = GC_INTERVAL,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1 (got {window})")
        self.directory = Path(directory)
        self._window = window
        self._gc_interval = gc_interval
        self._last_gc = float("-inf")
        self._ops: list[tuple[str, list[tuple[Any, ...]]]] = []
        self._committing: list[tuple[str, list[tuple[Any, ...]]]] = []  # taken by a commit
        self._executed = False  # statements run in the open transaction, not committed
        self._idle = threading.Event()  # no commit running in a thread
        self._idle.set()
        self._touched: dict[int, float] = {}
        self._oldest_retained: dict[int, float | None] = {}
        self._gc_floor: dict[int, int] = {}  # topic id -> seq below which all is deleted
        self._lock_fd = lock_directory(self.directory)
        try:
            self._db = open_database(self.directory)
            try:
                self._state = self._read()
            except sqlite3.DatabaseError as error:
                self._db.close()
                path = self.directory / DATABASE_FILE
                raise StoreError(f"{path} is corrupt: {error}") from None
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._db.execute("BEGIN")

    def __repr__(self) -> str:
        return f"<SqliteStore {self.directory}>"

    def _read(self) -> StoredState:
        """Everything the broker rebuilds its memory from (once, at open)."""
        db = self._db
        self._ids: dict[tuple[str, str], int] = {
            (kind, name): id_ for id_, kind, name in db.execute("SELECT id, kind, name FROM names")
        }
        self._next_id = max(self._ids.values(), default=0) + 1
        row = db.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()
        self._last_seq = int(row[0]) if row else 0
        names = {id_: name for (_, name), id_ in self._ids.items()}
        topics = [
            codec.topic_from_json(config)
            for (config,) in db.execute("SELECT config FROM topics ORDER BY id")
        ]
        counts = {
            subscription: (rows, size)
            for subscription, rows, size in db.execute(
                "SELECT subscription, COUNT(*), SUM(size) FROM backlog GROUP BY 1"
            )
        }
        self._source_topic: dict[int, int] = {}
        subscriptions: list[StoredSubscription] = []
        for id_, topic, config, created, last_activity in db.execute(
            "SELECT id, topic, config, created, last_activity FROM subscriptions ORDER BY id"
        ):
            self._source_topic[id_] = topic
            record = SubscriptionRecord(
                codec.subscription_from_json(config), created, last_activity
            )
            rows, size = counts.get(id_, (0, 0))
            subscriptions.append(StoredSubscription(record, rows, size))
        self._snapshot_topic: dict[int, tuple[int, int]] = {}  # id -> (topic, position)
        snapshots: list[SnapshotRecord] = []
        for id_, topic, expire_time, labels, position in db.execute(
            "SELECT id, topic, expire_time, labels, position FROM snapshots ORDER BY id"
        ):
            self._snapshot_topic[id_] = (topic, position)
            snapshots.append(
                SnapshotRecord(
                    names[id_],
                    names[topic],
                    expire_time,
                    codec.attributes_from_json(labels),
                    position,
                )
            )
        documents = {
            (kind, name): bytes(body)
            for kind, name, body in db.execute("SELECT kind, name, body FROM documents")
        }
        return StoredState(topics, subscriptions, snapshots, self._last_seq, documents)

    # ------------------------------------------------------------- plumbing

    def _write(self, sql: str, row: tuple[Any, ...]) -> None:
        if self._ops and self._ops[-1][0] is sql:
            self._ops[-1][1].append(row)
        else:
            self._ops.append((sql, [row]))

    def _id(self, kind: str, name: str) -> int:
        key = (kind, name)
        id_ = self._ids.get(key)
        if id_ is None:
            id_ = self._ids[key] = self._next_id
            self._next_id += 1
            self._write(_INSERT_NAME, (id_, kind, name))
        return id_

    def _flush(self) -> None:
        """Run the pending operations (after a commit in flight): reads see them."""
        self._idle.wait()
        ops, self._ops = self._ops, []
        self._run(ops)
        if ops:
            self._executed = True

    def _run(self, ops: list[tuple[str, list[tuple[Any, ...]]]]) -> None:
        for sql, rows in ops:
            if len(rows) == 1:
                self._db.execute(sql, rows[0])
            else:
                self._db.executemany(sql, rows)

    # ---------------------------------------------------------------- Store

    @property
    def window(self) -> int | None:
        return self._window

    def load(self) -> StoredState:
        return self._state

    def put_topic(self, config: TopicConfig) -> None:
        self._write(_PUT_TOPIC, (self._id("topic", config.name), codec.topic_to_json(config)))

    def delete_topic(self, name: str) -> None:
        self._write(_DELETE_TOPIC, (self._id("topic", name),))

    def put_subscription(self, record: SubscriptionRecord) -> None:
        id_ = self._id("subscription", record.config.name)
        source = self._source_topic.get(id_)
        if source is None:  # created now: on the topic it names
            source = self._source_topic[id_] = self._id("topic", record.config.topic)
        self._touched.pop(id_, None)
        config = codec.subscription_to_json(record.config)
        self._write(_PUT_SUBSCRIPTION, (id_, source, config, record.created, record.last_activity))

    def touch_subscription(self, name: str, last_activity: float) -> None:
        self._touched[self._id("subscription", name)] = last_activity

    def delete_subscription(self, name: str) -> None:
        id_ = self._id("subscription", name)
        self._touched.pop(id_, None)
        self._oldest_retained.pop(id_, None)
        self._source_topic.pop(id_, None)
        self._write(_DELETE_SUBSCRIPTION, (id_,))
        self._write(_DELETE_BACKLOG, (id_,))
        self._write(_DELETE_RETAINED, (id_,))

    def put_document(self, kind: str, name: str, body: bytes) -> None:
        self._write(_PUT_DOCUMENT, (kind, name, body))

    def delete_document(self, kind: str, name: str) -> None:
        self._write(_DELETE_DOCUMENT, (kind, name))

    def publish(
        self,
        topic: str,
        messages: Sequence[SeqMessage],
        receivers: Mapping[str, Sequence[int]],
    ) -> None:
        if not messages:
            return
        topic_id = self._id("topic", topic)
        to_json = codec.attributes_to_json
        rows = [
            (seq, topic_id, m.message_id, m.data, to_json(m.attributes), m.ordering_key,
             m.publish_time, m.size)
            for seq, m in messages
        ]  # fmt: skip
        self._ops.append((_INSERT_MESSAGE, rows))
        sizes = {seq: m.size for seq, m in messages}
        for subscription, seqs in receivers.items():
            if seqs:
                id_ = self._id("subscription", subscription)
                self._ops.append((_INSERT_BACKLOG, [(id_, seq, sizes[seq]) for seq in seqs]))
        self._last_seq = max(self._last_seq, messages[-1][0])

    def backlog(self, subscription: str, after_seq: int, limit: int) -> list[BacklogRow]:
        self._flush()
        rows = self._db.execute(
            f"SELECT b.seq, b.failed_attempts, {_MESSAGE_COLUMNS} FROM backlog b "
            "JOIN messages m ON m.seq = b.seq WHERE b.subscription = ? AND b.seq > ? "
            "ORDER BY b.seq LIMIT ?",
            (self._id("subscription", subscription), after_seq, limit),
        )
        return [BacklogRow(row[0], _message(row[2:]), row[1]) for row in rows]

    def settle(self, subscription: str, seqs: Sequence[int], retain: Sequence[SeqMessage]) -> None:
        id_ = self._id("subscription", subscription)
        for seq, message in retain:
            self._write(_RETAIN, (id_, seq, message.publish_time))
        if retain and id_ in self._oldest_retained:
            oldest = self._oldest_retained[id_]
            first = min(m.publish_time for _, m in retain)
            self._oldest_retained[id_] = first if oldest is None else min(oldest, first)
        for seq in seqs:
            self._write(_SETTLE, (id_, seq))

    def set_failed_attempts(self, subscription: str, seq: int, failed_attempts: int) -> None:
        self._write(_ATTEMPTS, (failed_attempts, self._id("subscription", subscription), seq))

    def retained(self, subscription: str) -> list[SeqMessage]:
        self._flush()
        rows = self._db.execute(
            f"SELECT r.seq, {_MESSAGE_COLUMNS} FROM retained r JOIN messages m ON m.seq = r.seq "
            "WHERE r.subscription = ? ORDER BY r.seq",
            (self._id("subscription", subscription),),
        )
        return [(row[0], _message(row[1:])) for row in rows]

    def oldest_retained(self, subscription: str) -> float | None:
        id_ = self._id("subscription", subscription)
        if id_ not in self._oldest_retained:
            self._flush()
            row = self._db.execute(
                "SELECT MIN(publish_time) FROM retained WHERE subscription = ?", (id_,)
            ).fetchone()
            self._oldest_retained[id_] = None if row is None or row[0] is None else float(row[0])
        return self._oldest_retained[id_]

    def prune_retained(self, subscription: str, cutoff: float) -> None:
        oldest = self.oldest_retained(subscription)
        if oldest is None or oldest > cutoff:
            return
        id_ = self._id("subscription", subscription)
        self._write(_PRUNE_RETAINED, (id_, cutoff))
        del self._oldest_retained[id_]  # read again (after this runs) when next asked

    def drop_retained(self, subscription: str) -> None:
        id_ = self._id("subscription", subscription)
        if id_ in self._oldest_retained and self._oldest_retained[id_] is None:
            return  # known to be empty: nothing to write
        self._write(_DELETE_RETAINED, (id_,))
        self._oldest_retained[id_] = None

    def reset_subscription(
        self, subscription: str, unacked: Sequence[SeqMessage], retained: Sequence[SeqMessage]
    ) -> None:
        id_ = self._id("subscription", subscription)
        self._write(_DELETE_BACKLOG, (id_,))
        self._write(_DELETE_RETAINED, (id_,))
        self._ops.append((_INSERT_BACKLOG, [(id_, seq, m.size) for seq, m in unacked]))
        self._ops.append((_RETAIN, [(id_, seq, m.publish_time) for seq, m in retained]))
        self._oldest_retained.pop(id_, None)

    def put_snapshot(
        self, record: SnapshotRecord, subscription: str, window: Sequence[SeqMessage]
    ) -> None:
        id_ = self._id("snapshot", record.name)
        topic = self._id("topic", record.topic)
        self._snapshot_topic[id_] = (topic, record.position)
        labels = codec.attributes_to_json(record.labels) or "{}"
        self._write(_PUT_SNAPSHOT, (id_, topic, record.expire_time, labels, record.position))
        # The whole backlog, window and cold rows alike, is in the backlog table.
        self._write(_SNAPSHOT_BACKLOG, (id_, self._id("subscription", subscription)))

    def update_snapshot(self, record: SnapshotRecord) -> None:
        labels = codec.attributes_to_json(record.labels) or "{}"
        self._write(
            _UPDATE_SNAPSHOT, (record.expire_time, labels, self._id("snapshot", record.name))
        )

    def delete_snapshot(self, name: str) -> None:
        id_ = self._id("snapshot", name)
        self._snapshot_topic.pop(id_, None)
        self._write(_DELETE_SNAPSHOT_MESSAGES, (id_,))
        self._write(_DELETE_SNAPSHOT, (id_,))

    def snapshot_messages(self, name: str) -> list[SeqMessage]:
        self._flush()
        rows = self._db.execute(
            f"SELECT s.seq, {_MESSAGE_COLUMNS} FROM snapshot_messages s "
            "JOIN messages m ON m.seq = s.seq WHERE s.snapshot = ? ORDER BY s.seq",
            (self._id("snapshot", name),),
        )
        return [(row[0], _message(row[1:])) for row in rows]

    def topic_log(self, topic: str, after_seq: int) -> list[SeqMessage]:
        self._flush()
        rows = self._db.execute(
            f"SELECT m.seq, {_MESSAGE_COLUMNS} FROM messages m "
            "WHERE m.seq > ? AND m.topic = ? ORDER BY m.seq",
            (after_seq, self._id("topic", topic)),
        )
        return [(row[0], _message(row[1:])) for row in rows]

    # ---------------------------------------------------------------- lifecycle

    @property
    def dirty(self) -> bool:
        return bool(self._ops or self._touched or self._executed)

    def commit(self) -> None:
        if self.begin_commit():
            self.finish_commit()

    def begin_commit(self) -> bool:
        """Take what is pending for a commit; True if there is one (then
        ``finish_commit`` must follow, in any thread; until it returns, reads wait and
        writes are only buffered for the next commit)."""
        if not self.dirty:
            return False
        if self._touched:
            self._ops.append((_TOUCH_SUBSCRIPTION, [(t, id_) for id_, t in self._touched.items()]))
            self._touched.clear()
        self._write(_LAST_SEQ, (self._last_seq,))
        self._idle.wait()  # one commit at a time
        self._committing, self._ops = self._ops, []
        self._idle.clear()
        return True

    def finish_commit(self) -> None:
        """Run the taken statements, COMMIT (the fsync) and open the next transaction.
        In a thread of its own, this runs beside the event loop: sqlite3 releases the
        GIL while SQLite works."""
        try:
            ops, self._committing = self._committing, []
            self._run(ops)
            self._db.execute("COMMIT")
            self._executed = False
            self._db.execute("BEGIN")
        except sqlite3.Error:
            if not self._db.in_transaction:  # rolled back by SQLite: start afresh
                logger.critical("the store's transaction was rolled back; changes are lost")
                self._executed = False
                self._db.execute("BEGIN")
            raise
        finally:
            self._idle.set()

    def collect_garbage(self) -> None:
        """Delete each topic's messages below its low-water mark (module docstring)."""
        now = time.monotonic()
        if now - self._last_gc < self._gc_interval:
            return
        self._last_gc = now
        self._flush()
        db = self._db
        subscriptions_of: dict[int, list[int]] = {}
        for subscription, topic in self._source_topic.items():
            subscriptions_of.setdefault(topic, []).append(subscription)
        snapshots_of: dict[int, list[tuple[int, int]]] = {}
        for snapshot, (topic, position) in self._snapshot_topic.items():
            snapshots_of.setdefault(topic, []).append((snapshot, position))
        deleted = 0
        for (kind, _), topic in list(self._ids.items()):
            if kind != "topic":
                continue
            floor = self._last_seq + 1
            for subscription in subscriptions_of.get(topic, ()):
                for table in ("backlog", "retained"):
                    (low,) = db.execute(
                        f"SELECT MIN(seq) FROM {table} WHERE subscription = ?", (subscription,)
                    ).fetchone()
                    if low is not None:
                        floor = min(floor, low)
            for snapshot, position in snapshots_of.get(topic, ()):
                floor = min(floor, position + 1)
                (low,) = db.execute(
                    "SELECT MIN(seq) FROM snapshot_messages WHERE snapshot = ?", (snapshot,)
                ).fetchone()
                if low is not None:
                    floor = min(floor, low)
            start = self._gc_floor.get(topic, 0)
            if floor <= start:
                continue
            cursor = db.execute(
                "DELETE FROM messages WHERE seq IN (SELECT seq FROM messages WHERE seq >= ? "
                "AND seq < ? AND topic = ? LIMIT ?)",
                (start, floor, topic, GC_BATCH),
            )
            deleted += cursor.rowcount
            if cursor.rowcount < GC_BATCH:
                self._gc_floor[topic] = floor  # all below is gone: next pass starts here
        if deleted:
            self._executed = True

    def close(self) -> None:
        """Commit what is pending and release the directory (idempotent)."""
        if self._lock_fd < 0:
            return
        try:
            with contextlib.suppress(sqlite3.Error):
                self._idle.wait()
                self.commit()
                self._db.execute("ROLLBACK")
            self._db.close()
        finally:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def statistics(self) -> Mapping[str, int]:
        """Row counts (inspection and tests)."""
        self._flush()
        return {
            table: int(self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("messages", "backlog", "retained", "snapshot_messages")
        }
