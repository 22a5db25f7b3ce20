"""Broker core: ordering keys, alone and with exactly-once (docs/protocol.md#ordering-keys,
docs/protocol.md#exactly-once-semantics)."""

from __future__ import annotations

import pytest

from eoclient.server_stub.core import RetryPolicy

from .support import INVALID, SUB, UNORDERED, Env, data


def ordered(*, exactly_once: bool = False, **kwargs: object) -> Env:
    env = Env()
    env.subscribe(
        enable_message_ordering=True,
        enable_exactly_once_delivery=exactly_once,
        ack_deadline_seconds=10,
        **kwargs,
    )
    return env


@pytest.fixture(params=[False, True], ids=["plain", "exactly-once"])
def env(request: pytest.FixtureRequest) -> Env:
    return ordered(exactly_once=request.param)


def test_subscription_reports_ordering(env: Env) -> None:
    assert env.broker.subscriptions.properties(SUB)[1]


def test_messages_of_a_key_are_delivered_in_publish_order(env: Env) -> None:
    env.publish("k1", key="k")
    env.publish("k2", "k3", key="k")
    env.publish("k4", key="k")
    assert data(env.pull()) == ["k1", "k2", "k3", "k4"]


def test_messages_of_a_key_arrive_in_order_across_pulls(env: Env) -> None:
    for i in range(6):
        env.publish(f"m{i}", key="k")
    got: list[str] = []
    while len(got) < 6:
        batch = env.pull(2)
        got += data(batch)
        env.ack(*[d.ack_id for d in batch])
    assert got == [f"m{i}" for i in range(6)]


def test_next_message_of_a_key_waits_for_the_first_to_be_delivered(env: Env) -> None:
    env.publish("k1", key="k")
    env.publish("k2", key="k")
    assert data(env.pull(1)) == ["k1"]
    assert data(env.pull(1)) == ["k2"]


def test_message_published_after_the_key_drained_is_delivered(env: Env) -> None:
    env.publish("k1", key="k")
    [d] = env.pull()
    env.ack(d.ack_id)
    env.publish("k2", key="k")
    assert data(env.pull()) == ["k2"]


def test_keys_are_independent_and_unkeyed_messages_interleave(env: Env) -> None:
    env.publish("a1", key="a")
    env.publish("free1")
    env.publish("b1", key="b")
    env.publish("a2", key="a")
    env.publish("free2")
    got = env.pull()
    assert sorted(data(got)) == ["a1", "a2", "b1", "free1", "free2"]
    positions = {d: i for i, d in enumerate(data(got))}
    assert positions["a1"] < positions["a2"]
    # Nacking a keyed message does not hold back unkeyed ones or other keys.
    by_data = {d.message.data.decode(): d for d in got}
    env.nack(by_data["a1"].ack_id)
    env.publish("free3")
    env.publish("b2", key="b")
    assert data(env.pull()) == ["a1", "a2", "free3", "b2"]


def test_nack_redelivers_the_message_and_its_later_messages_in_order(env: Env) -> None:
    env.publish("k1", "k2", "k3", "k4", key="k")
    d1, d2, d3, d4 = env.pull()
    env.ack(d1.ack_id)
    env.nack(d2.ack_id)
    redelivered = env.pull()
    assert data(redelivered) == ["k2", "k3", "k4"]
    for old in (d2, d3, d4):
        assert old.ack_id not in {d.ack_id for d in redelivered}


def test_expiry_redelivers_the_message_and_its_later_messages_in_order(env: Env) -> None:
    env.publish("k1", "k2", "k3", key="k")
    _d1, d2, d3 = env.pull()
    env.modack(60, d2.ack_id, d3.ack_id)  # only k1 expires at 10 s
    env.advance(10)
    assert data(env.pull()) == ["k1", "k2", "k3"]


def test_expiry_of_a_later_message_redelivers_only_the_suffix(env: Env) -> None:
    env.publish("k1", "k2", "k3", key="k")
    d1, _d2, _d3 = env.pull()
    env.modack(60, d1.ack_id)
    env.advance(10)
    assert data(env.pull()) == ["k2", "k3"]


def test_nack_of_a_later_message_leaves_earlier_leases_alone(env: Env) -> None:
    env.publish("k1", "k2", key="k")
    d1, d2 = env.pull()
    env.nack(d2.ack_id)
    assert data(env.pull()) == ["k2"]
    assert env.modack(30, d1.ack_id).ok


def test_redelivery_after_nack_keeps_order_with_messages_published_since(env: Env) -> None:
    env.publish("k1", "k2", key="k")
    d1, _ = env.pull()
    env.publish("k3", key="k")
    assert data(env.pull()) == ["k3"]
    env.nack(d1.ack_id)
    env.publish("k4", key="k")
    assert data(env.pull()) == ["k1", "k2", "k3", "k4"]


def test_retry_backoff_holds_back_the_whole_key() -> None:
    env = ordered(retry_policy=RetryPolicy(10.0, 600.0))
    env.publish("k1", "k2", key="k")
    d1, _ = env.pull()
    env.nack(d1.ack_id)
    env.publish("k3", key="k")
    env.advance(9)
    assert env.pull() == []
    env.advance(1)
    assert data(env.pull()) == ["k1", "k2", "k3"]


