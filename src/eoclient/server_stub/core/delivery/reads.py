"""What one subscription holds, read without changing it: counts, bytes, ages, bodies.

For statistics (``stats.py``, ``subscriptions.describe``), the backlog quota
(``backlog_policies.py``), snapshots and seek (``snapshots.py``) and the operator's peek.
No read leases a message, counts an attempt or loads the window.

Costs: counts and bytes are kept as messages come and go, O(1); the oldest message is
O(1) amortised but for a store read when only cold rows and leases are left. Listing
messages is O(n): bodies in memory where the core holds them, else (a store that keeps
every body) a store read.
"""

from __future__ import annotations

import heapq

from eoclient.server_stub.core.delivery.lease_table import LeaseTable
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.delivery.window import Backlog
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import SeqMessage, SubscriptionStorage


class DeliveryReads:
    def __init__(
        self,
        window: Backlog,
        leases: LeaseTable,
        bodies: dict[int, StoredMessage] | None,
        *,
        rules: DeliveryRules,
        storage: SubscriptionStorage,
    ) -> None:
        self._window = window
        self._leases = leases
        # Bodies of leased messages, when the store keeps none (``lease_lifecycle.py``);
        # None: the store holds every unacknowledged row.
        self._bodies = bodies
        self._rules = rules
        self._storage = storage

    def leased(self) -> int:
        """Messages leased to a client right now (the lease limit counts these)."""
        return len(self._leases)

    def backlog(self) -> int:
        """Unacknowledged messages: waiting (window, cold, returned) and leased."""
        return self._window.waiting() + len(self._leases)

    def backlog_bytes(self) -> int:
        """Sizes of every unacknowledged message, as flow control counts them."""
        return self._window.bytes + self._leases.bytes

    def oldest_unacked(self) -> float | None:
        """Publish time of the oldest unacknowledged message (None: none)."""
        times = []
        oldest = self._window.oldest()
        if oldest is not None:
            times.append(oldest[0])
        lease = self._leases.oldest()
        if lease is not None:
            times.append(lease.publish_time)
        if oldest is None and self._window.cold():
            row = self._window.first_cold_row()
            if row is not None:
                times.append(row.message.publish_time)
        return min(times) if times else None

    def delayed_pending(self, now: float) -> int:
        """Messages in the window held back by a delayed-delivery attribute."""
        entries = self._window.entries.values()
        return sum(1 for entry in entries if entry.message.deliver_at > now)

    def held(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message whose body the core holds."""
        held = self._window.window()
        if self._bodies is not None:
            held.extend(self._bodies.items())
        return held

    def unacked(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message, in seq order."""
        if self._bodies is None:
            rows = self._storage.backlog(0, self.backlog())
            return [(row.seq, row.message) for row in rows]
        return sorted(self.held(), key=_first)

    def retained(self) -> list[SeqMessage]:
        """Retained acknowledged messages (``retain_acked``), in seq order."""
        return self._storage.retained() if self._rules.retain_acked else []

    def peek(self, limit: int) -> list[tuple[StoredMessage, bool]]:
        """The oldest ``limit`` unacknowledged messages (seq order), each with whether it
        is leased now."""
        if self._bodies is None:
            rows = self._storage.backlog(0, limit)
            return [(row.message, row.seq in self._leases) for row in rows]
        held = [
            *((seq, entry.message, False) for seq, entry in self._window.entries.items()),
            *((seq, message, True) for seq, message in self._bodies.items()),
        ]
        return [(m, leased) for _, m, leased in heapq.nsmallest(limit, held, key=_first)]


def _first(item: tuple[int, StoredMessage] | tuple[int, StoredMessage, bool]) -> int:
    return item[0]
