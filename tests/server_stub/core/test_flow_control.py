"""Broker core: StreamingPull server-side flow control (docs/protocol.md#server-side-flow-control).

Proto text: the server stops sending while ``max_outstanding_messages`` (or
``max_outstanding_bytes`` or more) are outstanding, and resumes once below; <= 0 is
unlimited. A message counts as outstanding on its stream until acked, nacked or expired.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eoclient._clock import FakeClock
from eoclient.errors import NotFound, ResourceExhausted
from eoclient.server_stub.core import Broker, NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.storage.sqlite import SqliteStore

from .support import INVALID, SUB, TOPIC, Env, data


@pytest.fixture
def env() -> Env:
    e = Env()
    e.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    return e


def test_max_outstanding_messages_limits_stream_deliveries(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=2)
    env.publish("a", "b", "c", "d", "e")
    first = env.broker.leasing.stream_pull(stream)
    assert data(first) == ["a", "b"]
    assert env.broker.leasing.stream_pull(stream) == []
    assert env.flow(stream).outstanding_messages == 2


def test_ack_frees_room_on_the_stream(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=2)
    env.publish("a", "b", "c", "d", "e")
    a, _ = env.broker.leasing.stream_pull(stream)
    env.ack(a.ack_id)
    assert data(env.broker.leasing.stream_pull(stream)) == ["c"]
    assert env.broker.leasing.stream_pull(stream) == []


def test_nack_and_expiry_free_room_on_the_stream(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=1)
    env.publish("a", "b")
    [a] = env.broker.leasing.stream_pull(stream)
    env.nack(a.ack_id)
    assert env.flow(stream).outstanding_messages == 0
    [again] = env.broker.leasing.stream_pull(stream)
    assert data([again]) == ["a"]
    env.advance(30)
    assert env.flow(stream).outstanding_messages == 0
    assert data(env.broker.leasing.stream_pull(stream)) == ["a"]


def test_unary_pulls_are_not_limited_by_a_stream(env: Env) -> None:
    env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=1)
    env.publish("a", "b", "c")
    assert len(env.pull()) == 3


def test_each_stream_has_its_own_limit(env: Env) -> None:
    s1 = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=1)
    s2 = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=2)
    env.publish("a", "b", "c", "d")
    assert data(env.broker.leasing.stream_pull(s1)) == ["a"]
    assert data(env.broker.leasing.stream_pull(s2)) == ["b", "c"]
    assert env.broker.leasing.stream_pull(s1) == []


def test_ack_on_another_stream_or_unary_frees_the_delivering_stream(env: Env) -> None:
    s1 = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=1)
    env.publish("a", "b")
    [a] = env.broker.leasing.stream_pull(s1)
    env.ack(a.ack_id)  # unary ack of a stream delivery
    assert data(env.broker.leasing.stream_pull(s1)) == ["b"]


def _publish_sized(env: Env, *sizes: int) -> None:
    for size in sizes:
        env.broker.publishing.publish(TOPIC, [NewMessage(b"x" * size)])


def test_max_outstanding_bytes_stops_once_reached(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_bytes=100)
    _publish_sized(env, 60, 30, 20, 5)
    got = env.broker.leasing.stream_pull(stream)
    # 0 < 100 → 60; 60 < 100 → 30; 90 < 100 → 20; 110 >= 100 → stop.
    assert [d.message.size for d in got] == [60, 30, 20]
    assert env.flow(stream).outstanding_bytes == 110
    assert env.broker.leasing.stream_pull(stream) == []
    env.ack(got[0].ack_id)
    assert [d.message.size for d in env.broker.leasing.stream_pull(stream)] == [5]


def test_message_larger_than_max_bytes_is_delivered_when_nothing_is_outstanding(
    env: Env,
) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_bytes=10)
    _publish_sized(env, 1000, 1)
    [big] = env.broker.leasing.stream_pull(stream)
    assert big.message.size == 1000
    assert env.broker.leasing.stream_pull(stream) == []
    env.ack(big.ack_id)
    assert [d.message.size for d in env.broker.leasing.stream_pull(stream)] == [1]


def test_message_and_byte_limits_combine(env: Env) -> None:
    stream = env.broker.leasing.open_stream(
        SUB, stream_ack_deadline=30, max_outstanding_messages=3, max_outstanding_bytes=25
    )
    _publish_sized(env, 10, 10, 10, 1, 1)
    assert len(env.broker.leasing.stream_pull(stream)) == 3  # bytes: 0, 10, 20 < 25
    stream2 = env.broker.leasing.open_stream(
        SUB, stream_ack_deadline=30, max_outstanding_messages=1, max_outstanding_bytes=1000
    )
    assert len(env.broker.leasing.stream_pull(stream2)) == 1


@pytest.mark.parametrize("limit", [0, -1])
def test_non_positive_limits_mean_unlimited(env: Env, limit: int) -> None:
    stream = env.broker.leasing.open_stream(
        SUB, stream_ack_deadline=30, max_outstanding_messages=limit, max_outstanding_bytes=limit
    )
    _publish_sized(env, *[100] * 50)
    assert len(env.broker.leasing.stream_pull(stream)) == 50


def test_stream_pull_max_messages_caps_one_batch(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30)
    env.publish("a", "b", "c")
    assert data(env.broker.leasing.stream_pull(stream, max_messages=2)) == ["a", "b"]
    assert data(env.broker.leasing.stream_pull(stream, max_messages=2)) == ["c"]


def test_closing_a_stream_keeps_its_leases_valid_until_their_deadline(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=5)
    env.publish("a", "b", "c")
    a, b, c = env.broker.leasing.stream_pull(stream)
    env.broker.leasing.close_stream(stream)
    assert env.broker.leasing.stream_subscription(stream) is None
    # Still leased: no redelivery before the deadline, ids still valid.
    env.advance(29)
    assert env.pull() == []
    assert env.ack(a.ack_id).ok
    assert env.modack(60, b.ack_id).ok
    env.advance(1)
    [again] = env.pull()
    assert again.message.message_id == c.message.message_id
    assert env.ack(c.ack_id).failures == {c.ack_id: INVALID}


def test_pulling_a_closed_stream_fails(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30)
    env.broker.leasing.close_stream(stream)
    with pytest.raises(NotFound):
        env.broker.leasing.stream_pull(stream)
    env.broker.leasing.close_stream(stream)  # idempotent


def test_leases_of_a_closed_stream_do_not_count_against_a_new_one(env: Env) -> None:
    old = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=2)
    env.publish("a", "b", "c", "d")
    a, b = env.broker.leasing.stream_pull(old)
    env.broker.leasing.close_stream(old)
    new = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=2)
    assert data(env.broker.leasing.stream_pull(new)) == ["c", "d"]
    env.ack(a.ack_id, b.ack_id)  # acking the closed stream's leases
    flow = env.flow(new)
    assert (flow.outstanding_messages, flow.outstanding_bytes) == (2, 2)


def test_deleting_the_subscription_ends_its_streams(env: Env) -> None:
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30)
    env.broker.subscriptions.delete(SUB)
    with pytest.raises(NotFound):
        env.broker.leasing.stream_pull(stream)


# The server's lease limit (``Broker(max_leases=...)``, ``serve --max-leases``): a bound on
# what one subscription may hold leased, whatever the clients' flow control asks for.


def test_unary_pull_is_refused_at_the_lease_limit_and_room_comes_back_with_acks() -> None:
    env = Env(max_leases=3)
    env.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    env.publish("a", "b", "c", "d", "e")
    first = env.pull(max_messages=10)
    assert data(first) == ["a", "b", "c"]  # cut to the room left, not refused
    with pytest.raises(ResourceExhausted, match=r"3 outstanding leases.*--max-leases 3"):
        env.pull()
    env.ack(first[0].ack_id)
    assert data(env.pull()) == ["d"]
    env.advance(10)  # expired leases give their room back too
    assert len(env.pull()) == 3


def test_streams_wait_at_the_lease_limit_and_count_unary_leases() -> None:
    env = Env(max_leases=2)
    env.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=10)
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=30, max_outstanding_messages=0)
    env.publish("a", "b", "c")
    [a] = env.pull(max_messages=1)
    assert data(env.broker.leasing.stream_pull(stream)) == ["b"]
    assert env.broker.leasing.stream_pull(stream) == []  # waits; nothing is refused on a stream
    env.nack(a.ack_id)
    assert data(env.broker.leasing.stream_pull(stream)) == ["a"]


def test_zero_lease_limit_means_unlimited() -> None:
    env = Env(max_leases=0)
    env.subscribe()
    env.publish(*[str(n) for n in range(50)])
    assert len(env.pull()) == 50


class _TickingClock(FakeClock):
    """Moves a microsecond at every reading, as a real clock does between two calls."""

    def now(self) -> float:
        self.advance(1e-6)
        return super().now()


def test_a_pull_at_the_lease_limit_check_sees_the_same_now_as_its_delivery(
    tmp_path: Path,
) -> None:
    # Regression: the limit check read the clock again, later than the Pull's ``now``;
    # after a restart (every message cold) the messages it loaded were scheduled at the
    # later time and were not ready at the Pull's own: the Pull returned nothing.
    clock = _TickingClock()
    store = SqliteStore(tmp_path / "data")
    broker = Broker(clock, store=store, max_leases=10)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    broker.publishing.publish(TOPIC, [NewMessage(b"kept")])
    store.close()
    store = SqliteStore(tmp_path / "data")
    try:
        restarted = Broker(clock, store=store, max_leases=10)
        assert data(restarted.leasing.pull(SUB, 10)) == ["kept"]
    finally:
        store.close()
