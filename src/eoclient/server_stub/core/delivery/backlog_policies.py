"""What the Pulsar-style policies (``policies.py``) do to one subscription's backlog.

Functions over ``PolicyTarget``, the small interface a subscription's delivery state
(``engine.SubscriptionDelivery``) offers them: they decide which messages go and count
them; the delivery state removes a message wherever it waits or is leased
(``settlement.py``), so that its ack ids stop resolving (INVALID_ACK_ID under
exactly-once), flow control is released, its ordering key's next message is scheduled
and the store forgets the row.

* skip by id (PIP-423): one message, acknowledged as a subscriber would;
* backlog-quota eviction: the oldest messages, acknowledged, until the backlog is within
  the quota's bytes and age;
* the retention cursor's size limit: the oldest messages, forgotten, beyond the limit.
"""

from __future__ import annotations

import math
from typing import Protocol

from eoclient.server_stub.core.delivery.entries import Counters


class PolicyTarget(Protocol):
    """What a policy may read and do to one subscription's backlog."""

    counters: Counters

    @property
    def retain_acked(self) -> bool:
        """Are acknowledged messages retained (an eviction keeps them as acked)?"""
        ...

    def backlog_bytes(self) -> int:
        """Sizes of every unacknowledged message (waiting and leased)."""
        ...

    def oldest_unacked(self) -> float | None:
        """Publish time of the oldest unacknowledged message (None: none)."""
        ...

    def settle_message(self, seq: int) -> bool:
        """Acknowledge message ``seq`` wherever it waits or is leased; False if it is not
        pending here."""
        ...

    def drop_oldest(self, now: float, *, retain: bool, keep_since: float = math.inf) -> bool:
        """Remove the oldest unacknowledged message (kept as acked if ``retain``), unless it
        was published at or after ``keep_since``; False if none went."""
        ...


def over_quota(
    target: PolicyTarget, now: float, limit_bytes: int | None, limit_age: float | None
) -> bool:
    if limit_bytes is not None and target.backlog_bytes() > limit_bytes:
        return True
    if limit_age is not None:
        oldest = target.oldest_unacked()
        return oldest is not None and now - oldest > limit_age
    return False


def skip(target: PolicyTarget, seq: int) -> bool:
    """Acknowledge message ``seq`` as a subscriber would (PIP-423); False if it is not
    pending. Waiting, leased, delayed or cold alike."""
    if not target.settle_message(seq):
        return False
    target.counters.skipped += 1
    return True


def evict(
    target: PolicyTarget, now: float, limit_bytes: int | None, limit_age: float | None
) -> int:
    """Backlog quota eviction: acknowledge the oldest messages until the backlog is within
    ``limit_bytes`` and ``limit_age``; how many went."""
    evicted = 0
    while over_quota(target, now, limit_bytes, limit_age):
        if not target.drop_oldest(now, retain=target.retain_acked):
            break  # nothing left to drop
        evicted += 1
    target.counters.evicted += evicted
    return evicted


def trim(
    target: PolicyTarget, now: float, limit_bytes: float, *, keep_since: float = math.inf
) -> int:
    """The retention cursor's size limit: forget the oldest beyond ``limit_bytes``, but
    never a message published at or after ``keep_since`` (the topic's
    message_retention_duration keeps those whatever their size: the two retentions
    combine by union, docs/policies.md)."""
    dropped = 0
    while target.backlog_bytes() > limit_bytes:
        if not target.drop_oldest(now, retain=False, keep_since=keep_since):
            break  # the oldest left is one that must stay
        dropped += 1
    return dropped
