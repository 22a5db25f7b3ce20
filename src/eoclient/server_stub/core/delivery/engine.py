"""Per-subscription delivery state: what is waiting, what is leased, what each ack id means.

One ``SubscriptionDelivery`` per subscription coordinates a message's life there: each
stage is decided in a room of its own, and this class calls them in turn. Every
unacknowledged message is either

* **waiting** (``window.Backlog``): in the window with its body, or only in the
  store — a cold row past the window's cursor, or returned from a lease. Those in the
  window that may go next are scheduled (``schedule.Schedule``), one an
  ordering key (``key_order.KeyOrder``);
* **leased** (``lease_table.LeaseTable``): delivered to a client until a deadline under
  one ack id. Leases do not count against the window, so a subscription may hold as many
  as the lease limit allows whatever the window's size.

The class's sections follow a message's life:

* published (``add``): into the window if it has room and nothing older is cold, else a
  cold row;
* time passes (``advance``): leases past their deadlines expire, delayed messages become
  ready, and what outlived the retention or the TTL goes (``retention.py``);
* leased (``deliver``, ``extend``, ``nack``): ``lease_lifecycle.py`` — a nack or an
  expiry makes the message wait again, or sends it to the dead-letter topic; an ack id
  names a lease through ``ack_resolution.py``;
* settled (``ack``, the policies): acknowledged by a client, the TTL, a dead letter or a
  policy, or dropped past the retention — ``settlement.py`` forgets it here and in
  the store (retained if the subscription retains acknowledged messages); what the
  policies choose (skip, backlog quota, the retention cursor's size) is
  ``backlog_policies.py``;
* restart (``restore``): the uid and leases the store kept, every other unacknowledged
  message cold; seek (``reset``): the whole state rebuilt from the messages the seek
  leaves unacked and the ones it leaves acked, under a new uid — every ack id issued
  before stops resolving and every message made unacked is delivered again.

The rules these follow (retry backoff, dead letters, retention, TTL, retained acks) are
``rules.DeliveryRules``; statistics, snapshots and peek read through
``reads.py``; the streams' flow control is ``stream_flow.OpenStreams``.

Costs, with n messages held: delivery, ack, nack, extension and expiry O(log n) each (the
heaps and the lease table); retention O(log n) a message dropped. Every change the store
must keep (settled, leases, failed attempts, retained, reset) is handed to ``storage`` as
it happens.
"""

from __future__ import annotations

import math

from eoclient.server_stub.core.ack_ids import AckIdParts
from eoclient.server_stub.core.delivery import backlog_policies
from eoclient.server_stub.core.delivery.ack_resolution import AckIdResolver, AckTarget
from eoclient.server_stub.core.delivery.entries import Counters, Entry
from eoclient.server_stub.core.delivery.key_order import KeyOrder
from eoclient.server_stub.core.delivery.lease_lifecycle import LeaseLifecycle
from eoclient.server_stub.core.delivery.lease_table import LeaseTable
from eoclient.server_stub.core.delivery.reads import DeliveryReads
from eoclient.server_stub.core.delivery.retention import Retention
from eoclient.server_stub.core.delivery.rules import DeliveryRules, Forwarder
from eoclient.server_stub.core.delivery.schedule import Schedule
from eoclient.server_stub.core.delivery.settlement import Settlement
from eoclient.server_stub.core.delivery.stream_flow import OpenStreams, StreamFlow
from eoclient.server_stub.core.delivery.window import Backlog
from eoclient.server_stub.core.model import Delivery, StoredMessage
from eoclient.server_stub.core.store import SeqMessage, StoredSubscription, SubscriptionStorage


