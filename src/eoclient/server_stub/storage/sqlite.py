"""``SqliteStore``: the broker's state in a data directory (``eoclient serve --data-dir``).

One SQLite database (standard library ``sqlite3``) in WAL mode, ``synchronous=FULL``:

* **Group commit.** Changes run as statements inside one open transaction as the broker
  makes them (frequent small ones — settlements, failed attempts, activity clocks — are
  buffered and sent with ``executemany``); ``commit()`` ends the transaction. The
  server's shell commits once for everything handled in a turn of the event loop and
  only then answers the Publish calls and acknowledgements of that turn, so one fsync
  covers many messages.
* **Why it is crash-safe.** In WAL mode a transaction is committed once its commit frame
  is in the WAL file; ``synchronous=FULL`` fsyncs the WAL at every commit, so a committed
  transaction survives a killed process *and* a power failure, and an uncommitted one
  is rolled back at the next open. (``NORMAL`` would survive a killed process — the
  frames are written before COMMIT returns — but not a power failure; the fsync is
  what the group commit amortises.) Nothing is answered before its commit, so a client
  never hears SUCCESS for a change that a crash can undo.
* **Bounded memory.** Bodies live in the ``messages`` table; the broker holds at most a
  window of each subscription's backlog (``window``) and reads the rest in seq order.
  A message's ``refs`` counts the backlog, retained and snapshot rows that name it
  (kept by triggers, so no code path can forget it); unreferenced messages are deleted
  by ``collect_garbage`` unless a snapshot's topic log still pins them.
* **One server per directory.** ``LOCK`` is held with ``flock`` for the life of the
  store; a second server on the directory fails at once, naming the holder's pid.
* **Never someone else's file.** An existing database is opened only if it is an
  SQLite file whose ``meta`` says it is an eoclient store of a known version; anything
  else fails with ``StoreError`` naming the file, and nothing is written to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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

DATABASE_FILE = "eoclient.sqlite3"
LOCK_FILE = "LOCK"
FORMAT = "eoclient-store"
FORMAT_VERSION = 1
# Files SQLite keeps next to the database in WAL mode, and ours.
OWN_FILES = {DATABASE_FILE, f"{DATABASE_FILE}-wal", f"{DATABASE_FILE}-shm", LOCK_FILE}
SQLITE_HEADER = b"SQLite format 3\x00"

# Messages of each subscription's backlog the broker holds in memory. 10,000 100-byte
# messages cost the broker about 6 MB a subscription (entry, message, heaps), and a
# refill of that size is one indexed range read of a few milliseconds; small enough to
# keep RSS flat under a backlog of millions, large enough that a subscriber keeping up
# never waits for the store.
DEFAULT_WINDOW = 10_000
# Garbage collection runs at most this often, deleting at most this many messages a
# pass: a pass stays within a few milliseconds of the event loop.
GC_INTERVAL = 2.0
GC_BATCH = 20_000

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
-- Ids for names, never reused for another name: rows elsewhere refer to them by number.
CREATE TABLE names (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
                    UNIQUE (kind, name));
CREATE TABLE topics (id INTEGER PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE subscriptions (id INTEGER PRIMARY KEY, config TEXT NOT NULL,
                            created REAL NOT NULL, last_activity REAL NOT NULL);
CREATE TABLE messages (seq INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                       message_id TEXT NOT NULL, data BLOB NOT NULL, attributes TEXT,
                       ordering_key TEXT NOT NULL, publish_time REAL NOT NULL,
                       size INTEGER NOT NULL, refs INTEGER NOT NULL DEFAULT 0);
CREATE INDEX unreferenced ON messages (seq) WHERE refs <= 0;
CREATE TABLE backlog (subscription INTEGER NOT NULL, seq INTEGER NOT NULL,
                      failed_attempts INTEGER NOT NULL DEFAULT 0,
                      PRIMARY KEY (subscription, seq)) WITHOUT ROWID;
CREATE TABLE retained (subscription INTEGER NOT NULL, seq INTEGER NOT NULL,
                       publish_time REAL NOT NULL,
                       PRIMARY KEY (subscription, seq)) WITHOUT ROWID;
CREATE TABLE snapshots (id INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                        expire_time REAL NOT NULL, labels TEXT NOT NULL,
                        position INTEGER NOT NULL);
CREATE TABLE snapshot_messages (snapshot INTEGER NOT NULL, seq INTEGER NOT NULL,
                                PRIMARY KEY (snapshot, seq)) WITHOUT ROWID;
"""
# refs: one per backlog, retained and snapshot row naming the message.
_TRIGGERS = "".join(
    f"""
CREATE TRIGGER {table}_in AFTER INSERT ON {table} BEGIN
    UPDATE messages SET refs = refs + 1 WHERE seq = NEW.seq; END;
CREATE TRIGGER {table}_out AFTER DELETE ON {table} BEGIN
    UPDATE messages SET refs = refs - 1 WHERE seq = OLD.seq; END;
"""
    for table in ("backlog", "retained", "snapshot_messages")
)

