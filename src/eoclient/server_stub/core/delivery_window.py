"""One subscription's backlog beyond memory: the window and the cold rows (core/store.py).

A mixin of ``SubscriptionDelivery``. With a store that bounds the window, only the oldest
part of the backlog is held in memory; the *cold* rest (``_cold`` rows, every seq above
``_loaded_through``) stays in the store and is loaded in seq order as the window drains.
Loading in seq order keeps the delivery invariants: an ordering key's loaded messages are
always a prefix of its sequence, and the oldest messages (the first to meet the retention
or the TTL) are always the loaded ones.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from eoclient.server_stub.core.backlog_entry import Counters, Entry
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import BacklogRow, SeqMessage

if TYPE_CHECKING:
    from eoclient.server_stub.core.store import SubscriptionStorage


class DeliveryWindow:
    if TYPE_CHECKING:  # provided by SubscriptionDelivery
        storage: SubscriptionStorage
        counters: Counters
        retention: float
        ttl: float | None
        retain_acked: bool
        _window: int | None
        _entries: dict[int, Entry]
        _by_publish: deque[tuple[float, int]]
        _cold: int
        _bytes: int
        _loaded_through: int

        def _admit(
            self, seq: int, message: StoredMessage, ready_at: float, failed_attempts: int
        ) -> None: ...

    # The fewest rows a refill asks the store for (when the window is nearly full of
    # leased messages, it still moves on): one store read per this many deliveries.
    MIN_REFILL = 100

    def _refill(self, now: float, want: int) -> bool:
        """Load the next cold rows into the window (seq order); False if none came.

        ``want``: how many deliveries the caller still asks for. The window may grow
        past its size (to twice it plus ``want``) when what it holds cannot be delivered
        yet — ordering keys waiting behind leased heads — so other keys get a chance;
        beyond that it waits for acks (every key it holds has its head in it, so
        something there is always deliverable or leased: no deadlock).
        """
        if not self._cold or self._window is None or len(self._entries) >= 2 * self._window + want:
            return False
        limit = max(self._window - len(self._entries), self.MIN_REFILL, want)
        rows: list[BacklogRow] = self.storage.backlog(self._loaded_through, limit)
        self._cold = self._cold - len(rows) if len(rows) == limit else 0
        if not rows:
            return False
        self._loaded_through = rows[-1].seq
        cutoff = now - self.retention
        ttl_cutoff = now - self.ttl if self.ttl is not None else -math.inf
        for row in rows:
            published = row.message.publish_time
            if published <= cutoff:
                self.counters.discarded += 1
                self._settle_cold(row.seq, row.message, retain=False)
            elif published <= ttl_cutoff:
                self.counters.expired_by_ttl += 1
                self._settle_cold(row.seq, row.message, retain=self.retain_acked)
            else:
                self._admit(row.seq, row.message, now, row.failed_attempts)
        return True

    def _settle_cold(self, seq: int, message: StoredMessage, *, retain: bool) -> None:
        """A message that was only in the store leaves the backlog (loaded or not)."""
        self._bytes -= message.size
        self.storage.settle((seq,), ((seq, message),) if retain else ())

    def restore_backlog(self, rows: int, size: int) -> None:
        """After a restart: the store holds ``rows`` unacknowledged messages of ``size``
        bytes in all, every one cold."""
        self._cold = rows
        self._bytes = size
        self._loaded_through = 0

    def window(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message held here (waiting or leased)."""
        return [(seq, entry.message) for seq, entry in self._entries.items()]

    def unacked(self) -> list[SeqMessage]:
        """(seq, message) of every unacknowledged message: the window and the cold rows."""
        held = self.window()
        if self._cold:
            held.extend(
                (row.seq, row.message)
                for row in self.storage.backlog(self._loaded_through, self._cold)
            )
        return held

    def oldest_publish_time(self) -> float | None:
        """Publish time of the oldest unacknowledged message (None: there is none).

        Cold rows were published after everything in the window (seq order), so the
        first of them counts only when the window is empty.
        """
        if self._entries:
            return min(entry.message.publish_time for entry in self._entries.values())
        if self._cold:
            rows = self.storage.backlog(self._loaded_through, 1)
            return rows[0].message.publish_time if rows else None
        return None
