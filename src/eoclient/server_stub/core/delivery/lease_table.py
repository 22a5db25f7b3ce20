"""The outstanding leases of one subscription, in about 60 bytes a lease.

A lease is what an ack id needs to resolve — the message's seq, the delivery's
generation and deadline — plus what its end needs: the message's size (flow control,
backlog bytes), failed delivery attempts, the stream whose flow control counts it and
the publish time (message TTL, retention). Not the body: that stays in the store, and a
redelivery reads it back.

Why not a dict of objects: a slots object, its dict slot and a heap record cost about
300 bytes a lease, 300 MB for the million leases a subscription may hold
(``--max-leases``). Here the leases are parallel ``array`` columns sorted by seq:

* **The run.** A lease whose seq is above every seq in the run is appended — deliveries
  go out oldest first, so nearly every new lease is. A lease whose seq still has a dead
  slot in the run (a redelivery soon after a nack or an expiry) takes that slot back.
  Any other (a redelivery of a message whose slot was compacted away) goes to the
  *overflow*, a small dict merged into the run once it outgrows an eighth of it. A
  lookup is one ``bisect`` in the run, then the overflow: O(log n).
* **Dead slots.** An ended lease leaves its slot dead (generation 0; generations start
  at 1); the run is rebuilt without them once they outnumber the live leases (plus
  ``SLACK``): amortised O(1) an end.
* **Expiry.** Each lease is recorded as due at its deadline (``lease_deadlines.py``: the
  leases of one request share one record). A record's seq whose lease ended, or moved to
  another deadline, since is skipped when the record comes due (its deadline no longer
  matches the table's); the records are rebuilt from the live leases once they hold
  twice as many seqs (plus ``SLACK``), so stale ones cost memory in proportion to the
  live leases, not to the ack rate times the deadline.

Pure and synchronous: no clock, no store; ``leases.py`` keeps it in step with
the streams and the store, ``engine.py`` decides what a lease's end means.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterator, Sequence
from itertools import compress
from typing import NamedTuple

from eoclient.server_stub.core.delivery.lease_deadlines import DeadlineRecords
from eoclient.server_stub.core.delivery.lease_run import DEAD as _DEAD
from eoclient.server_stub.core.delivery.lease_run import EndedRun, Extended, LeaseRun, Settled
from eoclient.server_stub.core.store import consecutive_stretches


class NewLeases(NamedTuple):
    """Leases given at once (``LeaseTable.add_many``), column by column."""

    seqs: list[int]
    generations: list[int]
    sizes: list[int]
    failed_attempts: list[int]
    publish_times: list[float]


class Lease(NamedTuple):
    """One outstanding lease, as read from the table (a copy: change it with the table's
    methods)."""

    seq: int
    generation: int  # the delivery's; >= 1
    deadline: float
    size: int
    failed_attempts: int
    stream_id: int  # the stream whose flow control counts it; 0: none
    publish_time: float


# An overflow row: the fields of a Lease after its seq, in order (a list: updated in place).
_Row = list[float]


class LeaseTable(LeaseRun):
    # Stale slots and records tolerated beyond the live leases before a rebuild: a
    # rebuild is O(live), so one every SLACK ends (or extensions) keeps its cost
    # amortised O(1) while a small table never rebuilds at all.
    SLACK = 4096
    # The overflow is merged into the run once it holds more than an eighth of it (at
    # least this many): lookups there are dict lookups, but the oldest lease and the
    # ordered walk need its smallest seq, which is recomputed when removed.
    OVERFLOW_MIN = 1024

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._clear_run()
        self._overflow: dict[int, _Row] = {}
        self._overflow_min: int | None = None  # cached; None: recompute
        self._live = 0
        self._bytes = 0
        self._due = DeadlineRecords()

    def __len__(self) -> int:
        return self._live

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and (self._slot(seq) >= 0 or seq in self._overflow)

    def __repr__(self) -> str:
        return (
            f"<LeaseTable [{self._live} leases, {len(self._seqs)} slots, "
            f"{len(self._overflow)} overflow, {len(self._due)} records]>"
        )

    @property
    def bytes(self) -> int:
        """The sizes of every leased message."""
        return self._bytes

    def records(self) -> int:
        """Seqs held by the expiry records, stale ones included (inspection: bounded by
        twice the live leases plus ``SLACK``)."""
        return self._due.slots

    # ---------------------------------------------------------------- lookups

    def _view(self, i: int) -> Lease:
        return Lease(
            self._seqs[i],
            self._generations[i],
            self._deadlines[i],
            self._sizes[i],
            self._failed[i],
            self._streams[i],
            self._published[i],
        )

    def current(self, seq: int) -> tuple[int, float] | None:
        """(generation, deadline) of ``seq``'s lease, or None: what an ack id is checked
        against, without building a ``Lease``."""
        i = self._find(seq)
        if i >= 0:
            generation = self._generations[i]
            return (generation, self._deadlines[i]) if generation != _DEAD else None
        row = self._overflow.get(seq)
        return None if row is None else (int(row[0]), row[1])

    def get(self, seq: int) -> Lease | None:
        i = self._slot(seq)
        if i >= 0:
            return self._view(i)
        row = self._overflow.get(seq)
        if row is None:
            return None
        return _from_row(seq, row)

    def oldest(self) -> Lease | None:
        """The lease of the smallest seq (the oldest message leased)."""
        self._skip_dead_head()
        run = self._head < len(self._seqs)
        low = self._overflow_low()
        if low is not None and (not run or low < self._seqs[self._head]):
            return _from_row(low, self._overflow[low])
        return self._view(self._head) if run else None

    def __iter__(self) -> Iterator[Lease]:
        """Every lease, in seq order (a snapshot: the table may change meanwhile)."""
        run = [self._view(i) for i in range(self._head, len(self._seqs)) if self._generations[i]]
        extra = [_from_row(seq, row) for seq, row in sorted(self._overflow.items())]
        return iter(list(heapq.merge(run, extra)) if extra else run)

    def seq_bound(self) -> int:
        """A seq above every leased one (0: none leased): with leases in seq order (the
        common case), rows past it need no lookup here."""
        return self._seqs[-1] + 1 if self._seqs else 0

    def next_deadline(self) -> float | None:
        """The earliest deadline of a record (stale-early: its leases may have ended)."""
        return self._due.next_deadline()

    # ---------------------------------------------------------------- changes

    def add(
        self,
        seq: int,
        generation: int,
        deadline: float,
        size: int,
        failed_attempts: int,
        stream_id: int,
        publish_time: float,
    ) -> None:
        """A new lease (the fields of a ``Lease``, by position: one is added for every
        delivery, and building the tuple first would cost as much again); ``seq`` must
        have none (a message has one lease at most)."""
        if generation <= _DEAD:
            raise ValueError(f"a lease's generation starts at 1 (got {generation})")
        seqs = self._seqs
        if not seqs or seq > seqs[-1]:
            seqs.append(seq)
            self._generations.append(generation)
            self._deadlines.append(deadline)
            self._sizes.append(size)
            self._failed.append(failed_attempts)
            self._streams.append(stream_id)
            self._published.append(publish_time)
        else:
            lease = Lease(seq, generation, deadline, size, failed_attempts, stream_id, publish_time)
            i = self._find(seq)
            if i >= 0:
                if self._generations[i] != _DEAD:
                    raise ValueError(f"message {seq} is leased already")
                self._fill(i, lease)
                self._dead -= 1
                if i < self._head:
                    self._head = i  # every slot before the head stays dead
            else:
                if seq in self._overflow:
                    raise ValueError(f"message {seq} is leased already")
                self._overflow[seq] = _to_row(lease)
                low = self._overflow_min
                if len(self._overflow) == 1 or (low is not None and seq < low):
                    self._overflow_min = seq
                if len(self._overflow) > max(self.OVERFLOW_MIN, len(seqs) // 8):
                    self._rebuild_run()
        self._live += 1
        self._bytes += size
        if self._due.add(seq, deadline) > 2 * self._live + self.SLACK:
            self._rebuild_records()

    def add_many(self, deadline: float, leases: NewLeases, stream_id: int = 0) -> None:
        """``add`` of one Pull's leases (ascending seqs, one ``deadline``, one stream or
        none: 0), appended column by column when they all lie above the run (fresh
        deliveries)."""
        seqs, generations, sizes, failed, published = leases
        if self._seqs and seqs and seqs[0] <= self._seqs[-1]:
            for seq, generation, size, attempts, publish_time in zip(*leases, strict=True):
                self.add(seq, generation, deadline, size, attempts, stream_id, publish_time)
            return
        # fromlist and a repeated array: half and a seventh of extend's cost an element.
        self._seqs.fromlist(seqs)
        self._generations.fromlist(generations)  # each >= 1: a delivery's
        self._deadlines += array("d", (deadline,)) * len(seqs)
        self._sizes.fromlist(sizes)
        self._failed.fromlist(failed)
        self._streams += array("q", (stream_id,)) * len(seqs)
        self._published.fromlist(published)
        self._live += len(seqs)
        self._bytes += sum(sizes)
        if self._due.add_many(seqs, deadline) > 2 * self._live + self.SLACK:
            self._rebuild_records()

    def _fill(self, i: int, lease: Lease) -> None:
        self._generations[i] = lease.generation
        self._deadlines[i] = lease.deadline
        self._sizes[i] = lease.size
        self._failed[i] = lease.failed_attempts
        self._streams[i] = lease.stream_id
        self._published[i] = lease.publish_time

    def remove(self, seq: int) -> Lease | None:
        """End ``seq``'s lease (nacked, expired, settled); None if it had none."""
        lease = self._end(seq)
        if lease is not None:
            self._upkeep()
        return lease

    def settle_many(
        self, seqs: Sequence[int], generations: Sequence[int], now: float, *, exact: bool
    ) -> Settled:
        """``settle`` of the leases a request's ack ids name, ``(seqs[i], generations[i])``:
        with ``exact`` (exactly-once's ``AckIds.resolve``) an id names its message's lease
        under that lease's generation before its deadline (after ``now``); otherwise
        (``AckIds.lookup``) under any generation issued so far, 1 to the lease's. The
        run's slots only: an id naming no live slot so (a stale or repeated id, a lease in
        the overflow, none at all) is a *miss*, left alone, for the caller's one-by-one
        path. The request, then each of its stretches of consecutive seqs (one Pull's
        ids), is settled as a slice of the run where it is one; the rest id by id."""
        settled = Settled([], [], [], [])
        freed = self._settle_sliced(seqs, generations, now, exact, settled)
        if freed is None:
            freed = 0
            stretches = consecutive_stretches(seqs)
            for start, end in stretches:
                got = None
                if len(stretches) > 1:
                    got = self._settle_sliced(
                        seqs[start:end], generations[start:end], now, exact, settled
                    )
                if got is None:
                    got = self._settle_each(seqs, generations, start, end, now, exact, settled)
                freed += got
        self._dead += len(settled.seqs)
        self._live -= len(settled.seqs)
        self._bytes -= freed
        self._skip_dead_head()
        self._upkeep()
        return settled

    def _settle_sliced(
        self,
        seqs: Sequence[int],
        generations: Sequence[int],
        now: float,
        exact: bool,
        into: Settled,
    ) -> int | None:
        """``seqs`` settled as one slice of the run (``LeaseRun._settle_slice``) and added
        to ``into``: the bytes freed; None (nothing changed) if they are not one."""
        sliced = self._settle_slice(seqs, generations, now, exact=exact)
        if sliced is None:
            return None
        times, streamed, freed, last = sliced
        if last + 1 - len(seqs) == self._head:  # from the head on: skip them at once
            self._head = last + 1
        self._finger = last
        into.seqs.extend(seqs)
        into.publish_times.extend(times)
        into.streamed.extend(streamed)
        return freed

    def end_many(self, seqs: Sequence[int], generations: Sequence[int], now: float) -> EndedRun:
        """``remove`` of the leases a request's nack ids name, ``(seqs[i], generations[i])``:
        an id names its message's lease under that lease's generation before its deadline
        (after ``now``), as ``AckIds.resolve`` checks a modack. The run's slots only: the
        other ids (stale, repeated, a lease in the overflow, none at all) are *misses*,
        left for the caller's one-by-one path (``LeaseRun._end_slots``)."""
        ended = self._end_slots(seqs, generations, now)
        count = len(ended.seqs)
        self._dead += count
        self._live -= count
        self._bytes -= sum(ended.sizes)
        self._skip_dead_head()
        self._upkeep()
        return ended

    def _end(self, seq: int) -> Lease | None:
        i = self._slot(seq)
        if i >= 0:
            lease = self._view(i)
            self._generations[i] = _DEAD
            self._dead += 1
            if i == self._head:
                self._skip_dead_head()
        else:
            row = self._overflow.pop(seq, None)
            if row is None:
                return None
            lease = _from_row(seq, row)
            if seq == self._overflow_min:
                self._overflow_min = None
        self._live -= 1
        self._bytes -= lease.size
        return lease

    def _upkeep(self) -> None:
        """Rebuild what has grown stale beyond the live leases plus ``SLACK``."""
        live = self._live
        if self._dead > live + self.SLACK:
            self._rebuild_run()
        if self._due.slots > 2 * live + self.SLACK:
            self._rebuild_records()

    def set_deadline(self, seq: int, deadline: float) -> bool:
        """Move ``seq``'s lease to ``deadline`` (a ModifyAckDeadline); False: no lease."""
        i = self._slot(seq)
        if i >= 0:
            self._deadlines[i] = deadline
        else:
            row = self._overflow.get(seq)
            if row is None:
                return False
            row[1] = deadline
        if self._due.add(seq, deadline) > 2 * self._live + self.SLACK:
            self._rebuild_records()
        return True

    def extend_many(
        self, seqs: Sequence[int], generations: Sequence[int], now: float, deadline: float
    ) -> Extended:
        """``set_deadline`` to ``deadline`` of the leases a request's modack ids name,
        ``(seqs[i], generations[i])``, under one record: an id names its message's lease
        under that lease's generation before its deadline (after ``now``), the check
        ``AckIds.resolve`` makes of a modack with or without exactly-once (an id given
        twice moves its lease twice, as one by one). The run's slots only: the other ids
        (stale, a lease in the overflow, none at all) are *misses*, left for the caller's
        one-by-one path. The request, then each of its stretches of consecutive seqs, is
        moved as a slice of the run where it is one; the rest id by id."""
        extended = Extended([], [], [])
        if self._extend_slice(seqs, generations, now, deadline):
            extended.seqs.extend(seqs)
            extended.generations.extend(generations)
        else:
            stretches = consecutive_stretches(seqs)
            for start, end in stretches:
                part, asked = seqs[start:end], generations[start:end]
                if len(stretches) > 1 and self._extend_slice(part, asked, now, deadline):
                    extended.seqs.extend(part)
                    extended.generations.extend(asked)
                else:
                    found: list[int] = []
                    slots: list[int] = []
                    into = (extended.misses, found, slots)
                    self._live_each(seqs, generations, start, end, now, deadline, into)
                    extended.seqs.extend(map(seqs.__getitem__, found))
                    extended.generations.extend(map(generations.__getitem__, found))
        moved = extended.seqs
        if moved and self._due.add_many(moved, deadline) > 2 * self._live + self.SLACK:
            self._rebuild_records()
        return extended

    def expire(self, now: float) -> Iterator[Lease]:
        """End, one at a time, every lease whose deadline is at or before ``now``; yields
        each as it ends, by deadline, then by seq (publish order).

        The caller may end or move other leases between two of them (an ordering key's
        rewind ends its later leases): one ended meanwhile is not yielded. Consume it
        whole. Leases of one deadline go in publish order, whatever order they were given
        it in: the earliest message of a key fails first and takes its key's later ones
        back with it, not failed, as when their deadlines differ (a modack of a key's
        leases in reverse order must not make the later ones' expiry count as failed
        attempts).
        """
        while (record := self._due.pop_due(now)) is not None:
            deadline, first = record
            seqs = list(first)
            while self._due.next_deadline() == deadline:
                more = self._due.pop_due(now)
                assert more is not None
                seqs += more[1]
            seqs.sort()
            for seq in seqs:
                lease = self.get(seq)
                # Stale: ended, or moved to another deadline, since the record was made.
                if lease is not None and lease.deadline == deadline:
                    self._end(seq)
                    yield lease
        self._upkeep()

    # ---------------------------------------------------------------- upkeep

    def _rebuild_records(self) -> None:
        """The deadline records again, of the live leases only: O(n), in C but for one
        step a stretch of slots sharing a deadline (``DeadlineRecords.rebuild``)."""
        head = self._head
        if self._dead == head:  # the live slots are the run's tail
            seqs, deadlines = self._seqs[head:], self._deadlines[head:]
        else:
            # A slot is live exactly when its generation is not DEAD (0): the generations
            # column is its own selector, and compress walks it in C.
            live = self._generations
            seqs = array("q", compress(self._seqs, live))
            deadlines = array("d", compress(self._deadlines, live))
        self._due.rebuild(seqs, deadlines, ((seq, row[1]) for seq, row in self._overflow.items()))

    def _rebuild_run(self) -> None:
        """The run again, without dead slots and with the overflow merged in: O(n)."""
        if not self._overflow:
            self._drop_dead()
            return
        leases = list(self)
        self._seqs = array("q", (lease.seq for lease in leases))
        self._generations = array("q", (lease.generation for lease in leases))
        self._deadlines = array("d", (lease.deadline for lease in leases))
        self._sizes = array("q", (lease.size for lease in leases))
        self._failed = array("q", (lease.failed_attempts for lease in leases))
        self._streams = array("q", (lease.stream_id for lease in leases))
        self._published = array("d", (lease.publish_time for lease in leases))
        self._head = self._finger = self._dead = 0
        self._overflow.clear()
        self._overflow_min = None

    def _overflow_low(self) -> int | None:
        if not self._overflow:
            return None
        if self._overflow_min is None:
            self._overflow_min = min(self._overflow)
        return self._overflow_min


def _to_row(lease: Lease) -> _Row:
    return [
        lease.generation,
        lease.deadline,
        lease.size,
        lease.failed_attempts,
        lease.stream_id,
        lease.publish_time,
    ]


def _from_row(seq: int, row: _Row) -> Lease:
    generation, deadline, size, failed, stream, published = row
    return Lease(seq, int(generation), deadline, int(size), int(failed), int(stream), published)
