"""Broker core: dead-letter policy (docs/protocol.md#dead-letters) and how it meets
ordering, exactly-once, retry backoff, retention and updates."""

from __future__ import annotations

import pytest

from eoclient.server_stub.core import (
    DeadLetterPolicy,
    Delivery,
    NewMessage,
    RetryPolicy,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.publishing import rfc3339_millis

from .support import DLT, INVALID, PROJECT, SUB, TOPIC, Env, data

DEAD = f"{PROJECT}/subscriptions/dead"


@pytest.fixture
def env() -> Env:
    env = Env()
    env.broker.topics.create(TopicConfig(DLT))
    env.broker.subscriptions.create(SubscriptionConfig(DEAD, DLT))
    return env


def dead_letters(env: Env) -> list[Delivery]:
    return env.broker.leasing.pull(DEAD, 100)


def fail_n_times(env: Env, n: int) -> list[int]:
    """Pull and nack the (single) message ``n`` times; the delivery attempts seen."""
    attempts = []
    for _ in range(n):
        [d] = env.pull()
        attempts.append(d.delivery_attempt)
        env.nack(d.ack_id)
    return attempts


# ------------------------------------------------------------------ forwarding


def test_after_max_attempts_the_message_goes_to_the_dead_letter_topic(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.clock.advance(0.5555)  # publish time 2026-01-01T00:00:00.555Z (ms truncated)
    [original_id] = env.broker.publishing.publish(
        TOPIC, [NewMessage(b"payload", attributes={"k": "v"}, ordering_key="key")]
    )
    published_at = env.clock.now()
    env.clock.advance(1)
    assert fail_n_times(env, 5) == [1, 2, 3, 4, 5]
    assert env.pull() == []  # the would-be 6th delivery was diverted
    assert env.broker.backlog(SUB) == 0  # acked on the source

    [forwarded] = dead_letters(env)
    message = forwarded.message
    assert message.message_id != original_id  # a new message on the dead-letter topic
    assert message.data == b"payload"
    assert message.ordering_key == "key"
    assert message.publish_time == env.clock.now()
    assert dict(message.attributes) == {
        "k": "v",
        "CloudPubSubDeadLetterSourceDeliveryCount": "5",
        "CloudPubSubDeadLetterSourceSubscription": "sub-a",  # the id only
        "CloudPubSubDeadLetterSourceSubscriptionProject": "p1",
        "CloudPubSubDeadLetterSourceTopicPublishTime": "2026-01-01T00:00:00.555Z",
    }
    assert rfc3339_millis(published_at) == "2026-01-01T00:00:00.555Z"
    counters = env.broker.counters(SUB)
    assert (counters["dead_lettered"], counters["acked"], counters["delivered"]) == (1, 0, 5)

    [record] = env.broker.history.of(SUB, original_id).dead_lettered
    assert (record.topic, record.message_id, record.delivery_count) == (
        DLT,
        message.message_id,
        5,
    )


def test_rfc3339_millis_format() -> None:
    assert rfc3339_millis(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339_millis(1_795_316_785.5559) == "2026-11-22T03:06:25.555Z"


def test_deadline_expiries_count_like_nacks(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10, dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("a")
    seen = []
    for i in range(5):
        [d] = env.pull()
        seen.append(d.delivery_attempt)
        if i % 2:
            env.nack(d.ack_id)
        else:
            env.advance(10)  # expiry
    assert seen == [1, 2, 3, 4, 5]
    env.advance(10)
    assert env.pull() == []
    [forwarded] = dead_letters(env)
    assert forwarded.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"


def test_modack_extensions_are_not_attempts(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10, dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("a")
    [d] = env.pull()
    for _ in range(10):
        env.modack(10, d.ack_id)
        env.advance(5)
    assert env.broker.backlog(SUB) == 1
    assert dead_letters(env) == []


def test_max_delivery_attempts_100(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 100))
    env.publish("a")
    assert fail_n_times(env, 100) == list(range(1, 101))
    assert env.pull() == []
    [forwarded] = dead_letters(env)
    assert forwarded.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "100"


def test_only_the_failing_message_leaves(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("bad", "good")
    for _ in range(5):
        deliveries = env.pull()
        for d in deliveries:
            if d.message.data == b"bad":
                env.nack(d.ack_id)
    assert data(env.pull()) == []  # "good" is still leased
    assert data(dead_letters(env)) == ["bad"]
    assert env.broker.backlog(SUB) == 1


def test_dead_letter_topic_without_subscriptions_loses_the_message(env: Env) -> None:
    lonely = f"{PROJECT}/topics/lonely"
    env.broker.topics.create(TopicConfig(lonely))
    env.subscribe(dead_letter_policy=DeadLetterPolicy(lonely, 5))
    env.publish("a")
    fail_n_times(env, 5)
    assert env.broker.backlog(SUB) == 0  # "messages published to a topic with no
    assert env.pull() == []  # subscriptions are lost" (DeadLetterPolicy proto comment)


def test_filters_of_dead_letter_subscriptions_apply(env: Env) -> None:
    only_ours = f"{PROJECT}/subscriptions/dead-filtered"
    env.broker.subscriptions.create(
        SubscriptionConfig(
            only_ours, DLT, filter='attributes.CloudPubSubDeadLetterSourceSubscription = "x"'
        )
    )
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("a")
    fail_n_times(env, 5)
    assert len(dead_letters(env)) == 1
    assert env.broker.leasing.pull(only_ours, 10) == []


# ------------------------------------------------------------------ retry policy


def test_dead_lettering_does_not_wait_for_the_retry_backoff(env: Env) -> None:
    env.subscribe(
        dead_letter_policy=DeadLetterPolicy(DLT, 5), retry_policy=RetryPolicy(10.0, 600.0)
    )
    env.publish("a")
    for _ in range(5):
        while not (deliveries := env.pull()):
            env.advance(1)
        env.nack(deliveries[0].ack_id)
    assert len(dead_letters(env)) == 1  # forwarded at the 5th nack, not 160 s later


# ------------------------------------------------------------------ exactly-once


def test_exactly_once_ack_of_a_dead_lettered_message_is_invalid(env: Env) -> None:
    env.subscribe(
        enable_exactly_once_delivery=True,
        ack_deadline_seconds=10,
        dead_letter_policy=DeadLetterPolicy(DLT, 5),
    )
    env.publish("a")
    for _ in range(4):
        [d] = env.pull()
        env.nack(d.ack_id)
    [last] = env.pull()
    env.advance(10)  # the 5th attempt expires: forwarded
    assert env.ack(last.ack_id).failures == {last.ack_id: INVALID}
    assert len(dead_letters(env)) == 1


# ---------------------------------------------------------------------- ordering


def test_ordered_subscription_dead_letters_and_the_rest_of_the_key_proceeds(env: Env) -> None:
    # The emulator answers this case with a NullPointerException
    # (docs/protocol.md#where-the-emulator-differs).
    env.subscribe(enable_message_ordering=True, dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("k1", "k2", "k3", key="k")
    env.publish("other", key="j")
    for attempt in range(1, 6):
        by_data = {d.message.data.decode(): d for d in env.pull()}
        assert sorted(by_data) == (
            ["k1", "k2", "k3", "other"] if attempt == 1 else ["k1", "k2", "k3"]
        )
        assert by_data["k1"].delivery_attempt == attempt
        if "other" in by_data:
            env.ack(by_data["other"].ack_id)
        env.nack(by_data["k1"].ack_id)  # takes k2 and k3 back with it
    assert data(dead_letters(env)) == ["k1"]
    rest = env.pull()
    assert data(rest) == ["k2", "k3"]
    # k2 and k3 went back with k1 each time, but none of their own attempts failed.
    assert [d.delivery_attempt for d in rest] == [1, 1]


def test_ordered_exactly_once_the_next_message_becomes_ackable(env: Env) -> None:
    env.subscribe(
        enable_message_ordering=True,
        enable_exactly_once_delivery=True,
        dead_letter_policy=DeadLetterPolicy(DLT, 5),
    )
    env.publish("k1", "k2", key="k")
    for _ in range(5):
        k1, k2 = env.pull()
        assert env.ack(k2.ack_id).failures == {k2.ack_id: "TRANSIENT_FAILURE_UNORDERED_ACK_ID"}
        env.nack(k1.ack_id)
    [k2] = env.pull()
    assert data([k2]) == ["k2"]
    assert env.ack(k2.ack_id).ok
    assert env.broker.backlog(SUB) == 0


def test_ordered_dead_letter_of_the_last_message_of_a_key(env: Env) -> None:
    env.subscribe(enable_message_ordering=True, dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("only", key="k")
    fail_n_times(env, 5)
    env.publish("later", key="k")
    assert data(env.pull()) == ["later"]


# ---------------------------------------------------------------------- streams


def test_dead_lettering_releases_stream_flow_control(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=10, max_outstanding_messages=1)
    env.publish("a", "b")
    for _ in range(5):
        [d] = env.broker.leasing.stream_pull(stream)
        assert data([d]) == ["a"]
        env.nack(d.ack_id)
    assert env.flow(stream).outstanding_messages == 0
    assert data(env.broker.leasing.stream_pull(stream)) == ["b"]


# ------------------------------------------------------- topic deleted, updates


def test_deleted_dead_letter_topic_means_redelivery_until_it_exists_again(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("a")
    env.broker.topics.delete(DLT)
    # Nowhere to forward: the message stays and delivery_attempt keeps counting.
    assert fail_n_times(env, 7) == [1, 2, 3, 4, 5, 6, 7]
    assert env.broker.backlog(SUB) == 1
    env.broker.topics.create(TopicConfig(DLT))
    fresh = f"{PROJECT}/subscriptions/dead-again"
    env.broker.subscriptions.create(SubscriptionConfig(fresh, DLT))
    fail_n_times(env, 1)  # the 8th failure finds the topic
    assert env.broker.backlog(SUB) == 0
    [forwarded] = env.broker.leasing.pull(fresh, 10)
    assert forwarded.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "8"


def test_removing_the_policy_stops_dead_lettering(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("a")
    fail_n_times(env, 4)
    env.broker.subscriptions.update(SubscriptionConfig(SUB, TOPIC), ["dead_letter_policy"])
    assert fail_n_times(env, 3) == [0, 0, 0]  # no policy: delivery_attempt is 0
    assert env.broker.backlog(SUB) == 1
    assert dead_letters(env) == []


def test_policy_added_later_counts_earlier_failures(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    fail_n_times(env, 6)
    env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, dead_letter_policy=DeadLetterPolicy(DLT, 5)),
        ["dead_letter_policy"],
    )
    assert fail_n_times(env, 1) == [7]  # delivered once more, then forwarded
    assert env.broker.backlog(SUB) == 0
    [forwarded] = dead_letters(env)
    assert forwarded.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "7"


def test_raising_max_delivery_attempts_gives_more_attempts(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("a")
    fail_n_times(env, 4)
    env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, dead_letter_policy=DeadLetterPolicy(DLT, 7)),
        ["dead_letter_policy.max_delivery_attempts"],
    )
    assert fail_n_times(env, 3) == [5, 6, 7]
    assert len(dead_letters(env)) == 1


# -------------------------------------------------------------- retain acked


def test_dead_lettered_message_is_retained_as_acked(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 5), retain_acked_messages=True)
    [message_id] = env.publish("a")
    fail_n_times(env, 5)
    assert [m.message_id for m in env.broker.retained_acked(SUB)] == [message_id]


def test_leases_of_one_deadline_end_in_publish_order_whatever_order_they_got_it(
    env: Env,
) -> None:
    # A key's leases given one deadline in reverse order: the earliest message's expiry
    # is the failed attempt, and its key's later message comes back with it, not failed
    # (as when the deadlines differ). Found by tests/server_stub/core/test_properties.py.
    env.subscribe(enable_message_ordering=True, dead_letter_policy=DeadLetterPolicy(DLT, 5))
    env.publish("first", "second", key="a")
    first, second = env.pull(2)
    assert env.modack(30, second.ack_id, first.ack_id).ok
    env.advance(1300)
    again = env.pull(2)
    assert [(d.message.data, d.delivery_attempt) for d in again] == [(b"first", 2), (b"second", 1)]
