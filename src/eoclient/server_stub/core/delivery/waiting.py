"""The waiting messages of one subscription: the window with its cold rest, which goes
next, and the order of each ordering key.

Three parts, changed together only here, so that they always agree:

* ``window`` (``window.Backlog``): where each waiting message is — in memory with its
  body, a cold row only the store holds, or back from a lease with its body in the store;
* ``schedule`` (``schedule.Schedule``): which message of the window may go next, now or
  at its ready time;
* the key order (``key_order.KeyOrder``, with ordering keys): which message of each key is
  its head, the only one of the key that may be scheduled.

Readers use ``window`` and ``schedule`` directly (counts, bytes, the oldest message, what
is ready, when the next delayed message is); a change of one part alone goes to that
part (``schedule.put_back``, ``schedule.release_due``); every change that touches more
than one is a method here. What leaves for good is handed back as ``Left`` records:
the caller (``engine.SubscriptionDelivery``) settles them (``settlement.Settlement``).

Costs: O(log n) a message in or out (the heaps), O(1) amortised for the key order. A
refill's rows without ordering keys or delays are admitted in a few passes over their
columns (``_admit_fresh``), O(1) each.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from eoclient.server_stub.core.delivery.entries import (
    Entry,
    Left,
    Returned,
    deliver_at_of,
    message_of,
    ordering_key_of,
    seq_of,
)
from eoclient.server_stub.core.delivery.key_order import KeyOrder
from eoclient.server_stub.core.delivery.lease_run import EndedRun
from eoclient.server_stub.core.delivery.lease_table import Lease, LeaseTable
from eoclient.server_stub.core.delivery.schedule import Schedule
from eoclient.server_stub.core.delivery.window import Backlog
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import BacklogRow, SubscriptionStorage


class Waiting:
    def __init__(self, storage: SubscriptionStorage, *, ordered: bool) -> None:
        self.window = Backlog(storage)
        self._keys = KeyOrder(self.window.entries)  # unused when ordering is off
        self.schedule = Schedule(self.window.entries, self._keys, ordered=ordered)
        self._ordered = ordered
        self._storage = storage

    @property
    def ordered(self) -> bool:
        """With ordering keys (``deliver_run`` is for subscriptions without)."""
        return self._ordered

    def __repr__(self) -> str:
        return f"<Waiting {self.window!r} {self.schedule!r} [{len(self._keys)} keys]>"

    def clear(self) -> None:
        self.window.clear()
        self.schedule.clear()
        self._keys.clear()

    # ------------------------------------------------------------ in

    def add(self, seq: int, message: StoredMessage, ready_at: float, now: float) -> None:
        """A message published to the topic (and matching the subscription): into the
        window if it has room and nothing is cold (seq order), else it stays a cold row
        of the store (which the publish gave it)."""
        if self.window.accepts():
            self._admit(Entry(seq, message, ready_at=ready_at), returned=False, now=now)
        else:
            self.window.add_cold(message.size)

    def _admit(self, entry: Entry, *, returned: bool, now: float) -> None:
        """Into the window: scheduled now (or at its delayed-delivery time), or behind the
        earlier messages of its key. ``returned``: it was delivered before, so it has its
        place in its key's sequence already."""
        entry.ready_at = max(entry.ready_at, entry.message.deliver_at)
        self.window.add(entry)
        key = entry.message.ordering_key if self._ordered else ""
        if key:
            entry.key_position, head = self._keys.admit(entry.seq, key, returned=returned)
            if not head:
                return
        self.schedule.push(entry, now)

    def _admit_fresh(self, entries: list[Entry], now: float) -> None:
        """``_admit`` of each of ``entries`` (rows loaded past the cursor, ascending
        seqs, ``ready_at`` 0: deliverable at once): at once — the window's ``add_run``,
        one schedule ``push_run`` — when none has an ordering key or a delivery time (the
        common case: then ``_admit`` would add each, keep its ``ready_at`` and schedule
        it ready); else one by one."""
        messages = list(map(message_of, entries))
        # A delivery time (0.0: none) is one ``_admit`` would raise ``ready_at`` to.
        if (self._ordered and any(map(ordering_key_of, messages))) or any(
            map(deliver_at_of, messages)
        ):
            for entry in entries:
                self._admit(entry, returned=False, now=now)
            return
        # The columns read once for both (each pass over a refill's rows costs ~40 ns a row).
        seqs = list(map(seq_of, entries))
        self.window.add_run(entries, seqs, messages)
        self.schedule.push_run(seqs)

    def refill(
        self,
        now: float,
        want: int,
        leased: LeaseTable,
        cutoff: float,
        ttl_cutoff: float,
        most: int | None = None,
    ) -> tuple[bool, list[tuple[Left, bool]]]:
        """Load the next cold messages into the window (seq order) for ``want`` more
        deliveries, at most ``most`` (None: as many as it has room for): whether any
        came, and those that left at once, each with whether it is acknowledged —
        published at or before ``cutoff`` (past the retention: dropped) or ``ttl_cutoff``
        (past the message TTL: acknowledged). ``leased``: the leases (their rows are
        passed over)."""
        # Rows past every lease (all of them, but after a restart) need no lookup there.
        # The rows loaded past the cursor become the window's entries as they are (a
        # row is an Entry), deliverable at once (their ``ready_at`` 0).
        entries = self.window.load_fresh(want, held_below=leased.seq_bound(), most=most)
        if entries is not None:
            self._admit_fresh(entries, now)
        else:
            entries = []
            for item in self.window.load(want, leased.__contains__, most):
                entry = Entry(
                    item.seq,
                    item.message,
                    ready_at=0.0 if item.ready_at is None else item.ready_at,
                    generation=item.generation,
                    failed_attempts=item.failed_attempts,
                )
                self._admit(entry, returned=item.returned, now=now)
                entries.append(entry)
        left: list[tuple[Left, bool]] = []
        due = max(cutoff, ttl_cutoff)
        if not self.window.may_hold_older(due):
            return bool(entries), left  # none of them (now in the window) is due: O(1)
        for entry in entries:
            published = entry.message.publish_time
            if published <= due:
                gone = self.remove(entry.seq, now)
                if gone is not None:
                    left.append((gone, published > cutoff))
        return bool(entries), left

    def give_back(
        self,
        lease: Lease,
        body: StoredMessage | None,
        ready_at: float,
        failed_attempts: int,
        now: float,
    ) -> None:
        """A lease ended without an ack: its message waits again from ``ready_at``, with
        ``failed_attempts``; ``body`` None: the store keeps it (read back when loaded)."""
        if body is not None:
            entry = Entry(
                lease.seq,
                body,
                ready_at=ready_at,
                generation=lease.generation,
                failed_attempts=failed_attempts,
            )
            self._admit(entry, returned=True, now=now)
        else:
            returned = Returned(
                ready_at, lease.generation, failed_attempts, lease.size, lease.publish_time
            )
            self.window.give_back(lease.seq, returned)

    def give_back_many(
        self,
        ended: EndedRun,
        held: list[Entry] | None,
        ready_at: list[float],
        failed_attempts: list[int],
        now: float,
    ) -> None:
        """``give_back`` of each lease of ``ended`` (one request's nacks, ``Leases.end_many``)
        with its ``ready_at`` and ``failed_attempts``, at once; without ordering keys
        only (a key's messages would each take their place in its order). ``held``: the
        entries the leases kept, which wait again as they are (None: the store keeps the
        bodies)."""
        if self._ordered:
            raise ValueError("give_back_many is for subscriptions without ordering keys")
        seqs = ended.seqs
        if held is None:
            returned = map(
                Returned,
                ready_at,
                ended.generations,
                failed_attempts,
                ended.sizes,
                ended.publish_times,
            )
            self.window.give_back_many(seqs, list(returned))
            return
        messages = list(map(message_of, held))
        # A delivery time (0.0: none) is one ``_admit`` would raise ``ready_at`` to.
        if any(map(deliver_at_of, messages)):
            ready_at = list(map(max, ready_at, map(deliver_at_of, messages)))
        # What ``give_back`` would build each with (``key_position`` stays -1: no keys).
        for entry, attempts, generation, at in zip(
            held, failed_attempts, ended.generations, ready_at, strict=True
        ):
            entry.failed_attempts = attempts
            entry.generation = generation
            entry.ready_at = at
        self.window.add_back(held, seqs, messages)
        self.schedule.push_many(seqs, ready_at, now)

    # ------------------------------------------------------------ out

    def deliver(self, entry: Entry, now: float) -> None:
        """``entry`` (from ``schedule.pop``) is leased: out of the window, and its key's
        next message scheduled."""
        self.window.take(entry.seq)
        key = entry.message.ordering_key if self._ordered else ""
        if key:
            self.schedule.push_seq(self._keys.delivered(entry.seq, key), now)

    def deliver_run(self, taken: list[Entry]) -> None:
        """``deliver`` of many entries (``schedule.take_run``'s) without ordering keys."""
        self.window.take_many(taken)

    def rewind(self, seq: int) -> list[int]:
        """Leased ``seq`` waits again: the later messages of its key delivered since go
        back with it (their seqs; with ordering keys only)."""
        return self._keys.rewind(seq) if self._ordered else []

    def remove(self, seq: int, now: float) -> Left | None:
        """Message ``seq`` leaves for good from the window or as returned (None: it is
        not waiting there); its key's next message is scheduled in its place."""
        entry = self.window.take(seq)
        if entry is not None:
            left = Left(seq, entry.message.publish_time, entry.message)
            if self._ordered and entry.message.ordering_key:
                follower = self._keys.removed(
                    seq, entry.message.ordering_key, entry.key_position, waited=True
                )
                self.schedule.push_seq(follower, now)
            return left
        returned = self.window.take_returned(seq)
        if returned is None:
            return None
        key = self._keys.key_of(seq) if self._ordered else ""
        if key:
            self.schedule.push_seq(self._keys.removed(seq, key, -1, waited=True), now)
        return Left(seq, returned.publish_time, None)

    def lease_left(self, seq: int) -> None:
        """Leased ``seq`` left for good (acked, dropped): its key forgets it."""
        key = self._keys.key_of(seq) if self._ordered else ""
        if key:
            self._keys.removed(seq, key, -1, waited=False)

    def leases_left(self, seqs: Iterable[int]) -> None:
        """``lease_left`` of each of ``seqs`` (one Acknowledge's): nothing to do without
        ordering keys."""
        if self._ordered:
            for seq in seqs:
                self.lease_left(seq)

    def take_cold(self, seq: int, leased: Container[int]) -> BacklogRow | None:
        """Row ``seq`` out of the backlog if it is a cold row past the cursor (a store
        read); ``leased``: the seqs with a lease."""
        return self.window.take_cold(seq, leased.__contains__)

    def drop_older(self, cutoff: float, ttl_cutoff: float, now: float) -> list[tuple[Left, bool]]:
        """The oldest waiting messages the core holds, while published at or before
        ``cutoff`` (dropped) or ``ttl_cutoff`` (acknowledged): out, each with whether it
        is acknowledged."""
        left: list[tuple[Left, bool]] = []
        if not self.window.may_hold_older(max(cutoff, ttl_cutoff)):
            return left
        while (oldest := self.window.oldest()) is not None:
            published, seq = oldest
            if published > cutoff and published > ttl_cutoff:
                break
            gone = self.remove(seq, now)
            if gone is not None:
                left.append((gone, published > cutoff))
        return left

    # ------------------------------------------------------------ reads

    def unacked_before(self, seq: int) -> bool:
        """Exactly-once ordering: is an earlier message of leased ``seq``'s key unacked?"""
        return self._ordered and self._keys.unacked_before(seq)

    def generation(self, seq: int) -> int | None:
        """The generation of waiting ``seq``'s last delivery (0: none), None if it does
        not wait in memory."""
        entry = self.window.entries.get(seq)
        return entry.generation if entry is not None else self.window.returned_generation(seq)

    def body(self, seq: int) -> tuple[StoredMessage | None, int]:
        """The body and failed attempts of waiting ``seq`` (a store read if returned)."""
        entry = self.window.entries.get(seq)
        if entry is not None:
            return entry.message, entry.failed_attempts
        rows = self._storage.rows([seq])
        return (rows[0].message, rows[0].failed_attempts) if rows else (None, 0)

    # ------------------------------------------------------------ restart

    def restore(self, rows: int, size: int, leased_keys: list[tuple[int, str]]) -> None:
        """After a restart: ``rows`` waiting messages of ``size`` bytes, all cold; the
        ordering keys of the leases the store kept (seq order)."""
        self.clear()
        self.window.restore(rows, size)
        if self._ordered:
            for seq, key in leased_keys:
                if key:
                    self._keys.restore_lease(seq, key)
