"""How a message leaves one subscription for good: acknowledged, or dropped.

An acknowledged message is forgotten, here and in the store, wherever it was held: leased
(``lease_table.LeaseTable``), in the window or back from a lease with its body only in the
store (``window.Backlog``) — or, for a policy's settle by id, a cold row only the
store holds. What its leaving releases, at once:

* its ack ids stop resolving (its lease is gone) — INVALID_ACK_ID under exactly-once;
* the flow control of the stream that leased it (``stream_flow.OpenStreams``);
* its ordering key's next message, scheduled if it was the key's head
  (``key_order.KeyOrder``, ``schedule.Schedule``);
* its row in the store (``SubscriptionStorage.settle``), or the body the core kept for a
  lease when the store keeps none.

Acknowledged — by a client, the message TTL, a dead letter or a policy — it is handed to
the store as retained if the subscription retains acknowledged messages and it is within
the retention (``DeliveryRules``), for seek to replay; dropped (past the retention) it is
not.

Costs: a lookup in the lease table (O(log n), O(1) for acks in seq order), else a dict
lookup in the window; one store call; O(log n) to schedule the key's next message. A cold
row costs a store read.
"""

from __future__ import annotations

from eoclient.server_stub.core.delivery.entries import Counters
from eoclient.server_stub.core.delivery.key_order import KeyOrder
from eoclient.server_stub.core.delivery.lease_table import LeaseTable
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.delivery.schedule import Schedule
from eoclient.server_stub.core.delivery.stream_flow import OpenStreams
from eoclient.server_stub.core.delivery.window import Backlog
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import Acked, SubscriptionStorage


class Settlement:
    def __init__(
        self,
        window: Backlog,
        leases: LeaseTable,
        keys: KeyOrder,
        schedule: Schedule,
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
        self._streams = streams
        # Bodies of leased messages, when the store keeps none (``lease_lifecycle.py``).
        self._bodies = bodies
        self._rules = rules
        self._storage = storage
        self._counters = counters
        self._ordered = ordered
        # A store that bounds the window keeps every backlog row; one that does not
        # (``MemoryStore``) is handed only what it keeps: retained acknowledged messages.
        self._durable = storage.window is not None

    def discard(self, seq: int, now: float) -> None:
        """Past the retention: dropped, not retained."""
        self._counters.discarded += 1
        self.remove(seq, acked=False, now=now)

    def expire_by_ttl(self, seq: int, now: float) -> None:
        """Past the message TTL: acknowledged, leased or not."""
        self._counters.expired_by_ttl += 1
        self.remove(seq, acked=True, now=now)

    def remove(self, seq: int, *, acked: bool, now: float) -> bool:
        """Forget message ``seq`` wherever it is held (lease, window, returned), here and
        in the store; ``acked``: by a client or a policy, so retained if the subscription
        retains acknowledged messages. False: not held here."""
        position = -1
        message: StoredMessage | None = None
        ended = self._leases.settle(seq)
        if ended is not None:
            stream_id, size, published = ended
            if stream_id:
                self._streams.release(stream_id, size)
            waited = False
            if self._bodies is not None:
                message = self._bodies.pop(seq)
            key = self._keys.key_of(seq) if self._ordered else ""
        else:
            entry = self._window.take(seq)
            if entry is not None:
                message, waited = entry.message, True
                published = message.publish_time
                position = entry.key_position
                key = message.ordering_key if self._ordered else ""
            else:
                returned = self._window.take_returned(seq)
                if returned is None:
                    return False
                published, waited = returned.publish_time, True
                key = self._keys.key_of(seq) if self._ordered else ""
        if acked and self._rules.retain_acked and not self._rules.past_retention(published, now):
            self._storage.settle((seq,), (Acked(seq, published, message),))
        elif self._durable:
            self._storage.settle((seq,))
        if key:
            self._schedule.schedule(self._keys.removed(seq, key, position, waited=waited), now)
        return True

    def settle_anywhere(self, seq: int, now: float) -> bool:
        """Acknowledge message ``seq`` as a subscriber would, wherever it waits or is
        leased (a cold row too: read from the store); False if it is not pending here."""
        if self.remove(seq, acked=True, now=now):
            return True
        row = self._window.take_cold(seq, self._leases.__contains__)
        if row is None:
            return False
        published = row.message.publish_time
        retain = self._rules.retain_acked and not self._rules.past_retention(published, now)
        self._storage.settle((seq,), (Acked(seq, published, row.message),) if retain else ())
        return True
