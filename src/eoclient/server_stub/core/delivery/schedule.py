"""Which waiting message of one subscription goes next: its ready and delayed heaps.

A message in the window is *scheduled* once it may be delivered: in ``ready``, a heap of
seqs deliverable now (oldest published first), or in ``delayed``, a heap of
(ready_at, seq) not deliverable yet — a retry backoff, a delayed-delivery attribute. With
ordering keys only a key's head is ever scheduled (``key_order.KeyOrder``); whoever
delivers or settles the head schedules the next one.

Invariant: every message of the window that may be delivered has an entry in one of the
heaps. Entries are never removed in place: a stale one (the message left the window or
was rescheduled, or is no longer its key's head after a rewind) is recognised when it
surfaces and skipped. Each is pushed once, so with n messages in the window scheduling,
taking the next and skipping a stale entry each cost O(log n), amortised.

Part of the waiting messages (``waiting.Waiting``): ``entries`` is the window's,
``keys`` their key order; ``now`` is the caller's.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from eoclient.server_stub.core.delivery.entries import Entry
from eoclient.server_stub.core.delivery.key_order import KeyOrder


class Schedule:
    def __init__(self, entries: Mapping[int, Entry], keys: KeyOrder, *, ordered: bool) -> None:
        self._entries = entries
        self._keys = keys
        self._ordered = ordered
        self._ready: list[int] = []
        self._delayed: list[tuple[float, int]] = []

    def __repr__(self) -> str:
        return f"<Schedule [{len(self._ready)} ready, {len(self._delayed)} delayed entries]>"

    def entries(self) -> tuple[int, int]:
        """(ready, delayed) heap entries, stale ones included (inspection: the ready heap
        stays within the window, the delayed one empties once nothing is delayed)."""
        return len(self._ready), len(self._delayed)

    def clear(self) -> None:
        self._ready.clear()
        self._delayed.clear()

    # ------------------------------------------------------------ scheduling

    def push(self, entry: Entry, now: float) -> None:
        """``entry`` may be delivered from its ``ready_at`` on."""
        if entry.ready_at > now:
            heapq.heappush(self._delayed, (entry.ready_at, entry.seq))
        else:
            heapq.heappush(self._ready, entry.seq)

    def push_seq(self, seq: int | None, now: float) -> None:
        """The window's message ``seq`` became its key's head (None: no message did)."""
        if seq is not None:
            self.push(self._entries[seq], now)

    def release_due(self, now: float) -> None:
        """Delayed messages whose time has come become ready."""
        delayed, entries = self._delayed, self._entries
        while delayed and delayed[0][0] <= now:
            ready_at, seq = heapq.heappop(delayed)
            entry = entries.get(seq)
            if entry is not None and entry.ready_at == ready_at:
                heapq.heappush(self._ready, seq)

    def next_release(self) -> float | None:
        """When the first delayed message becomes ready (stale-early)."""
        return self._delayed[0][0] if self._delayed else None

    # ------------------------------------------------------------ taking

    def exhausted(self) -> bool:
        """Nothing in the ready heap, stale or not (the window may need a refill)."""
        return not self._ready

    def pop(self, now: float) -> Entry | None:
        """The next ready message, out of the heap (still in the window); None if the
        entry that surfaced was stale."""
        return self._deliverable(heapq.heappop(self._ready), now)

    def put_back(self, seq: int) -> None:
        """``pop``'s message is not delivered after all: still the next to go."""
        heapq.heappush(self._ready, seq)

    def has_ready(self, now: float) -> bool:
        """Is a message deliverable now? Stale entries on top are dropped on the way, so
        a subscription with nothing to deliver does not say otherwise."""
        ready = self._ready
        while ready:
            if self._deliverable(ready[0], now) is not None:
                return True
            heapq.heappop(ready)
        return False

    def _deliverable(self, seq: int, now: float) -> Entry | None:
        """The entry a ready seq names if it is deliverable now, else None (stale)."""
        entry = self._entries.get(seq)
        if entry is None or entry.ready_at > now:
            return None
        key = entry.message.ordering_key if self._ordered else ""
        if key and not self._keys.is_head(key, entry.key_position):
            return None  # not the head of its key (a stale entry from before a rewind)
        return entry
