"""The waiting messages of one subscription: the window in memory, the cold rest in the store.

A message waits here until it is delivered (then ``lease_table.py`` holds its lease, not
its body), and again after a nack or an expiry. Three places, each with its count and
bytes:

* the **window**: messages whose bodies are in memory (``entries``), each scheduled by
  ``schedule.py``. A store that bounds it (``Store.window``) keeps it near that many
  messages; ``MemoryStore`` does not (every waiting message is here);
* the **cold rows**: messages past the *cursor* (every seq above the largest loaded),
  only in the store;
* the **returned**: messages back from a lease whose bodies only the store keeps (a
  bounded store drops a body when it leases the message): their seqs lie below the
  cursor, with what the window needs to take them again (``Returned``).

``load`` moves the oldest cold messages into reach, returned first (their seqs are the
smallest), then past the cursor, in seq order: an ordering key's messages enter the
window in its order, so the window always holds the head of every key it holds, and the
oldest messages (the first to meet the retention or the TTL) are the first loaded.
In the common case — nothing returned, no lease past the cursor — a load is one store
read whose rows all enter the window as they are (``load_fresh``, ``add_run``: columns,
not a call a row): a durable server pays this for every message it delivers.
The window grows past its size (to twice it plus what a caller wants) only while what it
holds cannot be delivered yet — ordering keys waiting behind leased heads — so that other
keys get a chance; beyond that it waits for acks.

Pure: the store is read (``SubscriptionStorage``), never written; what a loaded message
becomes (delivered, dropped by the retention, acked by the TTL) is decided by
``retention.py`` and ``engine.py``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from operator import le, lt
from typing import TypeVar

from eoclient.server_stub.core.delivery.entries import (
    Entry,
    Returned,
    message_of,
    publish_time_of,
    size_of,
)
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import BacklogRow, SeqMessage, SubscriptionStorage

# What the window's heaps hold: (publish time, seq) records and returned seqs.
_Item = TypeVar("_Item", tuple[float, int], int)


@dataclass(slots=True)
class Loaded:
    """A cold message brought into reach by ``Backlog.load``, not in the window yet.
    Not frozen: one is made for every message loaded (``BacklogRow``'s reason)."""

    seq: int
    message: StoredMessage
    generation: int
    failed_attempts: int
    ready_at: float | None  # None: deliverable as soon as loaded (a row past the cursor)
    returned: bool  # back from a lease (its key position was given before)


class Backlog:
    # The fewest rows a load asks the store for (when the window is nearly full of
    # messages it cannot deliver yet, it still moves on): one store read per this many
    # deliveries.
    MIN_LOAD = 100

    def __init__(self, storage: SubscriptionStorage) -> None:
        self.storage = storage
        self.limit = storage.window  # None: no bound, nothing ever cold
        self.entries: dict[int, Entry] = {}  # the window
        # (publish time, seq) of the window's entries, oldest first; an entry that left
        # the window leaves its record behind until it reaches the front. Two parts, as
        # the schedule's ready seqs: ``_by_publish_run`` the records added in ascending
        # order (each above the last: messages published and admitted in seq order, the
        # common case), where a stale record at the front goes in O(1); ``_by_publish``
        # a heap of the rest (messages given back, loaded after a seek or a restart with
        # earlier publish times), O(log n) each. The oldest is the smaller front. The run
        # holds only the seqs (a live one's publish time is its entry's: no tuple a
        # message), and ``_run_last`` the record of its last.
        self._by_publish_run: deque[int] = deque()
        self._run_last = (-math.inf, 0)
        self._by_publish: list[tuple[float, int]] = []
        self._cold = 0  # rows past the cursor that nothing else holds
        self._cursor = 0  # the largest seq loaded (or added) so far
        self._returned: dict[int, Returned] = {}
        self._returned_seqs: list[int] = []  # heap of the returned seqs (stale ones too)
        self._bytes = 0  # sizes of every waiting message: window, cold, returned
        self._compact_at = 4096  # _by_publish's length that calls for dropping stale records
        # At or before the publish time of every message ``oldest`` can see (window and
        # returned): lowered as one comes in, raised to the true oldest when ``oldest``
        # looks. The retention walk asks it first (``may_hold_older``), so that a backlog
        # nothing is due in costs O(1) a call, not the stale records' heap pops.
        self._floor = math.inf

    def __repr__(self) -> str:
        return (
            f"<Backlog [{len(self.entries)} in the window, {self._cold} cold, "
            f"{len(self._returned)} returned]>"
        )

    # ------------------------------------------------------------ measures

    def waiting(self) -> int:
        """Messages waiting: in the window, cold and returned."""
        return len(self.entries) + self._cold + len(self._returned)

    @property
    def bytes(self) -> int:
        return self._bytes

    def cold(self) -> int:
        """Messages only the store holds (past the cursor, or returned)."""
        return self._cold + len(self._returned)

    def oldest(self) -> tuple[float, int] | None:
        """(publish time, seq) of the oldest waiting message the core can see without a
        store read: the window's or a returned one's; None if neither holds any."""
        candidates = []
        head = self.window_head()
        if head is not None:
            candidates.append(head)
        low = self._lowest_returned()
        if low is not None:
            candidates.append((self._returned[low].publish_time, low))
        oldest = min(candidates) if candidates else None
        self._floor = oldest[0] if oldest is not None else math.inf
        return oldest

    def shortfall(self) -> int:
        """How many messages a bounded window holds fewer than its size, when some are
        cold (a load would bring some); else 0."""
        if self.limit is None or not (self._cold or self._returned):
            return 0
        return max(self.limit - len(self.entries), 0)

    def may_hold_older(self, cutoff: float) -> bool:
        """Might ``oldest`` be published at or before ``cutoff``? (False: it is not.)"""
        return self._floor <= cutoff

    def oldest_bound(self) -> float | None:
        """At or before the publish time of ``oldest`` (None: the window and the returned
        messages hold none), in O(1): early while messages that left were the oldest,
        exact again once ``oldest`` looks, and None whenever nothing is held."""
        if not self.entries and not self._returned:
            self._floor = math.inf
            return None
        return self._floor

    def window_head(self) -> tuple[float, int] | None:
        """(publish time, seq) of the window's oldest entry. O(1) amortised."""
        run, by_publish, entries = self._by_publish_run, self._by_publish, self.entries
        while run and run[0] not in entries:
            run.popleft()
        while by_publish and by_publish[0][1] not in entries:
            heapq.heappop(by_publish)
        if run:
            first = (entries[run[0]].message.publish_time, run[0])
            if not by_publish or first < by_publish[0]:
                return first
        return by_publish[0] if by_publish else None

    def first_cold_row(self) -> BacklogRow | None:
        """The first row past the cursor (a store read)."""
        if not self._cold:
            return None
        rows = self.storage.backlog(self._cursor, 1)
        return rows[0] if rows else None

    def _lowest_returned(self) -> int | None:
        seqs, returned = self._returned_seqs, self._returned
        while seqs and seqs[0] not in returned:
            heapq.heappop(seqs)
        return seqs[0] if seqs else None

    def returned_generation(self, seq: int) -> int | None:
        returned = self._returned.get(seq)
        return None if returned is None else returned.generation

    # ------------------------------------------------------------ intake

    def accepts(self) -> bool:
        """May a newly published message join the window (else it stays a cold row)?
        Only while nothing older is cold, so the window loads in seq order."""
        return (
            not self._cold
            and not self._returned
            and (self.limit is None or len(self.entries) < self.limit)
        )

    def add(self, entry: Entry) -> None:
        """Into the window (published, loaded, or back from a lease with its body)."""
        self.entries[entry.seq] = entry
        published = entry.message.publish_time
        record = (published, entry.seq)
        run = self._by_publish_run
        if not run or record > self._run_last:
            run.append(entry.seq)
            self._run_last = record
        else:
            heapq.heappush(self._by_publish, record)
        if published < self._floor:
            self._floor = published
        self._bytes += entry.message.size
        if entry.seq > self._cursor:
            self._cursor = entry.seq
        self._compact_records()

    def add_run(self, entries: list[Entry], seqs: list[int], messages: list[StoredMessage]) -> None:
        """``add`` of each of ``entries`` (ascending seqs, none in the window: rows loaded
        past the cursor), whose ``seqs`` and ``messages`` the caller read, in a few passes
        over their columns when their records come in ascending order after the run's last
        (the common case: messages published in seq order, loaded as the store keeps
        them); else one ``add`` at a time."""
        if not entries:
            return
        published = list(map(publish_time_of, messages))
        run = self._by_publish_run
        # (publish time, seq) ascends with the seqs exactly when the publish times do not
        # fall; then every record goes where ``add`` puts one above the run's last.
        if (run and (published[0], seqs[0]) <= self._run_last) or not all(
            map(le, published, islice(published, 1, None))
        ):
            for entry in entries:
                self.add(entry)
            return
        self.entries.update(zip(seqs, entries, strict=True))
        run.extend(seqs)
        self._run_last = (published[-1], seqs[-1])
        if published[0] < self._floor:
            self._floor = published[0]
        self._bytes += sum(map(size_of, messages))
        if seqs[-1] > self._cursor:
            self._cursor = seqs[-1]
        self._compact_records()

    def add_back(
        self, entries: list[Entry], seqs: list[int], messages: list[StoredMessage]
    ) -> None:
        """``add`` of each of ``entries`` (back from leases with their bodies: one request's
        nacks, in any order; ``seqs`` and ``messages`` their columns) at once: their
        records go to the run when they ascend past its last, else to the heap, as
        ``add`` would put the first that does not."""
        if not entries:
            return
        self.entries.update(zip(seqs, entries, strict=True))
        published = list(map(publish_time_of, messages))
        records = list(zip(published, seqs, strict=True))
        run = self._by_publish_run
        ascending = all(map(lt, records, islice(records, 1, None)))
        if ascending and (not run or records[0] > self._run_last):
            run.extend(seqs)
            self._run_last = records[-1]
        else:
            _push_all(self._by_publish, records)
        self._floor = min(self._floor, min(published))
        self._bytes += sum(map(size_of, messages))
        self._cursor = max(self._cursor, max(seqs))
        self._compact_records()

    def _compact_records(self) -> None:
        """Records of entries that left (leased, settled) beyond twice the window:
        dropped, so they cost memory in proportion to the window, not the traffic."""
        run, by_publish = self._by_publish_run, self._by_publish
        if len(run) + len(by_publish) > self._compact_at:
            entries = self.entries
            self._by_publish_run = run = deque(seq for seq in run if seq in entries)
            if run:
                self._run_last = (entries[run[-1]].message.publish_time, run[-1])
            self._by_publish = [record for record in by_publish if record[1] in entries]
            heapq.heapify(self._by_publish)
            self._compact_at = 2 * len(entries) + 4096

    def add_cold(self, size: int) -> None:
        """A newly published message stays in the store (a row past the cursor)."""
        self._cold += 1
        self._bytes += size

    def give_back(self, seq: int, returned: Returned) -> None:
        """A leased message is waiting again, its body in the store only."""
        self._returned[seq] = returned
        heapq.heappush(self._returned_seqs, seq)
        if returned.publish_time < self._floor:
            self._floor = returned.publish_time
        self._bytes += returned.size

    def give_back_many(self, seqs: list[int], returned: list[Returned]) -> None:
        """``give_back`` of each of ``seqs`` (one request's nacks) with its ``returned``."""
        if not seqs:
            return
        self._returned.update(zip(seqs, returned, strict=True))
        _push_all(self._returned_seqs, seqs)
        self._floor = min(self._floor, min(map(publish_time_of, returned)))
        self._bytes += sum(map(size_of, returned))

    # ------------------------------------------------------------ leaving

    def take(self, seq: int) -> Entry | None:
        """Out of the window (delivered, or settled); None if it is not there."""
        entry = self.entries.pop(seq, None)
        if entry is not None:
            self._bytes -= entry.message.size
        return entry

    def take_many(self, taken: list[Entry]) -> None:
        """``take`` of entries known to be in the window (one Pull's), in one loop."""
        remove = self.entries.pop
        size = 0
        for entry in taken:
            remove(entry.seq)
            size += entry.message.size
        self._bytes -= size

    def take_returned(self, seq: int) -> Returned | None:
        """A returned message leaves (settled before it was loaded again)."""
        returned = self._returned.pop(seq, None)
        if returned is not None:
            self._bytes -= returned.size
        return returned

    def take_cold(self, seq: int, held: Callable[[int], bool]) -> BacklogRow | None:
        """Row ``seq`` if it is a cold row past the cursor (read from the store), out of
        the backlog; ``held(seq)``: leased (a row the cursor must pass over)."""
        if not self._cold or seq <= self._cursor or held(seq):
            return None
        rows = self.storage.rows([seq])
        if not rows:
            return None
        self._cold -= 1
        self._bytes -= rows[0].message.size
        return rows[0]

    def load(self, want: int, held: Callable[[int], bool], most: int | None = None) -> list[Loaded]:
        """The next cold messages in seq order, out of the cold side (the caller adds
        those it keeps to the window); [] when none, or when the window is full. The
        general case, each row looked at (``load_fresh``: the common one, in bulk).

        ``want``: how many deliveries the caller still asks for; ``held(seq)``: the
        message is leased (its row stays in the store, passed over by the cursor);
        ``most``: at most this many rows (None: as many as the window has room for).
        """
        room = self._room(want, most)
        if not room:
            # Past the growth cap (``_room``) the window holds only messages waiting
            # behind their keys' heads; a head back from a lease, its body in the store,
            # is one of the returned, and they would wait for ever unless it loads. Few:
            # at most one a lease that ended without an ack.
            return self._load_returned(len(self._returned)) if most is None else []
        loaded = self._load_returned(room)
        # Past the cursor: rows of leased messages (restored at a restart) are passed
        # over, so a read may bring nothing new while more lies beyond it.
        while len(loaded) < room and (self._cold or self._returned):
            cursor = self._cursor
            loaded += self._load_past_cursor(room - len(loaded), held)
            if self._cursor == cursor:
                break
        return loaded

    def load_fresh(
        self, want: int, *, held_below: float, most: int | None = None
    ) -> list[BacklogRow] | None:
        """``load`` in the common case, where nothing is returned and every row past the
        cursor lies at or above ``held_below`` (past every lease): each row the store
        gives is loaded as it is (a message waiting since its publish, deliverable as
        soon as loaded), in one store read. None: not that case (``load`` looks at each
        row). ``want``, ``most``: as for ``load``."""
        if self._returned or self._cursor + 1 < held_below:
            return None
        room = self._room(want, most)
        if not room:
            return []
        rows = self.storage.backlog(self._cursor, room)
        self._cold -= len(rows)
        self._bytes -= sum(map(size_of, map(message_of, rows)))
        if rows:
            self._cursor = rows[-1].seq
        if len(rows) < room:
            # Fewer than asked: the store has no more rows past these, so none are cold
            # beyond them, whatever the count says.
            self._cold = 0
        return rows

    def _room(self, want: int, most: int | None) -> int:
        """How many rows a load asks for (0: none to load, or the window is full), at
        most ``most`` (None: no cap)."""
        if not (self._cold or self._returned) or self.limit is None:
            return 0
        if len(self.entries) >= 2 * self.limit + want:
            return 0
        room = max(self.limit - len(self.entries), self.MIN_LOAD, want)
        return room if most is None else min(room, most)

    def _load_returned(self, room: int) -> list[Loaded]:
        """Returned messages below the cursor, smallest seq first (those above it — a
        lease restored at a restart, ended before the cursor got there — are read when
        the cursor reaches them)."""
        seqs: list[int] = []
        while len(seqs) < room:
            low = self._lowest_returned()
            if low is None or low > self._cursor:
                break
            heapq.heappop(self._returned_seqs)
            seqs.append(low)
        if not seqs:
            return []
        rows = {row.seq: row for row in self.storage.rows(seqs)}
        loaded = []
        for seq in seqs:
            returned = self._returned.pop(seq)
            self._bytes -= returned.size
            row = rows.get(seq)
            if row is not None:  # else gone from the store: nothing to deliver
                loaded.append(_from_returned(seq, row.message, returned))
        return loaded

    def _load_past_cursor(self, room: int, held: Callable[[int], bool]) -> list[Loaded]:
        rows = self.storage.backlog(self._cursor, room)
        loaded = self._load_rows(rows, held)
        if rows:
            self._cursor = rows[-1].seq
        if len(rows) < room:  # as in ``load_fresh``: nothing cold beyond them
            self._cold = 0
        return loaded

    def _load_rows(self, rows: list[BacklogRow], held: Callable[[int], bool]) -> list[Loaded]:
        """``_load_past_cursor``'s rows, each looked at: returned ones (their body only
        in the store) take what the window kept of them; leased ones are passed over."""
        loaded = []
        for row in rows:
            returned = self._returned.pop(row.seq, None)
            if returned is not None:
                self._bytes -= returned.size
                loaded.append(_from_returned(row.seq, row.message, returned))
            elif not held(row.seq):
                self._cold -= 1
                self._bytes -= row.message.size
                loaded.append(
                    Loaded(row.seq, row.message, row.generation, row.failed_attempts, None, False)
                )
        return loaded

    # ------------------------------------------------------------ reading

    def window(self) -> list[SeqMessage]:
        """(seq, message) of every message in the window."""
        return [(seq, entry.message) for seq, entry in self.entries.items()]

    # ------------------------------------------------------------ lifecycle

    def restore(self, rows: int, size: int) -> None:
        """After a restart: ``rows`` waiting messages of ``size`` bytes, all cold."""
        self.clear()
        self._cold = rows
        self._bytes = size

    def clear(self) -> None:
        self.entries.clear()
        self._by_publish_run.clear()
        self._run_last = (-math.inf, 0)
        self._by_publish.clear()
        self._cold = 0
        self._cursor = 0
        self._returned.clear()
        self._returned_seqs.clear()
        self._bytes = 0
        self._floor = math.inf


def _from_returned(seq: int, message: StoredMessage, returned: Returned) -> Loaded:
    return Loaded(
        seq, message, returned.generation, returned.failed_attempts, returned.ready_at, True
    )


def _push_all(heap: list[_Item], items: list[_Item]) -> None:
    """Push ``items`` onto the heap ``heap``: when they outnumber it, appended and the whole
    heapified (O(n), cheaper than a push each then), else pushed one by one."""
    if len(items) > len(heap):
        heap += items
        heapq.heapify(heap)
    else:
        push = heapq.heappush
        for item in items:
            push(heap, item)
