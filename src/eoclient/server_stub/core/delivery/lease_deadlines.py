"""When the leases of one subscription fall due: records of (deadline, seqs) in a heap.

Leases given the same deadline at once (one Pull, one ModifyAckDeadline request) share
one *record* ``(deadline, seqs)``: a lease joins the newest record when it has the same
deadline, else starts a new one, so a request of a thousand leases costs one heap push,
not a thousand. Records come due by deadline, ties in the order they were made.

A record is never changed in place: a seq whose lease ended, or moved to another
deadline, since the record was made is *stale*, and the lease table (``lease_table.py``,
which knows each lease's deadline) skips it when the record comes due. The table rebuilds
the records from its live leases (``rebuild``) once they hold more than twice as many
seqs (plus its ``SLACK``), so stale seqs cost memory in proportion to the live leases,
not to the ack rate times the deadline.

Costs, with r records: O(1) to join the newest record, O(log r) to start one or to take
a due one; a rebuild is O(n) for the n leases it is given, in C but for a step a stretch
of leases sharing a deadline.
"""

from __future__ import annotations

import heapq
import itertools
from array import array
from collections.abc import Iterable, Sequence
from itertools import compress, islice
from operator import ne


class DeadlineRecords:
    def __init__(self) -> None:
        self._records: list[tuple[float, int, array[int]]] = []
        # Seqs held by the records, stale ones included (read only: a plain attribute,
        # not a property, since the table reads it at every lease's end).
        self.slots = 0
        self._tail: tuple[float, array[int]] | None = None  # the newest record
        self._order = itertools.count()  # ties between records of one deadline

    def __len__(self) -> int:
        """Records (not seqs)."""
        return len(self._records)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a record (stale-early: its leases may have ended)."""
        return self._records[0][0] if self._records else None

    def add(self, seq: int, deadline: float) -> int:
        """Record ``seq`` as due at ``deadline``; the seqs held now."""
        tail = self._tail
        if tail is not None and tail[0] == deadline:
            tail[1].append(seq)
        else:
            seqs = array("q", (seq,))
            heapq.heappush(self._records, (deadline, next(self._order), seqs))
            self._tail = (deadline, seqs)
        self.slots += 1
        return self.slots

    def add_many(self, seqs: Sequence[int], deadline: float) -> int:
        """``add`` of many seqs given one deadline (one Pull's leases)."""
        tail = self._tail
        if tail is not None and tail[0] == deadline:
            tail[1].extend(seqs)
        else:
            record = array("q", seqs)
            heapq.heappush(self._records, (deadline, next(self._order), record))
            self._tail = (deadline, record)
        self.slots += len(seqs)
        return self.slots

    def pop_due(self, now: float) -> tuple[float, array[int]] | None:
        """The earliest record, out of the heap, if due at ``now``; else None."""
        records = self._records
        if not records or records[0][0] > now:
            return None
        deadline, _, seqs = heapq.heappop(records)
        self.slots -= len(seqs)
        if self._tail is not None and self._tail[1] is seqs:
            self._tail = None
        return deadline, seqs

    def rebuild(
        self,
        seqs: array[int],
        deadlines: array[float],
        extra: Iterable[tuple[int, float]] = (),
    ) -> None:
        """Records of just these leases, one a deadline: the parallel columns ``seqs`` and
        ``deadlines``, then the (seq, deadline) pairs of ``extra``.

        Leases given together sit together in the columns (a Pull's leases take
        consecutive slots of the lease table's run, under one deadline), so the columns
        are taken a stretch of one deadline at a time: finding where the deadline
        changes is one pass in C, and each stretch joins its record as one slice.
        """
        by_deadline: dict[float, array[int]] = {}
        count = len(seqs)
        # A stretch starts at slot 0 and wherever a deadline differs from the one before.
        starts = [0, *compress(range(1, count), map(ne, islice(deadlines, 1, None), deadlines))]
        for start, end in zip(starts, [*starts[1:], count], strict=True):
            if start < end:
                record = by_deadline.get(deadlines[start])
                if record is None:
                    by_deadline[deadlines[start]] = seqs[start:end]
                else:
                    record.extend(seqs[start:end])
        slots = count
        for seq, deadline in extra:
            record = by_deadline.get(deadline)
            if record is None:
                by_deadline[deadline] = record = array("q")
            record.append(seq)
            slots += 1
        self._records = [(d, next(self._order), s) for d, s in by_deadline.items()]
        heapq.heapify(self._records)
        self.slots = slots
        self._tail = None
