"""The data directory of ``SqliteStore``: its lock, its database file and schema.

* **One server per directory.** ``LOCK`` is held with ``flock`` for the life of the store;
  a second server on the directory fails at once, naming the holder's pid.
* **Never someone else's file.** A directory holding files that are not ours is refused;
  an existing database is opened only if it is an SQLite file whose ``meta`` says it is
  an eoclient store of a known version (an older one is upgraded in place, in one
  transaction). Anything else fails with ``StoreError`` naming the file, and nothing is
  written to it.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

DATABASE_FILE = "eoclient.sqlite3"
LOCK_FILE = "LOCK"
FORMAT = "eoclient-store"
# 2: subscriptions keep their ack-id uid, backlog rows the generation of their last
# ended lease, and "leases" the leases until their deadlines.
FORMAT_VERSION = 2
# Files SQLite keeps next to the database in WAL mode, and ours.
OWN_FILES = {DATABASE_FILE, f"{DATABASE_FILE}-wal", f"{DATABASE_FILE}-shm", LOCK_FILE}
# The ingestion room's record of the objects import topics ingested (ingestion/ledger.py);
# the exports' work directory (their batch files and lease journals, exports/journal.py);
# and what `eoclient serve --data-dir` keeps there by default: the bucket directories and
# the BigQuery stand-in's DuckDB file (with its write-ahead log).
OWN_FILES |= {
    "ingested-objects.jsonl",
    "exports",
    "buckets",
    "bigquery.duckdb",
    "bigquery.duckdb.wal",
}
SQLITE_HEADER = b"SQLite format 3\x00"

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
-- Ids for names, never reused for another name: rows elsewhere refer to them by number.
CREATE TABLE names (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
                    UNIQUE (kind, name));
CREATE TABLE topics (id INTEGER PRIMARY KEY, config TEXT NOT NULL);
-- topic: the id of the topic the subscription was created on (kept when the topic is
-- deleted): its messages are the only ones its backlog can name.
-- uid: of its ack ids (kept so that an id issued before a restart resolves after it).
CREATE TABLE subscriptions (id INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                            config TEXT NOT NULL, created REAL NOT NULL,
                            last_activity REAL NOT NULL, uid TEXT NOT NULL DEFAULT '');
CREATE TABLE messages (seq INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                       message_id TEXT NOT NULL, data BLOB NOT NULL, attributes TEXT,
                       ordering_key TEXT NOT NULL, publish_time REAL NOT NULL,
                       size INTEGER NOT NULL);
-- size: the message's (flow control's count), so a backlog's bytes need no join.
-- generation: of its last lease that ended without an ack (0: none).
CREATE TABLE backlog (subscription INTEGER NOT NULL, seq INTEGER NOT NULL,
                      failed_attempts INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL,
                      generation INTEGER NOT NULL DEFAULT 0,
                      PRIMARY KEY (subscription, seq)) WITHOUT ROWID;
-- Leases given at once (one Pull, one ModifyAckDeadline request) until one deadline, in
-- the order given: leases holds (seq, generation) pairs, little-endian int64s. One row a
-- batch, not a row update a message: a lease costs the store a few bytes. Forgotten once
-- the deadline passed (sqlite_backlog.py).
CREATE TABLE leases (id INTEGER PRIMARY KEY, subscription INTEGER NOT NULL,
                     deadline REAL NOT NULL, leases BLOB NOT NULL);
CREATE INDEX leases_by_deadline ON leases (subscription, deadline);
CREATE TABLE retained (subscription INTEGER NOT NULL, seq INTEGER NOT NULL,
                       publish_time REAL NOT NULL,
                       PRIMARY KEY (subscription, seq)) WITHOUT ROWID;
CREATE TABLE snapshots (id INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                        expire_time REAL NOT NULL, labels TEXT NOT NULL,
                        position INTEGER NOT NULL);
CREATE TABLE snapshot_messages (snapshot INTEGER NOT NULL, seq INTEGER NOT NULL,
                                PRIMARY KEY (snapshot, seq)) WITHOUT ROWID;
-- Resources the core keeps whole (schemas, IAM policies): its own encoding.
CREATE TABLE documents (kind TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL,
                        PRIMARY KEY (kind, name)) WITHOUT ROWID;
"""


class StoreError(Exception):
    """The data directory cannot be used (foreign or corrupt file, locked, unwritable)."""


def lock_directory(directory: Path) -> int:
    """Create ``directory`` if needed, refuse it if it holds others' files, and lock it;
    returns the lock's file descriptor (closing it releases the lock)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"cannot create the data directory {directory}: {error}") from None
    if not directory.is_dir():
        raise StoreError(f"the data directory {directory} is not a directory")
    present = sorted(p.name for p in directory.iterdir())
    if DATABASE_FILE not in present:
        foreign = [name for name in present if name not in OWN_FILES]
        if foreign:
            raise StoreError(
                f"the data directory {directory} holds files that are not an eoclient "
                f"store ({', '.join(foreign[:5])}); use an empty or new directory"
            )
    path = directory / LOCK_FILE
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
            f"another eoclient server is using the data directory {directory} "
            f"(pid {holder} holds {path})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def open_database(directory: Path) -> sqlite3.Connection:
    """Open (or create) the store's database: WAL, ``synchronous=FULL``, autocommit off
    by hand (the store runs BEGIN / COMMIT itself)."""
    path = directory / DATABASE_FILE
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
            _check_ours(db, path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA temp_store=MEMORY")
        db.execute("PRAGMA cache_size=-32000")  # 32 MB of page cache
        if not existing:
            db.executescript(SCHEMA)
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
    version = meta.get("version")
    if version == 1:
        _upgrade_from_1(db)
    elif version != FORMAT_VERSION:
        raise StoreError(
            f"{path} is an eoclient store of format version {version}; "
            f"this eoclient reads versions 1 and {FORMAT_VERSION}"
        )


# Version 1 kept no leases: its rows all wait, and its subscriptions get a new uid at
# their first load (an empty one). One transaction: a crash midway leaves version 1 as
# it was.
_UPGRADE_FROM_1 = """
BEGIN;
ALTER TABLE subscriptions ADD COLUMN uid TEXT NOT NULL DEFAULT '';
ALTER TABLE backlog ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
CREATE TABLE leases (id INTEGER PRIMARY KEY, subscription INTEGER NOT NULL,
                     deadline REAL NOT NULL, leases BLOB NOT NULL);
CREATE INDEX leases_by_deadline ON leases (subscription, deadline);
UPDATE meta SET value = 2 WHERE key = 'version';
COMMIT;
"""


def _upgrade_from_1(db: sqlite3.Connection) -> None:
    db.executescript(_UPGRADE_FROM_1)
