"""Broker core: message retention (subscription and topic), retained acknowledged messages,
and the expiration policy — all on the fake clock, days passing in microseconds."""

from __future__ import annotations

import pytest

from eoclient.errors import NotFound
from eoclient.server_stub.core import (
    ExpirationPolicy,
    NewMessage,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.policies import RetentionPolicy, TopicPolicies

from .support import PROJECT, SUB, TOPIC, Env, data

MINUTE = 60.0
HOUR = 3600.0
DAY = 24 * HOUR


@pytest.fixture
def env() -> Env:
    return Env()


# ------------------------------------------------------- subscription retention


def test_messages_older_than_the_retention_are_gone(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE)
    env.publish("old")
    env.advance(5 * MINUTE)
    env.publish("young")
    env.advance(5 * MINUTE)  # "old" is exactly 10 minutes old: gone
    assert env.broker.backlog(SUB) == 1
    assert data(env.pull()) == ["young"]
    assert env.broker.counters(SUB)["discarded"] == 1


def test_a_message_just_inside_the_retention_is_delivered(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE)
    env.publish("a")
    env.clock.advance(10 * MINUTE - 0.001)
    assert data(env.pull()) == ["a"]


def test_default_retention_is_seven_days(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    env.advance(7 * DAY - 1)
    assert env.broker.backlog(SUB) == 1
    env.advance(1)
    assert env.broker.backlog(SUB) == 0
    assert env.pull() == []


def test_retention_applies_without_any_tick(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE)
    env.publish("a")
    env.clock.advance(11 * MINUTE)  # no tick: the pull itself finds the message too old
    assert env.pull() == []


def test_waiting_for_a_retry_backoff_does_not_save_a_message(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE, ack_deadline_seconds=600)
    env.publish("a")
    env.pull()
    env.advance(9 * MINUTE)
    env.publish("b")
    env.advance(1 * MINUTE)  # "a": lease ends and retention ends at the same moment
    assert data(env.pull()) == ["b"]


def test_an_outstanding_message_stays_leased_past_its_retention_and_can_be_acked(
    env: Env,
) -> None:
    env.subscribe(
        message_retention_duration=10 * MINUTE,
        ack_deadline_seconds=600,
        enable_exactly_once_delivery=True,
    )
    env.publish("a")
    env.advance(5 * MINUTE)
    [d] = env.pull()
    env.advance(6 * MINUTE)  # 11 minutes old, still leased (until 15)
    assert env.broker.backlog(SUB) == 1
    assert env.ack(d.ack_id).ok


def test_an_outstanding_message_past_its_retention_is_dropped_when_nacked(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE, ack_deadline_seconds=600)
    env.publish("a")
    env.advance(5 * MINUTE)
    [d] = env.pull()
    env.advance(6 * MINUTE)
    env.nack(d.ack_id)
    assert env.pull() == []
    assert env.broker.backlog(SUB) == 0


def test_an_outstanding_message_past_its_retention_is_dropped_when_its_lease_expires(
    env: Env,
) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE, ack_deadline_seconds=600)
    env.publish("a")
    env.advance(5 * MINUTE)
    env.pull()
    env.advance(10 * MINUTE)  # lease ends at 15 minutes, retention at 10
    assert env.pull() == []
    assert env.broker.backlog(SUB) == 0


def test_retention_update_applies_to_the_existing_backlog(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    env.advance(HOUR)
    env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, message_retention_duration=30 * MINUTE),
        ["message_retention_duration"],
    )
    env.advance(0)
    assert env.broker.backlog(SUB) == 0


def test_ordered_key_proceeds_when_its_head_is_too_old(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE, enable_message_ordering=True)
    env.publish("k1", key="k")
    env.advance(5 * MINUTE)
    env.publish("k2", key="k")
    env.advance(5 * MINUTE)
    assert data(env.pull()) == ["k2"]


def test_ordered_follower_taken_back_past_its_retention_is_dropped(env: Env) -> None:
    env.subscribe(
        message_retention_duration=10 * MINUTE,
        enable_message_ordering=True,
        ack_deadline_seconds=600,
    )
    env.publish("k1", key="k")
    env.advance(1 * MINUTE)
    env.publish("k2", key="k")
    env.advance(5 * MINUTE)
    k1, _k2 = env.pull()
    env.advance(5 * MINUTE)  # k1 and k2 too old, but leased
    env.publish("k3", key="k")
    env.nack(k1.ack_id)  # k1 dropped; k2 comes back with it and is dropped when due
    assert data(env.pull()) == ["k3"]
    assert env.broker.backlog(SUB) == 1


