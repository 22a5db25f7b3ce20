"""The rules one subscription delivers by: retry backoff, dead letters, retention, TTL.

The broker sets them from the subscription's config and its topic's policies
(``resources.py``) and sets them again whenever either changes: one ``DeliveryRules`` a
subscription, changed in place, so that every part of its delivery state holding it sees
the change at once — a lease's end (``engine.py``: backoff, dead letters), the
retention walk (``retention.py``: retention, TTL) and settling
(``settlement.py``: whether an acknowledged message is retained). Each rule is a
field read or an O(1) computation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from eoclient.server_stub.core.model import RetryPolicy, StoredMessage

# ``forward(message, delivery_count) -> bool``: publish to the dead-letter topic;
# False when that is impossible now (the topic is gone) and the message must stay.
Forwarder = Callable[[StoredMessage, int], bool]


@dataclass(slots=True)
class DeliveryRules:
    retry_policy: RetryPolicy | None = None  # None: redeliver as soon as possible
    count_attempts: bool = False  # deliveries carry their delivery_attempt (dead letters on)
    max_delivery_attempts: int | None = None  # None: no dead lettering
    forward: Forwarder | None = None
    retention: float = math.inf  # seconds since publish; inf: kept until acked
    ttl: float | None = None  # message TTL (policies.py): acknowledged when older
    retain_acked: bool = False  # acknowledged messages kept (for seek) until retention

    def backoff(self, failed_attempts: int) -> float:
        """How long a message waits after its ``failed_attempts``-th nack or expiry."""
        policy = self.retry_policy
        if policy is None:
            return 0.0
        # Exponential between the bounds: min * 2^(n-1), capped at max. The service
        # documents "exponential backoff" without a formula (docs/protocol.md#retry-backoff).
        exponent = max(failed_attempts - 1, 0)
        return float(min(policy.maximum_backoff, policy.minimum_backoff * (2 ** min(exponent, 32))))

    def attempts_used_up(self, failed_attempts: int) -> bool:
        """Does this failure send the message to the dead-letter topic instead?"""
        limit = self.max_delivery_attempts
        return limit is not None and failed_attempts >= limit

    def retention_cutoff(self, now: float) -> float:
        """Messages published at or before this are past the retention."""
        return now - self.retention

    def ttl_cutoff(self, now: float) -> float:
        """Messages published at or before this are past the message TTL."""
        return now - self.ttl if self.ttl is not None else -math.inf

    def past_retention(self, publish_time: float, now: float) -> bool:
        return publish_time <= now - self.retention
