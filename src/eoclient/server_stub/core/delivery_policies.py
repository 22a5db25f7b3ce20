"""What the Pulsar-style policies (``policies.py``) do to one subscription's backlog.

A mixin of ``SubscriptionDelivery``, kept apart so each file holds one concern: this one
acknowledges messages on an operator's or a policy's behalf — skip by id, backlog-quota
eviction, the retention cursor's size limit — and answers the quota's questions (bytes,
oldest age). Every removal goes through ``_remove`` / ``_settle_cold``, so ack ids of the
removed messages stop resolving (INVALID_ACK_ID under exactly-once), flow control is
released, the ordering key's next message is scheduled, and the store forgets the row.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING

from eoclient.server_stub.core.backlog_entry import Counters, Entry, State
from eoclient.server_stub.core.model import StoredMessage

if TYPE_CHECKING:
    from eoclient.server_stub.core.store import SubscriptionStorage


class DeliveryPolicies:
    if TYPE_CHECKING:  # provided by SubscriptionDelivery
        storage: SubscriptionStorage
        counters: Counters
        retain_acked: bool
        _entries: dict[int, Entry]
        _by_publish: deque[tuple[float, int]]
        _cold: int
        _bytes: int
        _loaded_through: int

        def _remove(self, entry: Entry, *, retain: bool = False) -> None: ...
        def _past_retention(self, entry: Entry) -> bool: ...
        def _settle_cold(self, seq: int, message: StoredMessage, *, retain: bool) -> None: ...
        def _refill(self, now: float, want: int) -> bool: ...

    # ------------------------------------------------------------ peek

    def peek(self, limit: int) -> list[tuple[StoredMessage, bool]]:
        """The oldest ``limit`` unacknowledged messages (seq order), each with whether it
        is leased now — read only: no lease, no attempt counted, nothing loaded into the
        window (cold rows are read from the store and left there)."""
        held = heapq.nsmallest(limit, self._entries)  # O(window log limit), not a full sort
        peeked = [
            (self._entries[seq].message, self._entries[seq].state is State.OUTSTANDING)
            for seq in held
        ]
        if len(peeked) < limit and self._cold:
            rows = self.storage.backlog(self._loaded_through, min(limit - len(peeked), self._cold))
            peeked.extend((row.message, False) for row in rows)
        return peeked

    # ------------------------------------------------------------ measures

    def backlog_bytes(self) -> int:
        """Sizes of every unacknowledged message (window and cold), as flow control counts."""
        return self._bytes

    def oldest_unacked(self) -> float | None:
        """Publish time of the oldest unacknowledged message (None: none). O(1) amortised."""
        by_publish = self._by_publish
        while by_publish and by_publish[0][1] not in self._entries:
            by_publish.popleft()
        if by_publish:
            return by_publish[0][0]
        if self._cold:  # only after a restart or a seek, until the first refill
            rows = self.storage.backlog(self._loaded_through, 1)
            return rows[0].message.publish_time if rows else None
        return None

    def over_quota(self, now: float, limit_bytes: int | None, limit_age: float | None) -> bool:
        if limit_bytes is not None and self._bytes > limit_bytes:
            return True
        if limit_age is not None:
            oldest = self.oldest_unacked()
            return oldest is not None and now - oldest > limit_age
        return False

    def delayed_pending(self, now: float) -> int:
        """Messages in the window held back by a delayed-delivery attribute."""
        return sum(
            1
            for entry in self._entries.values()
            if entry.state is State.WAITING and entry.message.deliver_at > now
        )

    # ------------------------------------------------------------ effects

    def skip(self, seq: int) -> bool:
        """Acknowledge message ``seq`` here as a subscriber would (PIP-423); False if it
        is not pending here. Waiting, leased, delayed or cold alike."""
        entry = self._entries.get(seq)
        if entry is not None:
            self.counters.skipped += 1
            self._remove(entry, retain=self.retain_acked and not self._past_retention(entry))
            return True
        if self._cold and seq > self._loaded_through:
            rows = self.storage.backlog(seq - 1, 1)
            if rows and rows[0].seq == seq:
                self._cold -= 1
                self.counters.skipped += 1
                self._settle_cold(seq, rows[0].message, retain=self.retain_acked)
                return True
        return False

    def evict(self, now: float, limit_bytes: int | None, limit_age: float | None) -> int:
        """Backlog quota eviction: acknowledge the oldest messages until the backlog is
        within ``limit_bytes`` and ``limit_age``; how many went."""
        evicted = self._drop_oldest(now, limit_bytes, limit_age, retain=self.retain_acked)
        self.counters.evicted += evicted
        return evicted

    def trim(self, now: float, limit_bytes: float, *, keep_since: float = math.inf) -> int:
        """The retention cursor's size limit: forget the oldest beyond ``limit_bytes``,
        but never a message published at or after ``keep_since`` (the topic's
        message_retention_duration keeps those whatever their size: the two retentions
        combine by union, docs/policies.md)."""
        if self._bytes <= limit_bytes:
            return 0
        return self._drop_oldest(now, int(limit_bytes), None, retain=False, keep_since=keep_since)

    def _drop_oldest(
        self,
        now: float,
        limit_bytes: int | None,
        limit_age: float | None,
        *,
        retain: bool,
        keep_since: float = math.inf,
    ) -> int:
        dropped = 0
        while self.over_quota(now, limit_bytes, limit_age):
            by_publish = self._by_publish
            while by_publish and by_publish[0][1] not in self._entries:
                by_publish.popleft()
            if not by_publish:
                if not self._refill(now, 1):
                    break  # nothing left to drop that this state can see
                continue
            if by_publish[0][0] >= keep_since:
                break  # the oldest left is one that must stay
            _, seq = by_publish.popleft()
            entry = self._entries[seq]
            self._remove(entry, retain=retain and not self._past_retention(entry))
            dropped += 1
        return dropped