def test_next_wakeup_includes_the_retention_deadline(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE, expiration_policy=ExpirationPolicy(None))
    assert env.broker.next_wakeup() is None
    env.publish("a")
    assert env.broker.next_wakeup() == env.clock.now() + 10 * MINUTE


# ------------------------------------------------------------- topic retention


def test_a_longer_topic_retention_keeps_the_backlog_longer(env: Env) -> None:
    topic = f"{PROJECT}/topics/long"
    env.broker.topics.create(TopicConfig(topic, message_retention_duration=DAY))
    env.broker.subscriptions.create(
        SubscriptionConfig(SUB, topic, message_retention_duration=10 * MINUTE)
    )
    view = env.broker.subscriptions.get(SUB)
    assert view.topic_message_retention_duration == DAY
    env.broker.publishing.publish(topic, [NewMessage(b"a")])
    env.advance(DAY - 1)
    assert len(env.pull()) == 1


def test_a_shorter_topic_retention_does_not_shorten_the_subscriptions(env: Env) -> None:
    topic = f"{PROJECT}/topics/short"
    env.broker.topics.create(TopicConfig(topic, message_retention_duration=10 * MINUTE))
    env.broker.subscriptions.create(SubscriptionConfig(SUB, topic))
    env.broker.publishing.publish(topic, [NewMessage(b"a")])
    env.advance(DAY)
    assert len(env.pull()) == 1
    env.advance(7 * DAY)
    assert env.pull() == []


def test_topic_retention_update_and_deletion_reach_the_subscriptions(env: Env) -> None:
    env.subscribe(message_retention_duration=10 * MINUTE)
    env.broker.topics.update(
        TopicConfig(TOPIC, message_retention_duration=HOUR), ["message_retention_duration"]
    )
    env.publish("a")
    env.advance(30 * MINUTE)
    assert env.broker.backlog(SUB) == 1  # kept by the topic's hour
    env.broker.topics.delete(TOPIC)  # now only the subscription's 10 minutes count
    env.advance(0)
    assert env.broker.backlog(SUB) == 0


def _topic_retention(env: Env, seconds: float | None) -> None:
    env.broker.topics.update(
        TopicConfig(TOPIC, message_retention_duration=seconds), ["message_retention_duration"]
    )


def test_topic_retention_lets_a_seek_replay_acked_messages(env: Env) -> None:
    # "Configuring a topic with message retention ... allowing any subscription attached
    # to the topic to seek back in time and replay previously-acked messages" (Google's
    # replay overview): no retain_acked_messages needed.
    _topic_retention(env, DAY)
    env.subscribe()
    start = env.clock.now()
    env.publish("a", "b")
    env.ack(*[d.ack_id for d in env.pull()])
    assert env.broker.backlog(SUB) == 0
    env.advance(HOUR)
    outcome = env.broker.snapshots.seek(SUB, time=start)
    assert outcome.complete
    assert data(env.pull()) == ["a", "b"]


def test_topic_retention_replays_messages_published_before_the_subscription(env: Env) -> None:
    # "Topic message retention also allows a subscription to replay messages published
    # before a subscription was created" (the same page).
    _topic_retention(env, DAY)
    start = env.clock.now()
    env.publish("before")
    env.advance(MINUTE)
    env.subscribe()
    env.publish("after")
    assert data(env.pull()) == ["after"]  # a new subscription starts from its creation
    env.broker.snapshots.seek(SUB, time=start)
    assert data(env.pull()) == ["before", "after"]


def test_topic_retention_replay_ends_with_the_retention(env: Env) -> None:
    _topic_retention(env, HOUR)
    env.subscribe()
    start = env.clock.now()
    env.publish("old")
    env.ack(*[d.ack_id for d in env.pull()])
    env.advance(30 * MINUTE)
    env.publish("young")
    env.ack(*[d.ack_id for d in env.pull()])
    env.advance(30 * MINUTE)  # "old" is an hour old: out of the topic's retention
    outcome = env.broker.snapshots.seek(SUB, time=start)
    assert not outcome.complete  # the time is older than anything left to replay
    assert data(env.pull()) == ["young"]


