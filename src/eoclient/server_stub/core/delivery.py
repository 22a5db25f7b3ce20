"""Per-subscription delivery state: what is waiting, what is leased, what each ack id means.

One ``SubscriptionDelivery`` per subscription. It holds, for every message the
subscription has not acknowledged, a ``_Entry`` in one of two states:

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
* Retained acknowledged messages (``retain_acked``): kept in ``RetainedAcked`` with
  their publish time until retention drops them, for seek to replay.

Seek (``reset``) rebuilds the whole state from the messages the seek leaves unacked
and the ones it leaves acked, under a new uid: every ack id issued before it stops
resolving (PERMANENT_FAILURE_INVALID_ACK_ID with exactly-once; ignored otherwise, its
uid still counts as well formed) and every message made unacked is delivered again.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from eoclient.server_stub.core.model import Delivery, RetryPolicy, StoredMessage

PERMANENT_FAILURE_INVALID_ACK_ID = "PERMANENT_FAILURE_INVALID_ACK_ID"
TRANSIENT_FAILURE_UNORDERED_ACK_ID = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"


class State(enum.Enum):
    WAITING = "waiting"
    OUTSTANDING = "outstanding"


@dataclass(slots=True)
class _Entry:
    seq: int
    message: StoredMessage
    state: State = State.WAITING
    ready_at: float = 0.0
    generation: int = 0  # number of deliveries so far; the ack id carries the latest
    failed_attempts: int = 0  # nacks + deadline expiries (delivery_attempt = this + 1)
    deadline: float = 0.0
    stream_id: int | None = None  # the stream whose flow control counts this lease
    key_position: int = -1  # absolute position in its ordering key's sequence


@dataclass(slots=True)
class _KeySequence:
    """The unacknowledged messages of one ordering key, by absolute position."""

    seqs: deque[int] = field(default_factory=deque)
    base: int = 0  # absolute position of seqs[0]
    next_position: int = 0  # first position not delivered (or not since a rewind)

    def seq_at(self, position: int) -> int:
        return self.seqs[position - self.base]

    def end(self) -> int:
        return self.base + len(self.seqs)


@dataclass(slots=True)
class StreamFlow:
    """Server-side flow control of one StreamingPull stream (wire-contract §1.2 fields 7, 8)."""

    stream_id: int
    ack_deadline: int
    max_messages: int  # <= 0: unlimited
    max_bytes: int  # <= 0: unlimited
    outstanding_messages: int = 0
    outstanding_bytes: int = 0

    def has_room(self) -> bool:
        # A stream with nothing outstanding always gets one message, even one larger
        # than max_bytes: otherwise that message could never be delivered to it.
        if self.outstanding_messages == 0:
            return True
        if 0 < self.max_messages <= self.outstanding_messages:
            return False
        return not 0 < self.max_bytes <= self.outstanding_bytes


class AckIdParts(NamedTuple):
    # A NamedTuple, not a frozen dataclass: ack ids are parsed on every ack and
    # modack, and a tuple is several times cheaper to build.
    uid: str
    seq: int
    generation: int


def parse_ack_id(ack_id: str) -> AckIdParts | None:
    parts = ack_id.split("-")
    if len(parts) != 3:
        return None
    uid, seq, generation = parts
    if not (seq.isdigit() and generation.isdigit()):
        return None
    return AckIdParts(uid, int(seq), int(generation))


@dataclass
class Counters:
    delivered: int = 0
    acked: int = 0
    nacked: int = 0
    expired: int = 0  # leases that ran out
    dead_lettered: int = 0  # forwarded to the dead-letter topic (and settled here)
    filtered: int = 0  # did not match the filter: settled at publish, never delivered
    discarded: int = 0  # older than the retention: dropped undelivered


# ``forward(message, delivery_count) -> bool``: publish to the dead-letter topic;
# False when that is impossible now (the topic is gone) and the message must stay.
Forwarder = Callable[[StoredMessage, int], bool]


class RetainedAcked:
    """Acknowledged messages kept for replay (retain_acked_messages), oldest first out.

    ``_heap`` orders (publish_time, seq) so pruning by retention costs O(log n) per
    message whatever order the acks came in; ``_messages`` holds the bodies by seq.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._messages: dict[int, StoredMessage] = {}

    def __len__(self) -> int:
        return len(self._messages)

    def __contains__(self, seq: object) -> bool:
        return seq in self._messages

    def add(self, seq: int, message: StoredMessage) -> None:
        self._messages[seq] = message
        heapq.heappush(self._heap, (message.publish_time, seq))

    def prune(self, cutoff: float) -> None:
        """Forget every message published at or before ``cutoff``."""
        while self._heap and self._heap[0][0] <= cutoff:
            _, seq = heapq.heappop(self._heap)
            self._messages.pop(seq, None)

    def clear(self) -> None:
        self._heap.clear()
        self._messages.clear()

    def oldest(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def items(self) -> list[tuple[int, StoredMessage]]:
        """(seq, message) in publish order."""
        return sorted(self._messages.items())


class SubscriptionDelivery:
    """Delivery bookkeeping of one subscription. Pure: every method takes ``now``."""

    def __init__(
        self,
        uid: str,
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
        self.retained = RetainedAcked()
        self.counters = Counters()
        self._by_publish: deque[tuple[float, int]] = deque()
        self._entries: dict[int, _Entry] = {}
        self._ready: list[int] = []
        self._delayed: list[tuple[float, int]] = []
        self._leases: list[tuple[float, int, int]] = []
        self._keys: dict[str, _KeySequence] = {}
        self._streams: dict[int, StreamFlow] = {}
        self._former_uids: set[str] = set()  # before each seek: ids still well formed

    def __repr__(self) -> str:
        waiting = sum(1 for e in self._entries.values() if e.state is State.WAITING)
        return (
            f"<SubscriptionDelivery {self.uid} [{waiting} waiting, "
            f"{len(self._entries) - waiting} outstanding | {len(self._streams)} streams]>"
        )

    # ------------------------------------------------------------------ intake

    def add(self, seq: int, message: StoredMessage, ready_at: float, now: float) -> None:
        """A message published to the topic (and matching the subscription) arrives."""
        self._now_hint = now
        entry = _Entry(seq=seq, message=message, ready_at=ready_at)
        self._entries[seq] = entry
        self._by_publish.append((message.publish_time, seq))
        key = message.ordering_key if self.ordered else ""
        if key:
            sequence = self._keys.get(key)
            if sequence is None:
                sequence = self._keys[key] = _KeySequence()
            entry.key_position = sequence.end()
            sequence.seqs.append(seq)
            if sequence.next_position == entry.key_position:
                self._schedule(entry)
        else:
            self._schedule(entry)

    def _schedule(self, entry: _Entry) -> None:
        if entry.ready_at > self._now_hint:
            heapq.heappush(self._delayed, (entry.ready_at, entry.seq))
        else:
            heapq.heappush(self._ready, entry.seq)

    # The latest ``now`` any public method was called with: scheduling uses it to
    # choose between the ready and the delayed heap without threading ``now`` through.
    _now_hint: float = float("-inf")

    # ---------------------------------------------------------------- time

    def advance(self, now: float) -> list[_Entry]:
        """Expire leases whose deadline has passed and release delayed messages.

        Returns the entries whose lease expired (for counting delivery attempts).
        """
        self._now_hint = now
        expired: list[_Entry] = []
        while self._leases and self._leases[0][0] <= now:
            deadline, seq, generation = heapq.heappop(self._leases)
            entry = self._entries.get(seq)
            if (
                entry is None
                or entry.state is not State.OUTSTANDING
                or entry.generation != generation
                or entry.deadline != deadline
            ):
                continue  # stale: acked, redelivered or extended since
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
        cutoff = now - self.retention
        by_publish = self._by_publish
        while by_publish:
            published, seq = by_publish[0]
            entry = self._entries.get(seq)
            if entry is not None and published > cutoff:
                break
            # Gone already (acked: usually in publish order, so the deque stays short),
            # or too old.
            by_publish.popleft()
            # Outstanding: left leased; dropped by _return_to_waiting if nacked or expired.
            if entry is not None and entry.state is State.WAITING:
                self.counters.discarded += 1
                self._remove(entry)
        if self.retained:
            self.retained.prune(cutoff)

    def _past_retention(self, entry: _Entry) -> bool:
        return entry.message.publish_time <= self._now_hint - self.retention

    def next_wakeup(self) -> float | None:
        """The earliest time at which ``advance`` would change something (may be stale-early)."""
        candidates = []
        if self._leases:
            candidates.append(self._leases[0][0])
        if self._delayed:
            candidates.append(self._delayed[0][0])
        if self._by_publish and self.retention != float("inf"):
            candidates.append(self._by_publish[0][0] + self.retention)
        oldest = self.retained.oldest()
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

    def _return_to_waiting(self, entry: _Entry, now: float, *, failed: bool) -> None:
        """Nack or expiry of ``entry``: back to WAITING, with its key's later deliveries.

        Then, instead of waiting for redelivery, the message may leave: to the
        dead-letter topic when this failure used up its delivery attempts, or for good
        when it outlived the retention while it was leased.
        """
        self._release_lease(entry)
        if failed:
            entry.failed_attempts += 1
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

    def _attempts_used_up(self, entry: _Entry) -> bool:
        limit = self.max_delivery_attempts
        return limit is not None and entry.failed_attempts >= limit

    def _forward(self, entry: _Entry) -> bool:
        """Divert the would-be next delivery to the dead-letter topic (True if done)."""
        if self.forward is None or not self.forward(entry.message, entry.failed_attempts):
            return False  # the dead-letter topic is gone: keep redelivering
        self.counters.dead_lettered += 1
        self._settle(entry)  # acked on the source subscription
        return True

    def _release_lease(self, entry: _Entry) -> None:
        if entry.state is State.OUTSTANDING and entry.stream_id is not None:
            stream = self._streams.get(entry.stream_id)
            if stream is not None:
                stream.outstanding_messages -= 1
                stream.outstanding_bytes -= entry.message.size
        entry.state = State.WAITING
        entry.stream_id = None

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
        while self._ready and len(deliveries) < max_messages:
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

    def _head_ready(self, seq: int, now: float) -> _Entry | None:
        """The entry a ``_ready`` seq names if it is deliverable now, else None (stale)."""
        entry = self._entries.get(seq)
        if entry is None or entry.state is not State.WAITING or entry.ready_at > now:
            return None
        key = entry.message.ordering_key if self.ordered else ""
        sequence = self._keys.get(key) if key else None
        if sequence is not None and sequence.next_position != entry.key_position:
            return None  # not the head of its key (a stale entry from before a rewind)
        return entry

    def _advance_key(self, sequence: _KeySequence) -> None:
        """After delivering a key's head: schedule the next undelivered message of the key."""
        sequence.next_position += 1
        while sequence.next_position < sequence.end():
            follower = self._entries.get(sequence.seq_at(sequence.next_position))
            if follower is not None and follower.state is State.WAITING:
                self._schedule(follower)
                return
            sequence.next_position += 1  # acked out of order (no exactly-once): skip

    def ack_id(self, entry: _Entry) -> str:
        return f"{self.uid}-{entry.seq}-{entry.generation}"

    # --------------------------------------------------------- ack / modack

    def resolve(self, ack_id: str) -> _Entry | None:
        """The entry an ack id currently leases, or None (malformed, stale, expired, acked)."""
        return self.resolve_parts(parse_ack_id(ack_id))

    def resolve_parts(self, parts: AckIdParts | None) -> _Entry | None:
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

    def lookup_any_generation(self, ack_id: str) -> _Entry | None:
        """The unacked entry an ack id names, whatever delivery it came from."""
        return self.lookup_parts(parse_ack_id(ack_id))

    def lookup_parts(self, parts: AckIdParts | None) -> _Entry | None:
        if parts is None or parts.uid != self.uid:
            return None
        entry = self._entries.get(parts.seq)
        # Only ids actually issued (generations 1..latest) name the entry: a forged
        # "{uid}-{seq}-0" must not settle a message that was never delivered.
        if entry is None or not 1 <= parts.generation <= entry.generation:
            return None
        return entry

    def is_wellformed(self, ack_id: str) -> bool:
        return self.wellformed_parts(parse_ack_id(ack_id))

    def wellformed_parts(self, parts: AckIdParts | None) -> bool:
        return parts is not None and (parts.uid == self.uid or parts.uid in self._former_uids)

    def first_unacked_before(self, entry: _Entry) -> bool:
        """Ordering + exactly-once: is an earlier message of entry's key still unacked?"""
        key = entry.message.ordering_key if self.ordered else ""
        if not key:
            return False
        sequence = self._keys[key]
        self._prune_key(key, sequence)
        return sequence.base < entry.key_position

    def ack(self, entry: _Entry) -> None:
        self.counters.acked += 1
        self._settle(entry)

    def _settle(self, entry: _Entry) -> None:
        """The message is acknowledged on this subscription (by a client or a policy)."""
        if self.retain_acked and not self._past_retention(entry):
            self.retained.add(entry.seq, entry.message)
        self._remove(entry)

    def _remove(self, entry: _Entry) -> None:
        """Forget ``entry``: acked, dead-lettered or past its retention."""
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
        if sequence is not None:
            if was_head:
                self._advance_key(sequence)
            self._prune_key(key, sequence)

    def filtered(self) -> None:
        """A published message did not match the filter: acknowledged at once (§3)."""
        self.counters.filtered += 1

    def _prune_key(self, key: str, sequence: _KeySequence) -> None:
        while sequence.seqs and sequence.seqs[0] not in self._entries:
            sequence.seqs.popleft()
            sequence.base += 1
        sequence.next_position = max(sequence.next_position, sequence.base)
        if not sequence.seqs:
            del self._keys[key]

    def nack(self, entry: _Entry, now: float) -> None:
        self._now_hint = now
        self.counters.nacked += 1
        self._return_to_waiting(entry, now, failed=True)

    def extend(self, entry: _Entry, now: float, seconds: int) -> None:
        entry.deadline = now + seconds
        heapq.heappush(self._leases, (entry.deadline, entry.seq, entry.generation))

    # -------------------------------------------------------------- streams

    def open_stream(self, flow: StreamFlow) -> None:
        self._streams[flow.stream_id] = flow

    def close_stream(self, stream_id: int) -> None:
        # Its leases stay valid until their deadlines (acks may still arrive on other
        # streams or by unary calls); they just stop counting against any stream.
        self._streams.pop(stream_id, None)

    def stream(self, stream_id: int) -> StreamFlow | None:
        return self._streams.get(stream_id)

    # ------------------------------------------------------------ inspection

    def has_deliverable(self, now: float) -> bool:
        self.advance(now)
        # Drop stale seqs from the top (acked, dropped or rescheduled since they were
        # pushed) so a subscription with nothing to deliver does not say otherwise.
        while self._ready:
            if self._head_ready(self._ready[0], now) is not None:
                return True
            heapq.heappop(self._ready)
        return False

    def open_stream_count(self) -> int:
        return len(self._streams)

    def entries(self) -> Iterator[_Entry]:
        return iter(self._entries.values())

    def backlog(self) -> int:
        return len(self._entries)

    def unacked(self) -> list[tuple[int, StoredMessage]]:
        """(seq, message) of every unacknowledged message (waiting or outstanding)."""
        return [(seq, entry.message) for seq, entry in self._entries.items()]

    def reset(
        self,
        uid: str,
        unacked: list[tuple[int, StoredMessage]],
        acked: list[tuple[int, StoredMessage]],
        now: float,
    ) -> None:
        """Seek: ``unacked`` become waiting (deliverable now, in publish order), ``acked``
        are acknowledged (kept for replay if ``retain_acked``); nothing else remains.

        A new ``uid`` invalidates every ack id issued so far. O(n log n) for n messages.
        """
        self._former_uids.add(self.uid)
        self.uid = uid
        self._now_hint = now
        self._entries.clear()
        self._by_publish.clear()
        self._ready.clear()
        self._delayed.clear()
        self._leases.clear()
        self._keys.clear()
        for stream in self._streams.values():
            stream.outstanding_messages = 0
            stream.outstanding_bytes = 0
        self.retained.clear()
        cutoff = now - self.retention
        if self.retain_acked:
            for seq, message in acked:
                if message.publish_time > cutoff:
                    self.retained.add(seq, message)
        for seq, message in sorted(unacked, key=lambda item: item[0]):
            if message.publish_time > cutoff:
                self.add(seq, message, now, now)

    def set_retain_acked(self, retain: bool) -> None:
        self.retain_acked = retain
        if not retain:
            self.retained.clear()