def test_ordering_disabled_ignores_keys() -> None:
    env = Env()
    env.subscribe(ack_deadline_seconds=10)
    env.publish("k1", "k2", "k3", key="k")
    d1, d2, d3 = env.pull()
    env.nack(d1.ack_id)
    assert data(env.pull()) == ["k1"]  # k2, k3 keep their leases
    assert env.ack(d3.ack_id).ok  # no ordering constraint on acks
    assert env.ack(d2.ack_id).ok


def test_ordering_disabled_delivers_later_messages_of_a_key_without_waiting() -> None:
    env = Env()
    env.subscribe()
    env.publish("k1", key="k")
    env.publish("k2", key="k")
    assert data(env.pull(1)) == ["k1"]
    assert data(env.pull(1)) == ["k2"]
    assert not env.broker.subscriptions.properties(SUB)[1]


# ------------------------------------------------------- ordering + exactly-once


def test_out_of_order_ack_fails_transiently_then_succeeds_in_order() -> None:
    env = ordered(exactly_once=True)
    env.publish("k1", "k2", key="k")
    d1, d2 = env.pull()
    reply = env.ack(d2.ack_id)
    assert reply.failures == {d2.ack_id: UNORDERED}
    assert env.broker.backlog(SUB) == 2
    assert env.ack(d1.ack_id).ok
    assert env.ack(d2.ack_id).ok
    assert env.broker.backlog(SUB) == 0


def test_acks_in_order_within_one_request_succeed() -> None:
    env = ordered(exactly_once=True)
    env.publish("k1", "k2", "k3", key="k")
    d1, d2, d3 = env.pull()
    assert env.ack(d1.ack_id, d2.ack_id, d3.ack_id).ok


def test_out_of_order_ids_within_one_request_fail_only_the_early_ones() -> None:
    env = ordered(exactly_once=True)
    env.publish("k1", "k2", key="k")
    d1, d2 = env.pull()
    reply = env.ack(d2.ack_id, d1.ack_id)
    assert reply.failures == {d2.ack_id: UNORDERED}
    assert reply.confirmed == (d1.ack_id,)
    assert env.ack(d2.ack_id).ok


def test_unordered_ack_is_not_applied_and_the_message_is_redelivered_on_expiry() -> None:
    env = ordered(exactly_once=True)
    env.publish("k1", "k2", key="k")
    _d1, d2 = env.pull()
    assert env.ack(d2.ack_id).failures == {d2.ack_id: UNORDERED}
    env.advance(10)
    r1, r2 = env.pull()
    assert data([r1, r2]) == ["k1", "k2"]
    assert env.ack(d2.ack_id).failures == {d2.ack_id: INVALID}
    assert env.ack(r1.ack_id, r2.ack_id).ok


def test_ordering_does_not_constrain_acks_across_keys() -> None:
    env = ordered(exactly_once=True)
    env.publish("a1", key="a")
    env.publish("b1", key="b")
    env.publish("free")
    a1, b1, free = env.pull()
    assert env.ack(free.ack_id).ok
    assert env.ack(b1.ack_id).ok
    assert env.ack(a1.ack_id).ok


def test_modack_is_not_subject_to_ack_order() -> None:
    env = ordered(exactly_once=True)
    env.publish("k1", "k2", key="k")
    _, d2 = env.pull()
    assert env.modack(60, d2.ack_id).ok


def test_redelivered_suffix_has_new_ids_and_old_ones_are_invalid() -> None:
    env = ordered(exactly_once=True)
    env.publish("k1", "k2", "k3", key="k")
    d1, d2, d3 = env.pull()
    assert env.ack(d1.ack_id).ok
    assert env.nack(d2.ack_id).ok
    r2, r3 = env.pull()
    reply = env.ack(d2.ack_id, d3.ack_id)
    assert reply.failures == {d2.ack_id: INVALID, d3.ack_id: INVALID}
    assert env.modack(30, d3.ack_id).failures == {d3.ack_id: INVALID}
    assert env.ack(r2.ack_id, r3.ack_id).ok
    assert env.broker.backlog(SUB) == 0


# -------------------------------------------------- non-exactly-once stale acks


def test_stale_ack_of_the_waiting_head_does_not_block_the_key() -> None:
    # Without exactly-once a stale id settles its message even while it waits for
    # redelivery; the next message of the key must then be delivered.
    env = ordered()
    env.publish("k1", "k2", "k3", key="k")
    d1, _ = env.pull(2)
    env.nack(d1.ack_id)  # k1 and k2 wait again; k1 is the head
    assert env.ack(d1.ack_id).ok  # stale, but settles k1
    assert data(env.pull()) == ["k2", "k3"]


def test_stale_ack_of_a_waiting_follower_is_skipped_on_redelivery() -> None:
    env = ordered()
    env.publish("k1", "k2", "k3", key="k")
    d1, d2, _ = env.pull()
    env.nack(d1.ack_id)
    assert env.ack(d2.ack_id).ok  # settles k2 while it waits behind k1
    assert data(env.pull()) == ["k1", "k3"]


def test_out_of_order_ack_without_exactly_once_is_applied() -> None:
    env = ordered()
    env.publish("k1", "k2", key="k")
    d1, d2 = env.pull()
    assert env.ack(d2.ack_id).ok
    env.nack(d1.ack_id)
    assert data(env.pull()) == ["k1"]
