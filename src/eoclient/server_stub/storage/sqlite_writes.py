"""The write path of ``SqliteStore``: changes buffered, then run and committed in groups.

Every change the broker hands over becomes a row of a pending operation (consecutive rows
of one statement run as one ``executemany``); ``begin_commit()`` takes them and
``finish_commit()`` runs them in a transaction and commits it. A transaction is opened by
the first statement that runs after a COMMIT, not right after it: the BEGIN holds nothing
until a statement runs, and on the commit's thread each statement costs a hand-back of
the GIL (see ``finish_commit``). The server's
shell (``group_commit.py``) runs the second half in a thread, so the event loop goes on
serving — and buffering the next group — during the fsync. A read waits for a commit in
flight, then runs what is pending first (``flush``), so it sees every change made
before it.

``in_chunks`` cuts the seqs of a point read into statements of a few hundred each.
``Names`` numbers the resources' names for the tables (``names``: an id is never reused
for another name), through the same buffer.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from eoclient.server_stub.core.store import consecutive_stretches
from eoclient.server_stub.storage.sqlite_checkpoints import Checkpoints

logger = logging.getLogger("eoclient.server_stub.store")

Row = tuple[Any, ...]
# A statement and its rows: tuples, or lists for ranges extended in place (``write_ranges``).
Operation = tuple[str, list[Any]]


# Point reads name at most this many seqs a statement (SQLite allows 32,766 parameters;
# a few hundred keep each statement's plan and parameter list small).
ROWS_PER_READ = 500


def in_chunks(
    seqs: Sequence[int], size: int = ROWS_PER_READ
) -> Iterator[tuple[Sequence[int], str]]:
    """``seqs`` in chunks of at most ``size``, each with its ``?,?,...`` for ``IN (...)``."""
    for start in range(0, len(seqs), size):
        chunk = seqs[start : start + size]
        yield chunk, ",".join("?" * len(chunk))


class Writes:
    """One connection's pending statements and the transaction they go into."""

    def __init__(self, db: sqlite3.Connection, checkpoints: Checkpoints | None = None) -> None:
        self.db = db
        self._checkpoints = checkpoints
        self._ops: list[Operation] = []
        self._committing: list[Operation] = []  # taken by a commit
        self._executed = False  # statements run in the open transaction, not committed
        self._idle = threading.Event()  # no commit running in a thread
        self._idle.set()

    def write(self, sql: str, row: Row) -> None:
        """Buffer one row of ``sql`` (a module constant: recognised by identity, so
        consecutive rows of one statement run as one ``executemany``)."""
        if self._ops and self._ops[-1][0] is sql:
            self._ops[-1][1].append(row)
        else:
            self._ops.append((sql, [row]))

    def write_rows(self, sql: str, rows: list[Any]) -> None:
        """``write`` of each of ``rows`` (tuples, or lists as ``write_ranges`` makes), at
        once."""
        if self._ops and self._ops[-1][0] is sql:
            self._ops[-1][1].extend(rows)
        elif rows:
            self._ops.append((sql, rows))

    def write_stretches(
        self, sql: str, key: int, seqs: Sequence[int], values: Sequence[Row]
    ) -> None:
        """Rows of ``sql``, a statement over (``*values[i]``, key, first seq, last seq):
        each stretch of ``seqs`` counting up by one with equal ``values`` is one row (one
        Pull's ids given back whole: one row of a range, not one a message)."""
        rows: list[list[Any]] = []
        last: list[Any] = []
        last_value: Row = ()
        for seq, value in zip(seqs, values, strict=True):
            if last and seq == last[-1] + 1 and value == last_value:
                last[-1] = seq
            else:
                last = [*value, key, seq, seq]
                last_value = value
                rows.append(last)
        self.write_rows(sql, rows)

    def write_ranges(self, sql: str, key: int, seqs: Sequence[int]) -> None:
        """Buffer ``seqs`` for ``sql``, a statement over (key, first seq, last seq): each
        stretch of ``seqs`` counting up by one (``consecutive_stretches``) is one row, and
        a stretch right after the last row's range, of the same key, extends that range
        instead (acks mostly come in seq order: a request's acks, or a run of requests,
        are one statement). The open range is a list extended in place."""
        stretches = consecutive_stretches(seqs)
        if not stretches:
            return
        ops = self._ops
        if ops and ops[-1][0] is sql:
            rows = ops[-1][1]
        else:
            rows = []
            ops.append((sql, rows))
        for start, end in stretches:
            first, last = seqs[start], seqs[end - 1]
            if rows and rows[-1][2] == first - 1 and rows[-1][0] == key:
                rows[-1][2] = last
            else:
                rows.append([key, first, last])

    def write_many(self, sql: str, rows: list[Row]) -> None:
        if rows:
            self._ops.append((sql, rows))

    def flush(self) -> None:
        """Run the pending operations (after a commit in flight): reads see them."""
        self._idle.wait()
        ops, self._ops = self._ops, []
        self._run(ops)
        if ops:
            self._executed = True

    def read(self, sql: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        self.flush()
        return self.db.execute(sql, parameters)

    def executed(self) -> None:
        """Something was run directly in the open transaction (it needs a commit)."""
        self._executed = True

    def _open_for(self, ops: list[Operation]) -> None:
        """BEGIN the transaction ``ops`` will run in, unless one is open."""
        if ops and not self.db.in_transaction:
            self.db.execute("BEGIN")

    def _run(self, ops: list[Operation]) -> None:
        self._open_for(ops)
        for sql, rows in ops:
            if len(rows) == 1:
                self.db.execute(sql, rows[0])
            else:
                self.db.executemany(sql, rows)

    @property
    def dirty(self) -> bool:
        return bool(self._ops or self._executed)

    @property
    def pending(self) -> bool:
        """Are statements buffered, not run yet?"""
        return bool(self._ops)

    def begin_commit(self) -> None:
        """Take what is pending for a commit (one at a time: waits for one in flight);
        ``finish_commit`` must follow."""
        self._idle.wait()
        self._open_for(self._ops)  # here, not in the commit's thread (``finish_commit``)
        self._committing, self._ops = self._ops, []
        # What ran in the open transaction is this commit's now: until it ends, ``dirty``
        # says only whether something came after it (a caller with nothing new waits
        # for the commit in flight, not for the next one: ``GroupCommit.pending``).
        self._executed = False
        self._idle.clear()

    def finish_commit(self) -> None:
        """Run the taken statements and COMMIT (the fsync). In a thread of its own, this
        runs beside the event loop: sqlite3 releases the GIL while SQLite works, and takes
        it back after each statement, which waits while the loop computes (an exactly-once
        Pull encodes its answer beside its commit) for up to the switch interval
        (``group_commit.COMMIT_SWITCH_INTERVAL``). So the thread runs nothing it need not:
        no BEGIN after the COMMIT (``_run`` opens the next transaction)."""
        try:
            ops, self._committing = self._committing, []
            self._run(ops)
            if self.db.in_transaction:
                self.db.execute("COMMIT")
            if self._checkpoints is not None:
                self._checkpoints.committed(self.db)
        except sqlite3.Error:
            if not self.db.in_transaction:  # rolled back by SQLite: the next one starts afresh
                logger.critical("the store's transaction was rolled back; changes are lost")
            else:  # still open, with what ran in it: the next commit commits it
                self._executed = True
            raise
        finally:
            self._idle.set()

    def wait_idle(self) -> None:
        self._idle.wait()


_INSERT_NAME = "INSERT INTO names (id, kind, name) VALUES (?, ?, ?)"


class Names:
    """Ids for (kind, name) pairs, made on first use and never reused."""

    def __init__(self, writes: Writes) -> None:
        self._writes = writes
        self.ids: dict[tuple[str, str], int] = {
            (kind, name): id_
            for id_, kind, name in writes.db.execute("SELECT id, kind, name FROM names")
        }
        self._next = max(self.ids.values(), default=0) + 1

    def id(self, kind: str, name: str) -> int:
        key = (kind, name)
        id_ = self.ids.get(key)
        if id_ is None:
            id_ = self.ids[key] = self._next
            self._next += 1
            self._writes.write(_INSERT_NAME, (id_, kind, name))
        return id_

    def names(self) -> dict[int, str]:
        """id -> name."""
        return {id_: name for (_, name), id_ in self.ids.items()}


class KindIds(dict[str, int]):
    """name -> id for one kind of ``Names``, made on first use: the store's hot calls
    (a lease, a settle: one a message) find theirs by a plain subscript."""

    def __init__(self, names: Names, kind: str) -> None:
        super().__init__()
        self._names = names
        self._kind = kind

    def __missing__(self, name: str) -> int:
        id_ = self[name] = self._names.id(self._kind, name)
        return id_
