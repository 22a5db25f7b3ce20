"""The dashboard's pure history: samples per subscription, rates over the last minute."""

from __future__ import annotations

import dataclasses

import pytest

from eoclient.server_stub.core.stats import BrokerStats, SubscriptionStats, TopicStats
from eoclient.server_stub.observe.dashboard.stats_history import RATE_WINDOW, Rates, StatsHistory

SUB = "projects/p/subscriptions/s"
TOPIC = "projects/p/topics/t"

_SUB = SubscriptionStats(
    name=SUB,
    topic=TOPIC,
    undelivered_messages=0,
    backlog_bytes=0,
    oldest_unacked_age=0.0,
    outstanding_messages=0,
    delivered=0,
    redelivered=0,
    acked=0,
    nacked=0,
    modacked=0,
    expired=0,
    dead_lettered=0,
    filtered=0,
    discarded=0,
    skipped=0,
    evicted=0,
    expired_by_ttl=0,
    ack_failures={},
    streams={},
)
_TOPIC = TopicStats(
    name=TOPIC,
    publish_requests=0,
    published_messages=0,
    published_bytes=0,
    held_publishes=0,
    held_then_refused=0,
    refused_publishes=0,
    retained_messages=None,
    retained_bytes=None,
    oldest_retained_age=None,
)


def stats(backlog: int = 0, delivered: int = 0, acked: int = 0, published: int = 0) -> BrokerStats:
    sub = dataclasses.replace(_SUB, undelivered_messages=backlog, delivered=delivered, acked=acked)
    return BrokerStats((sub,), (dataclasses.replace(_TOPIC, published_messages=published),))


def test_one_sample_has_no_rate() -> None:
    history = StatsHistory()
    history.record(100.0, stats(backlog=5))
    assert [s.backlog for s in history.samples(SUB)] == [5]
    assert history.rates(SUB) == Rates()
    assert history.publish_rate(TOPIC) == 0.0


@pytest.mark.parametrize(
    ("points", "expected_acked_rate"),
    [
        ([(0, 0), (10, 100)], 10.0),  # younger than the window: over what there is
        ([(0, 0), (30, 300), (60, 600)], 10.0),  # exactly the window
        ([(0, 0), (30, 0), (90, 600)], 10.0),  # the sample at 0 is past the window: from 30
        ([(0, 50), (100, 50)], 0.0),  # idle
    ],
)
def test_rates_over_the_last_minute(
    points: list[tuple[float, int]], expected_acked_rate: float
) -> None:
    history = StatsHistory()
    for at, acked in points:
        history.record(at, stats(acked=acked, delivered=acked * 2, published=acked))
    assert history.rates(SUB).acked == pytest.approx(expected_acked_rate)
    assert history.rates(SUB).delivered == pytest.approx(2 * expected_acked_rate)
    assert history.publish_rate(TOPIC) == pytest.approx(expected_acked_rate)
    assert RATE_WINDOW == 60.0


def test_the_ring_is_bounded_and_keeps_the_newest() -> None:
    history = StatsHistory(samples=3)
    for at in range(5):
        history.record(float(at), stats(backlog=at))
    assert [s.backlog for s in history.samples(SUB)] == [2, 3, 4]


def test_a_deleted_subscription_is_forgotten_and_a_new_one_starts_over() -> None:
    history = StatsHistory()
    history.record(0.0, stats(acked=100))
    history.record(10.0, BrokerStats((), ()))
    assert history.samples(SUB) == []
    history.record(20.0, stats(acked=100))
    history.record(30.0, stats(acked=5))  # counters went down: a new subscription
    assert [s.acked for s in history.samples(SUB)] == [5]
