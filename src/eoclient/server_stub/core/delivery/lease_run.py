"""The run of a lease table (``lease_table.LeaseTable``): the leases as parallel ``array``
columns sorted by seq, with dead slots (generation ``DEAD``) where leases ended, and the
slot-level work on them — finding a seq's slot, and settling, moving or ending a whole
request's leases at once when its ack ids name a stretch of consecutive slots — with the
records of what those batch paths did (``Settled``, ``Extended``, ``EndedRun``).

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
from itertools import compress, islice, pairwise
from operator import ne
from typing import Any, NamedTuple

from eoclient.server_stub.core.store import consecutive_stretches

DEAD = 0  # the generation of a slot whose lease ended (generations start at 1)


class Settled(NamedTuple):
    """What ``LeaseTable.settle_many`` did with a request's ids."""

    misses: list[int]  # the positions of the ids it left alone
    seqs: list[int]  # the leases it settled, in the ids' order
    publish_times: list[float]  # of those
    streamed: list[tuple[int, int]]  # (stream id, size) of those a stream counted


class Extended(NamedTuple):
    """What ``LeaseTable.extend_many`` did with a request's ids."""

    misses: list[int]  # the positions of the ids it left alone
    seqs: list[int]  # the leases it moved, in the ids' order
    generations: list[int]  # of those


