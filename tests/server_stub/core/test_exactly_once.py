"""Broker core: the exactly-once ack-id rules (docs/protocol.md#ack-id-state-machine)."""

from __future__ import annotations

import pytest

from eoclient.server_stub.core import Delivery, SubscriptionConfig

from .support import INVALID, PROJECT, SUB, TOPIC, Env, data


@pytest.fixture
def env() -> Env:
    e = Env()
    e.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    return e


def deliver_one(env: Env) -> Delivery:
    env.publish("a")
    [d] = env.pull()
    return d


def test_subscription_reports_exactly_once(env: Env) -> None:
    assert env.broker.subscriptions.properties(SUB) == (True, False)


def test_each_delivery_gets_a_new_ack_id(env: Env) -> None:
    first = deliver_one(env)
    seen = {first.ack_id}
    d = first
    for _ in range(5):
        env.nack(d.ack_id)
        [d] = env.pull()
        assert d.message.message_id == first.message.message_id
        assert d.ack_id not in seen
        seen.add(d.ack_id)


def test_only_the_latest_delivery_ack_id_is_valid(env: Env) -> None:
    first = deliver_one(env)
    env.advance(10)
    [second] = env.pull()
    reply = env.ack(first.ack_id)
    assert reply.failures == {first.ack_id: INVALID}
    assert reply.confirmed == ()
    assert env.broker.backlog(SUB) == 1
    assert env.ack(second.ack_id).ok
    assert env.broker.backlog(SUB) == 0


def test_ack_id_is_invalid_once_its_deadline_passed_before_any_redelivery(env: Env) -> None:
    d = deliver_one(env)
    env.clock.advance(10)  # no tick, no pull: the deadline just passed
    assert env.ack(d.ack_id).failures == {d.ack_id: INVALID}
    assert env.broker.backlog(SUB) == 1
    [redelivered] = env.pull()
    assert redelivered.message.message_id == d.message.message_id


def test_ack_id_is_valid_just_before_its_deadline(env: Env) -> None:
    d = deliver_one(env)
    env.clock.advance(9.999)
    assert env.ack(d.ack_id).ok


def test_modack_of_an_expired_ack_id_fails(env: Env) -> None:
    d = deliver_one(env)
    env.clock.advance(10)
    assert env.modack(60, d.ack_id).failures == {d.ack_id: INVALID}
    assert env.nack(d.ack_id).failures == {d.ack_id: INVALID}
    # The failed modack did not revive the lease: the message is due now.
    assert data(env.pull()) == ["a"]


def test_ack_id_is_invalid_after_ack(env: Env) -> None:
    d = deliver_one(env)
    assert env.ack(d.ack_id).ok
    assert env.ack(d.ack_id).failures == {d.ack_id: INVALID}
    assert env.modack(30, d.ack_id).failures == {d.ack_id: INVALID}
    assert env.nack(d.ack_id).failures == {d.ack_id: INVALID}
    env.advance(3600)
    assert env.pull() == []


def test_ack_id_is_invalid_after_nack(env: Env) -> None:
    d = deliver_one(env)
    assert env.nack(d.ack_id).ok
    assert env.ack(d.ack_id).failures == {d.ack_id: INVALID}
    assert env.nack(d.ack_id).failures == {d.ack_id: INVALID}
    assert env.broker.backlog(SUB) == 1


def test_ack_id_is_invalid_after_redelivery(env: Env) -> None:
    d = deliver_one(env)
    env.nack(d.ack_id)
    [again] = env.pull()
    assert env.ack(d.ack_id).failures == {d.ack_id: INVALID}
    assert env.modack(30, d.ack_id).failures == {d.ack_id: INVALID}
    assert env.ack(again.ack_id).ok


def test_no_redelivery_while_the_lease_is_live(env: Env) -> None:
    deliver_one(env)
    for _ in range(9):
        assert env.pull() == []
        env.advance(1)
    assert env.pull() == []
    env.advance(1)
    assert data(env.pull()) == ["a"]


def test_modack_extends_the_lease_and_keeps_the_id_valid(env: Env) -> None:
    d = deliver_one(env)
    env.advance(8)
    assert env.modack(60, d.ack_id).ok
    env.advance(59)  # 67 s after delivery, the original deadline long gone
    assert env.pull() == []
    assert env.modack(60, d.ack_id).ok
    env.advance(60)
    [again] = env.pull()
    assert env.ack(d.ack_id).failures == {d.ack_id: INVALID}
    assert env.ack(again.ack_id).ok


