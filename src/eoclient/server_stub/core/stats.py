"""A read-only picture of every topic and subscription, for monitoring (``/metrics``).

``collect`` reads what the core already keeps — the per-subscription ``Counters``, the
per-topic ``TopicCounters``, backlog sizes, the oldest unacknowledged publish time, the
open streams' flow control — and returns plain frozen values; the Prometheus exposition
(``server_stub/observe/metrics.py``) is built from them. It changes nothing the service shows:
it takes no lease, processes no expiry or retention (the server's ticker does that at
each deadline), and writes nothing to the store. The one thing it may touch is
``oldest_unacked``'s index of acknowledged messages, which it prunes as every reader
does (amortised O(1)); with a durable store the oldest cold row is one indexed read.

Cost: O(subscriptions + topics + open streams) per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eoclient.server_stub.core.delivery import StreamFlow
from eoclient.server_stub.core.resources import Resources

# Stream states, with the names of Cloud Monitoring's subscription/open_streaming_pulls
# ``status`` label: a stream whose flow control is full is not sent messages.
STREAM_OK = "ok"
STREAM_MESSAGES_FULL = "suspended_max_outstanding_messages_exceeded"
STREAM_BYTES_FULL = "suspended_max_outstanding_bytes_exceeded"


def stream_status(flow: StreamFlow) -> str:
    if flow.has_room():
        return STREAM_OK
    if 0 < flow.max_messages <= flow.outstanding_messages:
        return STREAM_MESSAGES_FULL
    return STREAM_BYTES_FULL


@dataclass(frozen=True)
class SubscriptionStats:
    """One subscription: its backlog now, and what happened to it since the server
    started (counters start at zero with every server process)."""

    name: str
    topic: str  # "_deleted-topic_" once its topic is deleted, as the service says
    undelivered_messages: int  # unacknowledged, waiting or leased (window and store)
    backlog_bytes: int
    oldest_unacked_age: float  # seconds since the oldest unacked message's publish; 0: none
    outstanding_messages: int  # leased now
    delivered: int
    redelivered: int  # deliveries of a message delivered before (a nack, a lease ran out)
    acked: int  # acknowledged by Acknowledge (or a stream's ack ids)
    nacked: int  # ModifyAckDeadline with 0 seconds
    modacked: int  # deadlines extended by ModifyAckDeadline
    expired: int  # leases whose deadline passed
    dead_lettered: int
    filtered: int
    discarded: int  # older than the retention, dropped unacknowledged
    skipped: int
    evicted: int
    expired_by_ttl: int
    ack_failures: Mapping[tuple[str, str], int]  # (operation, reason) -> count
    streams: Mapping[str, int]  # stream status -> open StreamingPulls


@dataclass(frozen=True)
class TopicStats:
    """One topic: publishes since the server started, its backlog-quota outcomes, and
    what its retention policy keeps (None without one)."""

    name: str
    publish_requests: int
    published_messages: int
    published_bytes: int
    held_publishes: int
    held_then_refused: int
    refused_publishes: int
    retained_messages: int | None
    retained_bytes: int | None
    oldest_retained_age: float | None


@dataclass(frozen=True)
class BrokerStats:
    subscriptions: tuple[SubscriptionStats, ...]
    topics: tuple[TopicStats, ...]


def _age(now: float, published: float | None) -> float:
    return max(now - published, 0.0) if published is not None else 0.0


def collect_stats(resources: Resources, now: float) -> BrokerStats:
    """Every topic and (client-visible) subscription, sorted by name."""
    subscriptions = []
    for name in sorted(resources.subscriptions):
        state = resources.subscriptions[name]
        if state.config.internal:  # a retention cursor: reported on its topic
            continue
        delivery = state.delivery
        counters = delivery.counters
        streams: dict[str, int] = {}
        for flow in delivery.streams.all():
            status = stream_status(flow)
            streams[status] = streams.get(status, 0) + 1
        subscriptions.append(
            SubscriptionStats(
                name=name,
                topic=state.config.topic,
                undelivered_messages=delivery.reads.backlog(),
                backlog_bytes=delivery.reads.backlog_bytes(),
                oldest_unacked_age=_age(now, delivery.reads.oldest_unacked()),
                outstanding_messages=delivery.reads.leased(),
                delivered=counters.delivered,
                redelivered=counters.redelivered,
                acked=counters.acked,
                nacked=counters.nacked,
                modacked=counters.modacked,
                expired=counters.expired,
                dead_lettered=counters.dead_lettered,
                filtered=counters.filtered,
                discarded=counters.discarded,
                skipped=counters.skipped,
                evicted=counters.evicted,
                expired_by_ttl=counters.expired_by_ttl,
                ack_failures=dict(counters.ack_failures),
                streams=streams,
            )
        )
    topics = []
    for name in sorted(resources.topics):
        topic = resources.topics[name]
        cursor = resources.retention_cursor(name)
        retained = cursor.delivery if cursor is not None else None
        published = topic.counters
        topics.append(
            TopicStats(
                name=name,
                publish_requests=published.publish_requests,
                published_messages=published.published_messages,
                published_bytes=published.published_bytes,
                held_publishes=published.held_publishes,
                held_then_refused=published.held_then_refused,
                refused_publishes=published.refused_publishes,
                retained_messages=retained.reads.backlog() if retained else None,
                retained_bytes=retained.reads.backlog_bytes() if retained else None,
                oldest_retained_age=_age(now, retained.reads.oldest_unacked())
                if retained
                else None,
            )
        )
    return BrokerStats(tuple(subscriptions), tuple(topics))