def test_topic_retention_replay_keeps_to_the_subscriptions_filter(env: Env) -> None:
    _topic_retention(env, DAY)
    env.subscribe(filter='attributes.kind = "keep"')
    start = env.clock.now()
    env.broker.publishing.publish(
        TOPIC,
        [NewMessage(b"kept", attributes={"kind": "keep"}), NewMessage(b"other")],
    )
    env.ack(*[d.ack_id for d in env.pull()])
    env.broker.snapshots.seek(SUB, time=start)
    assert data(env.pull()) == ["kept"]


def test_removing_topic_retention_ends_the_replay_of_acked_messages(env: Env) -> None:
    _topic_retention(env, DAY)
    env.subscribe()
    start = env.clock.now()
    env.publish("a")
    env.ack(*[d.ack_id for d in env.pull()])
    _topic_retention(env, None)
    env.broker.snapshots.seek(SUB, time=start)
    assert env.pull() == []


def test_topic_retention_keeps_what_the_policys_size_limit_would_drop(env: Env) -> None:
    # The two retentions combine by union (docs/policies.md): a 1-byte Pulsar size limit
    # drops nothing the topic's own message_retention_duration still keeps.
    env.broker.topics.set_policies(TOPIC, TopicPolicies(retention=RetentionPolicy(HOUR, 1)))
    _topic_retention(env, DAY)
    env.subscribe()
    start = env.clock.now()
    env.publish("a", "b", "c")
    env.ack(*[d.ack_id for d in env.pull()])
    env.advance(2 * HOUR)  # past the policy's hour, inside the topic's day
    env.broker.snapshots.seek(SUB, time=start)
    assert data(env.pull()) == ["a", "b", "c"]


def test_the_topic_retention_cursor_is_not_a_subscription_anyone_sees(env: Env) -> None:
    _topic_retention(env, DAY)
    env.subscribe()
    assert env.broker.topics.list_subscriptions(TOPIC, 0, "").items == (SUB,)
    listed = env.broker.subscriptions.list(PROJECT, 0, "").items
    assert [s.config.name for s in listed] == [SUB]


# ---------------------------------------------------------- retained acked


def test_acked_messages_are_not_kept_by_default(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    env.ack(d.ack_id)
    assert env.broker.retained_acked(SUB) == []


def test_retain_acked_keeps_acked_messages_with_their_publish_time(env: Env) -> None:
    env.subscribe(retain_acked_messages=True, message_retention_duration=HOUR)
    first = env.publish("a", "b")
    env.advance(MINUTE)
    second = env.publish("c")
    deliveries = env.pull()
    # Acked out of publish order; kept in publish order.
    env.ack(*[d.ack_id for d in reversed(deliveries)])
    retained = env.broker.retained_acked(SUB)
    assert [m.message_id for m in retained] == first + second
    assert [m.publish_time for m in retained] == [
        env.clock.now() - MINUTE,
        env.clock.now() - MINUTE,
        env.clock.now(),
    ]
    assert env.broker.backlog(SUB) == 0
    env.advance(HOUR - MINUTE)  # "a" and "b" are an hour old
    assert [m.message_id for m in env.broker.retained_acked(SUB)] == second
    env.advance(MINUTE)
    assert env.broker.retained_acked(SUB) == []


def test_retained_acked_messages_follow_topic_retention(env: Env) -> None:
    env.broker.topics.update(
        TopicConfig(TOPIC, message_retention_duration=DAY), ["message_retention_duration"]
    )
    env.subscribe(retain_acked_messages=True, message_retention_duration=HOUR)
    env.publish("a")
    [d] = env.pull()
    env.ack(d.ack_id)
    env.advance(2 * HOUR)
    assert len(env.broker.retained_acked(SUB)) == 1
    env.advance(DAY)
    assert env.broker.retained_acked(SUB) == []


def test_turning_retain_acked_off_forgets_them(env: Env) -> None:
    env.subscribe(retain_acked_messages=True)
    env.publish("a")
    [d] = env.pull()
    env.ack(d.ack_id)
    env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, retain_acked_messages=False), ["retain_acked_messages"]
    )
    assert env.broker.retained_acked(SUB) == []


def test_stale_ack_without_exactly_once_is_retained_too(env: Env) -> None:
    env.subscribe(retain_acked_messages=True, ack_deadline_seconds=10)
    [message_id] = env.publish("a")
    [first] = env.pull()
    env.advance(10)
    env.ack(first.ack_id)  # expired, still settles the message
    assert [m.message_id for m in env.broker.retained_acked(SUB)] == [message_id]