def test_mixed_request_fails_invalid_ids_and_applies_valid_ones(env: Env) -> None:
    env.publish("a", "b", "c")
    a, b, c = env.pull()
    env.nack(a.ack_id)
    [a2] = env.pull()
    bogus = "not-an-ack-id"
    foreign = "ffffffffffff-1-1"
    reply = env.ack(a.ack_id, b.ack_id, bogus, foreign, c.ack_id)
    assert reply.failures == {a.ack_id: INVALID, bogus: INVALID, foreign: INVALID}
    assert reply.confirmed == (b.ack_id, c.ack_id)
    assert not reply.ok
    assert reply.exactly_once
    # b and c are acked for good; a is still leased under a2.
    assert env.broker.backlog(SUB) == 1
    env.advance(3600)
    [last] = env.pull()
    assert last.message.message_id == a2.message.message_id


def test_mixed_modack_request_extends_only_valid_ids(env: Env) -> None:
    env.publish("a", "b")
    a, b = env.pull()
    env.nack(a.ack_id)
    [a2] = env.pull()
    reply = env.modack(60, a.ack_id, b.ack_id)
    assert reply.failures == {a.ack_id: INVALID}
    assert reply.confirmed == (b.ack_id,)
    env.advance(10)  # a2 expires (deadline 10 s), b was extended to 60 s
    assert [d.message.message_id for d in env.pull()] == [a2.message.message_id]


@pytest.mark.parametrize(
    "bogus",
    ["", "bogus", "1-2", "x-y-z", "abc-1-1-1", "projects/p1/subscriptions/sub-a:12"],
)
def test_malformed_ids_fail_per_id_on_exactly_once(env: Env, bogus: str) -> None:
    d = deliver_one(env)
    reply = env.ack(bogus, d.ack_id)
    assert reply.failures == {bogus: INVALID}
    assert reply.confirmed == (d.ack_id,)
    assert env.modack(30, bogus).failures == {bogus: INVALID}


def test_ack_id_from_another_exactly_once_subscription_is_invalid(env: Env) -> None:
    other = f"{PROJECT}/subscriptions/sub-b"
    env.subscribe(other, enable_exactly_once_delivery=True)
    env.publish("a")
    [mine] = env.pull()
    [theirs] = env.pull(sub=other)
    assert env.ack(theirs.ack_id).failures == {theirs.ack_id: INVALID}
    assert env.ack(mine.ack_id).ok
    assert env.ack(theirs.ack_id, sub=other).ok


def test_acked_message_is_not_redelivered_after_any_amount_of_time(env: Env) -> None:
    env.publish(*[str(i) for i in range(20)])
    deliveries = env.pull()
    assert env.ack(*[d.ack_id for d in deliveries[::2]]).ok
    for _ in range(5):
        env.advance(10)
        redelivered = env.pull()
        assert sorted(int(x) for x in data(redelivered)) == list(range(1, 20, 2))


def test_enabling_exactly_once_later_applies_the_rules(env: Env) -> None:
    plain = f"{PROJECT}/subscriptions/plain"
    env.subscribe(plain)
    env.publish("a")
    [d] = env.pull(sub=plain)
    env.broker.subscriptions.update(
        SubscriptionConfig(plain, TOPIC, enable_exactly_once_delivery=True),
        ["enable_exactly_once_delivery"],
    )
    env.advance(10)
    reply = env.ack(d.ack_id, sub=plain)
    assert reply.exactly_once
    assert reply.failures == {d.ack_id: INVALID}


@pytest.mark.parametrize(
    "ack_id",
    ["x-²-1", "x-1-²", "x-" + "9" * 5000 + "-1", "x--1", "x-1-", "x-1-1-1", "x-١-1", ""],
)
def test_malformed_ack_ids_fail_alone(env: Env, ack_id: str) -> None:
    """Ids this server cannot have issued (non-ASCII digits, absurd lengths) fail that
    id alone; the request's other ids are applied."""
    delivery = deliver_one(env)
    reply = env.broker.acks.acknowledge(SUB, [ack_id, delivery.ack_id])
    assert reply.failures == {ack_id: INVALID}
    assert reply.confirmed == (delivery.ack_id,)
    assert env.broker.backlog(SUB) == 0
