"""Messages of one subscription that outlive its retention or its message TTL, and the
refills of its window, where cold messages meet both.

* Retention: a message older than ``DeliveryRules.retention`` (since its publish time)
  is gone. A waiting message is dropped when its time is up; a leased one stays leased
  (its ack still succeeds) and is dropped at its next nack or expiry instead of waiting
  again (``lease_lifecycle.py``). Retained acknowledged messages are pruned by the same
  cutoff.
* Message TTL (``DeliveryRules.ttl``): a message older than it is acknowledged, leased
  or not (its ack ids stop resolving).
* Refill: the next cold messages are loaded into the window (``window.Backlog``)
  in seq order and scheduled; one loaded past the retention is dropped and one past the
  TTL acknowledged (their turn came while they were cold).
* The oldest message, dropped or acknowledged on a policy's demand (``drop_oldest``:
  backlog-quota eviction, the retention cursor's size limit).

The walk looks only at the oldest message in memory (the window's, a returned one's, the
oldest lease): O(log n) a message that leaves, O(1) amortised when none does. Only with
nothing left in memory does it read the store, one refill at a time, so that a
subscription nobody pulls still loses its expired cold rows.
"""

from __future__ import annotations

import math

from eoclient.server_stub.core.delivery.entries import Entry
from eoclient.server_stub.core.delivery.lease_table import LeaseTable
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.delivery.schedule import Schedule
from eoclient.server_stub.core.delivery.settlement import Settlement
from eoclient.server_stub.core.delivery.window import Backlog, Loaded
from eoclient.server_stub.core.store import SubscriptionStorage


class Retention:
    def __init__(
        self,
        window: Backlog,
        leases: LeaseTable,
        schedule: Schedule,
        settlement: Settlement,
        *,
        rules: DeliveryRules,
        storage: SubscriptionStorage,
    ) -> None:
        self._window = window
        self._leases = leases
        self._schedule = schedule
        self._settlement = settlement
        self._rules = rules
        self._storage = storage

    def enforce(self, now: float) -> None:
        """Drop what outlived the retention; acknowledge what outlived the message TTL
        (leased or not: its ack ids stop resolving)."""
        window, settlement = self._window, self._settlement
        cutoff = self._rules.retention_cutoff(now)
        ttl_cutoff = self._rules.ttl_cutoff(now)
        while True:
            newer_found = False
            while (oldest := window.oldest()) is not None:
                published, seq = oldest
                if published <= cutoff:
                    settlement.discard(seq, now)
                elif published <= ttl_cutoff:
                    settlement.expire_by_ttl(seq, now)
                else:
                    newer_found = True
                    break
            while (lease := self._leases.oldest()) is not None and lease.publish_time <= ttl_cutoff:
                settlement.expire_by_ttl(lease.seq, now)
            # Nothing newer was held: the oldest cold rows may be due too (a refill
            # drops or acknowledges those, and loads the rest).
            if newer_found or not window.cold() or not self.refill(now, 0):
                break
        if self._rules.retain_acked:
            self._storage.prune_retained(cutoff)

    def refill(self, now: float, want: int) -> bool:
        """Load the next cold messages into the window (seq order) for ``want`` more
        deliveries; False if none came."""
        loaded: list[Loaded] = self._window.load(want, self._leases.__contains__)
        if not loaded:
            return False
        cutoff = self._rules.retention_cutoff(now)
        ttl_cutoff = self._rules.ttl_cutoff(now)
        for item in loaded:
            entry = Entry(
                item.seq,
                item.message,
                ready_at=now if item.ready_at is None else item.ready_at,
                generation=item.generation,
                failed_attempts=item.failed_attempts,
            )
            self._schedule.admit(entry, returned=item.returned, now=now)
            published = item.message.publish_time
            if published <= cutoff:
                self._settlement.discard(item.seq, now)
            elif published <= ttl_cutoff:
                self._settlement.expire_by_ttl(item.seq, now)
        return True

    def drop_oldest(self, now: float, *, retain: bool, keep_since: float = math.inf) -> bool:
        """Acknowledge (``retain``: as acked, else as dropped) the oldest unacknowledged
        message, unless it was published at or after ``keep_since``; False if none went."""
        window = self._window
        if window.oldest() is None and window.cold():
            self.refill(now, 1)
        oldest = window.oldest()
        lease = self._leases.oldest()
        if lease is not None and (oldest is None or (lease.publish_time, lease.seq) < oldest):
            oldest = (lease.publish_time, lease.seq)
        if oldest is None or oldest[0] >= keep_since:
            return False
        return self._settlement.remove(oldest[1], acked=retain, now=now)

    def next_due(self) -> float | None:
        """When the oldest message held, or retained, meets the retention or the TTL
        (None: never, as things stand)."""
        rules, window = self._rules, self._window
        candidates = []
        # The oldest waiting message's publish time. With nothing waiting in memory and
        # cold rows (after a restart or a seek) it is the first cold row's, read from the
        # store: otherwise only a Pull would load them, and a subscription nobody pulls —
        # the topic's retention cursor above all — would keep expired rows (and the
        # topic's garbage behind them) for ever. Only then: ``enforce`` can always load
        # (and drop) that row, so a wake-up in the past cannot repeat.
        oldest = window.oldest()
        head = oldest[0] if oldest is not None else None
        if head is None and window.cold():
            row = window.first_cold_row()
            head = row.message.publish_time if row is not None else None
        if head is not None and rules.retention != math.inf:
            candidates.append(head + rules.retention)
        if rules.ttl is not None:
            lease = self._leases.oldest()
            if lease is not None:
                head = lease.publish_time if head is None else min(head, lease.publish_time)
            if head is not None:
                candidates.append(head + rules.ttl)
        retained = self._storage.oldest_retained() if rules.retain_acked else None
        if retained is not None and rules.retention != math.inf:
            candidates.append(retained + rules.retention)
        return min(candidates) if candidates else None
