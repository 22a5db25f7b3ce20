"""The backlog of one subscription as one sequence by age — waiting messages and leases
together — and what time does to it: the retention, the message TTL, and the refills of
the window, where cold messages meet both.

* Retention: a message older than ``DeliveryRules.retention`` (since its publish time)
  is gone. A waiting message is dropped when its time is up; a leased one stays leased
  (its ack still succeeds) and is dropped at its next nack or expiry instead of waiting
  again (``engine.py``). Retained acknowledged messages are pruned by the same cutoff
  (``settlement.py``).
* Message TTL (``DeliveryRules.ttl``): a message older than it is acknowledged, leased
  or not (its ack ids stop resolving).
* Refill: the next cold messages are loaded into the window in seq order and scheduled;
  one loaded past the retention is dropped and one past the TTL acknowledged (their turn
  came while they were cold).
* The oldest message, taken on a policy's demand (``take_oldest``: backlog-quota
  eviction, the retention cursor's size limit).

Nothing here settles: what leaves is handed back as ``Left`` records, each with whether
it is acknowledged, for the caller to settle (``engine.SubscriptionDelivery``).

The walk looks only at the oldest message in memory (the window's, a returned one's, the
oldest lease): O(log n) a message that leaves, O(1) amortised when none does. Only with
nothing left in memory does it read the store, one refill at a time, so that a
subscription nobody pulls still loses its expired cold rows.
"""

from __future__ import annotations

import math

from eoclient.server_stub.core.delivery.entries import Left
from eoclient.server_stub.core.delivery.leases import Leases
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.delivery.waiting import Waiting

# What left, each with whether it is acknowledged (else dropped).
_new_tuple = tuple.__new__
Departures = list[tuple[Left, bool]]


class Retention:
    def __init__(self, waiting: Waiting, leases: Leases, rules: DeliveryRules) -> None:
        self._waiting = waiting
        self._leases = leases
        self._rules = rules

    def take(self, seq: int, now: float) -> Left | None:
        """Message ``seq`` out of the backlog wherever the core holds it (leased, or
        waiting in memory); None if it holds it nowhere."""
        ended = self._leases.settle(seq)
        if ended is None:
            return self._waiting.remove(seq, now)
        self._waiting.lease_left(seq)
        # tuple.__new__, not Left(...): every ack comes here (ack_ids.parse_ack_id).
        return _new_tuple(Left, (seq, *ended))

    def enforce(self, now: float) -> Departures:
        """Drop what outlived the retention; acknowledge what outlived the message TTL
        (leased or not: its ack ids stop resolving)."""
        cutoff = self._rules.retention_cutoff(now)
        ttl_cutoff = self._rules.ttl_cutoff(now)
        window = self._waiting.window
        left: Departures = []
        table = self._leases.table
        while True:
            left += self._waiting.drop_older(cutoff, ttl_cutoff, now)
            if self._rules.ttl is not None:
                while (lease := table.oldest()) is not None and lease.publish_time <= ttl_cutoff:
                    gone = self.take(lease.seq, now)
                    if gone is not None:
                        left.append((gone, True))
            # Nothing newer waits in memory: the oldest cold rows may be due too (a
            # refill drops or acknowledges those, and loads the rest).
            if not window.cold() or window.oldest() is not None:
                break
            loaded, more = self._waiting.refill(now, 0, table, cutoff, ttl_cutoff)
            left += more
            if not loaded:
                break
        return left

    def refill(self, now: float, want: int) -> tuple[bool, Departures]:
        """Load the next cold messages into the window (seq order) for ``want`` more
        deliveries: whether any came, and what left at once."""
        return self._waiting.refill(
            now,
            want,
            self._leases.table,
            self._rules.retention_cutoff(now),
            self._rules.ttl_cutoff(now),
        )

    def top_up(self, now: float, most: int) -> Departures:
        """Between requests: up to ``most`` cold messages into a window that holds fewer
        than its size (``refill``: what a later delivery would have loaded then), and
        what left at once. Loading early changes nothing a client sees: a refill always
        loads the oldest cold rows, and what leaves by the retention or the TTL was due
        already."""
        most = min(most, self._waiting.window.shortfall())
        if not most:
            return []
        cutoff, ttl_cutoff = self._rules.retention_cutoff(now), self._rules.ttl_cutoff(now)
        table = self._leases.table
        return self._waiting.refill(now, 0, table, cutoff, ttl_cutoff, most)[1]

    def take_oldest(
        self, now: float, *, keep_since: float = math.inf
    ) -> tuple[Left | None, Departures]:
        """The oldest unacknowledged message out, unless it was published at or after
        ``keep_since`` (None: none went); and what a refill on the way took."""
        window = self._waiting.window
        left: Departures = []
        if window.oldest() is None and window.cold():
            _, left = self.refill(now, 1)
        oldest = window.oldest()
        lease = self._leases.table.oldest()
        if lease is not None and (oldest is None or (lease.publish_time, lease.seq) < oldest):
            oldest = (lease.publish_time, lease.seq)
        if oldest is None or oldest[0] >= keep_since:
            return None, left
        return self.take(oldest[1], now), left

    def next_due(self, oldest_retained: float | None) -> float | None:
        """When the oldest message held, or retained (``oldest_retained``: its publish
        time), meets the retention or the TTL (None: never, as things stand)."""
        rules, window = self._rules, self._waiting.window
        candidates = []
        # The oldest waiting message's publish time, or a bound at or before it (a wake-up
        # may come early: then ``enforce`` looks, which makes the bound exact, so an early
        # wake-up in the past cannot repeat; the bound spares every call here the heap
        # pops of the records delivered messages left behind). With nothing waiting in
        # memory and cold rows (after a restart or a seek) it is the first cold row's,
        # read from the store: otherwise only a Pull would load them, and a subscription
        # nobody pulls — the topic's retention cursor above all — would keep expired rows
        # (and the topic's garbage behind them) for ever. Only then: ``enforce`` can
        # always load (and drop) that row, so a wake-up in the past cannot repeat.
        head = window.oldest_bound()
        if head is None and window.cold():
            row = window.first_cold_row()
            head = row.message.publish_time if row is not None else None
        if head is not None and rules.retention != math.inf:
            candidates.append(head + rules.retention)
        if rules.ttl is not None:
            lease = self._leases.table.oldest()
            if lease is not None:
                head = lease.publish_time if head is None else min(head, lease.publish_time)
            if head is not None:
                candidates.append(head + rules.ttl)
        if oldest_retained is not None and rules.retention != math.inf:
            candidates.append(oldest_retained + rules.retention)
        return min(candidates) if candidates else None
