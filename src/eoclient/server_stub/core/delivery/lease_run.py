"""The run of a lease table (``lease_table.LeaseTable``): the leases as parallel ``array``
columns sorted by seq, with dead slots (generation ``DEAD``) where leases ended, and the
slot-level work on them — finding a seq's slot, and settling a whole request's leases at
once when its ack ids name a stretch of consecutive slots.

The table owns the rest (the overflow, counts and bytes, the deadline records) and keeps
every invariant; this base only reads and marks slots. Acks of a unary Pull's response,
in order, are the common case: their seqs are a slice of the run (the Pull appended them
there together, ``LeaseTable.add_many``), so checking and settling them is a handful of
slice operations in C rather than a Python loop an id.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence

DEAD = 0  # the generation of a slot whose lease ended (generations start at 1)

# What ``LeaseRun._settle_slice`` settled: the publish times, (stream id, size) of those a
# stream counts, the bytes freed, and the last slot.
SliceSettled = tuple[list[float], list[tuple[int, int]], int, int]


class LeaseRun:
    def _clear_run(self) -> None:
        self._seqs = array("q")
        self._generations = array("q")
        self._deadlines = array("d")
        self._sizes = array("q")
        self._failed = array("q")
        self._streams = array("q")
        self._published = array("d")
        self._head = 0  # every slot before it is dead
        self._finger = 0  # the slot last found
        self._dead = 0  # dead slots in the run

    def _find(self, seq: int) -> int:
        """The run's slot holding ``seq`` (live or dead), or -1. Acks mostly come in seq
        order, and an ack id is resolved then settled: the slot after the last one found,
        or that one, is tried before a bisect."""
        seqs = self._seqs
        i = self._finger
        n = len(seqs)
        if i < n and seqs[i] == seq:
            return i
        i += 1
        if i < n and seqs[i] == seq:
            self._finger = i
            return i
        i = bisect_left(seqs, seq)
        if i < n and seqs[i] == seq:
            self._finger = i
            return i
        return -1

    def _slot(self, seq: int) -> int:
        """The run's slot of ``seq``'s live lease, or -1. (A seq with a slot in the run,
        dead or not, is never in the overflow: a new lease of it takes the slot back.)"""
        i = self._find(seq)
        return i if i >= 0 and self._generations[i] != DEAD else -1

    def _columns(self) -> tuple[array[int] | array[float], ...]:
        """The run's seven columns, slot by slot in step."""
        return (
            self._seqs,
            self._generations,
            self._deadlines,
            self._sizes,
            self._failed,
            self._streams,
            self._published,
        )

    def _skip_dead_head(self) -> None:
        generations, head, end = self._generations, self._head, len(self._seqs)
        while head < end and generations[head] == DEAD:
            head += 1
        self._head = head

    def _settle_slice(
        self, seqs: Sequence[int], generations: Sequence[int], now: float, *, exact: bool
    ) -> SliceSettled | None:
        """Settle the leases of ``seqs`` under ``generations`` at once if they fill
        consecutive live slots, each under its lease's own generation (and with ``exact``
        before its deadline: after ``now``) — what ``LeaseTable.settle_many``'s loop
        would do for each; None (nothing changed) otherwise. The caller counts them."""
        if not seqs:
            return None
        first = bisect_left(self._seqs, seqs[0])
        end = first + len(seqs)
        current = self._generations[first:end].tolist()
        if (
            current != list(generations)
            or DEAD in current
            or self._seqs[first:end].tolist() != list(seqs)
            or (exact and min(self._deadlines[first:end]) <= now)
        ):
            return None
        self._generations[first:end] = array("q", bytes(8 * len(seqs)))  # all DEAD
        sizes, streams = self._sizes[first:end], self._streams[first:end]
        streamed = (
            [pair for pair in zip(streams, sizes, strict=True) if pair[0]] if any(streams) else []
        )
        return self._published[first:end].tolist(), streamed, sum(sizes), end - 1
