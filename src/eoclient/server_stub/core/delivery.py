"""Per-subscription delivery state: what is waiting, what is leased, what each ack id means.

One ``SubscriptionDelivery`` per subscription. Every unacknowledged message is either

* **waiting** (``delivery_window.Backlog``): in the window with its body, scheduled at
  ``ready_at`` (publish time, its delayed-delivery time, or after a retry backoff); or
  only in the store — a cold row past the window's cursor, or returned from a lease;
* **leased** (``lease_table.LeaseTable``): delivered to a client until a deadline under
  one ack id. A lease holds the ack id's parts and what its end needs, not the body:
  leases do not count against the window, so a subscription may hold as many as the
  lease limit allows whatever the window's size. A nack or an expiry makes the message
  waiting again; a store that keeps every body gives it back at its redelivery, and with
  ``MemoryStore`` (which keeps none) the core keeps leased bodies itself (``_bodies``).

An acknowledged message is forgotten, here and in the store. Costs, with n messages held:

* ``_ready``: heap of window seqs deliverable now (oldest published first);
* ``_delayed``: heap of (ready_at, seq) not deliverable yet (retry backoff, delay);
* the lease table: O(log n) a lookup, amortised O(1) to add or end a lease.

Heap entries are never removed in place; a stale one (the message left the window or was
rescheduled) is recognised when it surfaces and skipped, so delivery, ack and expiry
each cost O(log n).

Ack ids (docs/protocol.md#ack-ids-and-generations) are
``{subscription uid}-{seq}-{generation}``: a new generation per delivery, so only the
latest delivery's id resolves to the message. The uid differs for every subscription ever
created and every seek, so an id from another subscription (or from a deleted and
recreated one) never resolves here. A store that keeps state across restarts keeps the
uid and each lease (generation, deadline) until its deadline, so an id issued before a
restart resolves as it did, and an exactly-once ack of a lease whose message has gone
since — the ack was committed, its answer lost with the process — answers SUCCESS again
when retried (``AckTarget.acked``). Within one run a repeated ack is INVALID_ACK_ID, as
Google's emulator answers (docs/protocol.md#ack-ids-across-a-restart).

Ordering keys (when the subscription enables ordering): ``key_order.KeyOrder`` says which
message of each key may go next; only that one is ever in ``_ready``/``_delayed``. When a
delivered message goes back to waiting (nack, expiry), every later delivered message of
its key goes back too, so they are delivered again after it, in order
(docs/protocol.md#ordering-keys).

Policies applied here (the broker sets them from the subscription's config):

* Dead letters: when a nack or an expiry brings a message's failed attempts to
  ``max_delivery_attempts``, the would-be next delivery is diverted: ``forward`` (the
  broker) publishes it to the dead-letter topic and the message is settled here as if
  acked. If ``forward`` cannot (the dead-letter topic was deleted), the message stays
  and is redelivered; every later failure tries again.
* Retention: a message older than ``retention`` (since its publish time) is gone. A
  waiting message is dropped when its time is up; a leased one stays leased (its ack
  still succeeds) and is dropped at its next nack or expiry instead of waiting again.
* Message TTL (``ttl``): a message older than it is acknowledged, leased or not (its ack
  ids stop resolving).
* Retained acknowledged messages (``retain_acked``): handed to the store with their
  publish time and kept there until retention drops them, for seek to replay.
* Skip by id, backlog-quota eviction and the retention cursor's size limit:
  ``delivery_policies.py``, through ``settle_message`` and ``drop_oldest``.

Every change the store must keep (settled, leases, failed attempts, retained, reset) is
handed to ``storage`` as it happens.

Seek (``reset``) rebuilds the whole state from the messages the seek leaves unacked and
the ones it leaves acked, under a new uid: every ack id issued before it stops resolving
(PERMANENT_FAILURE_INVALID_ACK_ID with exactly-once; ignored otherwise, its uid still
counts as well formed) and every message made unacked is delivered again.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from eoclient.server_stub.core import delivery_policies
from eoclient.server_stub.core.ack_ids import AckIdParts
from eoclient.server_stub.core.backlog_entry import Counters, Entry, Returned
from eoclient.server_stub.core.delivery_window import Backlog, Loaded
from eoclient.server_stub.core.key_order import KeyOrder
from eoclient.server_stub.core.lease_table import Lease, LeaseTable
from eoclient.server_stub.core.model import Delivery, RetryPolicy, StoredMessage
from eoclient.server_stub.core.store import (
    Acked,
    SeqMessage,
    StoredSubscription,
    SubscriptionStorage,
)
from eoclient.server_stub.core.stream_flow import StreamFlow

# ``forward(message, delivery_count) -> bool``: publish to the dead-letter topic;
# False when that is impossible now (the topic is gone) and the message must stay.
Forwarder = Callable[[StoredMessage, int], bool]


class AckTarget:
    """The message an ack id names here (``resolve_parts``, ``lookup_parts``). A slots
    class, not a NamedTuple: one is made for every id of every ack, and its constructor
    is the cheaper."""

    __slots__ = ("acked", "generation", "seq")

    def __init__(self, seq: int, generation: int, acked: bool = False) -> None:
        self.seq = seq
        self.generation = generation
        # Its lease was stored and its message left the backlog before a restart (acked,
        # the answer maybe lost with the process): a retried ack answers SUCCESS and
        # changes nothing.
        self.acked = acked

    def __repr__(self) -> str:
        return f"AckTarget({self.seq}, {self.generation}, acked={self.acked})"

    @property
    def message_id(self) -> str:
        return str(self.seq)  # the server numbers its messages by seq (dispatch.py)


class SubscriptionDelivery:
    """Delivery bookkeeping of one subscription. Pure: every method takes ``now``."""

    # Stored leases past their deadlines are deleted from the store at most this often
    # (one range delete a subscription).
    FORGET_LEASES_INTERVAL = 60.0

    def __init__(
        self,
        uid: str,
        storage: SubscriptionStorage,
        *,
        ordered: bool,
        exactly_once: bool,
        retry_policy: RetryPolicy | None,
        count_attempts: bool,
        max_delivery_attempts: int | None = None,
        forward: Forwarder | None = None,
        retention: float = float("inf"),
        retain_acked: bool = False,
    ) -> None:
        self.uid = uid
        self.ordered = ordered
        self.exactly_once = exactly_once
        self.retry_policy = retry_policy
        self.count_attempts = count_attempts
        self.max_delivery_attempts = max_delivery_attempts  # None: no dead lettering
        self.forward = forward
        self.retention = retention  # seconds since publish; inf: kept until acked
        self.retain_acked = retain_acked
        self.ttl: float | None = None  # message TTL (policies.py): auto-ack when older
        self.storage = storage
        self.counters = Counters()
        self.waiting = Backlog(storage)
        self.leases = LeaseTable()
        # Bodies of leased messages, when the store keeps none (it does not bound the
        # window): a nack or an expiry puts the message back in the window with it.
        self._bodies: dict[int, StoredMessage] | None = {} if storage.window is None else None
        # A store that bounds the window keeps every backlog row and lease; one that
        # does not (MemoryStore) keeps none: it is handed only what it
        # keeps (retained acknowledged messages).
        self._durable = storage.window is not None
        self._ready: list[int] = []
        self._delayed: list[tuple[float, int]] = []
        self.keys = KeyOrder(self)  # ordering keys (unused when ordering is off)
        self._streams: dict[int, StreamFlow] = {}
        self._former_uids: set[str] = set()  # before each seek: ids still well formed
        # Leases whose messages left the backlog before a restart (acked, its answer
        # maybe lost with the process): seq -> (generation, deadline).
        self._acked_before: dict[int, tuple[int, float]] = {}
        self._stored_until = -math.inf  # the latest deadline of a lease handed to the store
        self._next_forget = -math.inf

    def __repr__(self) -> str:
        return (
            f"<SubscriptionDelivery {self.uid} [{self.waiting!r}, {len(self.leases)} leased | "
            f"{len(self._streams)} streams]>"
        )

    # The latest ``now`` any public method was called with: scheduling uses it to
    # choose between the ready and the delayed heap without threading ``now`` through.
    _now_hint: float = float("-inf")

    # ------------------------------------------------------------------ intake

    def add(self, seq: int, message: StoredMessage, ready_at: float, now: float) -> None:
        """A message published to the topic (and matching the subscription) arrives.

        It joins the window if the window has room and nothing is cold (seq order), else
        it stays a cold row of the store (which the publish gave it).
        """
        self._now_hint = now
        if self.waiting.accepts():
            self._admit(Entry(seq, message, ready_at=ready_at), returned=False)
        else:
            self.waiting.add_cold(message.size)

    def _admit(self, entry: Entry, *, returned: bool) -> None:
        """Into the window: scheduled now (or at its delayed-delivery time), or behind the
        earlier messages of its key. ``returned``: it was delivered before, so it has its
        place in its key's sequence already."""
        entry.ready_at = max(entry.ready_at, entry.message.deliver_at)
        self.waiting.add(entry)
        key = entry.message.ordering_key if self.ordered else ""
        if not key:
            self._schedule(entry)
            return
        entry.key_position, head = self.keys.admit(entry.seq, key, returned=returned)
        if head:
            self._schedule(entry)

    def _schedule(self, entry: Entry) -> None:
        if entry.ready_at > self._now_hint:
            heapq.heappush(self._delayed, (entry.ready_at, entry.seq))
        else:
            heapq.heappush(self._ready, entry.seq)

    # ---------------------------------------------------------------- time

    def advance(self, now: float) -> None:
        """Expire leases whose deadline has passed, release delayed messages, apply the
        retention and the TTL."""
        self._now_hint = now
        # One at a time, by deadline: a rewind of an ordering key ends its later leases
        # without a failed attempt, and those are then no longer due here.
        for lease in self.leases.expire(now):
            self.counters.expired += 1
            # The lease ended at its deadline, not when this (lazy) call noticed it:
            # the retry backoff counts from the deadline, else a late tick or pull
            # would push the redelivery back by however long nobody looked.
            self._lease_ended(lease, lease.deadline, failed=True)
        entries = self.waiting.entries
        while self._delayed and self._delayed[0][0] <= now:
            ready_at, seq = heapq.heappop(self._delayed)
            entry = entries.get(seq)
            if entry is not None and entry.ready_at == ready_at:
                heapq.heappush(self._ready, seq)
        self._enforce_retention(now)
        self._forget_old_leases(now)

    def _enforce_retention(self, now: float) -> None:
        """Drop what outlived the retention; acknowledge what outlived the message TTL
        (leased or not: its ack ids stop resolving)."""
        cutoff = now - self.retention
        ttl_cutoff = now - self.ttl if self.ttl is not None else -math.inf
        while True:
            newer_found = False
            while (oldest := self.waiting.oldest()) is not None:
                published, seq = oldest
                if published <= cutoff:
                    self.counters.discarded += 1
                    self._remove(seq, acked=False)
                elif published <= ttl_cutoff:
                    self.counters.expired_by_ttl += 1
                    self._remove(seq, acked=True)
                else:
                    newer_found = True
                    break
            while (lease := self.leases.oldest()) is not None and lease.publish_time <= ttl_cutoff:
                self.counters.expired_by_ttl += 1
                self._remove(lease.seq, acked=True)
            # Nothing newer was held: the oldest cold rows may be due too (a refill
            # drops or acknowledges those, and loads the rest).
            if newer_found or not self.waiting.cold() or not self._refill(now, 0):
                break
        if self.retain_acked:
            self.storage.prune_retained(cutoff)

    def _past_retention(self, publish_time: float) -> bool:
        return publish_time <= self._now_hint - self.retention

    def next_wakeup(self) -> float | None:
        """The earliest time at which ``advance`` would change something (may be stale-early)."""
        candidates = []
        deadline = self.leases.next_deadline()
        if deadline is not None:
            candidates.append(deadline)
        if self._delayed:
            candidates.append(self._delayed[0][0])
        # The oldest waiting message's publish time. With nothing waiting in memory and
        # cold rows (after a restart or a seek) it is the first cold row's, read from the
        # store: otherwise only a Pull would load them, and a subscription nobody pulls —
        # the topic's retention cursor above all — would keep expired rows (and the
        # topic's garbage behind them) for ever. Only then: ``advance`` can always load
        # (and drop) that row, so a wake-up in the past cannot repeat.
        oldest = self.waiting.oldest()
        head = oldest[0] if oldest is not None else None
        if head is None and self.waiting.cold():
            row = self.waiting.first_cold_row()
            head = row.message.publish_time if row is not None else None
        if head is not None and self.retention != math.inf:
            candidates.append(head + self.retention)
        if self.ttl is not None:
            lease = self.leases.oldest()
            if lease is not None:
                head = lease.publish_time if head is None else min(head, lease.publish_time)
            if head is not None:
                candidates.append(head + self.ttl)
        retained = self.storage.oldest_retained() if self.retain_acked else None
        if retained is not None and self.retention != math.inf:
            candidates.append(retained + self.retention)
        if self._stored_until > -math.inf:
            # Stored leases to forget once their deadlines pass, on a subscription nobody
            # pulls or acks any more too (advance forgets at most every interval).
            candidates.append(self._next_forget)
        return min(candidates) if candidates else None

    def _backoff(self, failed_attempts: int) -> float:
        policy = self.retry_policy
        if policy is None:
            return 0.0  # no retry policy: redeliver as soon as possible
        # Exponential between the bounds: min * 2^(n-1), capped at max. The service
        # documents "exponential backoff" without a formula (docs/protocol.md#retry-backoff).
        exponent = max(failed_attempts - 1, 0)
        return float(min(policy.maximum_backoff, policy.minimum_backoff * (2 ** min(exponent, 32))))

    def _forget_old_leases(self, now: float) -> None:
        """Let the store forget leases whose deadlines passed (and this state the acks
        it restored)."""
        if self._acked_before and now >= max(d for _, d in self._acked_before.values()):
            self._acked_before.clear()
        if self._stored_until > -math.inf and now >= self._next_forget:
            self.storage.forget_leases(now)
            self._next_forget = now + self.FORGET_LEASES_INTERVAL
            if now >= self._stored_until:
                self._stored_until = -math.inf

    # ----------------------------------------------------- a lease's end

    def _lease_ended(self, lease: Lease, now: float, *, failed: bool) -> None:
        """Nack or expiry of ``lease`` (out of the table already): the message waits
        again, with its key's later deliveries.

        Then, instead of waiting for redelivery, the message may leave: to the
        dead-letter topic when this failure used up its delivery attempts, or for good
        when it outlived the retention while it was leased.
        """
        self._release_stream(lease)
        seq = lease.seq
        failed_attempts = lease.failed_attempts + 1 if failed else lease.failed_attempts
        if self._durable:
            self.storage.end_lease(seq, lease.generation, lease.deadline, failed_attempts)
        ready_at = now + self._backoff(failed_attempts)
        followers: list[Lease] = []
        for later in self.keys.rewind(seq) if self.ordered else ():
            follower = self.leases.remove(later)
            if follower is not None:
                self._release_stream(follower)
                if self._durable:
                    self.storage.end_lease(
                        follower.seq,
                        follower.generation,
                        follower.deadline,
                        follower.failed_attempts,
                    )
                followers.append(follower)
        self._wait_again(lease, ready_at, failed_attempts)
        for follower in followers:
            self._wait_again(follower, ready_at, follower.failed_attempts)
        if failed and self._attempts_used_up(failed_attempts) and self._forward(seq):
            return
        if self._past_retention(lease.publish_time):
            self.counters.discarded += 1
            self._remove(seq, acked=False)

    def _wait_again(self, lease: Lease, ready_at: float, failed_attempts: int) -> None:
        if self._bodies is not None:
            entry = Entry(
                lease.seq,
                self._bodies.pop(lease.seq),
                ready_at=ready_at,
                generation=lease.generation,
                failed_attempts=failed_attempts,
            )
            self._admit(entry, returned=True)
        else:
            self.waiting.give_back(
                lease.seq,
                Returned(
                    ready_at, lease.generation, failed_attempts, lease.size, lease.publish_time
                ),
            )

    def _attempts_used_up(self, failed_attempts: int) -> bool:
        limit = self.max_delivery_attempts
        return limit is not None and failed_attempts >= limit

    def _forward(self, seq: int) -> bool:
        """Divert the would-be next delivery to the dead-letter topic (True if done)."""
        if self.forward is None:
            return False
        message, failed_attempts = self._waiting_body(seq)
        if message is None or not self.forward(message, failed_attempts):
            return False  # the dead-letter topic is gone: keep redelivering
        self.counters.dead_lettered += 1
        self._remove(seq, acked=True)  # acked on the source subscription
        return True

    def _waiting_body(self, seq: int) -> tuple[StoredMessage | None, int]:
        """The body and failed attempts of a waiting message (a store read if returned)."""
        entry = self.waiting.entries.get(seq)
        if entry is not None:
            return entry.message, entry.failed_attempts
        rows = self.storage.rows([seq])
        return (rows[0].message, rows[0].failed_attempts) if rows else (None, 0)

    def _release_stream(self, lease: Lease) -> None:
        if lease.stream_id:
            stream = self._streams.get(lease.stream_id)
            if stream is not None:
                stream.outstanding_messages -= 1
                stream.outstanding_bytes -= lease.size

    # ------------------------------------------------------------- delivery

    def deliver(
        self,
        now: float,
        max_messages: int,
        ack_deadline: int,
        stream_id: int | None = None,
        *,
        max_bytes: int | None = None,
    ) -> list[Delivery]:
        """Lease up to ``max_messages`` messages (fewer if the stream's flow control says so).

        ``max_bytes`` caps the sum of message sizes, except that the first message is
        always delivered whatever its size (else it could never be).
        """
        self.advance(now)
        stream = self._streams.get(stream_id) if stream_id is not None else None
        deadline = now + ack_deadline
        deliveries: list[Delivery] = []
        total_bytes = 0
        while len(deliveries) < max_messages:
            if not self._ready:
                if not self._refill(now, max_messages - len(deliveries)):
                    break
                continue
            if stream is not None and not stream.has_room():
                break
            seq = heapq.heappop(self._ready)
            entry = self._head_ready(seq, now)
            if entry is None:
                continue
            message = entry.message
            if self._past_retention(message.publish_time):
                # Leased past its retention, then nacked or expired along with an
                # earlier message of its key: the retention walk did not see it leased.
                self.counters.discarded += 1
                self._remove(seq, acked=False)
                continue
            if max_bytes is not None and deliveries and total_bytes + message.size > max_bytes:
                heapq.heappush(self._ready, seq)  # still the next to go
                break
            total_bytes += message.size
            deliveries.append(self._lease(entry, deadline, stream))
        if deliveries and self._durable and deadline > self._stored_until:
            self._stored_until = deadline
        return deliveries

    def _lease(self, entry: Entry, deadline: float, stream: StreamFlow | None) -> Delivery:
        """Move ``entry`` from the window to the lease table."""
        seq, message = entry.seq, entry.message
        self.waiting.take(seq)
        generation = entry.generation + 1
        self.leases.add(
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
            self.storage.lease(seq, generation, deadline)
        if stream is not None:
            stream.outstanding_messages += 1
            stream.outstanding_bytes += message.size
        self.counters.delivered += 1
        key = message.ordering_key if self.ordered else ""
        if key:
            self._schedule_seq(self.keys.delivered(seq, key))
        attempt = entry.failed_attempts + 1 if self.count_attempts else 0
        return Delivery(f"{self.uid}-{seq}-{generation}", message, attempt)

    def _refill(self, now: float, want: int) -> bool:
        """Load the next cold messages into the window (seq order); False if none came.

        A loaded message past its retention is dropped and one past the TTL acknowledged
        (their turn came while they were cold); the rest wait in the window.
        """
        loaded: list[Loaded] = self.waiting.load(want, self.leases.__contains__)
        if not loaded:
            return False
        cutoff = now - self.retention
        ttl_cutoff = now - self.ttl if self.ttl is not None else -math.inf
        for item in loaded:
            entry = Entry(
                item.seq,
                item.message,
                ready_at=now if item.ready_at is None else item.ready_at,
                generation=item.generation,
                failed_attempts=item.failed_attempts,
            )
            self._admit(entry, returned=item.returned)
            published = item.message.publish_time
            if published <= cutoff:
                self.counters.discarded += 1
                self._remove(item.seq, acked=False)
            elif published <= ttl_cutoff:
                self.counters.expired_by_ttl += 1
                self._remove(item.seq, acked=True)
        return True

    def _head_ready(self, seq: int, now: float) -> Entry | None:
        """The entry a ``_ready`` seq names if it is deliverable now, else None (stale)."""
        entry = self.waiting.entries.get(seq)
        if entry is None or entry.ready_at > now:
            return None
        key = entry.message.ordering_key if self.ordered else ""
        if key and not self.keys.is_head(key, entry.key_position):
            return None  # not the head of its key (a stale entry from before a rewind)
        return entry

    def _schedule_seq(self, seq: int | None) -> None:
        if seq is not None:
            self._schedule(self.waiting.entries[seq])

    # Where a message is (key_order.Whereabouts).

    def in_window(self, seq: int) -> bool:
        return seq in self.waiting.entries

    def is_returned(self, seq: int) -> bool:
        return self.waiting.is_returned(seq)

    def held(self, seq: int) -> bool:
        """Is message ``seq`` still unacknowledged here (waiting in memory or leased)?"""
        return seq in self.waiting.entries or seq in self.leases or self.waiting.is_returned(seq)

    def ack_id(self, seq: int, generation: int) -> str:
        return f"{self.uid}-{seq}-{generation}"

    # --------------------------------------------------------- ack / modack

    def resolve_parts(self, parts: AckIdParts | None) -> AckTarget | None:
        """The lease an exactly-once ack id names while it is live (acks parse each id
        once), or an ack this id made before a restart."""
        if parts is None or parts.uid != self.uid:
            return None
        current = self.leases.current(parts.seq)
        if current is not None:
            generation, deadline = current
            if generation == parts.generation and deadline > self._now_hint:
                return AckTarget(parts.seq, generation)
            return None
        acked = self._acked_before.get(parts.seq)
        if acked is not None and acked[0] == parts.generation and acked[1] > self._now_hint:
            return AckTarget(parts.seq, parts.generation, acked=True)
        return None

    def lookup_parts(self, parts: AckIdParts | None) -> AckTarget | None:
        """The unacknowledged message an id of any of its deliveries names (without
        exactly-once an ack of an older delivery still settles the message)."""
        if parts is None or parts.uid != self.uid:
            return None
        seq = parts.seq
        lease = self.leases.get(seq)
        entry = self.waiting.entries.get(seq)
        if lease is not None:
            latest: int | None = lease.generation
        elif entry is not None:
            latest = entry.generation
        else:
            latest = self.waiting.returned_generation(seq)
        # Only ids actually issued (generations 1..latest) name the message: a forged
        # "{uid}-{seq}-0" must not settle a message that was never delivered.
        if latest is None or not 1 <= parts.generation <= latest:
            return None
        return AckTarget(seq, parts.generation)

    def wellformed_parts(self, parts: AckIdParts | None) -> bool:
        return parts is not None and (parts.uid == self.uid or parts.uid in self._former_uids)

    def first_unacked_before(self, target: AckTarget) -> bool:
        """Ordering + exactly-once: is an earlier message of the target's key unacked?"""
        return self.ordered and not target.acked and self.keys.unacked_before(target.seq)

    def ack(self, target: AckTarget) -> None:
        if target.acked:
            return  # acked by this id before a restart: SUCCESS again, nothing to do
        self.counters.acked += 1
        self._remove(target.seq, acked=True)

    def nack(self, target: AckTarget, now: float) -> None:
        self._now_hint = now
        if target.acked:
            return
        self.counters.nacked += 1
        lease = self.leases.remove(target.seq)
        if lease is not None:
            self._lease_ended(lease, now, failed=True)

    def extend(self, target: AckTarget, now: float, seconds: int) -> None:
        if target.acked:
            return
        self.counters.modacked += 1
        deadline = now + seconds
        if self.leases.set_deadline(target.seq, deadline) and self._durable:
            self.storage.lease(target.seq, target.generation, deadline)
            if deadline > self._stored_until:
                self._stored_until = deadline

    def filtered(self) -> None:
        """A published message did not match the filter: acknowledged at once
        (docs/protocol.md#filter-language)."""
        self.counters.filtered += 1

    # ------------------------------------------------------------ settling

    def _remove(self, seq: int, *, acked: bool) -> bool:
        """Forget message ``seq`` wherever it is held (lease, window, returned), here and
        in the store; ``acked``: by a client or a policy, so retained if the subscription
        retains acknowledged messages. False: not held here."""
        position = -1
        message: StoredMessage | None = None
        ended = self.leases.settle(seq)
        if ended is not None:
            stream_id, size, published = ended
            if stream_id:
                stream = self._streams.get(stream_id)
                if stream is not None:
                    stream.outstanding_messages -= 1
                    stream.outstanding_bytes -= size
            waited = False
            if self._bodies is not None:
                message = self._bodies.pop(seq)
            key = self.keys.key_of(seq) if self.ordered else ""
        else:
            entry = self.waiting.take(seq)
            if entry is not None:
                message, waited = entry.message, True
                published = message.publish_time
                position = entry.key_position
                key = message.ordering_key if self.ordered else ""
            else:
                returned = self.waiting.take_returned(seq)
                if returned is None:
                    return False
                published, waited = returned.publish_time, True
                key = self.keys.key_of(seq) if self.ordered else ""
        if acked and self.retain_acked and not self._past_retention(published):
            self.storage.settle((seq,), (Acked(seq, published, message),))
        elif self._durable:
            self.storage.settle((seq,))
        if key:
            self._schedule_seq(self.keys.removed(seq, key, position, waited=waited))
        return True

    # The policies' interface (delivery_policies.py).

    def settle_message(self, seq: int) -> bool:
        """Acknowledge message ``seq`` as a subscriber would, wherever it waits or is
        leased (a cold row too: read from the store); False if it is not pending here."""
        if self._remove(seq, acked=True):
            return True
        row = self.waiting.take_cold(seq, self.leases.__contains__)
        if row is None:
            return False
        published = row.message.publish_time
        retain = self.retain_acked and not self._past_retention(published)
        self.storage.settle((seq,), (Acked(seq, published, row.message),) if retain else ())
        return True

    def drop_oldest(self, now: float, *, retain: bool, keep_since: float = math.inf) -> bool:
        """Acknowledge (``retain``: as acked, else as dropped) the oldest unacknowledged
        message, unless it was published at or after ``keep_since``; False if none went."""
        if self.waiting.oldest() is None and self.waiting.cold():
            self._refill(now, 1)
        oldest = self.waiting.oldest()
        lease = self.leases.oldest()
        if lease is not None and (oldest is None or (lease.publish_time, lease.seq) < oldest):
            oldest = (lease.publish_time, lease.seq)
        if oldest is None or oldest[0] >= keep_since:
            return False
        return self._remove(oldest[1], acked=retain)

    def peek(self, limit: int) -> list[tuple[StoredMessage, bool]]:
        """The oldest ``limit`` unacknowledged messages (seq order), each with whether it
        is leased now — read only: no lease, no attempt counted, nothing loaded."""
        if self._bodies is None:  # the store holds every unacknowledged row
            rows = self.storage.backlog(0, limit)
            return [(row.message, row.seq in self.leases) for row in rows]
        held = [
            *((seq, entry.message, False) for seq, entry in self.waiting.entries.items()),
            *((seq, message, True) for seq, message in self._bodies.items()),
        ]
        return [(m, leased) for _, m, leased in heapq.nsmallest(limit, held, key=_first)]

    def over_quota(self, now: float, limit_bytes: int | None, limit_age: float | None) -> bool:
        return delivery_policies.over_quota(self, now, limit_bytes, limit_age)

    def evict(self, now: float, limit_bytes: int | None, limit_age: float | None) -> int:
        return delivery_policies.evict(self, now, limit_bytes, limit_age)

    def trim(self, now: float, limit_bytes: float, *, keep_since: float = math.inf) -> int:
        return delivery_policies.trim(self, now, limit_bytes, keep_since=keep_since)

    def skip(self, seq: int) -> bool:
        return delivery_policies.skip(self, seq)

    # -------------------------------------------------------------- streams

    def open_stream(self, flow: StreamFlow) -> None:
        self._streams[flow.stream_id] = flow

    def close_stream(self, stream_id: int) -> None:
        # Its leases stay valid until their deadlines (acks may still arrive on other
        # streams or by unary calls); they just stop counting against any stream.
        self._streams.pop(stream_id, None)

    def stream(self, stream_id: int) -> StreamFlow | None:
        return self._streams.get(stream_id)

    def streams(self) -> list[StreamFlow]:
        """The flow control of every stream open on the subscription (for inspection)."""
        return list(self._streams.values())

    # ------------------------------------------------------------ inspection

    def has_deliverable(self, now: float) -> bool:
        self.advance(now)
        # Drop stale seqs from the top (acked, dropped or rescheduled since they were
        # pushed) so a subscription with nothing to deliver does not say otherwise.
        while True:
            while self._ready:
                if self._head_ready(self._ready[0], now) is not None:
                    return True
                heapq.heappop(self._ready)
            if not self._refill(now, 1):
                return False

    def leased(self) -> int:
        """Messages leased to a client right now (the lease limit counts these)."""
        return len(self.leases)

    def open_stream_count(self) -> int:
        return len(self._streams)

    def backlog(self) -> int:
        """Unacknowledged messages: waiting (window, cold, returned) and leased."""
        return self.waiting.waiting() + len(self.leases)

    def backlog_bytes(self) -> int:
        """Sizes of every unacknowledged message, as flow control counts them."""
        return self.waiting.bytes + self.leases.bytes

    def oldest_unacked(self) -> float | None:
        """Publish time of the oldest unacknowledged message (None: none). O(1) amortised
        but for a store read when only cold rows and leases are left."""
        times = []
        oldest = self.waiting.oldest()
        if oldest is not None:
            times.append(oldest[0])
        lease = self.leases.oldest()
        if lease is not None:
            times.append(lease.publish_time)
        if oldest is None and self.waiting.cold():
            row = self.waiting.first_cold_row()
            if row is not None:
                times.append(row.message.publish_time)
        return min(times) if times else None

    def oldest_publish_time(self) -> float | None:
        return self.oldest_unacked()

    def delayed_pending(self, now: float) -> int:
        """Messages in the window held back by a delayed-delivery attribute."""
        return sum(1 for entry in self.waiting.entries.values() if entry.message.deliver_at > now)

    def window(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message whose body the core holds."""
        held = self.waiting.window()
        if self._bodies is not None:
            held.extend(self._bodies.items())
        return held

    def unacked(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message, in seq order."""
        if self._bodies is None:  # the store holds every unacknowledged row
            return [(row.seq, row.message) for row in self.storage.backlog(0, self.backlog())]
        return sorted(self.window(), key=_first)

    def retained(self) -> list[SeqMessage]:
        """Retained acknowledged messages (``retain_acked``), in seq order."""
        return self.storage.retained() if self.retain_acked else []

    # ------------------------------------------------------------- lifecycle

    def restore(self, stored: StoredSubscription) -> None:
        """After a restart: the uid and leases the store kept; every other
        unacknowledged message cold."""
        if stored.record.uid:
            self.uid = stored.record.uid
        leased_bytes = 0
        for kept in stored.leases:
            self.leases.add(
                kept.seq,
                kept.generation,
                kept.deadline,
                kept.size,
                kept.failed_attempts,
                0,
                kept.publish_time,
            )
            leased_bytes += kept.size
            if self.ordered and kept.ordering_key:
                self.keys.restore_lease(kept.seq, kept.ordering_key)
        self.waiting.restore(
            stored.backlog - len(stored.leases), stored.backlog_bytes - leased_bytes
        )
        self._acked_before = {ack.seq: (ack.generation, ack.deadline) for ack in stored.acks}
        deadlines = [lease.deadline for lease in stored.leases]
        deadlines += [ack.deadline for ack in stored.acks]
        if deadlines:
            self._stored_until = max(deadlines)

    def reset(
        self,
        uid: str,
        unacked: list[tuple[int, StoredMessage]],
        acked: list[tuple[int, StoredMessage]],
        now: float,
    ) -> None:
        """Seek: ``unacked`` become waiting (deliverable now, in publish order), ``acked``
        are acknowledged (kept for replay if ``retain_acked``); nothing else remains.

        A new ``uid`` invalidates every ack id issued so far. O(n log n) for n messages;
        the store gets the new backlog whole, the window its oldest part.
        """
        self._former_uids.add(self.uid)
        self.uid = uid
        self._now_hint = now
        self.waiting.clear()
        self.leases.clear()
        if self._bodies is not None:
            self._bodies.clear()
        self._ready.clear()
        self._delayed.clear()
        self.keys.clear()
        self._acked_before.clear()
        for stream in self._streams.values():
            stream.outstanding_messages = 0
            stream.outstanding_bytes = 0
        cutoff = now - self.retention
        retained = (
            sorted((seq, m) for seq, m in acked if m.publish_time > cutoff)
            if self.retain_acked
            else []
        )
        backlog = sorted(
            ((seq, m) for seq, m in unacked if m.publish_time > cutoff), key=lambda item: item[0]
        )
        self.storage.reset(backlog, retained, uid)
        for seq, message in backlog:
            self.add(seq, message, now, now)

    def set_retain_acked(self, retain: bool) -> None:
        self.retain_acked = retain
        if not retain:
            self.storage.drop_retained()


def _first(item: tuple[int, StoredMessage] | tuple[int, StoredMessage, bool]) -> int:
    return item[0]
