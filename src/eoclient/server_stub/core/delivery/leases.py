"""The leases of one subscription: the table, the streams whose flow control counts them,
the bodies the core keeps for them, and what the store keeps of them.

A lease holds no body: a store that keeps every body (one that bounds the window) gives
it back at the redelivery, and is handed every lease change (``storage.lease``,
``storage.end_lease``) so that an ack id resolves after a restart as it did before;
with ``MemoryStore`` (which keeps nothing) the body waits here until the lease ends.
The stored leases past their deadlines are deleted at most every
``FORGET_LEASES_INTERVAL``.

Readers use ``table`` (``lease_table.LeaseTable``: lookups, the oldest lease, counts)
and ``streams`` (``stream_flow.OpenStreams``: the streams open on the subscription, opened
and closed there); every change of a lease is a method here, so that the table, the
streams' counts, the bodies and the store always agree. What a lease's end means — wait
again, the dead-letter topic, settled — is the caller's (``engine.SubscriptionDelivery``).

Costs: O(log n) a lease in or out (the table), O(1) for the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from eoclient.server_stub.core.delivery.entries import (
    Entry,
    failed_attempts_of,
    generation_of,
    message_of,
    publish_time_of,
    seq_of,
    size_of,
)
from eoclient.server_stub.core.delivery.lease_run import EndedRun, Settled
from eoclient.server_stub.core.delivery.lease_table import Lease, LeaseTable, NewLeases
from eoclient.server_stub.core.delivery.stream_flow import OpenStreams, StreamFlow
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import SeqMessage, StoredLease, SubscriptionStorage

# A lease's end: the lease as it was, and its body if the core kept it.
Ended = tuple[Lease, StoredMessage | None]


class Leases:
    # Stored leases past their deadlines are deleted from the store at most this often
    # (one range delete a subscription).
    FORGET_LEASES_INTERVAL = 60.0

    def __init__(self, storage: SubscriptionStorage) -> None:
        self.table = LeaseTable()
        self.streams = OpenStreams()
        self._storage = storage
        self._durable = storage.window is not None  # the store keeps every lease
        # The waiting entries of leased messages (with their bodies), when the store keeps
        # none: a nack or an expiry puts the message back in the window with its body, a
        # request's nacks the entries themselves (``end_many``: no new object a message,
        # and none for the garbage collector to find surviving).
        self._held: dict[int, Entry] = {}
        self._stored_until = -math.inf  # the latest deadline of a lease handed to the store
        self._next_forget = -math.inf

    def __repr__(self) -> str:
        return f"<Leases {self.table!r} [{len(self.streams)} streams]>"

    def clear(self) -> None:
        """Every lease gone (a seek): the streams stay open, with nothing out."""
        self.table.clear()
        self._held.clear()
        self.streams.release_all()

    # ------------------------------------------------------------ in

    def lease(self, entry: Entry, deadline: float, stream: StreamFlow | None) -> int:
        """Waiting ``entry`` is delivered until ``deadline`` (on ``stream``, whose flow
        control counts it): its new generation."""
        seq, message = entry.seq, entry.message
        generation = entry.generation + 1
        self.table.add(
            seq,
            generation,
            deadline,
            message.size,
            entry.failed_attempts,
            stream.stream_id if stream is not None else 0,
            message.publish_time,
        )
        if self._durable:
            self._storage.lease(seq, generation, deadline)
            if deadline > self._stored_until:
                self._stored_until = deadline
        else:
            self._held[seq] = entry
        if stream is not None:
            stream.outstanding_messages += 1
            stream.outstanding_bytes += message.size
        return generation

    def lease_run(
        self, taken: list[Entry], deadline: float, stream: StreamFlow | None
    ) -> list[int]:
        """``lease`` of one Pull's waiting messages at once (ascending seqs:
        ``Schedule.take_run``'s) until ``deadline``, on ``stream`` (its flow control counts
        them) or none: their generations."""
        seqs = list(map(seq_of, taken))
        generations = [generation + 1 for generation in map(generation_of, taken)]
        messages = list(map(message_of, taken))
        sizes = list(map(size_of, messages))
        published = list(map(publish_time_of, messages))
        failed = list(map(failed_attempts_of, taken))
        leases = NewLeases(seqs, generations, sizes, failed, published)
        if stream is None:
            self.table.add_many(deadline, leases)
        else:
            self.table.add_many(deadline, leases, stream.stream_id)
            stream.outstanding_messages += len(seqs)
            stream.outstanding_bytes += sum(sizes)
        if self._durable:
            self._storage.lease_many(seqs, generations, deadline)
            if deadline > self._stored_until:
                self._stored_until = deadline
        else:
            self._held.update(zip(seqs, taken, strict=True))
        return generations

    def extend(self, seq: int, generation: int, deadline: float) -> None:
        """ModifyAckDeadline with seconds > 0: the lease of ``seq`` lasts until ``deadline``."""
        if self.table.set_deadline(seq, deadline) and self._durable:
            self._storage.lease(seq, generation, deadline)
            if deadline > self._stored_until:
                self._stored_until = deadline

    def extend_many(
        self, seqs: Sequence[int], generations: Sequence[int], now: float, deadline: float
    ) -> tuple[list[int], int]:
        """``extend`` of every lease a request's modack ids name that is live at ``now``
        (``LeaseTable.extend_many``): the positions of the ids it left alone, and how many
        leases moved."""
        extended = self.table.extend_many(seqs, generations, now, deadline)
        if self._durable and extended.seqs:
            # The store takes a run of leases in ascending seqs; modack ids come in the
            # order a client lists them.
            moved = sorted(zip(extended.seqs, extended.generations, strict=True))
            self._storage.lease_many([seq for seq, _ in moved], [g for _, g in moved], deadline)
            if deadline > self._stored_until:
                self._stored_until = deadline
        return extended.misses, len(extended.seqs)

    # ------------------------------------------------------------ out

    def settle(self, seq: int) -> tuple[float, StoredMessage | None] | None:
        """``seq``'s lease ends because its message leaves for good (acked, dropped): its
        publish time and the body the core kept; None if it has no lease."""
        lease = self.table.remove(seq)
        if lease is None:
            return None
        if lease.stream_id:
            self.streams.release(lease.stream_id, lease.size)
        entry = self._held.pop(seq, None)
        return lease.publish_time, entry.message if entry is not None else None

    def settle_many(
        self, seqs: Sequence[int], generations: Sequence[int], now: float, *, exact: bool
    ) -> tuple[Settled, list[Entry | None]]:
        """``settle`` of every lease a request's ack ids name (``LeaseTable.settle_many``:
        what it settled, and the ids it left alone); with the entries (their bodies) the
        core kept of those settled (None each: the store keeps them)."""
        settled = self.table.settle_many(seqs, generations, now, exact=exact)
        for stream_id, size in settled.streamed:
            self.streams.release(stream_id, size)
        if self._durable:
            return settled, [None] * len(settled.seqs)
        take = self._held.pop
        return settled, [take(seq, None) for seq in settled.seqs]

    def end(self, seq: int, *, failed: bool) -> Ended | None:
        """``seq``'s lease ends without an ack — a nack (``failed``: one more failed
        attempt) or an ordering key's rewind (not failed); None if it has none."""
        lease = self.table.remove(seq)
        if lease is None:
            return None
        return lease, self._released(lease, lease.failed_attempts + failed)

    def end_many(
        self, seqs: Sequence[int], generations: Sequence[int], now: float
    ) -> tuple[EndedRun, list[Entry] | None]:
        """``end(..., failed=True)`` of every lease a request's nack ids name that is live
        at ``now`` (``LeaseTable.end_many``: what it ended, and the ids it left alone),
        with the entries (their bodies) the core kept of those ended, to wait again as they
        are (None: the store keeps the bodies). The
        store is handed each end as ``end`` hands it, in the ids' order, in one call."""
        ended = self.table.end_many(seqs, generations, now)
        if any(ended.streams):
            release = self.streams.release
            for stream_id, size in zip(ended.streams, ended.sizes, strict=True):
                release(stream_id, size)
        if not self._durable:
            take = self._held.pop
            return ended, [take(seq) for seq in ended.seqs]
        failed = [attempts + 1 for attempts in ended.failed_attempts]
        self._storage.end_leases(ended.seqs, ended.generations, ended.deadlines, failed)
        return ended, None

    def expire(self, now: float) -> Iterator[Ended]:
        """End, one at a time, every lease whose deadline is at or before ``now`` (a
        failed attempt each), by deadline. Ending others between two of them (a rewind)
        is allowed: those are not yielded. Consume it whole."""
        for lease in self.table.expire(now):
            yield lease, self._released(lease, lease.failed_attempts + 1)

    def _released(self, lease: Lease, failed_attempts: int) -> StoredMessage | None:
        """``lease`` left the table: its stream's flow control and the store learn it;
        the body the core kept for it."""
        self.streams.release(lease.stream_id, lease.size)
        if self._durable:
            self._storage.end_lease(lease.seq, lease.generation, lease.deadline, failed_attempts)
            return None
        return self._held.pop(lease.seq).message

    # ------------------------------------------------------------ reads

    def bodies(self) -> list[SeqMessage]:
        """(seq, message) of every leased message whose body the core keeps."""
        return [(seq, entry.message) for seq, entry in self._held.items()]

    def next_forget(self) -> float | None:
        """When ``forget_stored`` has work, while stored leases remain: on a subscription
        nobody pulls or acks any more too."""
        return self._next_forget if self._stored_until > -math.inf else None

    # ------------------------------------------------------------ stored leases

    def forget_stored(self, now: float) -> None:
        """Let the store forget leases whose deadlines passed (one range delete)."""
        if self._stored_until > -math.inf and now >= self._next_forget:
            self._storage.forget_leases(now)
            self._next_forget = now + self.FORGET_LEASES_INTERVAL
            if now >= self._stored_until:
                self._stored_until = -math.inf

    def restore(self, kept: Sequence[StoredLease], latest_deadline: float) -> int:
        """After a restart: the leases the store kept (seq order), as they were; the
        bytes they hold. ``latest_deadline``: of those and of the acks it kept."""
        leased_bytes = 0
        for lease in kept:
            self.table.add(
                lease.seq,
                lease.generation,
                lease.deadline,
                lease.size,
                lease.failed_attempts,
                0,
                lease.publish_time,
            )
            leased_bytes += lease.size
        self._stored_until = latest_deadline
        return leased_bytes
