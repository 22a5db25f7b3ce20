"""``SqliteStore``'s message tables: messages, each subscription's backlog rows and
leases, and the acknowledged messages it retains.

* ``messages``: every body once, by seq (its topic's id beside it for garbage collection);
* ``backlog``: per subscription the seqs it has not acknowledged, with their failed
  delivery attempts and the generation of their last lease that ended without an ack;
* ``leases``: the leases, a row for each batch given at once (one Pull, one
  ModifyAckDeadline request) until one deadline: ``(seq, generation)`` pairs packed in a
  blob, and a lease's end without an ack as ``(seq, -generation)``. Replayed in order at
  a restart, the last pair of a seq says what it is: leased (its row is still in the
  backlog), ended, or gone while leased — acked, its answer maybe lost with the process:
  a retried exactly-once ack of it answers SUCCESS. A row a batch rather than an update
  of each backlog row: a delivery then costs the store a few bytes, not a B-tree write.
  Rows past their deadline are forgotten (``forget_leases``);
* ``retained``: per subscription the acknowledged messages it keeps for seek.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, cast

from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import Acked, BacklogRow, SeqMessage, StoredAck, StoredLease
from eoclient.server_stub.storage import codec
from eoclient.server_stub.storage.sqlite_cache import CACHE_BYTES, TailCache
from eoclient.server_stub.storage.sqlite_fresh import MAX_RUNS, FreshRows
from eoclient.server_stub.storage.sqlite_rows import MESSAGE_COLUMNS, backlog_rows, message_from_row
from eoclient.server_stub.storage.sqlite_writes import ROWS_PER_READ, Writes, in_chunks

_ROW_COLUMNS = f"b.seq, b.failed_attempts, b.generation, {MESSAGE_COLUMNS}"
# A window's refill: below the cache's lowest seq (every message a miss), rows with their
# messages; from there, the backlog's own columns (the messages from the cache).
_BACKLOG_JOINED = (
    f"SELECT {_ROW_COLUMNS} FROM backlog b JOIN messages m ON m.seq = b.seq "
    "WHERE b.subscription = ? AND b.seq > ? AND b.seq < ? ORDER BY b.seq LIMIT ?"
)
# From there, the rows come back to Python as one JSON array, not one row each: fetching a
# row costs sqlite3 a tuple and its ints, ~0.36 µs, the larger part of a 10,000-row
# refill's store time (measured: 3.6 ms for the rows, 1.5 for the array and its parsing).
# A row with no failed attempt and no generation (a refill's common case) is its seq; any
# other is [seq, failed attempts, generation], and the second column counts those.
# json_group_array's order is SQLite's to choose: the rows are sorted once parsed.
_BACKLOG_OWN = (
    "SELECT json_group_array(CASE WHEN failed_attempts = 0 AND generation = 0 THEN seq "
    "ELSE json_array(seq, failed_attempts, generation) END), "
    "sum(failed_attempts != 0 OR generation != 0) "
    "FROM (SELECT seq, failed_attempts, generation FROM backlog "
    "WHERE subscription = ? AND seq > ? ORDER BY seq LIMIT ?)"
)

_INSERT_MESSAGE = (
    "INSERT INTO messages (seq, topic, message_id, data, attributes, ordering_key, "
    "publish_time, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_BACKLOG = "INSERT INTO backlog (subscription, seq, size) VALUES (?, ?, ?)"
# Over a range of seqs, each of them settled (``Writes.write_ranges``): one statement for
# a run of acks in seq order.
_SETTLE = "DELETE FROM backlog WHERE subscription = ? AND seq BETWEEN ? AND ?"
# Over a range of seqs, each of them ended with the same generation and failed attempts
# (``Writes.write_stretches``): one statement for the leases of a Pull nacked whole.
_END_LEASES = (
    "UPDATE backlog SET generation = ?, failed_attempts = ? "
    "WHERE subscription = ? AND seq BETWEEN ? AND ?"
)
_INSERT_LEASES = "INSERT INTO leases (subscription, deadline, leases) VALUES (?, ?, ?)"
_FORGET_LEASES = "DELETE FROM leases WHERE subscription = ? AND deadline <= ?"
_DELETE_LEASES = "DELETE FROM leases WHERE subscription = ?"
_RETAIN = "INSERT OR IGNORE INTO retained (subscription, seq, publish_time) VALUES (?, ?, ?)"
_PRUNE_RETAINED = "DELETE FROM retained WHERE subscription = ? AND publish_time <= ?"
_DELETE_BACKLOG = "DELETE FROM backlog WHERE subscription = ?"
_DELETE_RETAINED = "DELETE FROM retained WHERE subscription = ?"
_DELETE_MESSAGES = "DELETE FROM messages WHERE seq >= ? AND seq < ? AND topic = ?"
_LAST_SEQ = "UPDATE meta SET value = ? WHERE key = 'last_seq'"


def _own_rows(array: str, others: int | None) -> list[tuple[int, int, int]]:
    """The rows of ``_BACKLOG_OWN``'s array, in seq order: (seq, failed attempts,
    generation); ``others``: how many are not a seq alone."""
    items = json.loads(array)
    if not others:
        return [(seq, 0, 0) for seq in sorted(items)]
    rows = [(i, 0, 0) if isinstance(i, int) else (i[0], i[1], i[2]) for i in items]
    rows.sort()
    return rows


def _pack(pairs: array[int]) -> bytes:
    if sys.byteorder == "big":
        pairs = array("q", pairs)
        pairs.byteswap()
    return pairs.tobytes()


def _unpack(blob: bytes) -> array[int]:
    pairs = array("q")
    pairs.frombytes(blob)
    if sys.byteorder == "big":
        pairs.byteswap()
    return pairs


class BacklogTables:
    def __init__(
        self, writes: Writes, cache_bytes: int = CACHE_BYTES, fresh_runs: int = MAX_RUNS
    ) -> None:
        self._writes = writes
        self.cache = TailCache(cache_bytes)
        self.fresh = FreshRows(fresh_runs)
        row = writes.db.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()
        self.last_seq = int(row[0]) if row else 0
        self._oldest_retained: dict[int, float | None] = {}
        # Lease batches not written yet, in order: (subscription, deadline, pairs). Nothing
        # reads them before a restart: written at the commit (``flush_leases``).
        self._batches: list[tuple[int, float, array[int]]] = []

    # ---------------------------------------------------------------- reading (at open)

    def counts(self) -> dict[int, tuple[int, int]]:
        """subscription id -> (backlog rows, their bytes)."""
        rows = self._writes.db.execute(
            "SELECT subscription, COUNT(*), SUM(size) FROM backlog GROUP BY 1"
        )
        return {subscription: (n, size) for subscription, n, size in rows}

    def restored_leases(
        self,
    ) -> tuple[dict[int, list[StoredLease]], dict[int, list[StoredAck]]]:
        """subscription id -> its leases (in seq order), and -> the leases whose messages
        left the backlog while leased: the ``leases`` rows replayed in order (module
        docstring), their backlog rows read back."""
        latest: dict[int, dict[int, tuple[int, float]]] = {}
        for subscription, deadline, blob in self._writes.db.execute(
            "SELECT subscription, deadline, leases FROM leases ORDER BY id"
        ):
            by_seq = latest.setdefault(subscription, {})
            pairs = _unpack(blob)
            for i in range(0, len(pairs), 2):
                by_seq[pairs[i]] = (pairs[i + 1], deadline)
        leases: dict[int, list[StoredLease]] = {}
        acks: dict[int, list[StoredAck]] = {}
        for subscription, by_seq in latest.items():
            live = sorted(seq for seq, (generation, _) in by_seq.items() if generation > 0)
            rows = {row[0]: row for row in self._lease_rows(subscription, live)}
            for seq in live:
                generation, deadline = by_seq[seq]
                row = rows.get(seq)
                if row is None:
                    acks.setdefault(subscription, []).append(StoredAck(seq, generation, deadline))
                elif generation > row[1]:  # else its end is in the row
                    _, _, failed, size, published, key = row
                    leases.setdefault(subscription, []).append(
                        StoredLease(seq, generation, deadline, failed, size, published, key)
                    )
        return leases, acks

    def _lease_rows(self, subscription: int, seqs: list[int]) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = []
        # A restart reads every lease once: larger reads.
        for chunk, marks in in_chunks(seqs, 20 * ROWS_PER_READ):
            found.extend(
                self._writes.db.execute(
                    "SELECT b.seq, b.generation, b.failed_attempts, b.size, m.publish_time, "
                    "m.ordering_key FROM backlog b JOIN messages m ON m.seq = b.seq "
                    f"WHERE b.subscription = ? AND b.seq IN ({marks})",
                    (subscription, *chunk),
                )
            )
        return found

    # ---------------------------------------------------------------- messages

    def publish(
        self, topic: int, messages: Sequence[SeqMessage], receivers: Mapping[int, Sequence[int]]
    ) -> None:
        if not messages:
            return
        to_json = codec.attributes_to_json
        rows = [
            (seq, topic, m.message_id, m.data, to_json(m.attributes), m.ordering_key,
             m.publish_time, m.size)
            for seq, m in messages
        ]  # fmt: skip
        self._writes.write_many(_INSERT_MESSAGE, rows)
        sizes = {seq: m.size for seq, m in messages}
        for subscription, seqs in receivers.items():
            self._writes.write_many(
                _INSERT_BACKLOG, [(subscription, seq, sizes[seq]) for seq in seqs]
            )
            self.fresh.published(subscription, seqs, self.last_seq)
        self.last_seq = max(self.last_seq, messages[-1][0])
        readers = [subscription for subscription, seqs in receivers.items() if seqs]
        if readers:  # (a message no subscription receives is read by no refill)
            self.cache.add(topic, messages, readers)

    def write_last_seq(self) -> None:
        self._writes.write(_LAST_SEQ, (self.last_seq,))

    # ---------------------------------------------------------------- backlog rows

    def backlog(self, subscription: int, after_seq: int, limit: int) -> list[BacklogRow]:
        found, last_read, complete = self._backlog(subscription, after_seq, limit)
        # The window reads its backlog in seq order from its cursor (every row before it
        # is in the window, leased or settled); fewer rows than asked: none is left up to
        # the last seq. (A read from the start — a snapshot's, the dashboard's oldest —
        # counts too: it costs those messages' next reads the join, nothing more.)
        self.cache.read(subscription, self.last_seq if complete else last_read)
        self.fresh.read(subscription, last_read, complete)
        return found

    def _backlog(
        self, subscription: int, after_seq: int, limit: int
    ) -> tuple[list[BacklogRow], int, bool]:
        """The rows, the seq of the last row read (rows whose message is gone are read,
        then left out; ``after_seq`` if none), and whether that was every row left."""
        seqs = self.fresh.after(subscription, after_seq, limit)
        if seqs is not None:  # rows published since the last read, as the store saw them
            return self._never_delivered(seqs), seqs[-1] if seqs else after_seq, len(seqs) < limit
        low = self.cache.low
        if low is None:
            low = self.last_seq + 1  # an empty cache: every row is below it
        found: list[BacklogRow] = []
        if after_seq + 1 < low:
            found = backlog_rows(
                self._writes.read(_BACKLOG_JOINED, (subscription, after_seq, low, limit))
            )
            if len(found) == limit:
                return found, found[-1].seq, False
            if low > self.last_seq:
                return found, found[-1].seq if found else after_seq, True
            after_seq, limit = low - 1, limit - len(found)
        array, others = self._writes.read(_BACKLOG_OWN, (subscription, after_seq, limit)).fetchone()
        if not others:  # every row a seq alone: failed attempts and generation 0
            seqs = sorted(json.loads(array))
            last_read = seqs[-1] if seqs else after_seq
            return found + self._never_delivered(seqs), last_read, len(seqs) < limit
        rows = _own_rows(array, others)
        last_read = rows[-1][0] if rows else after_seq
        return found + self._with_messages(rows), last_read, len(rows) < limit

    def _never_delivered(self, seqs: list[int]) -> list[BacklogRow]:
        """The rows of ``seqs``, each with no failed attempt and generation 0."""
        messages = list(map(self.cache.messages.get, seqs))
        # The cache holds them all (a refill's common case): the rows built by one map,
        # without a (seq, 0, 0) tuple each (0.88 against 1.14 ms for a 1,000-row refill
        # with the window's side, measured). all(): a StoredMessage is always true
        # (``None in`` would call its __eq__ on each).
        if all(messages):
            return list(map(BacklogRow, seqs, cast(list[StoredMessage], messages)))
        return self._with_messages([(seq, 0, 0) for seq in seqs])

    def rows(self, subscription: int, seqs: Sequence[int]) -> list[BacklogRow]:
        found: list[BacklogRow] = []
        for chunk, marks in in_chunks(seqs):
            rows = self._writes.read(
                "SELECT seq, failed_attempts, generation FROM backlog "
                f"WHERE subscription = ? AND seq IN ({marks}) ORDER BY seq",
                (subscription, *chunk),
            ).fetchall()
            found += self._with_messages(rows)
        return found

    def _with_messages(self, rows: list[tuple[int, int, int]]) -> list[BacklogRow]:
        """BacklogRows of (seq, failed attempts, generation): their messages from the
        cache, those it misses read (a row whose message is gone is left out, as the join
        leaves it out). The first pass serves a refill the cache holds whole; the second,
        the general one, any other."""
        get = self.cache.messages.get
        found = [
            BacklogRow(seq, message, failed, generation)
            for seq, failed, generation in rows
            if (message := get(seq)) is not None
        ]
        if len(found) == len(rows):
            return found
        read = self._read_messages([seq for seq, _, _ in rows if get(seq) is None]).get
        return [
            BacklogRow(seq, message, failed, generation)
            for seq, failed, generation in rows
            if (message := get(seq) or read(seq)) is not None
        ]

    def _read_messages(self, seqs: list[int]) -> dict[int, StoredMessage]:
        found: dict[int, StoredMessage] = {}
        for chunk, marks in in_chunks(seqs):
            for row in self._writes.read(
                f"SELECT m.seq, {MESSAGE_COLUMNS} FROM messages m WHERE m.seq IN ({marks})",
                chunk,
            ):
                found[row[0]] = message_from_row(row[1:])
        return found

    def settle(self, subscription: int, seqs: Sequence[int], retain: Sequence[Acked]) -> None:
        for seq, publish_time, _ in retain:
            self._writes.write(_RETAIN, (subscription, seq, publish_time))
        if retain and subscription in self._oldest_retained:
            oldest = self._oldest_retained[subscription]
            first = min(acked.publish_time for acked in retain)
            self._oldest_retained[subscription] = first if oldest is None else min(oldest, first)
        self._writes.write_ranges(_SETTLE, subscription, seqs)
        self.fresh.changed(subscription, seqs)

    def lease(self, subscription: int, seq: int, generation: int, deadline: float) -> None:
        """Into the newest batch if it is the subscription's with this deadline (the
        leases of one request), else a new one."""
        batches = self._batches
        if batches and batches[-1][0] == subscription and batches[-1][1] == deadline:
            pairs = batches[-1][2]
        else:
            pairs = array("q")
            batches.append((subscription, deadline, pairs))
        pairs.append(seq)
        pairs.append(generation)

    def lease_many(
        self, subscription: int, seqs: Sequence[int], generations: Sequence[int], deadline: float
    ) -> None:
        """``lease`` of each of ``seqs`` (one Pull's, one deadline): (seq, generation)
        pairs interleaved in C, into the newest batch if it is the subscription's with
        this deadline, else a new one (``test_sqlite_rows.py``: the same rows as ``lease``
        of each)."""
        if not seqs:
            return
        pairs = array("q", bytes(16 * len(seqs)))
        pairs[0::2] = array("q", seqs)
        pairs[1::2] = array("q", generations)
        batches = self._batches
        if batches and batches[-1][0] == subscription and batches[-1][1] == deadline:
            batches[-1][2].extend(pairs)
        else:
            batches.append((subscription, deadline, pairs))

    def end_leases(
        self,
        subscription: int,
        seqs: Sequence[int],
        generations: Sequence[int],
        deadlines: Sequence[float],
        failed: Sequence[int],
    ) -> None:
        """Each lease of ``seqs`` ended without an ack (a nack, an expiry, a rewind): its
        backlog row's update, and its marker, which lives as long as the lease it ends
        (forgotten at the same deadline): one batch when they share it."""
        ends = list(zip(generations, failed, strict=True))
        self._writes.write_stretches(_END_LEASES, subscription, seqs, ends)
        self.fresh.changed(subscription, seqs)
        negated = [-generation for generation in generations]
        if deadlines and min(deadlines) == max(deadlines):
            self.lease_many(subscription, seqs, negated, deadlines[0])
            return
        for seq, generation, deadline in zip(seqs, negated, deadlines, strict=True):
            self.lease(subscription, seq, generation, deadline)

    def flush_leases(self) -> None:
        """Buffer the lease batches as rows (before a commit, and before any statement
        that deletes from ``leases``)."""
        if self._batches:
            rows = [(subscription, d, _pack(pairs)) for subscription, d, pairs in self._batches]
            self._writes.write_many(_INSERT_LEASES, rows)
            self._batches = []

    def forget_leases(self, subscription: int, now: float) -> None:
        self.flush_leases()
        self._writes.write(_FORGET_LEASES, (subscription, now))

    def reset(self, subscription: int, unacked: Sequence[SeqMessage]) -> None:
        """Seek: the backlog becomes ``unacked``, waiting, with no lease."""
        self.flush_leases()
        self.fresh.forget(subscription)
        self._writes.write(_DELETE_BACKLOG, (subscription,))
        self._writes.write(_DELETE_LEASES, (subscription,))
        self._writes.write_many(_INSERT_BACKLOG, [(subscription, s, m.size) for s, m in unacked])

    def delete(self, subscription: int) -> None:
        self.flush_leases()
        self.cache.forget(subscription)
        self.fresh.forget(subscription)
        self._oldest_retained.pop(subscription, None)
        self._writes.write(_DELETE_BACKLOG, (subscription,))
        self._writes.write(_DELETE_RETAINED, (subscription,))
        self._writes.write(_DELETE_LEASES, (subscription,))

    @property
    def dirty(self) -> bool:
        return bool(self._batches)

    # ---------------------------------------------------------------- retained

    def retained(self, subscription: int) -> list[SeqMessage]:
        rows = self._writes.read(
            f"SELECT r.seq, {MESSAGE_COLUMNS} FROM retained r JOIN messages m ON m.seq = r.seq "
            "WHERE r.subscription = ? ORDER BY r.seq",
            (subscription,),
        )
        return [(row[0], message_from_row(row[1:])) for row in rows]

    def oldest_retained(self, subscription: int) -> float | None:
        if subscription not in self._oldest_retained:
            row = self._writes.read(
                "SELECT MIN(publish_time) FROM retained WHERE subscription = ?", (subscription,)
            ).fetchone()
            oldest = None if row is None or row[0] is None else float(row[0])
            self._oldest_retained[subscription] = oldest
        return self._oldest_retained[subscription]

    def prune_retained(self, subscription: int, cutoff: float) -> None:
        oldest = self.oldest_retained(subscription)
        if oldest is None or oldest > cutoff:
            return
        self._writes.write(_PRUNE_RETAINED, (subscription, cutoff))
        del self._oldest_retained[subscription]  # read again (after this runs) when next asked

    def drop_retained(self, subscription: int) -> None:
        if self._oldest_retained.get(subscription, 0.0) is None:
            return  # known to be empty: nothing to write
        self._writes.write(_DELETE_RETAINED, (subscription,))
        self._oldest_retained[subscription] = None

    def set_retained(self, subscription: int, retained: Sequence[SeqMessage]) -> None:
        """Seek: the retained acknowledged messages become ``retained``."""
        self._writes.write(_DELETE_RETAINED, (subscription,))
        self._writes.write_many(
            _RETAIN, [(subscription, seq, m.publish_time) for seq, m in retained]
        )
        self._oldest_retained.pop(subscription, None)

    # ---------------------------------------------------------------- garbage

    def lowest_seq(self, subscription: int) -> int | None:
        """The smallest seq the subscription's rows (backlog, retained) still name."""
        db = self._writes.db
        lows = [
            db.execute(
                f"SELECT MIN(seq) FROM {table} WHERE subscription = ?", (subscription,)
            ).fetchone()[0]
            for table in ("backlog", "retained")
        ]
        found = [low for low in lows if low is not None]
        return min(found) if found else None

    def delete_messages(self, topic: int, start: int, floor: int, limit: int) -> int:
        """Buffer the deletion of up to ``limit`` of the topic's messages with seq in
        [start, floor) (run by the next commit, in its thread); returns the seq below
        which all of them are then gone. The seq of the ``limit``-th bounds one ranged
        delete (a third cheaper than deleting the seqs a subquery lists, measured: 0.44
        against 0.61 µs a message). Read straight from the connection, after the
        caller's flush: the only writes buffered since are deletes of other topics'
        messages."""
        last = self._writes.db.execute(
            "SELECT seq FROM messages WHERE seq >= ? AND seq < ? AND topic = ? "
            "ORDER BY seq LIMIT 1 OFFSET ?",
            (start, floor, topic, limit - 1),
        ).fetchone()
        end = floor if last is None else last[0] + 1
        self._writes.write(_DELETE_MESSAGES, (start, end, topic))
        self.cache.drop(topic, start, end)
        return end
