"""What one subscription holds, read without changing it: counts, bytes, ages, bodies.

For statistics (``stats.py``, ``subscriptions.describe``), the backlog quota
(``publishing.py``, ``engine.SubscriptionDelivery.over_quota``), snapshots and seek
(``snapshots.py``) and the operator's peek. No read leases a message, counts an attempt
or loads the window.

Costs: counts and bytes are kept as messages come and go, O(1); the oldest message is
O(1) amortised but for a store read when only cold rows and leases are left. Listing
messages is O(n): bodies in memory where the core holds them, else (a store that keeps
every body) a store read.
"""

from __future__ import annotations

import heapq

from eoclient.server_stub.core.delivery.leases import Leases
from eoclient.server_stub.core.delivery.settlement import Settlement
from eoclient.server_stub.core.delivery.waiting import Waiting
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import SeqMessage, SubscriptionStorage


class DeliveryReads:
    def __init__(
        self,
        waiting: Waiting,
        leases: Leases,
        settlement: Settlement,
        storage: SubscriptionStorage,
    ) -> None:
        self._waiting = waiting
        self._leases = leases
        self._settlement = settlement
        self._storage = storage
        # A store that bounds the window holds every unacknowledged row; one that does
        # not keeps none, and the core holds every body.
        self._durable = storage.window is not None

    def leased(self) -> int:
        """Messages leased to a client right now (the lease limit counts these)."""
        return len(self._leases.table)

    def backlog(self) -> int:
        """Unacknowledged messages: waiting (window, cold, returned) and leased."""
        return self._waiting.window.waiting() + len(self._leases.table)

    def backlog_bytes(self) -> int:
        """Sizes of every unacknowledged message, as flow control counts them."""
        return self._waiting.window.bytes + self._leases.table.bytes

    def oldest_unacked(self) -> float | None:
        """Publish time of the oldest unacknowledged message (None: none)."""
        window = self._waiting.window
        times = []
        oldest = window.oldest()
        if oldest is not None:
            times.append(oldest[0])
        lease = self._leases.table.oldest()
        if lease is not None:
            times.append(lease.publish_time)
        if oldest is None and window.cold():
            row = window.first_cold_row()
            if row is not None:
                times.append(row.message.publish_time)
        return min(times) if times else None

    def delayed_pending(self, now: float) -> int:
        """Messages in the window held back by a delayed-delivery attribute."""
        entries = self._waiting.window.entries.values()
        return sum(1 for entry in entries if entry.message.deliver_at > now)

    def held(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message whose body the core holds."""
        return self._waiting.window.window() + self._leases.bodies()

    def unacked(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message, in seq order."""
        if self._durable:
            rows = self._storage.backlog(0, self.backlog())
            return [(row.seq, row.message) for row in rows]
        return sorted(self.held(), key=_first)

    def retained(self) -> list[SeqMessage]:
        """Retained acknowledged messages, in seq order."""
        return self._settlement.retained()

    def peek(self, limit: int) -> list[tuple[StoredMessage, bool]]:
        """The oldest ``limit`` unacknowledged messages (seq order), each with whether it
        is leased now."""
        if self._durable:
            rows = self._storage.backlog(0, limit)
            return [(row.message, row.seq in self._leases.table) for row in rows]
        held = [
            *((seq, entry.message, False) for seq, entry in self._waiting.window.entries.items()),
            *((seq, message, True) for seq, message in self._leases.bodies()),
        ]
        return [(m, leased) for _, m, leased in heapq.nsmallest(limit, held, key=_first)]


def _first(item: tuple[int, StoredMessage] | tuple[int, StoredMessage, bool]) -> int:
    return item[0]
