"""Per-subscription delivery state: what is waiting, what is leased, what each ack id means.

One ``SubscriptionDelivery`` per subscription. It holds, for every message the
subscription has not acknowledged, a ``Entry`` in one of two states:

* WAITING: deliverable at ``ready_at`` (publish time, or after a retry backoff);
* OUTSTANDING: leased to a client until ``deadline`` under one ack id.

An acknowledged message's entry is deleted. Costs, with n the backlog size:

* ``_ready``: heap of sequence numbers deliverable now (oldest published first);
* ``_delayed``: heap of (ready_at, seq) not deliverable yet (retry backoff);
* ``_leases``: heap of (deadline, seq, generation) for lease expiry.

Heap entries are never removed in place; a stale entry (the message was acked,
redelivered or its deadline moved) is recognised when it surfaces and skipped, so
delivery, ack and expiry each cost O(log n).

Ack ids (wire-contract §2.4) are ``{subscription uid}-{seq}-{generation}``: a new
generation per delivery, so only the latest delivery's id resolves to the message.
The uid differs for every subscription ever created, so an id from another
subscription (or from a deleted and recreated one) never resolves here.

Ordering keys (when the subscription enables ordering): the unacknowledged messages
of a key form a sequence whose delivered part is a prefix. Only the first
undelivered message of a key is ever in ``_ready``/``_delayed``; delivering it
schedules the next. When a delivered message goes back to WAITING (nack, expiry),
every later delivered message of its key goes back too, so they are delivered again
after it, in order (wire-contract §1.5 "Ordering").

Policies applied here (the broker sets them from the subscription's config):

* Dead letters: when a nack or an expiry brings a message's failed attempts to
  ``max_delivery_attempts``, the would-be next delivery is diverted: ``forward`` (the
  broker) publishes it to the dead-letter topic and the message is settled here as if
  acked. If ``forward`` cannot (the dead-letter topic was deleted), the message stays
  and is redelivered; every later failure tries again.
* Retention: a message older than ``retention`` (since its publish time) is gone.
  ``_by_publish`` lists seqs in publish order so the expired ones are found at its
  front (O(1) each, amortized). A waiting message is dropped when its time is up; an
  outstanding one stays leased (its ack still succeeds) and is dropped at its next
  nack or expiry instead of going back to waiting.
* Retained acknowledged messages (``retain_acked``): handed to the store with their
  publish time and kept there until retention drops them, for seek to replay.

The window (``delivery_window.py``): with a store that bounds it, only the oldest part
of the backlog is held here, the rest is read from the store in seq order. The policies'
effects on the backlog (skip, eviction, TTL's reach) are in ``delivery_policies.py``.
Every change the store must keep (settled, failed attempts, retained, reset) is handed
to ``storage`` as it happens.

Seek (``reset``) rebuilds the whole state from the messages the seek leaves unacked
and the ones it leaves acked, under a new uid: every ack id issued before it stops
resolving (PERMANENT_FAILURE_INVALID_ACK_ID with exactly-once; ignored otherwise, its
uid still counts as well formed) and every message made unacked is delivered again.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator

from eoclient.server_stub.core.ack_ids import AckIdParts
from eoclient.server_stub.core.backlog_entry import Counters, Entry, KeySequence, State
from eoclient.server_stub.core.delivery_policies import DeliveryPolicies
from eoclient.server_stub.core.delivery_window import DeliveryWindow
from eoclient.server_stub.core.model import Delivery, RetryPolicy, StoredMessage
from eoclient.server_stub.core.store import SeqMessage, SubscriptionStorage
from eoclient.server_stub.core.stream_flow import StreamFlow

# ``forward(message, delivery_count) -> bool``: publish to the dead-letter topic;
# False when that is impossible now (the topic is gone) and the message must stay.
Forwarder = Callable[[StoredMessage, int], bool]


class SubscriptionDelivery(DeliveryWindow, DeliveryPolicies):
    """Delivery bookkeeping of one subscription. Pure: every method takes ``now``."""

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
        self.storage = storage
        self.counters = Counters()
        self._window = storage.window  # None: the whole backlog in memory
        self._cold = 0  # backlog rows only the store holds (all seqs > _loaded_through)
        self._loaded_through = 0
        self._bytes = 0  # sizes of every unacknowledged message, window and cold
        self.ttl: float | None = None  # message TTL (policies.py): auto-ack when older
        self._by_publish: deque[tuple[float, int]] = deque()
        self._entries: dict[int, Entry] = {}
        self._ready: list[int] = []
        self._delayed: list[tuple[float, int]] = []
        self._leases: list[tuple[float, int, int]] = []
        self._leased = 0  # entries OUTSTANDING: the live part of _leases
        self._keys: dict[str, KeySequence] = {}
        self._streams: dict[int, StreamFlow] = {}
        self._former_uids: set[str] = set()  # before each seek: ids still well formed

    def __repr__(self) -> str:
        waiting = sum(1 for e in self._entries.values() if e.state is State.WAITING)
        return (
            f"<SubscriptionDelivery {self.uid} [{waiting} waiting, "
            f"{len(self._entries) - waiting} outstanding, {self._cold} cold | "
            f"{len(self._streams)} streams]>"
        )

    # ------------------------------------------------------------------ intake

    def add(self, seq: int, message: StoredMessage, ready_at: float, now: float) -> None:
        """A message published to the topic (and matching the subscription) arrives.

        It joins the window if the window has room and nothing is cold (seq order), else
        it stays a cold row of the store (which the publish gave it).
        """
        self._now_hint = now
        self._bytes += message.size
        if self._cold or (self._window is not None and len(self._entries) >= self._window):
            self._cold += 1
            return
        self._admit(seq, message, ready_at, 0)

    def _admit(
        self, seq: int, message: StoredMessage, ready_at: float, failed_attempts: int
    ) -> None:
        """Into the window: scheduled now (or at its delayed-delivery time), or behind the
        earlier messages of its key."""
        ready_at = max(ready_at, message.deliver_at)
        entry = Entry(seq=seq, message=message, ready_at=ready_at, failed_attempts=failed_attempts)
        self._entries[seq] = entry
        self._loaded_through = max(self._loaded_through, seq)
        self._by_publish.append((message.publish_time, seq))
        key = message.ordering_key if self.ordered else ""
        if key:
            sequence = self._keys.get(key)
            if sequence is None:
                sequence = self._keys[key] = KeySequence()
            entry.key_position = sequence.end()
            sequence.seqs.append(seq)
            if sequence.next_position == entry.key_position:
                self._schedule(entry)
        else:
            self._schedule(entry)

    def _schedule(self, entry: Entry) -> None:
        if entry.ready_at > self._now_hint:
            heapq.heappush(self._delayed, (entry.ready_at, entry.seq))
        else:
            heapq.heappush(self._ready, entry.seq)

    # The latest ``now`` any public method was called with: scheduling uses it to
    # choose between the ready and the delayed heap without threading ``now`` through.
    _now_hint: float = float("-inf")

    # ---------------------------------------------------------------- time

    def advance(self, now: float) -> list[Entry]:
        """Expire leases whose deadline has passed and release delayed messages.

        Returns the entries whose lease expired (for counting delivery attempts).
        """
        self._now_hint = now
        expired: list[Entry] = []
        while self._leases and self._leases[0][0] <= now:
            record = heapq.heappop(self._leases)
            entry = self._live_lease(self._entries, record)
            if entry is None:
                continue  # stale: acked, redelivered or extended since
            deadline = record[0]
            self.counters.expired += 1
            expired.append(entry)
            # The lease ended at its deadline, not when this (lazy) call noticed it:
            # the retry backoff counts from the deadline, else a late tick or pull
            # would push the redelivery back by however long nobody looked.
            self._return_to_waiting(entry, deadline, failed=True)
        while self._delayed and self._delayed[0][0] <= now:
            ready_at, seq = heapq.heappop(self._delayed)
            entry = self._entries.get(seq)
            if entry is not None and entry.state is State.WAITING and entry.ready_at == ready_at:
                heapq.heappush(self._ready, seq)
        self._enforce_retention(now)
        return expired

    def _enforce_retention(self, now: float) -> None:
        """Drop what outlived the retention; acknowledge what outlived the message TTL
        (leased or not: its ack ids stop resolving)."""
        cutoff = now - self.retention
        ttl_cutoff = now - self.ttl if self.ttl is not None else -math.inf
        by_publish = self._by_publish
        while True:
            while by_publish:
                published, seq = by_publish[0]
                entry = self._entries.get(seq)
                if entry is None:
                    by_publish.popleft()  # acked already: usually in publish order, so short
                elif published <= cutoff:
                    by_publish.popleft()
                    # Outstanding: left leased; dropped by _return_to_waiting if it comes back.
                    if entry.state is State.WAITING:
                        self.counters.discarded += 1
                        self._remove(entry)
                elif published <= ttl_cutoff:
                    by_publish.popleft()
                    self.counters.expired_by_ttl += 1
                    self._settle(entry)
                else:
                    newer_found = True
                    break
            else:
                newer_found = False
            # The window held nothing newer: the oldest cold rows may be due too (a refill
            # drops or acknowledges those, and loads the rest).
            if newer_found or not self._cold or not self._refill(now, 0):
                break
        if self.retain_acked:
            self.storage.prune_retained(cutoff)

    def _past_retention(self, entry: Entry) -> bool:
        return entry.message.publish_time <= self._now_hint - self.retention

    def next_wakeup(self) -> float | None:
        """The earliest time at which ``advance`` would change something (may be stale-early)."""
        candidates = []
        if self._leases:
            candidates.append(self._leases[0][0])
        if self._delayed:
            candidates.append(self._delayed[0][0])
        # The oldest message's publish time. With an empty window and cold rows (after
        # a restart or a seek) it is the first cold row's, read from the store: otherwise
        # only a Pull would load them, and a subscription nobody pulls — the topic's
        # retention cursor above all — would keep expired rows (and the topic's garbage
        # behind them) for ever. Only with an empty window: then ``advance`` can always
        # load (and drop) that row, so a wake-up in the past cannot repeat.
        head = self._by_publish[0][0] if self._by_publish else None
        if head is None and self._cold and not self._entries:
            head = self.oldest_unacked()
        if head is not None and self.retention != float("inf"):
            candidates.append(head + self.retention)
        if head is not None and self.ttl is not None:
            candidates.append(head + self.ttl)
        oldest = self.storage.oldest_retained() if self.retain_acked else None
        if oldest is not None and self.retention != float("inf"):
            candidates.append(oldest + self.retention)
        return min(candidates) if candidates else None

    def _backoff(self, failed_attempts: int) -> float:
        policy = self.retry_policy
        if policy is None:
            return 0.0  # no retry policy: redeliver as soon as possible
        # Exponential between the bounds: min * 2^(n-1), capped at max. The service
        # documents "exponential backoff" without a formula (wire-contract §6).
        exponent = max(failed_attempts - 1, 0)
        return float(min(policy.maximum_backoff, policy.minimum_backoff * (2 ** min(exponent, 32))))

    def _return_to_waiting(self, entry: Entry, now: float, *, failed: bool) -> None:
        """Nack or expiry of ``entry``: back to WAITING, with its key's later deliveries.

        Then, instead of waiting for redelivery, the message may leave: to the
        dead-letter topic when this failure used up its delivery attempts, or for good
        when it outlived the retention while it was leased.
        """
        self._release_lease(entry)
        if failed:
            entry.failed_attempts += 1
            self.storage.set_failed_attempts(entry.seq, entry.failed_attempts)
        entry.ready_at = now + self._backoff(entry.failed_attempts)
        key = entry.message.ordering_key if self.ordered else ""
        if not key:
            self._schedule(entry)
        else:
            sequence = self._keys[key]
            if entry.key_position < sequence.next_position:
                for position in range(entry.key_position + 1, sequence.next_position):
                    follower = self._entries.get(sequence.seq_at(position))
                    if follower is not None and follower.state is State.OUTSTANDING:
                        self._release_lease(follower)
                        follower.ready_at = entry.ready_at
                sequence.next_position = entry.key_position
                self._schedule(entry)
            # else: already waiting behind an earlier rewind of its key
        if failed and self._attempts_used_up(entry) and self._forward(entry):
            return
        if self._past_retention(entry):
            self.counters.discarded += 1
            self._remove(entry)

    def _attempts_used_up(self, entry: Entry) -> bool:
        limit = self.max_delivery_attempts
        return limit is not None and entry.failed_attempts >= limit

    def _forward(self, entry: Entry) -> bool:
        """Divert the would-be next delivery to the dead-letter topic (True if done)."""
        if self.forward is None or not self.forward(entry.message, entry.failed_attempts):
            return False  # the dead-letter topic is gone: keep redelivering
        self.counters.dead_lettered += 1
        self._settle(entry)  # acked on the source subscription
        return True

    def _release_lease(self, entry: Entry) -> None:
        if entry.state is State.OUTSTANDING:
            self._leased -= 1
            if entry.stream_id is not None:
                stream = self._streams.get(entry.stream_id)
                if stream is not None:
                    stream.outstanding_messages -= 1
                    stream.outstanding_bytes -= entry.message.size
        entry.state = State.WAITING
        entry.stream_id = None

    # Stale lease records (acked, nacked, extended) beyond this many more than the live
    # ones trigger a rebuild of the heap: without it they stay until their deadlines,
    # and memory grows with ack rate x ack deadline (60,000 records a minute at 1,000
    # acks/s with 60 s deadlines). The rebuild filters the heap's own records (at most
    # 2 x live + slack of them, not the whole window, which may hold a backlog of
    # millions) and happens at most once per this many stale records: amortised O(1)
    # an ack.
    LEASE_HEAP_SLACK = 4096

    def _compact_leases(self) -> None:
        if len(self._leases) > 2 * self._leased + self.LEASE_HEAP_SLACK:
            entries = self._entries
            # A set: one request may extend the same ack id many times at the same now,
            # pushing identical records that are all live; kept, they would make every
            # later ack rebuild the heap again (quadratic in the repeats).
            self._leases = list(
                {record for record in self._leases if self._live_lease(entries, record)}
            )
            heapq.heapify(self._leases)

    @staticmethod
    def _live_lease(entries: dict[int, Entry], record: tuple[float, int, int]) -> Entry | None:
        """The entry whose current lease a heap record is, or None for a stale record
        (acked, redelivered or extended since): the expiry in ``advance`` and the
        compaction judge records alike."""
        deadline, seq, generation = record
        entry = entries.get(seq)
        if (
            entry is None
            or entry.state is not State.OUTSTANDING
            or entry.generation != generation
            or entry.deadline != deadline
        ):
            return None
        return entry

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
            if self._past_retention(entry):
                # Leased past its retention, then nacked or expired along with an
                # earlier message of its key: it was not in _by_publish any more.
                self.counters.discarded += 1
                self._remove(entry)
                continue
            key = entry.message.ordering_key if self.ordered else ""
            sequence = self._keys.get(key) if key else None
            if (
                max_bytes is not None
                and deliveries
                and total_bytes + entry.message.size > (max_bytes)
            ):
                heapq.heappush(self._ready, seq)  # still the next to go
                break
            total_bytes += entry.message.size
            entry.state = State.OUTSTANDING
            entry.generation += 1
            entry.deadline = now + ack_deadline
            heapq.heappush(self._leases, (entry.deadline, seq, entry.generation))
            self._leased += 1
            if stream is not None:
                entry.stream_id = stream.stream_id
                stream.outstanding_messages += 1
                stream.outstanding_bytes += entry.message.size
            self.counters.delivered += 1
            attempt = entry.failed_attempts + 1 if self.count_attempts else 0
            deliveries.append(Delivery(self.ack_id(entry), entry.message, attempt))
            if sequence is not None:
                self._advance_key(sequence)
        return deliveries

    def _head_ready(self, seq: int, now: float) -> Entry | None:
        """The entry a ``_ready`` seq names if it is deliverable now, else None (stale)."""
        entry = self._entries.get(seq)
        if entry is None or entry.state is not State.WAITING or entry.ready_at > now:
            return None
        key = entry.message.ordering_key if self.ordered else ""
        sequence = self._keys.get(key) if key else None
        if sequence is not None and sequence.next_position != entry.key_position:
            return None  # not the head of its key (a stale entry from before a rewind)
        return entry

    def _advance_key(self, sequence: KeySequence) -> None:
        """After delivering a key's head: schedule the next undelivered message of the key."""
        sequence.next_position += 1
        while sequence.next_position < sequence.end():
            follower = self._entries.get(sequence.seq_at(sequence.next_position))
            if follower is not None and follower.state is State.WAITING:
                self._schedule(follower)
                return
            sequence.next_position += 1  # acked out of order (no exactly-once): skip

    def ack_id(self, entry: Entry) -> str:
        return f"{self.uid}-{entry.seq}-{entry.generation}"

    # --------------------------------------------------------- ack / modack

    def resolve_parts(self, parts: AckIdParts | None) -> Entry | None:
        """``resolve`` for an id already parsed (acks parse each id once)."""
        if parts is None or parts.uid != self.uid:
            return None
        entry = self._entries.get(parts.seq)
        if (
            entry is None
            or entry.state is not State.OUTSTANDING
            or entry.generation != parts.generation
            or entry.deadline <= self._now_hint
        ):
            return None
        return entry

    def lookup_parts(self, parts: AckIdParts | None) -> Entry | None:
        if parts is None or parts.uid != self.uid:
            return None
        entry = self._entries.get(parts.seq)
        # Only ids actually issued (generations 1..latest) name the entry: a forged
        # "{uid}-{seq}-0" must not settle a message that was never delivered.
        if entry is None or not 1 <= parts.generation <= entry.generation:
            return None
        return entry

    def wellformed_parts(self, parts: AckIdParts | None) -> bool:
        return parts is not None and (parts.uid == self.uid or parts.uid in self._former_uids)

    def first_unacked_before(self, entry: Entry) -> bool:
        """Ordering + exactly-once: is an earlier message of entry's key still unacked?"""
        key = entry.message.ordering_key if self.ordered else ""
        if not key:
            return False
        sequence = self._keys[key]
        self._prune_key(key, sequence)
        return sequence.base < entry.key_position

    def ack(self, entry: Entry) -> None:
        self.counters.acked += 1
        self._settle(entry)
        self._compact_leases()

    def _settle(self, entry: Entry) -> None:
        """The message is acknowledged on this subscription (by a client or a policy)."""
        self._remove(entry, retain=self.retain_acked and not self._past_retention(entry))

    def _remove(self, entry: Entry, *, retain: bool = False) -> None:
        """Forget ``entry`` (acked, dead-lettered or past its retention), here and in the
        store; ``retain``: the store keeps it as a retained acknowledged message."""
        key = entry.message.ordering_key if self.ordered else ""
        sequence = self._keys[key] if key else None
        # A WAITING message may leave while it is its key's head (the only one of the
        # key scheduled): a stale ack without exactly-once, a dead letter, retention.
        # The next one must be scheduled in its place or the key would never be
        # delivered again.
        was_head = (
            sequence is not None
            and entry.state is State.WAITING
            and sequence.next_position == entry.key_position
        )
        self._release_lease(entry)
        del self._entries[entry.seq]
        self._bytes -= entry.message.size
        self.storage.settle((entry.seq,), ((entry.seq, entry.message),) if retain else ())
        if sequence is not None:
            if was_head:
                self._advance_key(sequence)
            self._prune_key(key, sequence)

    def filtered(self) -> None:
        """A published message did not match the filter: acknowledged at once (§3)."""
        self.counters.filtered += 1

    def _prune_key(self, key: str, sequence: KeySequence) -> None:
        while sequence.seqs and sequence.seqs[0] not in self._entries:
            sequence.seqs.popleft()
            sequence.base += 1
        sequence.next_position = max(sequence.next_position, sequence.base)
        if not sequence.seqs:
            del self._keys[key]

    def nack(self, entry: Entry, now: float) -> None:
        self._now_hint = now
        self.counters.nacked += 1
        self._return_to_waiting(entry, now, failed=True)

    def extend(self, entry: Entry, now: float, seconds: int) -> None:
        self.counters.modacked += 1
        entry.deadline = now + seconds
        heapq.heappush(self._leases, (entry.deadline, entry.seq, entry.generation))
        self._compact_leases()

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
        return self._leased

    def open_stream_count(self) -> int:
        return len(self._streams)

    def entries(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def backlog(self) -> int:
        """Unacknowledged messages: in the window and cold."""
        return len(self._entries) + self._cold

    def retained(self) -> list[SeqMessage]:
        """Retained acknowledged messages (``retain_acked``), in seq order."""
        return self.storage.retained() if self.retain_acked else []

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
        self._entries.clear()
        self._by_publish.clear()
        self._ready.clear()
        self._delayed.clear()
        self._leases.clear()
        self._leased = 0
        self._keys.clear()
        for stream in self._streams.values():
            stream.outstanding_messages = 0
            stream.outstanding_bytes = 0
        self._cold = 0
        self._bytes = 0
        self._loaded_through = 0
        cutoff = now - self.retention
        retained = (
            sorted((seq, m) for seq, m in acked if m.publish_time > cutoff)
            if self.retain_acked
            else []
        )
        backlog = sorted(
            ((seq, m) for seq, m in unacked if m.publish_time > cutoff), key=lambda item: item[0]
        )
        self.storage.reset(backlog, retained)
        for seq, message in backlog:
            self.add(seq, message, now, now)

    def set_retain_acked(self, retain: bool) -> None:
        self.retain_acked = retain
        if not retain:
            self.storage.drop_retained()