class EndedRun(NamedTuple):
    """What ``LeaseTable.end_many`` did with a request's ids: the leases it ended, column
    by column in the ids' order (a ``Lease``'s fields), and the ids it left alone."""

    misses: list[int]  # the positions of the ids it left alone
    seqs: list[int]
    generations: list[int]
    deadlines: list[float]
    sizes: list[int]
    failed_attempts: list[int]
    streams: list[int]  # the stream whose flow control counted each; 0: none
    publish_times: list[float]


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

    def _columns(self) -> tuple[array[Any], ...]:
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

    def _drop_dead(self) -> None:
        """The run without its dead slots, column by column; the overflow is the caller's."""
        head = self._head
        if self._dead == head:
            # Every dead slot lies before the head (leases settled in the order they were
            # given, as a batch consumer acks): the live leases are the run's tail, and
            # dropping the head of each column is a move in C.
            for column in self._columns():
                del column[:head]
        else:
            # Leases given together end together, so the live slots come in stretches: each
            # is copied as one slice of each column. Where liveness changes is found in C
            # (a generation is nonzero exactly in a live slot).
            live = list(map(bool, self._generations))
            edges = [*compress(range(1, len(live)), map(ne, islice(live, 1, None), live))]
            bounds = [0, *edges, len(live)]
            stretches = list(pairwise(bounds))[0 if live and live[0] else 1 :: 2]
            columns = self._columns()
            kept = tuple(array(column.typecode) for column in columns)
            for start, end in stretches:
                for column, into in zip(columns, kept, strict=True):
                    into.extend(column[start:end])
            (
                self._seqs,
                self._generations,
                self._deadlines,
                self._sizes,
                self._failed,
                self._streams,
                self._published,
            ) = kept  # type: ignore[assignment]
        self._head = self._finger = self._dead = 0

    def _skip_dead_head(self) -> None:
        generations, head, end = self._generations, self._head, len(self._seqs)
        while head < end and generations[head] == DEAD:
            head += 1
        self._head = head

    def _live_slice(
        self, seqs: Sequence[int], generations: Sequence[int], now: float | None
    ) -> int | None:
        """The slot where ``seqs`` start if they fill consecutive live slots, each under
        its lease's own generation (and, with ``now``, before its deadline: after ``now``);
        else None."""
        if not seqs:
            return None
        first = bisect_left(self._seqs, seqs[0])
        end = first + len(seqs)
        current = self._generations[first:end].tolist()
        if (
            current != list(generations)
            or DEAD in current
            or self._seqs[first:end].tolist() != list(seqs)
            or (now is not None and min(self._deadlines[first:end]) <= now)
        ):
            return None
        return first

    def _settle_slice(
        self, seqs: Sequence[int], generations: Sequence[int], now: float, *, exact: bool
    ) -> SliceSettled | None:
        """Settle the leases of ``seqs`` under ``generations`` at once if they are a live
        slice of the run (``_live_slice``; with ``exact``, before their deadlines) — what
        ``LeaseTable.settle_many``'s loop would do for each; None (nothing changed)
        otherwise. The caller counts them."""
        first = self._live_slice(seqs, generations, now if exact else None)
        if first is None:
            return None
        end = first + len(seqs)
        self._generations[first:end] = array("q", bytes(8 * len(seqs)))  # all DEAD
        sizes, streams = self._sizes[first:end], self._streams[first:end]
        streamed = (
            [pair for pair in zip(streams, sizes, strict=True) if pair[0]] if any(streams) else []
        )
        return self._published[first:end].tolist(), streamed, sum(sizes), end - 1

    def _extend_slice(
        self, seqs: Sequence[int], generations: Sequence[int], now: float, deadline: float
    ) -> bool:
        """Move the leases of ``seqs`` under ``generations`` to ``deadline`` at once if they
        are a live slice of the run before their deadlines (``_live_slice``) — what
        ``LeaseTable.extend_many``'s loop would do for each; False (nothing changed)
        otherwise. The caller records the new deadline."""
        first = self._live_slice(seqs, generations, now)
        if first is None:
            return False
        end = first + len(seqs)
        self._deadlines[first:end] = array("d", (deadline,)) * len(seqs)
        self._finger = end - 1
        return True

    def _end_slots(self, seqs: Sequence[int], generations: Sequence[int], now: float) -> EndedRun:
        """End the live leases ``seqs`` name under their generations before their
        deadlines (after ``now``: the check ``AckIds.resolve`` makes of a modack) — the
        request as one slice of the run where it is one, else each stretch of consecutive
        seqs so, else id by id — and read what they held. The caller counts them."""
        slots: list[int] = []
        ended: list[int] = []  # the positions of the ids that ended a lease
        misses: list[int] = []
        whole = self._live_slice(seqs, generations, now)
        stretches = [(0, len(seqs))] if whole is not None else consecutive_stretches(seqs)
        for start, end in stretches:
            part = seqs[start:end]
            first = whole
            if first is None and len(stretches) > 1:
                first = self._live_slice(part, generations[start:end], now)
            if first is not None:
                # Dead at once: a later stretch naming these seqs again finds them ended.
                self._generations[first : first + len(part)] = array("q", bytes(8 * len(part)))
                slots.extend(range(first, first + len(part)))
                ended.extend(range(start, end))
            else:
                self._live_each(seqs, generations, start, end, now, None, (misses, ended, slots))
        if not slots:
            return EndedRun(misses, [], [], [], [], [], [], [])
        low, high = slots[0], slots[-1]
        if high - low + 1 == len(slots) and slots == list(range(low, high + 1)):
            # One slice (a Pull's response given back whole): its columns are slices.
            columns = [column[low : high + 1].tolist() for column in self._columns()]
            if low == self._head:
                self._head = high + 1
        else:
            columns = [list(map(column.__getitem__, slots)) for column in self._columns()]
        self._finger = high
        # The generations column reads DEAD now: the ids' own (equal, by the check).
        columns[1] = list(map(generations.__getitem__, ended))
        return EndedRun(misses, *columns)

    # The loops below are the id-by-id way of ``_settle_slice``, and of ``_extend_slice`` and
    # ``_end_slots``' slices, for ids that are not one slice of the run: over
    # ``seqs[start:end]``, adding to the lists given (positions of misses are the request's).
    # The slot search is written inline in both rather than as a method: a call an id in the
    # hottest loop of an Acknowledge or a modack. Ids come mostly in seq order: the slot
    # after the last one found is tried before a bisect.

    def _settle_each(
        self,
        seqs: Sequence[int],
        generations: Sequence[int],
        start: int,
        end: int,
        now: float,
        exact: bool,
        into: tuple[list[int], list[int], list[float], list[tuple[int, int]]],
    ) -> int:
        """Settle the live slots ``seqs[start:end]`` name (see ``LeaseTable.settle_many``
        for ``exact``): their misses, seqs, publish times and (stream id, size) go to
        ``into``; the bytes freed."""
        run, live, deadlines = self._seqs, self._generations, self._deadlines
        sizes, streams, published = self._sizes, self._streams, self._published
        n = len(run)
        finger = self._finger
        misses, done, times, streamed = into
        freed = 0
        for i, seq, asked in zip(
            range(start, end),
            islice(seqs, start, end),
            islice(generations, start, end),
            strict=True,
        ):
            j = finger + 1
            if j >= n or run[j] != seq:
                j = bisect_left(run, seq)
                if j >= n or run[j] != seq:
                    misses.append(i)
                    continue
            generation = live[j]
            if generation == DEAD or (
                (asked != generation or deadlines[j] <= now)
                if exact
                else not 0 < asked <= generation
            ):
                misses.append(i)
                continue
            finger = j
            live[j] = DEAD
            size = sizes[j]
            freed += size
            if streams[j]:
                streamed.append((streams[j], size))
            done.append(seq)
            times.append(published[j])
        self._finger = finger
        return freed

    def _live_each(
        self,
        seqs: Sequence[int],
        generations: Sequence[int],
        start: int,
        end: int,
        now: float,
        deadline: float | None,
        into: tuple[list[int], list[int], list[int]],
    ) -> None:
        """Move to ``deadline`` (None: end) the live slots ``seqs[start:end]`` name under
        their generations before their deadlines — a modack's check, for extensions and
        nacks alike: the positions of the others (misses), of the ids that named one and
        their slots go to ``into``. An id given twice moves its lease twice, as one by one,
        but ends it once: the second finds it ended, a miss."""
        run, live, deadlines = self._seqs, self._generations, self._deadlines
        n = len(run)
        finger = self._finger
        misses, found, slots = into
        for i, seq, asked in zip(
            range(start, end),
            islice(seqs, start, end),
            islice(generations, start, end),
            strict=True,
        ):
            j = finger + 1
            if j >= n or run[j] != seq:
                j = bisect_left(run, seq)
                if j >= n or run[j] != seq:
                    misses.append(i)
                    continue
            if live[j] != asked or asked == DEAD or deadlines[j] <= now:
                misses.append(i)
                continue
            finger = j
            if deadline is None:
                live[j] = DEAD
            else:
                deadlines[j] = deadline
            found.append(i)
            slots.append(j)
        self._finger = finger
