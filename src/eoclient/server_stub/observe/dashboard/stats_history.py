"""What the dashboard's charts and rates show: samples of the broker's stats over time.

Pure: ``StatsHistory.record(now, stats)`` takes one ``BrokerStats`` reading (``Broker.stats()``,
read only) and keeps, per subscription, a bounded ring of samples — backlog, oldest
unacknowledged age, and the cumulative delivered / acked counts — and per topic the
cumulative published count. Rates are the difference between the newest sample and the
one ``RATE_WINDOW`` seconds before it (counters only grow while the server runs; a
subscription deleted and created again under the same name starts a new ring).

Constants: one sample every ``SAMPLE_SECONDS`` (5 s: a backlog moving under a running
consumer shows in the chart within seconds), ``SAMPLES`` = 720 of them = one hour of
history, about 40 bytes each: ~30 KB a subscription.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeVar

from eoclient.server_stub.core.stats import BrokerStats

SAMPLE_SECONDS = 5.0
SAMPLES = 720  # one hour at SAMPLE_SECONDS
RATE_WINDOW = 60.0  # rates over the last minute (fewer seconds when younger)

T = TypeVar("T")
Point = tuple[float, float]  # (time, value) of a chart


@dataclass(frozen=True)
class Sample:
    at: float
    backlog: int
    oldest_age: float
    delivered: int
    acked: int


@dataclass(frozen=True)
class Rates:
    """Per second, over the last ``RATE_WINDOW`` seconds of samples (0 with one sample)."""

    delivered: float = 0.0
    acked: float = 0.0


class StatsHistory:
    def __init__(self, samples: int = SAMPLES) -> None:
        self._size = samples
        self._subscriptions: dict[str, deque[Sample]] = {}
        self._published: dict[str, deque[tuple[float, int]]] = {}

    def record(self, now: float, stats: BrokerStats) -> None:
        seen = set()
        for sub in stats.subscriptions:
            seen.add(sub.name)
            ring = self._subscriptions.get(sub.name)
            # Counters never go down: if they did, this is a new subscription of that name.
            if ring is None or (ring and ring[-1].acked > sub.acked):
                ring = self._subscriptions[sub.name] = deque(maxlen=self._size)
            ring.append(
                Sample(
                    now, sub.undelivered_messages, sub.oldest_unacked_age, sub.delivered, sub.acked
                )
            )
        for name in set(self._subscriptions) - seen:  # deleted
            del self._subscriptions[name]
        topics = set()
        for topic in stats.topics:
            topics.add(topic.name)
            published = self._published.setdefault(topic.name, deque(maxlen=self._size))
            if published and published[-1][1] > topic.published_messages:
                published.clear()
            published.append((now, topic.published_messages))
        for name in set(self._published) - topics:
            del self._published[name]

    def samples(self, subscription: str) -> list[Sample]:
        return list(self._subscriptions.get(subscription, ()))

    def rates(self, subscription: str) -> Rates:
        ring = self._subscriptions.get(subscription)
        if not ring or len(ring) < 2:
            return Rates()
        newest = ring[-1]
        oldest = _window_start(ring, newest.at, lambda sample: sample.at)
        seconds = newest.at - oldest.at
        if seconds <= 0:
            return Rates()
        return Rates(
            delivered=(newest.delivered - oldest.delivered) / seconds,
            acked=(newest.acked - oldest.acked) / seconds,
        )

    def rate_series(self, subscription: str) -> tuple[list[Point], list[Point]]:
        """Delivered and acked messages per second between consecutive samples (each
        point at the later sample's time), for the charts."""
        ring = list(self._subscriptions.get(subscription, ()))
        delivered = _per_second([(s.at, s.delivered) for s in ring])
        acked = _per_second([(s.at, s.acked) for s in ring])
        return delivered, acked

    def published(self, topic: str) -> list[tuple[float, int]]:
        """The topic's ``(time, messages published so far)`` samples, oldest first."""
        return list(self._published.get(topic, ()))

    def publish_rate_series(self, topic: str) -> list[Point]:
        """Messages published per second between consecutive samples."""
        return _per_second(self.published(topic))

    def publish_rate(self, topic: str) -> float:
        ring = self._published.get(topic)
        if not ring or len(ring) < 2:
            return 0.0
        newest = ring[-1]
        oldest = _window_start(ring, newest[0], lambda point: point[0])
        seconds = newest[0] - oldest[0]
        return (newest[1] - oldest[1]) / seconds if seconds > 0 else 0.0


def _per_second(counts: list[tuple[float, int]]) -> list[Point]:
    return [
        (later_at, (later - earlier) / (later_at - earlier_at))
        for (earlier_at, earlier), (later_at, later) in pairwise(counts)
        if later_at > earlier_at
    ]


def _window_start(ring: deque[T], newest_at: float, at: Callable[[T], float]) -> T:
    """The oldest sample within ``RATE_WINDOW`` of the newest (the ring's oldest if none
    is older)."""
    for item in ring:
        if newest_at - at(item) <= RATE_WINDOW:
            return item
    return ring[-1]