_MESSAGE_COLUMNS = "m.message_id, m.data, m.attributes, m.ordering_key, m.publish_time, m.size"


class StoreError(Exception):
    """The data directory cannot be used (foreign or corrupt file, locked, unwritable)."""


def _message(row: Sequence[Any]) -> StoredMessage:
    """A message from the ``_MESSAGE_COLUMNS`` of a row."""
    message_id, data, attributes, ordering_key, publish_time, size = row
    return StoredMessage(
        message_id=message_id,
        data=data,
        attributes=codec.attributes_from_json(attributes),
        ordering_key=ordering_key,
        publish_time=publish_time,
        size=size,
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
        self._lock_fd = self._lock()
        try:
            self._db = self._open()
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._ids: dict[tuple[str, str], int] = {
            (kind, name): id_
            for id_, kind, name in self._db.execute("SELECT id, kind, name FROM names")
        }
        self._last_seq = self._meta("last_seq", 0)
        self._settled: list[tuple[int, int]] = []
        self._retain: list[tuple[int, int, float]] = []
        self._attempts: list[tuple[int, int, int]] = []
        self._touched: dict[int, float] = {}
        self._oldest_retained: dict[int, float | None] = {}
        self._dirty = False
        self._gc_interval = gc_interval
        self._last_gc = float("-inf")
        self._begin()

    def __repr__(self) -> str:
        return f"<SqliteStore {self.directory}>"

    # ---------------------------------------------------------------- opening

    def _lock(self) -> int:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"cannot create the data directory {self.directory}: {error}"
            ) from None
        if not self.directory.is_dir():
            raise StoreError(f"the data directory {self.directory} is not a directory")
        present = sorted(p.name for p in self.directory.iterdir())
        if present and DATABASE_FILE not in present:
            foreign = [name for name in present if name not in OWN_FILES]
            if foreign:
                raise StoreError(
                    f"the data directory {self.directory} holds files that are not an "
                    f"eoclient store ({', '.join(foreign[:5])}); use an empty or new directory"
                )
        path = self.directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StoreError(f"cannot open the lock file {path}: {error}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreError(
                f"another eoclient server is using the data directory {self.directory} "
                f"(pid {holder} holds {path})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def _open(self) -> sqlite3.Connection:
        path = self.directory / DATABASE_FILE
        existing = path.exists() and path.stat().st_size > 0
        if existing:
            with path.open("rb") as file:
                if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                    raise StoreError(f"{path} is not an SQLite database: not an eoclient store")
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise StoreError(f"cannot open {path}: {error}") from None
        try:
            if existing:
                self._check_ours(db, path)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA temp_store=MEMORY")
            db.execute("PRAGMA cache_size=-32000")  # 32 MB of page cache
            if not existing:
                db.executescript(_SCHEMA + _TRIGGERS)
                db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [("format", FORMAT), ("version", FORMAT_VERSION), ("last_seq", 0)],
                )
        except sqlite3.DatabaseError as error:
            db.close()
            raise StoreError(f"{path} is corrupt or unreadable: {error}") from None
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _check_ours(db: sqlite3.Connection, path: Path) -> None:
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as error:
            if "no such table" in str(error):
                raise StoreError(
                    f"{path} is an SQLite database but not an eoclient store (no meta table)"
                ) from None
            raise
        if meta.get("format") != FORMAT:
            raise StoreError(f"{path} is an SQLite database but not an eoclient store")
        if meta.get("version") != FORMAT_VERSION:
            raise StoreError(
                f"{path} is an eoclient store of format version {meta.get('version')}; "
                f"this eoclient reads version {FORMAT_VERSION}"
            )
        check = db.execute("PRAGMA quick_check(1)").fetchone()
        if check is None or check[0] != "ok":
            raise StoreError(f"{path} is corrupt: {check[0] if check else 'no answer'}")

    def _meta(self, key: str, default: int) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row is not None else default

    def _id(self, kind: str, name: str) -> int:
        key = (kind, name)
        id_ = self._ids.get(key)
        if id_ is None:
            cursor = self._db.execute("INSERT INTO names (kind, name) VALUES (?, ?)", key)
            id_ = self._ids[key] = int(cursor.lastrowid or 0)
            self._dirty = True
        return id_

    def _begin(self) -> None:
        self._db.execute("BEGIN")

    # ---------------------------------------------------------------- Store

    @property
    def window(self) -> int | None:
        return self._window

    def load(self) -> StoredState:
        names = {id_: name for (_, name), id_ in self._ids.items()}
        topics = [
            codec.topic_from_json(config)
            for (config,) in self._db.execute("SELECT config FROM topics ORDER BY id")
        ]
        counts = dict(
            self._db.execute("SELECT subscription, COUNT(*) FROM backlog GROUP BY subscription")
        )
        subscriptions = [
            StoredSubscription(
                SubscriptionRecord(codec.subscription_from_json(config), created, last_activity),
                counts.get(id_, 0),
            )
            for id_, config, created, last_activity in self._db.execute(
                "SELECT id, config, created, last_activity FROM subscriptions ORDER BY id"
            )
        ]
        snapshots = [
            SnapshotRecord(
                names[id_], names[topic], expire_time, codec.attributes_from_json(labels), position
            )
            for id_, topic, expire_time, labels, position in self._db.execute(
                "SELECT id, topic, expire_time, labels, position FROM snapshots ORDER BY id"
            )
        ]
        return StoredState(topics, subscriptions, snapshots, self._last_seq)

    def put_topic(self, config: TopicConfig) -> None:
        self._flush()
        self._db.execute(
            "INSERT OR REPLACE INTO topics (id, config) VALUES (?, ?)",
            (self._id("topic", config.name), codec.topic_to_json(config)),
        )
        self._dirty = True

    def delete_topic(self, name: str) -> None:
        self._flush()
        self._db.execute("DELETE FROM topics WHERE id = ?", (self._id("topic", name),))
        self._dirty = True

    def put_subscription(self, record: SubscriptionRecord) -> None:
        self._flush()
        id_ = self._id("subscription", record.config.name)
        self._touched.pop(id_, None)
        self._db.execute(
            "INSERT OR REPLACE INTO subscriptions (id, config, created, last_activity) "
            "VALUES (?, ?, ?, ?)",
            (id_, codec.subscription_to_json(record.config), record.created, record.last_activity),
        )
        self._dirty = True

    def touch_subscription(self, name: str, last_activity: float) -> None:
        self._touched[self._id("subscription", name)] = last_activity
        self._dirty = True

    def delete_subscription(self, name: str) -> None:
        self._flush()
        id_ = self._id("subscription", name)
        self._touched.pop(id_, None)
        self._oldest_retained.pop(id_, None)
        self._db.execute("DELETE FROM subscriptions WHERE id = ?", (id_,))
        self._db.execute("DELETE FROM backlog WHERE subscription = ?", (id_,))
        self._db.execute("DELETE FROM retained WHERE subscription = ?", (id_,))
        self._dirty = True

    def publish(
        self,
        topic: str,
        messages: Sequence[SeqMessage],
        receivers: Mapping[str, Sequence[int]],
    ) -> None:
        if not messages:
            return
        self._flush()
        topic_id = self._id("topic", topic)
        self._db.executemany(
            "INSERT INTO messages (seq, topic, message_id, data, attributes, ordering_key, "
            "publish_time, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    seq,
                    topic_id,
                    m.message_id,
                    m.data,
                    codec.attributes_to_json(m.attributes),
                    m.ordering_key,
                    m.publish_time,
                    m.size,
                )
                for seq, m in messages
            ],
        )
        for subscription, seqs in receivers.items():
            if seqs:
                id_ = self._id("subscription", subscription)
                self._db.executemany(
                    "INSERT INTO backlog (subscription, seq) VALUES (?, ?)",
                    [(id_, seq) for seq in seqs],
                )
        self._last_seq = max(self._last_seq, messages[-1][0])
        self._dirty = True

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
        self._settled.extend((id_, seq) for seq in seqs)
        if retain:
            self._retain.extend((id_, seq, m.publish_time) for seq, m in retain)
            if id_ in self._oldest_retained:
                oldest = self._oldest_retained[id_]
                first = min(m.publish_time for _, m in retain)
                self._oldest_retained[id_] = first if oldest is None else min(oldest, first)
        self._dirty = True

    def set_failed_attempts(self, subscription: str, seq: int, failed_attempts: int) -> None:
        self._attempts.append((failed_attempts, self._id("subscription", subscription), seq))
        self._dirty = True

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
        self._flush()
        id_ = self._id("subscription", subscription)
        self._db.execute(
            "DELETE FROM retained WHERE subscription = ? AND publish_time <= ?", (id_, cutoff)
        )
        del self._oldest_retained[id_]
        self._dirty = True

    def drop_retained(self, subscription: str) -> None:
        id_ = self._id("subscription", subscription)
        if self._oldest_retained.get(id_, 0.0) is None:
            return  # known to be empty: nothing to write
        self._flush()
        self._db.execute("DELETE FROM retained WHERE subscription = ?", (id_,))
        self._oldest_retained[id_] = None
        self._dirty = True

    def reset_subscription(
        self, subscription: str, unacked: Sequence[SeqMessage], retained: Sequence[SeqMessage]
    ) -> None:
        self._flush()
        id_ = self._id("subscription", subscription)
        # refs may touch 0 in between for a message in both states: harmless, garbage
        # collection does not run inside this call.
        self._db.execute("DELETE FROM backlog WHERE subscription = ?", (id_,))
        self._db.execute("DELETE FROM retained WHERE subscription = ?", (id_,))
        self._db.executemany(
            "INSERT INTO backlog (subscription, seq) VALUES (?, ?)", [(id_, s) for s, _ in unacked]
        )
        self._db.executemany(
            "INSERT INTO retained (subscription, seq, publish_time) VALUES (?, ?, ?)",
            [(id_, s, m.publish_time) for s, m in retained],
        )
        self._oldest_retained.pop(id_, None)
        self._dirty = True

    def put_snapshot(
        self, record: SnapshotRecord, subscription: str, window: Sequence[SeqMessage]
    ) -> None:
        self._flush()
        id_ = self._id("snapshot", record.name)
        self._db.execute(
            "INSERT INTO snapshots (id, topic, expire_time, labels, position) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                id_,
                self._id("topic", record.topic),
                record.expire_time,
                codec.attributes_to_json(record.labels) or "{}",
                record.position,
            ),
        )
        # The whole backlog, window and cold rows alike, is in the backlog table.
        self._db.execute(
            "INSERT INTO snapshot_messages (snapshot, seq) "
            "SELECT ?, seq FROM backlog WHERE subscription = ?",
            (id_, self._id("subscription", subscription)),
        )
        self._dirty = True

    def update_snapshot(self, record: SnapshotRecord) -> None:
        self._flush()
        self._db.execute(
            "UPDATE snapshots SET expire_time = ?, labels = ? WHERE id = ?",
            (
                record.expire_time,
                codec.attributes_to_json(record.labels) or "{}",
                self._id("snapshot", record.name),
            ),
        )
        self._dirty = True

    def delete_snapshot(self, name: str) -> None:
        self._flush()
        id_ = self._id("snapshot", name)
        self._db.execute("DELETE FROM snapshot_messages WHERE snapshot = ?", (id_,))
        self._db.execute("DELETE FROM snapshots WHERE id = ?", (id_,))
        self._dirty = True

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
            "WHERE m.topic = ? AND m.seq > ? ORDER BY m.seq",
            (self._id("topic", topic), after_seq),
        )
        return [(row[0], _message(row[1:])) for row in rows]

    # ---------------------------------------------------------------- lifecycle

    def _flush(self) -> None:
        """Send the buffered small changes, in an order that keeps their meaning: a row
        settled after a failed attempt is gone either way; a retained row refers to its
        message before the backlog row is deleted (refs never reach 0 in between)."""
        if self._retain:
            self._db.executemany(
                "INSERT OR IGNORE INTO retained (subscription, seq, publish_time) VALUES (?, ?, ?)",
                self._retain,
            )
            self._retain.clear()
        if self._attempts:
            self._db.executemany(
                "UPDATE backlog SET failed_attempts = ? WHERE subscription = ? AND seq = ?",
                self._attempts,
            )
            self._attempts.clear()
        if self._settled:
            self._db.executemany(
                "DELETE FROM backlog WHERE subscription = ? AND seq = ?", self._settled
            )
            self._settled.clear()

    @property
    def dirty(self) -> bool:
        """Changes not committed yet."""
        return self._dirty

    def commit(self) -> None:
        if not self._dirty:
            return
        self._flush()
        if self._touched:
            self._db.executemany(
                "UPDATE subscriptions SET last_activity = ? WHERE id = ?",
                [(t, id_) for id_, t in self._touched.items()],
            )
            self._touched.clear()
        self._db.execute("UPDATE meta SET value = ? WHERE key = 'last_seq'", (self._last_seq,))
        self._db.execute("COMMIT")
        self._dirty = False
        self._begin()

    def collect_garbage(self) -> None:
        """Delete messages nothing refers to, unless a snapshot's topic log pins them."""
        now = time.monotonic()
        if now - self._last_gc < self._gc_interval:
            return
        self._last_gc = now
        self._flush()
        cursor = self._db.execute(
            "DELETE FROM messages WHERE seq IN (SELECT seq FROM messages m WHERE refs <= 0 "
            "AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.topic = m.topic "
            "AND m.seq > s.position) LIMIT ?)",
            (GC_BATCH,),
        )
        if cursor.rowcount:
            self._dirty = True

    def close(self) -> None:
        """Commit what is pending and release the directory (idempotent)."""
        if self._lock_fd < 0:
            return
        try:
            with contextlib.suppress(sqlite3.Error):
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