# --------------------------------------------------------------- expiration


def sub_config(ttl: float | None, name: str = SUB) -> SubscriptionConfig:
    # The ttl must be longer than the retention (default 7 days).
    return SubscriptionConfig(
        name, TOPIC, expiration_policy=ExpirationPolicy(ttl), message_retention_duration=HOUR
    )


def test_an_idle_subscription_is_deleted_after_its_ttl(env: Env) -> None:
    env.broker.subscriptions.create(sub_config(DAY))
    env.advance(DAY - 1)
    assert env.broker.subscriptions.exists(SUB)
    env.advance(1)
    assert not env.broker.subscriptions.exists(SUB)
    with pytest.raises(NotFound):
        env.pull()
    assert env.broker.topics.list_subscriptions(TOPIC, 0, "").items == ()
    env.broker.subscriptions.create(sub_config(DAY))  # the name is free again


def test_default_expiration_is_31_days(env: Env) -> None:
    env.subscribe()
    env.advance(31 * DAY - 1)
    assert env.broker.subscriptions.exists(SUB)
    env.advance(1)
    assert not env.broker.subscriptions.exists(SUB)


def test_a_ttl_of_none_never_expires(env: Env) -> None:
    env.broker.subscriptions.create(sub_config(None))
    env.advance(3650 * DAY)
    assert env.broker.subscriptions.exists(SUB)
    assert env.broker.next_wakeup() is None


def test_publishing_is_not_activity(env: Env) -> None:
    env.broker.subscriptions.create(sub_config(DAY))
    for _ in range(4):
        env.advance(6 * HOUR)
        env.publish("a")
    assert not env.broker.subscriptions.exists(SUB)


def test_get_subscription_is_not_activity(env: Env) -> None:
    env.broker.subscriptions.create(sub_config(DAY))
    env.advance(DAY - 1)
    env.broker.subscriptions.get(SUB)
    env.advance(1)
    assert not env.broker.subscriptions.exists(SUB)


@pytest.mark.parametrize("operation", ["pull", "empty pull", "ack", "modack", "nack", "update"])
def test_operations_on_the_subscription_are_activity(env: Env, operation: str) -> None:
    env.broker.subscriptions.create(sub_config(DAY))
    env.publish("a")
    [d] = env.pull()
    env.advance(DAY - 1)
    if operation == "pull":
        env.publish("b")
        assert len(env.pull()) == 1
    elif operation == "empty pull":
        assert env.pull() == []
    elif operation == "ack":
        env.ack(d.ack_id)
    elif operation == "modack":
        env.modack(30, d.ack_id)
    elif operation == "nack":
        env.nack(d.ack_id)
    else:
        env.broker.subscriptions.update(
            SubscriptionConfig(SUB, TOPIC, labels={"k": "v"}), ["labels"]
        )
    env.advance(DAY - 1)
    assert env.broker.subscriptions.exists(SUB)
    env.advance(1)
    assert not env.broker.subscriptions.exists(SUB)


def test_an_open_stream_keeps_the_subscription_alive(env: Env) -> None:
    env.broker.subscriptions.create(sub_config(DAY))
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=10)
    for _ in range(10):
        env.advance(DAY)
    assert env.broker.subscriptions.exists(SUB)
    env.broker.leasing.close_stream(stream)  # active until now
    env.advance(DAY - 1)
    assert env.broker.subscriptions.exists(SUB)
    env.advance(1)
    assert not env.broker.subscriptions.exists(SUB)


def test_next_wakeup_includes_the_expiration(env: Env) -> None:
    env.broker.subscriptions.create(sub_config(DAY))
    assert env.broker.next_wakeup() == env.clock.now() + DAY


def test_ttl_update_applies_from_the_last_activity(env: Env) -> None:
    env.broker.subscriptions.create(sub_config(None))
    env.advance(5 * DAY)
    env.broker.subscriptions.update(sub_config(2 * DAY), ["expiration_policy"])
    env.advance(2 * DAY - 1)
    assert env.broker.subscriptions.exists(SUB)
    env.advance(1)
    assert not env.broker.subscriptions.exists(SUB)


def test_subscription_state_is_active(env: Env) -> None:
    env.subscribe()
    assert env.broker.subscriptions.get(SUB).state_active
