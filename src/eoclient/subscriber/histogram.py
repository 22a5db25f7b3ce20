"""Ack-latency distribution and the lease deadline derived from it.

The subscriber extends leases by the 99th percentile of how long the application
has taken to ack, bounded by the user's settings
(docs/protocol.md#ack-deadline-from-the-latency-histogram; Go
``internal/distribution/distribution.go`` and ``iterator.go::boundedDuration``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from eoclient.subscriber.settings import MAX_ACK_DEADLINE, MIN_ACK_DEADLINE

__all__ = [
    "EXACTLY_ONCE_MIN_DEADLINE",
    "HistogramStatistics",
    "LatencyHistogram",
    "bounded_deadline",
]

# With exactly-once delivery and no user floor, leases are at least 60 s: an expired ack id can
# no longer be acked at all under EOD (docs/protocol.md#exactly-once-semantics, rule 5), so a longer
# lease trades a later redelivery for fewer failed acks. Python
# _MIN_ACK_DEADLINE_SECS_WHEN_EXACTLY_ONCE_ENABLED, Go minDurationPerLeaseExtensionExactlyOnce
# (docs/protocol.md#ack-deadline-from-the-latency-histogram).
EXACTLY_ONCE_MIN_DEADLINE = 60


@dataclass(frozen=True, slots=True)
class HistogramStatistics:
    """Attributes: ``count`` values recorded; ``p99`` their 99th percentile (seconds)."""

    count: int
    p99: int


class LatencyHistogram:
    """Ack latencies in whole seconds, clamped to the ack-deadline range [10, 600].

    One counter per possible value (591 buckets): ``record`` is O(1) and
    ``percentile`` O(591), which is cheap at the rate the lease deadline is recomputed.
    Values are rounded **up** to whole seconds, as Python records
    ``ceil(now - received)`` (docs/protocol.md#ack-deadline-from-the-latency-histogram): a lease
    must cover the whole handling time, so rounding down would under-lease.
    """

    __slots__ = ("_buckets", "_count")

    def __init__(self) -> None:
        # _buckets[i] counts the value MIN_ACK_DEADLINE + i.
        self._buckets = [0] * (MAX_ACK_DEADLINE - MIN_ACK_DEADLINE + 1)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"<LatencyHistogram count={self._count} p99={self.percentile(99)}>"

    def record(self, seconds: float, count: int = 1) -> None:
        """Record one latency (``count`` times: acks of one batch received together).

        Raises:
            ValueError: ``seconds`` is NaN. Negative values and infinity are clamped.
        """
        # The common case first, in one comparison: an ack within the 10 s floor.
        if 0 <= seconds <= MIN_ACK_DEADLINE:
            self._buckets[0] += count
            self._count += count
            return
        if math.isnan(seconds):
            raise ValueError("LatencyHistogram.record: seconds must be a number, got nan")
        # Clamp before ceil so that inf does not overflow int().
        value = math.ceil(min(max(seconds, MIN_ACK_DEADLINE), MAX_ACK_DEADLINE))
        self._buckets[value - MIN_ACK_DEADLINE] += count
        self._count += count

    def percentile(self, p: float) -> int:
        """The ``p``-th percentile (0 < p <= 100) by the nearest-rank method.

        The smallest recorded value such that at least ``p`` % of the values are <= it,
        i.e. the value of rank ``ceil(p / 100 * count)`` (Go ``distribution.Percentile``).
        With nothing recorded this is the minimum, 10, as in Python's ``Histogram``.

        Raises:
            ValueError: ``p`` is not in (0, 100].
        """
        if not (0 < p <= 100):
            raise ValueError(f"LatencyHistogram.percentile: p must be in (0, 100], got {p!r}")
        if self._count == 0:
            return MIN_ACK_DEADLINE
        # Exact rational arithmetic: 0.99 * 100 in floats is 99.00000000000001, whose ceil
        # would pick the rank above the right one.
        rank = math.ceil(Fraction(p) * self._count / 100)
        seen = 0
        for offset, count in enumerate(self._buckets):
            seen += count
            if seen >= rank:
                return MIN_ACK_DEADLINE + offset
        raise AssertionError("unreachable: rank <= count")  # pragma: no cover

    def statistics(self) -> HistogramStatistics:
        return HistogramStatistics(count=self._count, p99=self.percentile(99))


def bounded_deadline(
    p99: float, *, min_extension: float, max_extension: float, exactly_once: bool
) -> float:
    """The lease extension to request, from the latency p99 and the user's bounds.

    Args:
        p99: the observed 99th percentile ack latency, seconds.
        min_extension: ``LeaseSettings.min_extension`` (0 = unset).
        max_extension: ``LeaseSettings.max_extension`` (0 = unset).
        exactly_once: whether the subscription has exactly-once delivery enabled.

    Returns:
        Seconds, always within [10, 600]. The cap by ``max_extension`` is applied first,
        then the floor (``min_extension`` if set, else 60 s under exactly-once), so a floor
        wins over a cap, as in Go ``boundedDuration`` and Python ``_obtain_ack_deadline``
        (docs/protocol.md#ack-deadline-from-the-latency-histogram). ``LeaseSettings`` rejects min >
        max anyway.
    """
    deadline = p99
    if max_extension > 0:
        deadline = min(deadline, max_extension)
    if min_extension > 0:
        deadline = max(deadline, min_extension)
    elif exactly_once:
        deadline = max(deadline, EXACTLY_ONCE_MIN_DEADLINE)
    # The server's modack range; also turns a NaN p99 into a usable number.
    if not deadline >= MIN_ACK_DEADLINE:
        return float(MIN_ACK_DEADLINE)
    return float(min(deadline, MAX_ACK_DEADLINE))
