"""Broker core: ``Broker.stats()``, the reading behind the server's /metrics.

Runs on both stores (conftest.py): on SQLite the window is 3 messages, so the backlog
counts and the oldest unacked age below include cold rows only the store holds.
"""

from __future__ import annotations

from eoclient.server_stub.core import (
    DeadLetterPolicy,
    NewMessage,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.delivery import StreamFlow
from eoclient.server_stub.core.policies import RetentionPolicy, TopicPolicies
from eoclient.server_stub.core.stats import SubscriptionStats

from .support import DLT, INVALID, PROJECT, SUB, TOPIC, Env, ids


def stats_of(env: Env, name: str = SUB) -> SubscriptionStats:
    [found] = [s for s in env.broker.stats().subscriptions if s.name == name]
    return found


def test_a_fresh_subscription_reads_zero() -> None:
    env = Env()
    env.subscribe()
    stats = stats_of(env)
    assert stats.topic == TOPIC
    assert (stats.undelivered_messages, stats.backlog_bytes, stats.oldest_unacked_age) == (0, 0, 0)
    counts = (stats.delivered, stats.acked, stats.nacked, stats.modacked, stats.expired)
    assert counts == (0, 0, 0, 0, 0)
    assert stats.ack_failures == {}
    assert stats.streams == {}


def test_backlog_and_oldest_age_count_cold_rows() -> None:
    env = Env()
    env.subscribe()
    env.publish("a" * 10, "b" * 20)
    env.clock.advance(30)
    env.publish(*("c" * 5 for _ in range(8)))  # beyond a 3-message window: cold on SQLite
    env.clock.advance(12.5)
    stats = stats_of(env)
    assert stats.undelivered_messages == 10
    assert stats.backlog_bytes == 10 + 20 + 8 * 5
    assert stats.oldest_unacked_age == 42.5
    # Acking the two oldest moves the oldest to the later batch.
    deliveries = env.pull(2)
    env.ack(*ids(deliveries))
    stats = stats_of(env)
    assert (stats.undelivered_messages, stats.oldest_unacked_age) == (8, 12.5)
    assert (stats.delivered, stats.acked, stats.outstanding_messages) == (2, 2, 0)


def test_reading_changes_nothing() -> None:
    """No lease is taken, no expiry processed, nothing delivered."""
    env = Env()
    env.subscribe(ack_deadline_seconds=10)
    env.publish("x", "y")
    [leased] = env.pull(1)
    env.clock.advance(11)  # the lease is due, but nobody has ticked yet
    for _ in range(3):
        stats = stats_of(env)
    assert (stats.outstanding_messages, stats.expired, stats.delivered) == (1, 0, 1)
    env.broker.tick()
    stats = stats_of(env)
    assert (stats.outstanding_messages, stats.expired) == (0, 1)
    # Both messages are still there for the next Pull.
    assert sorted(d.message.data for d in env.pull(10)) == [b"x", b"y"]
    assert leased.message.data in (b"x", b"y")


def test_acks_nacks_modacks_and_failures_are_counted() -> None:
    env = Env()
    env.subscribe(enable_exactly_once_delivery=True)
    env.publish("1", "2", "3")
    first, second, third = env.pull(3)
    assert env.ack(first.ack_id).failures == {}
    assert env.modack(60, second.ack_id).failures == {}
    assert env.nack(third.ack_id).failures == {}
    assert env.ack(first.ack_id).failures == {first.ack_id: INVALID}  # acked already
    assert env.modack(30, first.ack_id, third.ack_id).failures == {
        first.ack_id: INVALID,
        third.ack_id: INVALID,
    }
    stats = stats_of(env)
    assert (stats.acked, stats.modacked, stats.nacked) == (1, 1, 1)
    assert stats.ack_failures == {("ack", INVALID): 1, ("modack", INVALID): 2}


def test_dead_letters_and_policy_acks_are_counted() -> None:
    env = Env()
    env.broker.topics.create(TopicConfig(DLT))
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    filtered = env.subscribe(f"{PROJECT}/subscriptions/filtered", filter='attributes.kind = "x"')
    env.publish("poison")
    for _ in range(5):
        [delivery] = env.pull()
        env.nack(delivery.ack_id)
    assert stats_of(env).dead_lettered == 1
    assert stats_of(env).undelivered_messages == 0
    assert stats_of(env, filtered).filtered == 1
    [dlt] = [t for t in env.broker.stats().topics if t.name == DLT]
    # A forward is not a Publish request of the dead-letter topic.
    assert (dlt.publish_requests, dlt.published_messages) == (0, 0)


def test_publish_requests_and_bytes_are_counted_per_topic() -> None:
    env = Env()
    env.broker.publishing.publish(TOPIC, [NewMessage(b"abc"), NewMessage(b"de", {"k": "v"})], 123)
    env.broker.publishing.publish(
        TOPIC, [NewMessage(b"abc")]
    )  # no request size given: message sizes
    [topic] = [t for t in env.broker.stats().topics if t.name == TOPIC]
    assert (topic.publish_requests, topic.published_messages, topic.published_bytes) == (
        2,
        3,
        123 + 3,
    )


def test_open_streams_by_flow_control_status() -> None:
    env = Env()
    env.subscribe()
    env.publish("a", "b")
    full = env.broker.leasing.open_stream(SUB, stream_ack_deadline=60, max_outstanding_messages=1)
    env.broker.leasing.open_stream(SUB, stream_ack_deadline=60)
    assert stats_of(env).streams == {"ok": 2}
    assert len(env.broker.leasing.stream_pull(full)) == 1
    flow: StreamFlow = env.flow(full)
    assert flow.outstanding_messages == 1
    assert stats_of(env).streams == {"ok": 1, "suspended_max_outstanding_messages_exceeded": 1}
    env.broker.leasing.close_stream(full)
    assert stats_of(env).streams == {"ok": 1}


def test_retention_cursors_are_not_subscriptions() -> None:
    env = Env()
    env.broker.topics.set_policies(TOPIC, TopicPolicies(retention=RetentionPolicy(3600, -1)))
    env.publish("kept")
    env.clock.advance(5)
    assert env.broker.stats().subscriptions == ()
    [topic] = env.broker.stats().topics
    assert (topic.retained_messages, topic.retained_bytes, topic.oldest_retained_age) == (1, 4, 5)


def test_a_subscription_on_a_deleted_topic_keeps_reporting() -> None:
    env = Env()
    env.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    env.publish("x")
    env.broker.topics.delete(TOPIC)
    stats = stats_of(env)
    assert (stats.topic, stats.undelivered_messages) == ("_deleted-topic_", 1)
