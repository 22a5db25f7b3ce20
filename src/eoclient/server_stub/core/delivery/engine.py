"""Per-subscription delivery state: a message's life from publish to settlement.

One ``SubscriptionDelivery`` per subscription. Its state is held by three rooms, each the
only one to change its own data; this class moves a message between them:

* the **waiting** messages (``waiting.Waiting``): the window with its cold rest in the
  store, which message goes next, and each ordering key's order;
* the **leases** (``leases.Leases``): delivered to a client until a deadline under one
  ack id, counted by the stream that leased them, kept by a durable store. Leases do not
  count against the window: a subscription may hold as many as the lease limit allows
  whatever the window's size;
* **settlement** (``settlement.Settlement``): a message leaving for good, and the
  acknowledged messages the subscription retains.

A message's life, by this class's sections:

* published (``add``): waiting — in the window if it has room, else a cold row;
* time passes (``advance``): leases past their deadlines end, delayed messages become
  ready, and what outlived the retention or the TTL goes (``retention.Retention``, which
  also sees the backlog as one sequence by age);
* leased (``deliver``, ``extend``, ``nack``): a nack or an expiry is a failed attempt,
  after which the message waits again — after the retry policy's backoff, and with ordering
  keys with every later delivered message of its key, so that they are delivered again
  after it, in order (docs/protocol.md#ordering-keys) — or, when it used up its delivery
  attempts, goes to the dead-letter topic (``forward`` publishes it there and it is settled
  here as if acked; if the dead-letter topic is gone the message stays and every later
  failure tries again), or for good when it outlived the retention while it was leased
  (``lease_ends.LeaseEnds``: for one lease, and for one request's nacks at once);
* settled (``ack``, the backlog policies): out of whichever room holds it, then into
  settlement;
* restart (``restore``): the uid and leases the store kept, every other unacknowledged
  message cold; seek (``reset``): the whole state rebuilt from the messages the seek
  leaves unacked and the ones it leaves acked, under a new uid — every ack id issued
  before stops resolving and every message made unacked is delivered again.

The rules these follow (retry backoff, dead letters, retention, TTL, retained acks) are
``rules.DeliveryRules``; what an ack id names is ``ack_resolution.AckIds``; what the statistics,
snapshots and peek read is ``reads.DeliveryReads`` (``reads``).

Costs, with n messages held: delivery, ack, nack, extension and expiry O(log n) each (the heaps and
the lease table); retention O(log n) a message dropped. A request's acks, extensions and nacks
(``ack_many``, ``extend_many``, ``nack_many``) and a Pull's deliveries go mostly as runs, in a few
passes in C over columns. Every change the store must keep (settled,
leases, failed attempts, retained, reset) is handed to ``storage`` as it happens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from eoclient.server_stub.core.ack_ids import AckIdParts
from eoclient.server_stub.core.delivery.ack_resolution import AckIds, AckTarget
from eoclient.server_stub.core.delivery.entries import (
    Counters,
    Entry,
    fitting_in,
    run_deliveries,
)
from eoclient.server_stub.core.delivery.lease_ends import LeaseEnds
from eoclient.server_stub.core.delivery.leases import Leases
from eoclient.server_stub.core.delivery.reads import DeliveryReads
from eoclient.server_stub.core.delivery.retention import Departures, Retention
from eoclient.server_stub.core.delivery.rules import DeliveryRules, Forwarder
from eoclient.server_stub.core.delivery.settlement import Settlement
from eoclient.server_stub.core.delivery.stream_flow import StreamFlow
from eoclient.server_stub.core.delivery.waiting import Waiting
from eoclient.server_stub.core.model import Delivery, StoredMessage
from eoclient.server_stub.core.store import SeqMessage, StoredSubscription, SubscriptionStorage


class SubscriptionDelivery:
    """Delivery bookkeeping of one subscription. Pure: every change takes ``now``, or (an
    ack, a settle by id) uses the latest one given."""

    def __init__(
        self, uid: str, storage: SubscriptionStorage, *, ordered: bool, forward: Forwarder | None
    ) -> None:
        self.storage = storage
        # The broker sets the rest from the subscription's config (and again when it or
        # its topic changes): ``resources.apply_policies``.
        self.rules = DeliveryRules(forward=forward)
        self.counters = Counters()
        self.waiting = Waiting(storage, ordered=ordered)
        self.leases = Leases(storage)
        # The StreamingPull streams open on the subscription, each with its flow control:
        # opened and closed there (``leasing.Leasing``), counted by the leases.
        self.streams = self.leases.streams
        self._settlement = Settlement(self.rules, storage)
        self._retention = Retention(self.waiting, self.leases, self.rules)
        self.reads = DeliveryReads(self.waiting, self.leases, self._settlement, storage)
        self._ack_ids = AckIds(uid)
        self._ends = LeaseEnds(self.waiting, self.leases, self.rules, self.counters, self._settle)
        # The latest ``now`` a change was given: acks, which take none, decide by it
        # (the rooms calling them advance the state first).
        self._now = -math.inf

    def __repr__(self) -> str:
        return f"<SubscriptionDelivery {self.uid} {self.waiting!r} {self.leases!r}>"

    @property
    def uid(self) -> str:
        """The uid of the ack ids issued from now on."""
        return self._ack_ids.uid

    def set_retain_acked(self, retain: bool) -> None:
        """Keep acknowledged messages (for seek) or not; not: forget those kept."""
        self._settlement.set_retain_acked(retain)

    # ------------------------------------------------------------ published

    def add(self, seq: int, message: StoredMessage, ready_at: float, now: float) -> None:
        """A message published to the topic (and matching the subscription) arrives:
        into the window if it has room, else it stays a cold row of the store."""
        self._now = now
        self.waiting.add(seq, message, ready_at, now)

    def filtered(self) -> None:
        """A published message did not match the filter: acknowledged at once
        (docs/protocol.md#filter-language)."""
        self.counters.filtered += 1

    # ------------------------------------------------------------ time passes

    def advance(self, now: float) -> None:
        """Expire leases whose deadline has passed, release delayed messages, apply the
        retention and the TTL, let the store forget leases past their deadlines."""
        self._now = now
        for lease, body in self.leases.expire(now):
            self.counters.expired += 1
            # The lease ended at its deadline, not when this (lazy) call noticed it:
            # the retry backoff counts from the deadline, else a late tick or pull
            # would push the redelivery back by however long nobody looked.
            self._ends.lease_ended(lease, body, lease.deadline, now)
        self.waiting.schedule.release_due(now)
        self._settle_departures(self._retention.enforce(now), now)
        self._settlement.prune_retained(self.rules.retention_cutoff(now))
        self._ack_ids.forget(now)
        self.leases.forget_stored(now)

    def next_wakeup(self) -> float | None:
        """The earliest time at which ``advance`` would change something (may be stale-early)."""
        candidates = (
            self.leases.table.next_deadline(),
            self.waiting.schedule.next_release(),
            self._retention.next_due(self._settlement.oldest_retained()),
            self.leases.next_forget(),
        )
        return min((t for t in candidates if t is not None), default=None)

    # ------------------------------------------------------------ leased

    def has_deliverable(self, now: float) -> bool:
        self.advance(now)
        while not self.waiting.schedule.has_ready(now):
            if not self._refill(now, 1):
                return False
        return True

    def deliver(
        self,
        now: float,
        max_messages: int,
        ack_deadline: int,
        stream_id: int | None = None,
        *,
        max_bytes: int | None = None,
    ) -> list[Delivery]:
        """Lease up to ``max_messages`` messages for ``ack_deadline`` seconds (fewer if
        the stream's flow control says so, or if ``max_bytes`` would be passed — but for
        the first message, always delivered whatever its size, else it could never be)."""
        self.advance(now)
        stream = self.streams.get(stream_id) if stream_id is not None else None
        deadline = now + ack_deadline
        waiting, rules, leases = self.waiting, self.rules, self.leases
        schedule = waiting.schedule
        # Read once a call, not once a message: the ack ids' prefix (their format:
        # docs/protocol.md#ack-ids-and-generations, ack_ids.py), the retention's cutoff,
        # whether deliveries carry their attempt.
        prefix = f"{self._ack_ids.uid}-"
        cutoff = rules.retention_cutoff(now)
        count_attempts = rules.count_attempts
        deliveries: list[Delivery] = []
        redelivered = 0
        total_bytes = 0
        # Runs of the common messages go at once (``_deliver_run``); the rest, with what
        # they need checked one by one (ordering keys, a message past the retention), one
        # at a time.
        runs = not waiting.ordered
        while len(deliveries) < max_messages:
            if schedule.exhausted():
                if not self._refill(now, max_messages - len(deliveries)):
                    break
                continue
            if stream is not None and not stream.has_room():
                break
            if runs and not waiting.window.may_hold_older(cutoff):
                want = max_messages - len(deliveries)
                taken = schedule.take_run(now, stream.message_room(want) if stream else want)
                if taken:
                    count = len(taken)
                    room = None if max_bytes is None else max_bytes - total_bytes
                    first = not deliveries
                    run, size = self._deliver_run(taken, deadline, prefix, room, first, stream)
                    deliveries += run
                    total_bytes += size
                    if len(run) < count:
                        break  # the next would pass max_bytes or the stream's flow control
                    continue
                if schedule.exhausted():
                    continue
            entry = schedule.pop(now)
            if entry is None:
                continue
            message = entry.message
            if message.publish_time <= cutoff:
                # Leased past its retention, then nacked or expired along with an
                # earlier message of its key: the retention walk did not see it leased.
                self._ends.drop(entry.seq, now)
                continue
            if max_bytes is not None and deliveries and total_bytes + message.size > max_bytes:
                schedule.put_back(entry.seq)
                break
            total_bytes += message.size
            waiting.deliver(entry, now)
            generation = leases.lease(entry, deadline, stream)
            redelivered += generation > 1  # delivered before (0 or 1)
            attempt = entry.failed_attempts + 1 if count_attempts else 0
            deliveries.append(Delivery(f"{prefix}{entry.seq}-{generation}", message, attempt))
        self.counters.delivered += len(deliveries)
        self.counters.redelivered += redelivered
        return deliveries

    def _deliver_run(
        self,
        taken: list[Entry],
        deadline: float,
        prefix: str,
        room: int | None,
        first: bool,
        stream: StreamFlow | None,
    ) -> tuple[list[Delivery], int]:
        """``deliver``'s loop over ``taken`` (``Schedule.take_run``'s, no ordering keys,
        none past the retention) in a few passes: as many as fit in ``room`` bytes (None:
        no limit; ``first``: the first always goes) and in ``stream``'s flow control, out
        of the window, leased at once; the deliveries and their bytes. Those that do not
        fit are the next to go again."""
        sizes = [entry.message.size for entry in taken]
        fit = fitting_in(sizes, room, first) if room is not None else len(taken)
        if stream is not None:
            fit = stream.fitting(sizes[:fit])
        if fit < len(taken):
            self.waiting.schedule.put_back_run(taken[fit:])
            del taken[fit:]
            if not taken:
                return [], 0
        self.waiting.deliver_run(taken)
        generations = self.leases.lease_run(taken, deadline, stream)
        self.counters.redelivered += len(generations) - generations.count(1)
        deliveries = run_deliveries(taken, generations, prefix, self.rules.count_attempts)
        return deliveries, sum(sizes[:fit])

    def top_up(self, most: int) -> None:
        """Between requests, by the latest ``now``: ``Retention.top_up`` (a refill of at
        most ``most`` rows, off the path of the requests that would otherwise load them)."""
        self._settle_departures(self._retention.top_up(self._now, most), self._now)

    def _refill(self, now: float, want: int) -> bool:
        """Load cold messages into the window; False if none came."""
        loaded, left = self._retention.refill(now, want)
        self._settle_departures(left, now)
        return loaded

    # ------------------------------------------------------------ ack ids

    def resolve_parts(self, parts: AckIdParts | None) -> AckTarget | None:
        """The live lease an exactly-once ack id names (or an ack it made before a
        restart)."""
        return self._ack_ids.resolve(parts, self._now, self.leases.table)

    def lookup_parts(self, parts: AckIdParts | None) -> AckTarget | None:
        """The message an id of any of its deliveries names (without exactly-once)."""
        if parts is None:
            return None
        lease = self.leases.table.current(parts.seq)
        latest = lease[0] if lease is not None else self.waiting.generation(parts.seq)
        return self._ack_ids.lookup(parts, latest)

    def wellformed_parts(self, parts: AckIdParts | None) -> bool:
        """Issued by this subscription, now or before a seek."""
        return self._ack_ids.wellformed(parts)

    def first_unacked_before(self, target: AckTarget) -> bool:
        """Ordering + exactly-once: is an earlier message of the target's key unacked?"""
        return not target.acked and self.waiting.unacked_before(target.seq)

    # ------------------------------------------------------------ lease changes

    def extend(self, target: AckTarget, now: float, seconds: int) -> None:
        """ModifyAckDeadline with seconds > 0: the lease lasts ``seconds`` from ``now``."""
        if not target.acked:
            self.counters.modacked += 1
            self.leases.extend(target.seq, target.generation, now + seconds)

    def extend_many(
        self, seqs: Sequence[int], generations: Sequence[int], seconds: int
    ) -> list[int]:
        """``extend`` of the live leases a request's modack ids name, at once, by the latest
        ``now`` (as ``ack_many``); the positions of the other ids."""
        misses, moved = self.leases.extend_many(seqs, generations, self._now, self._now + seconds)
        self.counters.modacked += moved
        return misses

    def nack(self, target: AckTarget, now: float) -> None:
        """ModifyAckDeadline with seconds 0: the lease ends, a failed attempt."""
        self._now = now
        if not target.acked:
            self.counters.nacked += 1
            ended = self.leases.end(target.seq, failed=True)
            if ended is not None:
                lease, body = ended
                self._ends.lease_ended(lease, body, now, now)

    def nack_many(self, seqs: Sequence[int], generations: Sequence[int]) -> Sequence[int]:
        """``nack`` of the live leases a request's nack ids name, ``(seqs[i], generations[i])``
        of this subscription's uid, at once, by the latest ``now`` (as ``ack_many``;
        ``Leases.end_many``, ``LeaseEnds.nacked_many``); the positions of the other ids,
        for the caller's one-by-one path. With ordering keys (a nack rewinds its key's
        later messages) every id is one."""
        if self.waiting.ordered:
            return range(len(seqs))
        ended, held = self.leases.end_many(seqs, generations, self._now)
        if ended.seqs:
            self._ends.nacked_many(ended, held, self._now)
        return ended.misses

    # ------------------------------------------------------------ settled

    def ack(self, target: AckTarget) -> None:
        if not target.acked:  # else acked by this id before a restart: nothing to do
            self.counters.acked += 1
            self._settle(target.seq, True, self._now)

    def ack_many(
        self, seqs: Sequence[int], generations: Sequence[int], *, exact: bool
    ) -> list[int]:
        """Acknowledge the leases a request's ack ids name, ``(seqs[i], generations[i])``
        of this subscription's uid, at once: what ``resolve_parts`` (``exact``, exactly
        once) or ``lookup_parts`` then ``ack`` would do for each id naming a live lease
        (``Leases.settle_many``). The positions of the other ids, in order: the caller
        answers those one by one (``Acks``)."""
        now = self._now
        settled, held = self.leases.settle_many(seqs, generations, now, exact=exact)
        self.waiting.leases_left(settled.seqs)
        self.counters.acked += len(settled.seqs)
        self._settlement.settled_many(settled.seqs, settled.publish_times, held, now)
        return settled.misses

    def _settle(self, seq: int, acked: bool, now: float) -> bool:
        """Message ``seq`` leaves wherever the core holds it; ``acked``: by a client or a
        policy (retained if the subscription retains acknowledged messages), else
        dropped. False: the core does not hold it."""
        left = self._retention.take(seq, now)
        if left is None:
            return False
        self._settlement.settled(left, acked=acked, now=now)
        return True

    def _settle_departures(self, left: Departures, now: float) -> None:
        """What the retention (dropped) or the message TTL (acknowledged) took."""
        counters = self.counters
        for gone, acked in left:
            if acked:
                counters.expired_by_ttl += 1
            else:
                counters.discarded += 1
            self._settlement.settled(gone, acked=acked, now=now)

    # ------------------------------------------------------------ backlog policies

    def over_quota(self, now: float, limit_bytes: int | None, limit_age: float | None) -> bool:
        """Is the backlog over a quota of ``limit_bytes`` and ``limit_age`` seconds?"""
        if limit_bytes is not None and self.reads.backlog_bytes() > limit_bytes:
            return True
        if limit_age is None:
            return False
        oldest = self.reads.oldest_unacked()
        return oldest is not None and now - oldest > limit_age

    def evict(self, now: float, limit_bytes: int | None, limit_age: float | None) -> int:
        """Backlog-quota eviction: acknowledge the oldest messages until the backlog is
        within the quota; how many went."""
        evicted = 0
        while self.over_quota(now, limit_bytes, limit_age):
            if not self._take_oldest(now, acked=self.rules.retain_acked):
                break  # nothing left to take
            evicted += 1
        self.counters.evicted += evicted
        return evicted

    def trim(self, now: float, limit_bytes: float, *, keep_since: float = math.inf) -> int:
        """The retention cursor's size limit: forget the oldest beyond ``limit_bytes``, but
        never a message published at or after ``keep_since`` (the topic's
        message_retention_duration keeps those whatever their size: the two retentions
        combine by union, docs/policies.md)."""
        dropped = 0
        while self.reads.backlog_bytes() > limit_bytes:
            if not self._take_oldest(now, acked=False, keep_since=keep_since):
                break  # the oldest left is one that must stay
            dropped += 1
        return dropped

    def _take_oldest(self, now: float, *, acked: bool, keep_since: float = math.inf) -> bool:
        oldest, left = self._retention.take_oldest(now, keep_since=keep_since)
        self._settle_departures(left, now)
        if oldest is None:
            return False
        self._settlement.settled(oldest, acked=acked, now=now)
        return True

    def skip(self, seq: int) -> bool:
        """Acknowledge message ``seq`` as a subscriber would (PIP-423), waiting, leased,
        delayed or cold alike; False if it is not pending."""
        if not self._settle(seq, True, self._now):
            row = self.waiting.take_cold(seq, self.leases.table)
            if row is None:
                return False
            self._settlement.settled_cold(row, self._now)
        self.counters.skipped += 1
        return True

    # ------------------------------------------------------------ restart and seek

    def restore(self, stored: StoredSubscription) -> None:
        """After a restart: the uid and leases the store kept; every other
        unacknowledged message cold."""
        self._ack_ids.restore(stored.record.uid, stored.acks)
        deadlines = [lease.deadline for lease in stored.leases]
        deadlines += [ack.deadline for ack in stored.acks]
        leased = self.leases.restore(stored.leases, max(deadlines, default=-math.inf))
        self.waiting.restore(
            stored.backlog - len(stored.leases),
            stored.backlog_bytes - leased,
            [(lease.seq, lease.ordering_key) for lease in stored.leases],
        )

    def reset(
        self,
        uid: str,
        unacked: list[SeqMessage],
        acked: list[SeqMessage],
        now: float,
    ) -> None:
        """Seek: ``unacked`` become waiting (deliverable now, in publish order), ``acked``
        are acknowledged (kept for replay if the subscription retains acknowledged
        messages); nothing else remains.

        A new ``uid`` invalidates every ack id issued so far. O(n log n) for n messages;
        the store gets the new backlog whole, the window its oldest part.
        """
        self._ack_ids.renew(uid)
        self._now = now
        self.waiting.clear()
        self.leases.clear()
        cutoff = self.rules.retention_cutoff(now)
        retained = (
            sorted((seq, m) for seq, m in acked if m.publish_time > cutoff)
            if self.rules.retain_acked
            else []
        )
        backlog = sorted(
            ((seq, m) for seq, m in unacked if m.publish_time > cutoff), key=lambda item: item[0]
        )
        self.storage.reset(backlog, retained, uid)
        for seq, message in backlog:
            self.waiting.add(seq, message, now, now)
