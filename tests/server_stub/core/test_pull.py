"""Broker core: publish, pull, leases, delivery attempts, retry backoff, history, faults."""

from __future__ import annotations

import pytest

from eoclient.errors import FailedPrecondition, InvalidArgument
from eoclient.server_stub.core import (
    Broker,
    DeadLetterPolicy,
    NewMessage,
    RetryPolicy,
    SubscriptionConfig,
    TopicConfig,
)

from .support import DLT, INVALID, PROJECT, SUB, TOPIC, Env, data


@pytest.fixture
def env() -> Env:
    return Env()


# ------------------------------------------------------------ publish and pull


def test_publish_returns_unique_ids_in_request_order(env: Env) -> None:
    env.subscribe()
    first = env.publish("a", "b", "c")
    second = env.publish("d")
    assert len(set(first + second)) == 4
    assert [d.message.message_id for d in env.pull()] == first + second


def test_pull_returns_the_message_as_published(env: Env) -> None:
    env.subscribe(enable_message_ordering=True)
    env.broker.publishing.publish(
        TOPIC, [NewMessage(b"payload", attributes={"k": "v"}, ordering_key="key")]
    )
    [d] = env.pull()
    assert d.message.data == b"payload"
    assert d.message.attributes == {"k": "v"}
    assert d.message.ordering_key == "key"
    assert d.message.publish_time == env.clock.now()
    assert d.message.size == len(b"payload") + len("k") + len("v") + len("key")


def test_messages_published_before_a_subscription_exists_are_not_delivered(env: Env) -> None:
    env.publish("before")
    env.subscribe()
    env.publish("after")
    assert data(env.pull()) == ["after"]


def test_every_subscription_gets_every_message(env: Env) -> None:
    other = f"{PROJECT}/subscriptions/sub-b"
    env.subscribe()
    env.subscribe(other)
    env.publish("a", "b")
    assert data(env.pull()) == ["a", "b"]
    assert data(env.pull(sub=other)) == ["a", "b"]


def test_pull_respects_max_messages_and_the_1000_cap(env: Env) -> None:
    env.subscribe()
    env.broker.publishing.publish(TOPIC, [NewMessage(b"x")] * 1000)
    env.broker.publishing.publish(TOPIC, [NewMessage(b"x")] * 500)
    assert len(env.pull(3)) == 3
    assert len(env.pull(5000)) == 1000
    assert len(env.pull(5000)) == 497
    assert env.pull(5000) == []


MIB = 2**20


def test_pull_response_stays_under_3_mib_of_message_data(env: Env) -> None:
    # Clients other than the official ones keep gRPC's 4 MiB receive limit.
    env.subscribe()
    env.broker.publishing.publish(TOPIC, [NewMessage(b"x" * MIB)] * 7)
    sizes = [len(env.pull(100)) for _ in range(3)]
    assert sizes == [3, 3, 1]  # 3 x 1 MiB = the 3 MiB budget exactly


def test_pull_always_returns_one_message_even_over_the_budget(env: Env) -> None:
    env.subscribe()
    env.broker.publishing.publish(TOPIC, [NewMessage(b"x" * (5 * MIB))])
    env.broker.publishing.publish(TOPIC, [NewMessage(b"small")])
    assert [len(d.message.data) for d in env.pull(10)] == [5 * MIB]
    assert data(env.pull(10)) == ["small"]


def test_pull_byte_budget_keeps_the_order(env: Env) -> None:
    env.subscribe(enable_message_ordering=True)
    env.broker.publishing.publish(TOPIC, [NewMessage(b"a" * 10, ordering_key="k")] * 2)
    env.broker.publishing.publish(TOPIC, [NewMessage(b"b", ordering_key="k")])
    first = env.broker.leasing.pull(SUB, 10, max_bytes=23)
    assert [len(d.message.data) for d in first] == [10, 10]  # 11 + 11 bytes with the key; + 2 > 23
    assert data(env.broker.leasing.pull(SUB, 10, max_bytes=23)) == ["b"]


def test_pull_on_empty_subscription_returns_nothing(env: Env) -> None:
    env.subscribe()
    assert env.pull() == []


