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
taking the next and skipping a stale entry each cost O(log n), amortised — and O(1) for
seqs pushed in ascending order (the published messages), which skip the heap.

Part of the waiting messages (``waiting.Waiting``): ``entries`` is the window's,
``keys`` their key order; ``now`` is the caller's.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from itertools import islice
from operator import lt
from typing import cast

from eoclient.server_stub.core.delivery.entries import Entry, ready_at_of
from eoclient.server_stub.core.delivery.key_order import KeyOrder


class Schedule:
    def __init__(self, entries: Mapping[int, Entry], keys: KeyOrder, *, ordered: bool) -> None:
        self._entries = entries
        self._keys = keys
        self._ordered = ordered
        # The ready seqs: ``_run`` those pushed in ascending order (each above the last:
        # the published messages, as the window takes them), ``_ready`` a heap of the
        # rest (back from a lease, released, a key's next head). The next is the smaller
        # of their fronts: taking one from the run is O(1), not a heap pop.
        self._run: deque[int] = deque()
        self._ready: list[int] = []
        self._delayed: list[tuple[float, int]] = []

    def __repr__(self) -> str:
        ready = len(self._run) + len(self._ready)
        return f"<Schedule [{ready} ready, {len(self._delayed)} delayed entries]>"

    def entries(self) -> tuple[int, int]:
        """(ready, delayed) heap entries, stale ones included (inspection: the ready heap
        stays within the window, the delayed one empties once nothing is delayed)."""
        return len(self._run) + len(self._ready), len(self._delayed)

    def clear(self) -> None:
        self._run.clear()
        self._ready.clear()
        self._delayed.clear()

    # ------------------------------------------------------------ scheduling

    def push(self, entry: Entry, now: float) -> None:
        """``entry`` may be delivered from its ``ready_at`` on."""
        if entry.ready_at > now:
            heapq.heappush(self._delayed, (entry.ready_at, entry.seq))
        else:
            self._push_ready(entry.seq)

    def _push_ready(self, seq: int) -> None:
        run = self._run
        if not run or seq > run[-1]:
            run.append(seq)
        else:
            heapq.heappush(self._ready, seq)

    def push_run(self, seqs: list[int]) -> None:
        """``push`` of messages ready now (ascending ``seqs``: rows loaded past the
        cursor), at once when they come after the run's last (the common case)."""
        run = self._run
        if run and seqs and seqs[0] <= run[-1]:
            for seq in seqs:
                self._push_ready(seq)
        else:
            run.extend(seqs)

    def push_many(self, seqs: list[int], ready_at: list[float], now: float) -> None:
        """``push`` of messages given back at once (``seqs[i]`` from ``ready_at[i]``): all
        ready now, ascending and after the run's last (a Pull's response nacked whole into
        an emptied run), appended to the run at once; else one by one."""
        run = self._run
        if (
            seqs
            and max(ready_at) <= now
            and (not run or seqs[0] > run[-1])
            and all(map(lt, seqs, islice(seqs, 1, None)))
        ):
            run.extend(seqs)
            return
        delayed = self._delayed
        for seq, at in zip(seqs, ready_at, strict=True):
            if at > now:
                heapq.heappush(delayed, (at, seq))
            else:
                self._push_ready(seq)

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
                self._push_ready(seq)

    def next_release(self) -> float | None:
        """When the first delayed message becomes ready (stale-early)."""
        return self._delayed[0][0] if self._delayed else None

    # ------------------------------------------------------------ taking

    def exhausted(self) -> bool:
        """Nothing in the ready heap, stale or not (the window may need a refill)."""
        return not self._run and not self._ready

    def pop(self, now: float) -> Entry | None:
        """The next ready message, out of the heap (still in the window); None if the
        entry that surfaced was stale."""
        return self._deliverable(self._take_first(), now)

    def _take_first(self) -> int:
        run, ready = self._run, self._ready
        if run and (not ready or run[0] < ready[0]):
            return run.popleft()
        return heapq.heappop(ready)

    def take_run(self, now: float, count: int) -> list[Entry]:
        """``pop`` of up to ``count`` messages at once, while the next is the run's (the
        common case: published messages, in seq order), in one loop; stale entries are
        dropped on the way as ``pop`` drops them. Without ordering keys only (``pop``
        checks a key's head). Ascending seqs."""
        run, entries = self._run, self._entries
        take = run.popleft
        if not self._ready:
            # Nothing in the heap (the common case): the run's first ``count`` at once,
            # looked up in C; a stale one among them (rare) sends them through the filter.
            found = [entries.get(take()) for _ in range(min(count, len(run)))]
            # all(): an Entry is always true (``None in`` would call Entry.__eq__ on each).
            if all(found) and (not found or max(map(ready_at_of, found)) <= now):
                return cast(list[Entry], found)  # None is not among them
            return [entry for entry in found if entry is not None and entry.ready_at <= now]
        before = self._ready[0]
        taken: list[Entry] = []
        while run and len(taken) < count and run[0] < before:
            entry = entries.get(take())
            if entry is not None and entry.ready_at <= now:
                taken.append(entry)
        return taken

    def put_back_run(self, entries: list[Entry]) -> None:
        """The tail of ``take_run``'s messages is not delivered after all: the next to go
        again, at the run's front (below every seq left in it)."""
        self._run.extendleft(reversed([entry.seq for entry in entries]))

    def put_back(self, seq: int) -> None:
        """``pop``'s message is not delivered after all: still the next to go."""
        self._push_ready(seq)

    def has_ready(self, now: float) -> bool:
        """Is a message deliverable now? Stale entries on top are dropped on the way, so
        a subscription with nothing to deliver does not say otherwise."""
        run, ready = self._run, self._ready
        while run or ready:
            first = run[0] if run and (not ready or run[0] < ready[0]) else ready[0]
            if self._deliverable(first, now) is not None:
                return True
            self._take_first()
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