class SubscriptionDelivery:
    """Delivery bookkeeping of one subscription. Pure: every change takes ``now``, or (an
    ack, a settle by id) uses the latest one given."""

    def __init__(
        self, uid: str, storage: SubscriptionStorage, *, ordered: bool, forward: Forwarder | None
    ) -> None:
        self.ordered = ordered
        self.storage = storage
        # The broker sets the rest from the subscription's config (and again when it or
        # its topic changes): ``resources.apply_policies``.
        self.rules = rules = DeliveryRules(forward=forward)
        self.counters = Counters()
        self.waiting = Backlog(storage)
        self.leases = LeaseTable()
        self.keys = KeyOrder(self.waiting, self.leases)  # unused when ordering is off
        self.schedule = Schedule(self.waiting, self.keys, ordered=ordered)
        self._streams = OpenStreams()
        # Bodies of leased messages, when the store keeps none (it does not bound the
        # window): a nack or an expiry puts the message back in the window with it.
        self._bodies: dict[int, StoredMessage] | None = {} if storage.window is None else None
        self._settlement = Settlement(
            self.waiting,
            self.leases,
            self.keys,
            self.schedule,
            self._streams,
            self._bodies,
            rules=rules,
            storage=storage,
            counters=self.counters,
            ordered=ordered,
        )
        self._retention = Retention(
            self.waiting, self.leases, self.schedule, self._settlement, rules=rules, storage=storage
        )
        self._lease_life = LeaseLifecycle(
            self.waiting,
            self.leases,
            self.keys,
            self.schedule,
            self._settlement,
            self._retention,
            self._streams,
            self._bodies,
            rules=rules,
            storage=storage,
            counters=self.counters,
            ordered=ordered,
        )
        self._ack_ids = AckIdResolver(uid, self.leases, self.waiting)
        self._reads = DeliveryReads(
            self.waiting, self.leases, self._bodies, rules=rules, storage=storage
        )
        # The latest ``now`` a change was given: acks and settles by id, which take
        # none, decide by it (the rooms calling them advance the state first).
        self._now = -math.inf

    def __repr__(self) -> str:
        return (
            f"<SubscriptionDelivery {self.uid} [{self.waiting!r}, {len(self.leases)} leased | "
            f"{len(self._streams)} streams]>"
        )

    @property
    def uid(self) -> str:
        """The uid of the ack ids issued from now on."""
        return self._ack_ids.uid

    @property
    def retain_acked(self) -> bool:
        return self.rules.retain_acked

    def set_retain_acked(self, retain: bool) -> None:
        self.rules.retain_acked = retain
        if not retain:
            self.storage.drop_retained()

    # ------------------------------------------------------------ published

    def add(self, seq: int, message: StoredMessage, ready_at: float, now: float) -> None:
        """A message published to the topic (and matching the subscription) arrives: into
        the window if it has room and nothing is cold (seq order), else it stays a cold
        row of the store (which the publish gave it)."""
        self._now = now
        if self.waiting.accepts():
            self.schedule.admit(Entry(seq, message, ready_at=ready_at), returned=False, now=now)
        else:
            self.waiting.add_cold(message.size)

    def filtered(self) -> None:
        """A published message did not match the filter: acknowledged at once
        (docs/protocol.md#filter-language)."""
        self.counters.filtered += 1

    # ------------------------------------------------------------ time passes

    def advance(self, now: float) -> None:
        """Expire leases whose deadline has passed, release delayed messages, apply the
        retention and the TTL, let the store forget leases past their deadlines."""
        self._now = now
        self._lease_life.expire(now)
        self.schedule.release_due(now)
        self._retention.enforce(now)
        self._ack_ids.forget(now)
        self._lease_life.forget_stored(now)

    def next_wakeup(self) -> float | None:
        """The earliest time at which ``advance`` would change something (may be stale-early)."""
        candidates = (
            self.leases.next_deadline(),
            self.schedule.next_release(),
            self._retention.next_due(),
            self._lease_life.next_forget(),
        )
        return min((t for t in candidates if t is not None), default=None)

    # ------------------------------------------------------------ leased

    def has_deliverable(self, now: float) -> bool:
        self.advance(now)
        while not self.schedule.has_ready(now):
            if not self._retention.refill(now, 1):
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
        """Lease up to ``max_messages`` messages (fewer if the stream's flow control says
        so, or if ``max_bytes`` would be passed — but for the first message)."""
        self.advance(now)
        stream = self._streams.get(stream_id) if stream_id is not None else None
        deadline = now + ack_deadline
        uid = self._ack_ids.uid
        return self._lease_life.deliver(now, max_messages, deadline, stream, uid, max_bytes)

    # ------------------------------------------------------------ ack ids

    def resolve_parts(self, parts: AckIdParts | None) -> AckTarget | None:
        """The live lease an exactly-once ack id names (or an ack it made before a
        restart)."""
        return self._ack_ids.resolve(parts, self._now)

    def lookup_parts(self, parts: AckIdParts | None) -> AckTarget | None:
        """The message an id of any of its deliveries names (without exactly-once)."""
        return self._ack_ids.lookup(parts)

    def wellformed_parts(self, parts: AckIdParts | None) -> bool:
        return self._ack_ids.wellformed(parts)

    def first_unacked_before(self, target: AckTarget) -> bool:
        """Ordering + exactly-once: is an earlier message of the target's key unacked?"""
        return self.ordered and not target.acked and self.keys.unacked_before(target.seq)

    def extend(self, target: AckTarget, now: float, seconds: int) -> None:
        if not target.acked:
            self._lease_life.extend(target.seq, target.generation, now + seconds)

    def nack(self, target: AckTarget, now: float) -> None:
        self._now = now
        if not target.acked:
            self._lease_life.nack(target.seq, now)

    # ------------------------------------------------------------ settled

    def ack(self, target: AckTarget) -> None:
        if not target.acked:  # else acked by this id before a restart: nothing to do
            self.counters.acked += 1
            self._settlement.remove(target.seq, acked=True, now=self._now)

    def settle_message(self, seq: int) -> bool:
        """Acknowledge message ``seq`` wherever it waits or is leased (a cold row too);
        False if it is not pending here."""
        return self._settlement.settle_anywhere(seq, self._now)

    def drop_oldest(self, now: float, *, retain: bool, keep_since: float = math.inf) -> bool:
        """Remove the oldest unacknowledged message (kept as acked if ``retain``), unless
        it was published at or after ``keep_since``; False if none went."""
        return self._retention.drop_oldest(now, retain=retain, keep_since=keep_since)

    def over_quota(self, now: float, limit_bytes: int | None, limit_age: float | None) -> bool:
        return backlog_policies.over_quota(self, now, limit_bytes, limit_age)

    def evict(self, now: float, limit_bytes: int | None, limit_age: float | None) -> int:
        return backlog_policies.evict(self, now, limit_bytes, limit_age)

    def trim(self, now: float, limit_bytes: float, *, keep_since: float = math.inf) -> int:
        return backlog_policies.trim(self, now, limit_bytes, keep_since=keep_since)

    def skip(self, seq: int) -> bool:
        return backlog_policies.skip(self, seq)

    # ------------------------------------------------------------ streams

    def open_stream(self, flow: StreamFlow) -> None:
        self._streams.open(flow)

    def close_stream(self, stream_id: int) -> None:
        self._streams.close(stream_id)

    def stream(self, stream_id: int) -> StreamFlow | None:
        return self._streams.get(stream_id)

    def streams(self) -> list[StreamFlow]:
        """The flow control of every stream open on the subscription (for inspection)."""
        return self._streams.all()

    def open_stream_count(self) -> int:
        return len(self._streams)

    # ------------------------------------------------------------ reads

    def leased(self) -> int:
        return self._reads.leased()

    def backlog(self) -> int:
        return self._reads.backlog()

    def backlog_bytes(self) -> int:
        return self._reads.backlog_bytes()

    def oldest_unacked(self) -> float | None:
        return self._reads.oldest_unacked()

    def oldest_publish_time(self) -> float | None:
        return self._reads.oldest_unacked()

    def delayed_pending(self, now: float) -> int:
        return self._reads.delayed_pending(now)

    def window(self) -> list[SeqMessage]:
        return self._reads.held()

    def unacked(self) -> list[SeqMessage]:
        return self._reads.unacked()

    def retained(self) -> list[SeqMessage]:
        return self._reads.retained()

    def peek(self, limit: int) -> list[tuple[StoredMessage, bool]]:
        return self._reads.peek(limit)

    # ------------------------------------------------------------ restart and seek

    def restore(self, stored: StoredSubscription) -> None:
        """After a restart: the uid and leases the store kept; every other
        unacknowledged message cold."""
        self._ack_ids.restore(stored.record.uid, stored.acks)
        deadlines = [lease.deadline for lease in stored.leases]
        deadlines += [ack.deadline for ack in stored.acks]
        leased = self._lease_life.restore(stored.leases, max(deadlines, default=-math.inf))
        self.waiting.restore(stored.backlog - len(stored.leases), stored.backlog_bytes - leased)

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
        self._ack_ids.renew(uid)
        self._now = now
        self.waiting.clear()
        self.leases.clear()
        if self._bodies is not None:
            self._bodies.clear()
        self.schedule.clear()
        self.keys.clear()
        self._streams.release_all()
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
            self.add(seq, message, now, now)
