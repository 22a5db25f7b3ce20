"""Checkpoints of ``SqliteStore``'s write-ahead log, out of its commits.

In WAL mode every commit appends its pages to the WAL; a *checkpoint* copies them back
into the database file so that the WAL can start over. SQLite's own auto-checkpoint runs
inside the COMMIT that takes the WAL past 1,000 pages: that commit's waiters — an
exactly-once Acknowledge each — also wait for ~4 MB to be copied and the database file
fsynced (commits measured at p90 7–11 ms, spikes ~100 ms, against a median ~1 ms).

So the store turns auto-checkpoints off (``wal_autocheckpoint=0``) and ``Checkpoints``
runs them on a connection and a thread of its own: after each COMMIT the commit thread
looks at the WAL's size (one ``stat``) and past ``bound`` wakes the thread, which runs a
PASSIVE checkpoint — it copies the frames no reader still needs and never waits for, nor
blocks, the writer. Once one has copied everything, the next transaction starts the WAL
over (``journal_size_limit`` truncates the file back to ``bound``, so its size says how
much it holds). Passive checkpoints can fall behind a writer that never pauses; past
``WAL_LIMIT`` times ``bound`` the commit thread itself runs a RESTART checkpoint after
its COMMIT (its connection then has no transaction open, so nothing of ours holds the
WAL): the WAL cannot grow without bound, and only that rare commit waits for a copy. (Only
another process reading the file — the sqlite3 shell — can refuse a RESTART; the next is
then tried once the WAL has grown by another limit, not at every commit.)

Durability does not change: a checkpoint only copies committed frames, and an interrupted
one is redone from the WAL at the next open.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path

logger = logging.getLogger("eoclient.server_stub.store")

# The WAL's size past which a passive checkpoint is run: SQLite's own default
# (1,000 pages of 4 KiB), so the database file is copied to as often as before.
CHECKPOINT_BYTES = 4 * 1024 * 1024
# Past this many times the bound, the commit thread checkpoints itself (RESTART): a WAL
# of at most 64 MiB by default, which a restart replays in well under a second.
WAL_LIMIT = 16


class Checkpoints:
    """The WAL's checkpoints for one database (module docstring)."""

    def __init__(self, path: Path, bound: int = CHECKPOINT_BYTES) -> None:
        self.bound = bound
        self.passive = 0  # checkpoints run, for tests and inspection
        self.restarts = 0
        self.refused = 0  # RESTARTs a reader kept from finishing
        # The WAL's size past which the commit thread runs a RESTART: raised by the limit
        # when a reader refused one (another process holding a snapshot, e.g. the sqlite3
        # shell), so commits do not each wait out the busy timeout; reset once one runs.
        self._restart_at = WAL_LIMIT * bound
        self._wal = path.with_name(path.name + "-wal")
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA synchronous=FULL")  # fsyncs the file after a copy
        self._wanted = threading.Event()
        # Held for each checkpoint: SQLite refuses a second one while one runs (SQLITE_BUSY,
        # no waiting), so the commit thread's RESTART waits here for a passive one instead.
        self._copying = threading.Lock()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="store-checkpoint", daemon=True)
        self._thread.start()

    @staticmethod
    def configure(db: sqlite3.Connection, bound: int = CHECKPOINT_BYTES) -> None:
        """The writing connection's settings: no checkpoint inside its commits."""
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute(f"PRAGMA journal_size_limit={int(bound)}")

    def committed(self, db: sqlite3.Connection) -> None:
        """After each COMMIT, on the commit thread, ``db`` (the writing connection)
        outside any transaction."""
        try:
            size = os.stat(self._wal).st_size
        except FileNotFoundError:
            return
        if size > self._restart_at:
            try:
                with self._copying:
                    busy, _, _ = db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            except sqlite3.Error:  # the commit is done all the same; the next one retries
                logger.exception("a checkpoint of the store's WAL failed")
                return
            if busy:  # a reader of another connection (none is ours) held the WAL
                self.refused += 1
                self._restart_at = size + WAL_LIMIT * self.bound
            else:
                self.restarts += 1
                self._restart_at = WAL_LIMIT * self.bound
        elif size > self.bound:
            self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._closing:
                return
            self._wanted.clear()
            try:
                with self._copying:
                    self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.passive += 1
            except sqlite3.Error:  # the next commit asks again; the limit still holds
                logger.exception("a checkpoint of the store's WAL failed")

    def close(self) -> None:
        self._closing = True
        self._wanted.set()
        self._thread.join()
        self._db.close()
