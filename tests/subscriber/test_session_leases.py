"""Leases against the reference server, on one FakeClock shared by client and server.

The test moves time; the session's sender computes what is due from the clock when
woken, so after each advance the test wakes it (``stream.sender.wake``) instead of
waiting for the real-time timer the sender set from the fake clock.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest

from eoclient import AcknowledgeStatus, LeaseSettings, SubscriberClient
from eoclient._clock import FakeClock
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.subscriber.session import StreamingSession

from .test_session_support import Env, eventually, make_env, take


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def srv(clock: FakeClock) -> AsyncIterator[ReferenceServer]:
    async with run_server(clock=clock) as server:
        yield server


def advance(clock: FakeClock, srv: ReferenceServer, stream: StreamingSession, s: float) -> None:
    clock.advance(s)
    srv.tick()
    stream.sender.wake.set()


async def receipt_settled(stream: StreamingSession) -> None:
    """Wait for every copy of the receipt modack to land (before the test moves time)."""
    await eventually(stream.ledger.idle, what="receipt modacks answered")


def extended_once_since(env: Env, message_id: str, since: float) -> bool:
    return [m.seconds for m in env.history(message_id).modacks if m.time >= since] == [60]


async def test_leases_are_extended_before_they_expire(
    srv: ReferenceServer, clock: FakeClock
) -> None:
    env = make_env(srv, exactly_once=True)
    (message_id,) = env.publish(1)
    async with (
        SubscriberClient(srv.address, clock=clock) as client,
        client.subscribe(env.subscription) as stream,
    ):
        (message,) = await take(stream, 1)
        await receipt_settled(stream)
        # The receipt modack: the exactly-once floor of 60 s (on the stream and, while the
        # session learns whether the server confirms there, by unary call too).
        assert [m.seconds for m in env.history(message_id).modacks] == [60, 60]
        # Three lease periods pass; each time the extension goes out before expiry.
        for _ in range(3):
            since = clock.now() + 55
            advance(clock, srv, stream, 55)
            await eventually(
                functools.partial(extended_once_since, env, message_id, since),
                what="an extension",
            )
        advance(clock, srv, stream, 30)
        assert len(env.history(message_id).deliveries) == 1
        assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
    assert env.backlog() == 0


async def test_a_message_held_past_max_lease_is_released_not_acked(
    srv: ReferenceServer, clock: FakeClock
) -> None:
    env = make_env(srv, exactly_once=True)
    (message_id,) = env.publish(1)
    lease = LeaseSettings(max_lease=100)
    async with (
        SubscriberClient(srv.address, clock=clock) as client,
        client.subscribe(env.subscription, lease=lease) as stream,
    ):
        (first,) = await take(stream, 1)
        await receipt_settled(stream)
        advance(clock, srv, stream, 55)
        await eventually(lambda: len(env.history(message_id).modacks) == 3, what="extension")
        advance(clock, srv, stream, 50)  # 105 s: past max_lease
        await eventually(lambda: stream.statistics().expired == 1, what="release")
        assert stream.statistics().outstanding_messages == 0
        assert all(m.seconds != 0 for m in env.history(message_id).modacks)
        # The last extension runs out; the server redelivers, to this same stream.
        advance(clock, srv, stream, 60)
        (second,) = await take(stream, 1)
        assert second.message_id == message_id
        assert await first.ack_with_response() is AcknowledgeStatus.INVALID_ACK_ID
        assert await second.ack_with_response() is AcknowledgeStatus.SUCCESS
    assert env.backlog() == 0
