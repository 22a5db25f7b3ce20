"""A lease's life on one subscription: delivered, extended, and ended by a nack or its
deadline (an ack ends it too: ``settlement.py``).

* **Deliver**: the next scheduled messages (``schedule.Schedule``) move from the
  window to the lease table (``lease_table.LeaseTable``) under a new generation — a new
  ack id — and a deadline, within the stream's flow control and the request's byte
  budget. The window is refilled from the store when it runs dry. A lease holds no body:
  a store that keeps every body gives it back at the redelivery, and with ``MemoryStore``
  (which keeps none) the body waits in ``bodies`` until the lease ends.
* **Extend** (ModifyAckDeadline): the lease moves to its new deadline.
* **End** (a nack, or the deadline passing): a failed attempt. The message waits again,
  after the retry policy's backoff, and with ordering keys every later delivered message
  of its key goes back with it, so they are delivered again after it, in order
  (docs/protocol.md#ordering-keys). Then, instead of waiting for redelivery, it may leave:
  to the dead-letter topic when this failure used up its delivery attempts (``forward``
  publishes it there and it is settled here as if acked; if the dead-letter topic is gone
  the message stays and every later failure tries again), or for good when it outlived
  the retention while it was leased.

Every lease change is handed to a store that bounds the window (``storage.lease``,
``storage.end_lease``), so an ack id resolves as it did after a restart; the stored leases
past their deadlines are deleted at most every ``FORGET_LEASES_INTERVAL``.

Costs: O(log n) a delivery, an extension and an end (the lease table and the heaps);
an end with ordering keys also costs one step per later message of the key it rewinds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from eoclient.server_stub.core.delivery.entries import Counters, Entry, Returned
from eoclient.server_stub.core.delivery.key_order import KeyOrder
from eoclient.server_stub.core.delivery.lease_table import Lease, LeaseTable
from eoclient.server_stub.core.delivery.retention import Retention
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.delivery.schedule import Schedule
from eoclient.server_stub.core.delivery.settlement import Settlement
from eoclient.server_stub.core.delivery.stream_flow import OpenStreams, StreamFlow
from eoclient.server_stub.core.delivery.window import Backlog
from eoclient.server_stub.core.model import Delivery, StoredMessage
from eoclient.server_stub.core.store import StoredLease, SubscriptionStorage


class LeaseLifecycle:
    # Stored leases past their deadlines are deleted from the store at most this often
    # (one range delete a subscription).
    FORGET_LEASES_INTERVAL = 60.0

    def __init__(
        self,
        window: Backlog,
        leases: LeaseTable,
        keys: KeyOrder,
        schedule: Schedule,
        settlement: Settlement,
        retention: Retention,
        streams: OpenStreams,
        bodies: dict[int, StoredMessage] | None,
        *,
        rules: DeliveryRules,
        storage: SubscriptionStorage,
        counters: Counters,
        ordered: bool,
    ) -> None:
        self._window = window
        self._leases = leases
        self._keys = keys
        self._schedule = schedule
        self._settlement = settlement
        self._retention = retention
        self._streams = streams
        # Bodies of leased messages, when the store keeps none (it does not bound the
        # window): a nack or an expiry puts the message back in the window with it.
        self._bodies = bodies
        self._rules = rules
        self._storage = storage
        self._counters = counters
        self._ordered = ordered
        self._durable = storage.window is not None  # the store keeps every lease
        self._stored_until = -math.inf  # the latest deadline of a lease handed to the store
        self._next_forget = -math.inf

    # ------------------------------------------------------------- delivery

    def deliver(
        self,
        now: float,
        max_messages: int,
        deadline: float,
        stream: StreamFlow | None,
        uid: str,
        max_bytes: int | None,
    ) -> list[Delivery]:
        """Lease up to ``max_messages`` messages until ``deadline`` (fewer if the stream's
        flow control says so), with ack ids under ``uid``.

        ``max_bytes`` caps the sum of message sizes, except that the first message is
        always delivered whatever its size (else it could never be).
        """
        schedule = self._schedule
        deliveries: list[Delivery] = []
        total_bytes = 0
        while len(deliveries) < max_messages:
            if schedule.exhausted():
                if not self._retention.refill(now, max_messages - len(deliveries)):
                    break
                continue
            if stream is not None and not stream.has_room():
                break
            entry = schedule.pop(now)
            if entry is None:
                continue
            message = entry.message
            if self._rules.past_retention(message.publish_time, now):
                # Leased past its retention, then nacked or expired along with an
                # earlier message of its key: the retention walk did not see it leased.
                self._settlement.discard(entry.seq, now)
                continue
            if max_bytes is not None and deliveries and total_bytes + message.size > max_bytes:
                schedule.put_back(entry.seq)
                break
            total_bytes += message.size
            deliveries.append(self._lease(entry, deadline, stream, uid, now))
        if deliveries and self._durable and deadline > self._stored_until:
            self._stored_until = deadline
        return deliveries

    def _lease(
        self, entry: Entry, deadline: float, stream: StreamFlow | None, uid: str, now: float
    ) -> Delivery:
        """Move ``entry`` from the window to the lease table."""
        seq, message = entry.seq, entry.message
        self._window.take(seq)
        generation = entry.generation + 1
        self._leases.add(
            seq,
            generation,
            deadline,
            message.size,
            entry.failed_attempts,
            stream.stream_id if stream is not None else 0,
            message.publish_time,
        )
        if self._bodies is not None:
            self._bodies[seq] = message
        else:
            self._storage.lease(seq, generation, deadline)
        if stream is not None:
            stream.outstanding_messages += 1
            stream.outstanding_bytes += message.size
        self._counters.delivered += 1
        key = message.ordering_key if self._ordered else ""
        if key:
            self._schedule.schedule(self._keys.delivered(seq, key), now)
        attempt = entry.failed_attempts + 1 if self._rules.count_attempts else 0
        # The ack id's format: docs/protocol.md#ack-ids-and-generations (ack_ids.py).
        return Delivery(f"{uid}-{seq}-{generation}", message, attempt)

    # ------------------------------------------------------------ extension

    def extend(self, seq: int, generation: int, deadline: float) -> None:
        """ModifyAckDeadline with seconds > 0: the lease of ``seq`` lasts until ``deadline``."""
        self._counters.modacked += 1
        if self._leases.set_deadline(seq, deadline) and self._durable:
            self._storage.lease(seq, generation, deadline)
            if deadline > self._stored_until:
                self._stored_until = deadline

    # ----------------------------------------------------------------- end

    def nack(self, seq: int, now: float) -> None:
        self._counters.nacked += 1
        lease = self._leases.remove(seq)
        if lease is not None:
            self._end(lease, now, now)

    def expire(self, now: float) -> None:
        """End every lease whose deadline is at or before ``now``."""
        # One at a time, by deadline: a rewind of an ordering key ends its later leases
        # without a failed attempt, and those are then no longer due here.
        for lease in self._leases.expire(now):
            self._counters.expired += 1
            # The lease ended at its deadline, not when this (lazy) call noticed it:
            # the retry backoff counts from the deadline, else a late tick or pull
            # would push the redelivery back by however long nobody looked.
            self._end(lease, lease.deadline, now)

    def _end(self, lease: Lease, ended_at: float, now: float) -> None:
        """Nack or expiry of ``lease`` (out of the table already): a failed attempt. The
        message waits again, with its key's later deliveries; then it may leave instead,
        to the dead-letter topic or for good (past the retention)."""
        seq = lease.seq
        failed_attempts = lease.failed_attempts + 1
        self._released(lease, failed_attempts)
        ready_at = ended_at + self._rules.backoff(failed_attempts)
        followers: list[Lease] = []
        for later in self._keys.rewind(seq) if self._ordered else ():
            follower = self._leases.remove(later)
            if follower is not None:
                # Sent back with it, not failed: their attempts stay as they were.
                self._released(follower, follower.failed_attempts)
                followers.append(follower)
        self._wait_again(lease, ready_at, failed_attempts, now)
        for follower in followers:
            self._wait_again(follower, ready_at, follower.failed_attempts, now)
        if self._rules.attempts_used_up(failed_attempts) and self._forward(seq, now):
            return
        if self._rules.past_retention(lease.publish_time, now):
            self._settlement.discard(seq, now)

    def _released(self, lease: Lease, failed_attempts: int) -> None:
        """``lease`` left the table: its stream's flow control and the store learn it."""
        self._streams.release(lease.stream_id, lease.size)
        if self._durable:
            self._storage.end_lease(lease.seq, lease.generation, lease.deadline, failed_attempts)

    def _wait_again(self, lease: Lease, ready_at: float, failed_attempts: int, now: float) -> None:
        if self._bodies is not None:
            entry = Entry(
                lease.seq,
                self._bodies.pop(lease.seq),
                ready_at=ready_at,
                generation=lease.generation,
                failed_attempts=failed_attempts,
            )
            self._schedule.admit(entry, returned=True, now=now)
        else:
            self._window.give_back(
                lease.seq,
                Returned(
                    ready_at, lease.generation, failed_attempts, lease.size, lease.publish_time
                ),
            )

    def _forward(self, seq: int, now: float) -> bool:
        """Divert the would-be next delivery to the dead-letter topic (True if done)."""
        forward = self._rules.forward
        if forward is None:
            return False
        message, failed_attempts = self._waiting_body(seq)
        if message is None or not forward(message, failed_attempts):
            return False  # the dead-letter topic is gone: keep redelivering
        self._counters.dead_lettered += 1
        self._settlement.remove(seq, acked=True, now=now)  # acked on the source subscription
        return True

    def _waiting_body(self, seq: int) -> tuple[StoredMessage | None, int]:
        """The body and failed attempts of a waiting message (a store read if returned)."""
        entry = self._window.entries.get(seq)
        if entry is not None:
            return entry.message, entry.failed_attempts
        rows = self._storage.rows([seq])
        return (rows[0].message, rows[0].failed_attempts) if rows else (None, 0)

    # ------------------------------------------------------- stored leases

    def restore(self, kept: Sequence[StoredLease], latest_deadline: float) -> int:
        """After a restart: the leases the store kept (seq order), as they were; the
        bytes they hold. ``latest_deadline``: of those and of the acks it kept."""
        leased_bytes = 0
        for lease in kept:
            self._leases.add(
                lease.seq,
                lease.generation,
                lease.deadline,
                lease.size,
                lease.failed_attempts,
                0,
                lease.publish_time,
            )
            leased_bytes += lease.size
            if self._ordered and lease.ordering_key:
                self._keys.restore_lease(lease.seq, lease.ordering_key)
        self._stored_until = latest_deadline
        return leased_bytes

    def forget_stored(self, now: float) -> None:
        """Let the store forget leases whose deadlines passed (one range delete)."""
        if self._stored_until > -math.inf and now >= self._next_forget:
            self._storage.forget_leases(now)
            self._next_forget = now + self.FORGET_LEASES_INTERVAL
            if now >= self._stored_until:
                self._stored_until = -math.inf

    def next_forget(self) -> float | None:
        """When ``forget_stored`` has work, while stored leases remain: on a subscription
        nobody pulls or acks any more too."""
        return self._next_forget if self._stored_until > -math.inf else None