def test_detached_subscription_cannot_be_pulled(env: Env) -> None:
    env.subscribe()
    env.broker.subscriptions.detach(SUB)
    with pytest.raises(FailedPrecondition):
        env.pull()
    with pytest.raises(FailedPrecondition):
        env.broker.leasing.open_stream(SUB, stream_ack_deadline=10)


# ---------------------------------------------------------------------- leases


def test_no_redelivery_while_the_lease_is_live(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    assert len(env.pull()) == 1
    for _ in range(9):
        env.advance(1)
        assert env.pull() == []


def test_expired_lease_is_redelivered_with_a_new_ack_id(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [first] = env.pull()
    env.advance(10)
    [second] = env.pull()
    assert second.message.message_id == first.message.message_id
    assert second.ack_id != first.ack_id


def test_ack_settles_the_message_for_good(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    assert env.ack(d.ack_id).ok
    assert env.broker.backlog(SUB) == 0
    env.advance(3600)
    assert env.pull() == []


def test_nack_without_retry_policy_redelivers_immediately(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    env.nack(d.ack_id)
    assert data(env.pull()) == ["a"]


def test_modack_extends_the_lease(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [d] = env.pull()
    env.advance(5)
    env.modack(30, d.ack_id)
    env.advance(29)  # 34 s after delivery, 1 s before the new deadline (5 + 30)
    assert env.pull() == []
    env.advance(1)
    assert data(env.pull()) == ["a"]


def test_modack_can_shorten_the_lease(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=600)
    env.publish("a")
    [d] = env.pull()
    env.modack(10, d.ack_id)
    env.advance(10)
    assert data(env.pull()) == ["a"]


def test_unary_pull_uses_the_subscription_ack_deadline(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=30)
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=100)
    env.publish("a")
    assert len(env.pull()) == 1
    env.advance(29)
    assert env.pull() == []
    assert env.broker.leasing.stream_pull(stream) == []
    env.advance(1)
    assert data(env.pull()) == ["a"]


def test_stream_pull_uses_the_stream_ack_deadline(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=30)
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=15)
    env.publish("a")
    assert len(env.broker.leasing.stream_pull(stream)) == 1
    env.advance(14)
    assert env.pull() == []
    env.advance(1)
    assert data(env.pull()) == ["a"]


def test_stream_ack_deadline_can_be_changed_for_later_deliveries(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=30)
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=15)
    env.broker.leasing.set_stream_ack_deadline(stream, 100)
    env.publish("a")
    assert len(env.broker.leasing.stream_pull(stream)) == 1
    env.advance(99)
    assert env.pull() == []
    env.advance(1)
    assert data(env.pull()) == ["a"]


def test_non_exactly_once_malformed_ids_reject_the_whole_request(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    for bogus in ["bogus", "", "x-1-1", f"{d.ack_id}-9", "projects/p1/subscriptions/sub-a:1"]:
        with pytest.raises(InvalidArgument, match="invalid ack ID"):
            env.ack(d.ack_id, bogus)
        with pytest.raises(InvalidArgument, match="invalid ack ID"):
            env.nack(d.ack_id, bogus)
    assert env.broker.backlog(SUB) == 1  # the valid id was not applied
    env.advance(9)
    assert env.pull() == []  # nor was the nack


def test_ack_ids_of_another_subscription_are_malformed_here(env: Env) -> None:
    other = f"{PROJECT}/subscriptions/sub-b"
    env.subscribe()
    env.subscribe(other)
    env.publish("a")
    [d] = env.pull(sub=other)
    with pytest.raises(InvalidArgument):
        env.ack(d.ack_id)


def test_ack_ids_of_a_deleted_and_recreated_subscription_are_malformed(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    env.broker.subscriptions.delete(SUB)
    env.subscribe()
    with pytest.raises(InvalidArgument):
        env.ack(d.ack_id)


def test_non_exactly_once_stale_ack_still_settles_the_message(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [first] = env.pull()
    env.advance(10)
    [second] = env.pull()
    reply = env.ack(first.ack_id)
    assert reply.ok
    assert not reply.exactly_once
    assert reply.confirmed == (first.ack_id,)
    assert env.broker.backlog(SUB) == 0
    env.advance(100)
    assert env.pull() == []
    assert env.ack(second.ack_id).ok  # already settled: a no-op, still OK


def test_non_exactly_once_expired_ack_before_redelivery_settles(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [d] = env.pull()
    env.advance(11)
    assert env.ack(d.ack_id).ok
    assert env.pull() == []


def test_non_exactly_once_stale_modack_is_ignored(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [first] = env.pull()
    env.advance(10)
    [second] = env.pull()
    assert env.nack(first.ack_id).ok  # stale: does not end the live lease
    assert env.pull() == []
    assert env.modack(600, first.ack_id).ok  # stale: does not extend either
    env.advance(10)
    assert [d.message.message_id for d in env.pull()] == [second.message.message_id]


def test_never_issued_generation_does_not_settle_a_message(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    uid, seq, _ = d.ack_id.split("-")
    env.nack(d.ack_id)
    env.ack(f"{uid}-{seq}-0")  # well formed, but no delivery ever had generation 0
    env.ack(f"{uid}-{seq}-7")  # nor generation 7
    assert env.broker.backlog(SUB) == 1
    assert data(env.pull()) == ["a"]


# -------------------------------------------------------------- delivery_attempt


def test_delivery_attempt_is_0_without_dead_letter_policy(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [d] = env.pull()
    assert d.delivery_attempt == 0
    env.nack(d.ack_id)
    [d] = env.pull()
    assert d.delivery_attempt == 0
    env.advance(10)
    [d] = env.pull()
    assert d.delivery_attempt == 0


def test_delivery_attempt_counts_nacks_and_expiries_with_dead_letter_policy(env: Env) -> None:
    env.broker.topics.create(TopicConfig(DLT))
    env.subscribe(ack_deadline_seconds=10, dead_letter_policy=DeadLetterPolicy(DLT, 10))
    env.publish("a")
    [d] = env.pull()
    assert d.delivery_attempt == 1
    env.nack(d.ack_id)
    [d] = env.pull()
    assert d.delivery_attempt == 2
    env.advance(10)
    [d] = env.pull()
    assert d.delivery_attempt == 3
    env.modack(20, d.ack_id)  # an extension is not a failed attempt
    env.advance(20)
    [d] = env.pull()
    assert d.delivery_attempt == 4


def test_delivery_attempt_follows_a_dead_letter_policy_added_later(env: Env) -> None:
    env.broker.topics.create(TopicConfig(DLT))
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    assert d.delivery_attempt == 0
    env.nack(d.ack_id)
    env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, dead_letter_policy=DeadLetterPolicy(DLT)),
        ["dead_letter_policy"],
    )
    [d] = env.pull()
    assert d.delivery_attempt == 2


# ------------------------------------------------------------------ retry policy


def test_nack_with_retry_policy_waits_the_minimum_backoff(env: Env) -> None:
    env.subscribe(retry_policy=RetryPolicy(10.0, 600.0))
    env.publish("a")
    [d] = env.pull()
    env.nack(d.ack_id)
    assert env.pull() == []
    env.advance(9.9)
    assert env.pull() == []
    env.advance(0.1)
    assert data(env.pull()) == ["a"]


def test_retry_backoff_grows_exponentially_up_to_the_maximum(env: Env) -> None:
    env.subscribe(retry_policy=RetryPolicy(10.0, 600.0))
    env.publish("a")
    [d] = env.pull()
    waits = []
    for _ in range(9):
        env.nack(d.ack_id)
        waited = 0
        while not (redelivered := env.pull()):
            env.advance(1)
            waited += 1
        [d] = redelivered
        waits.append(waited)
    assert waits == [10, 20, 40, 80, 160, 320, 600, 600, 600]


def test_retry_backoff_applies_after_lease_expiry(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10, retry_policy=RetryPolicy(30.0, 600.0))
    env.publish("a")
    env.pull()
    env.advance(10)  # expired at 10 s: redeliverable from 40 s
    assert env.pull() == []
    env.advance(29)
    assert env.pull() == []
    env.advance(1)
    assert data(env.pull()) == ["a"]


def test_backoff_after_expiry_counts_from_the_deadline_not_the_next_call(env: Env) -> None:
    # Nobody ticks between delivery and the pull at 100 s: the lease expired at 10 s,
    # the backoff (10 s) ended at 20 s, so the message is due at 100 s.
    env.subscribe(ack_deadline_seconds=10, retry_policy=RetryPolicy(10.0, 600.0))
    env.publish("a")
    env.pull()
    env.clock.advance(100)
    assert data(env.pull()) == ["a"]


def test_zero_backoff_retry_policy_redelivers_immediately(env: Env) -> None:
    env.subscribe(retry_policy=RetryPolicy(0.0, 0.0))
    env.publish("a")
    [d] = env.pull()
    env.nack(d.ack_id)
    assert data(env.pull()) == ["a"]


def test_backoff_does_not_hold_back_other_messages(env: Env) -> None:
    env.subscribe(retry_policy=RetryPolicy(60.0, 600.0))
    env.publish("a")
    [d] = env.pull()
    env.nack(d.ack_id)
    env.publish("b")
    assert data(env.pull()) == ["b"]


# ------------------------------------------------------------- tick / listener


def test_tick_notifies_when_expiry_makes_a_message_deliverable(env: Env) -> None:
    notified: list[str] = []
    env.broker.set_listener(notified.append)
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    assert notified == [SUB]
    env.pull()
    notified.clear()
    assert env.broker.next_wakeup() == env.clock.now() + 10
    env.clock.advance(9)
    env.broker.tick()
    assert notified == []
    env.clock.advance(1)
    env.broker.tick()
    assert notified == [SUB]
    assert env.broker.has_deliverable(SUB)


def test_ack_and_nack_notify_but_extension_does_not(env: Env) -> None:
    notified: list[str] = []
    env.subscribe()
    env.publish("a", "b")
    a, b = env.pull()
    env.broker.set_listener(notified.append)
    env.modack(30, a.ack_id)
    assert notified == []
    env.nack(a.ack_id)
    assert notified == [SUB]
    env.ack(b.ack_id)
    assert notified == [SUB, SUB]


# -------------------------------------------------------------------- history


def test_history_records_deliveries_acks_and_modacks_per_message(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=20)
    [message_id] = env.publish("a")
    [first] = env.pull()
    start = env.clock.now()
    env.modack(30, first.ack_id)
    env.nack(first.ack_id)
    [second] = env.broker.leasing.stream_pull(stream)
    env.advance(1)
    assert env.ack(first.ack_id).failures == {first.ack_id: INVALID}
    assert env.ack(second.ack_id).ok

    history = env.broker.history.of(SUB, message_id)
    assert [(r.ack_id, r.via, r.time) for r in history.deliveries] == [
        (first.ack_id, "pull", start),
        (second.ack_id, "stream", start),
    ]
    assert [(r.ack_id, r.seconds, r.failure) for r in history.modacks] == [
        (first.ack_id, 30, ""),
        (first.ack_id, 0, ""),
    ]
    assert [(r.ack_id, r.failure, r.time) for r in history.acks] == [
        (first.ack_id, INVALID, start + 1),
        (second.ack_id, "", start + 1),
    ]
    assert [r.ack_id for r in history.successful_acks] == [second.ack_id]
    assert env.broker.history.message_ids(SUB) == [message_id]
    assert env.broker.history.of(SUB, "unknown").deliveries == []


def test_history_records_stale_acks_on_non_exactly_once(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    [message_id] = env.publish("a")
    [first] = env.pull()
    env.advance(10)
    env.pull()
    env.ack(first.ack_id)
    history = env.broker.history.of(SUB, message_id)
    assert [(r.ack_id, r.failure) for r in history.acks] == [(first.ack_id, "")]


def test_history_can_be_disabled(env: Env) -> None:
    broker = Broker(env.clock, record_history=False)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    [message_id] = broker.publishing.publish(TOPIC, [NewMessage(b"a")])
    [d] = broker.leasing.pull(SUB, 1)
    broker.acks.acknowledge(SUB, [d.ack_id])
    assert broker.history.of(SUB, message_id).deliveries == []


# -------------------------------------------------------------- fault injection


def test_injected_transient_failure_is_reported_once_then_the_ack_succeeds(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    [message_id] = env.publish("a")
    [d] = env.pull()
    env.broker.acks.inject_failure(SUB, message_id, "TRANSIENT_FAILURE_OTHER")
    reply = env.ack(d.ack_id)
    assert reply.failures == {d.ack_id: "TRANSIENT_FAILURE_OTHER"}
    assert reply.confirmed == ()
    assert env.broker.backlog(SUB) == 1  # not applied
    reply = env.ack(d.ack_id)
    assert reply.ok
    assert reply.confirmed == (d.ack_id,)
    assert env.broker.backlog(SUB) == 0


def test_injected_failure_leaves_other_ids_of_the_request_applied(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    a_id, _ = env.publish("a", "b")
    a, b = env.pull()
    env.broker.acks.inject_failure(SUB, a_id, "PERMANENT_FAILURE_OTHER")
    reply = env.ack(a.ack_id, b.ack_id)
    assert reply.failures == {a.ack_id: "PERMANENT_FAILURE_OTHER"}
    assert reply.confirmed == (b.ack_id,)
    assert env.broker.backlog(SUB) == 1


def test_injected_modack_failure_is_not_applied(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    [message_id] = env.publish("a")
    [d] = env.pull()
    env.broker.acks.inject_failure(
        SUB, message_id, "TRANSIENT_FAILURE_OTHER", operations=["modack"]
    )
    assert env.modack(600, d.ack_id).failures == {d.ack_id: "TRANSIENT_FAILURE_OTHER"}
    assert env.nack(d.ack_id).ok  # the fault was used up: this one applies
    assert data(env.pull()) == ["a"]


def test_injected_failure_for_acks_only_leaves_modacks_alone(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    [message_id] = env.publish("a")
    [d] = env.pull()
    env.broker.acks.inject_failure(SUB, message_id, "TRANSIENT_FAILURE_OTHER", operations=["ack"])
    assert env.modack(30, d.ack_id).ok
    assert not env.ack(d.ack_id).ok
    assert env.ack(d.ack_id).ok


def test_injected_permanent_failure_forever(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    [message_id] = env.publish("a")
    [d] = env.pull()
    env.broker.acks.inject_failure(SUB, message_id, "PERMANENT_FAILURE_OTHER", times=-1)
    for _ in range(5):
        assert env.ack(d.ack_id).failures == {d.ack_id: "PERMANENT_FAILURE_OTHER"}
    assert env.broker.backlog(SUB) == 1


def test_injected_failure_times_counts_requests(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    [message_id] = env.publish("a")
    [d] = env.pull()
    env.broker.acks.inject_failure(SUB, message_id, "TRANSIENT_FAILURE_OTHER", times=3)
    results = [env.ack(d.ack_id).ok for _ in range(4)]
    assert results == [False, False, False, True]


# ------------------------------------------------------------------- counters


def test_counters_count_deliveries_acks_nacks_and_expiries(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a", "b", "c")
    a, b, _ = env.pull()
    env.ack(a.ack_id)
    env.nack(b.ack_id)
    env.advance(10)
    assert len(env.pull()) == 2
    assert env.broker.counters(SUB) == {
        "delivered": 5,
        "acked": 1,
        "nacked": 1,
        "expired": 1,
        "dead_lettered": 0,
        "filtered": 0,
        "discarded": 0,
        "skipped": 0,
        "evicted": 0,
        "expired_by_ttl": 0,
    }


def test_peek_shows_the_oldest_unacked_messages_without_leasing_them() -> None:
    env = Env()
    env.subscribe(enable_exactly_once_delivery=True)
    env.publish("a", "b", "c", "d", "e")
    [a] = env.pull(max_messages=1)
    peeked = env.broker.peek(SUB, 4)
    assert [(m.data, leased) for m, leased in peeked] == [
        (b"a", True),
        (b"b", False),
        (b"c", False),
        (b"d", False),
    ]
    # Nothing leased, nothing counted: the next pull gets b, c, d, e, first attempts.
    assert data(env.pull()) == ["b", "c", "d", "e"]
    env.ack(a.ack_id)
    assert [m.data for m, _ in env.broker.peek(SUB, 10)] == [b"b", b"c", b"d", b"e"]
