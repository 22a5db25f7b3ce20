"""The subscriber's records on the ``eoclient.subscriber`` logger: what a user turning on
debug logging sees of the session and its stream (open, close, reconnects), flow-control
holds, lease extensions, exactly-once failures and retries; and that INFO never carries a
record per message."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from eoclient import (
    AcknowledgeStatus,
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    SubscriberClient,
)
from eoclient._clock import FakeClock
from eoclient.server_stub.server import ReferenceServer, run_server

from .test_session_support import eventually, make_env, take

pytestmark = pytest.mark.timeout(30)

FAST_RETRY = AckRetrySettings(initial_backoff=0.01, max_backoff=0.02, deadline=5)


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


def logged(caplog: pytest.LogCaptureFixture, level: int = logging.DEBUG) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "eoclient.subscriber" and r.levelno >= level
    ]


def count(lines: list[str], text: str) -> int:
    return sum(text in line for line in lines)


async def test_the_session_its_stream_and_flow_control_holds_are_logged(
    srv: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "eoclient.subscriber")
    env = make_env(srv, exactly_once=False)
    env.publish(5)
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, flow_control=FlowControl(max_messages=2)) as stream,
    ):
        first = await take(stream, 2)
        assert srv.drop_streams("UNAVAILABLE") == 1
        await eventually(lambda: stream.statistics().reconnects == 1, what="a reconnect")
        # The server counts the new stream's outstanding messages from zero: it sends two
        # more while the application still holds the first two, and flow control holds them.
        await eventually(lambda: stream.statistics().held_messages > 0, what="a hold")
        for message in first:
            message.ack()
        for _ in range(3):
            (message,) = await take(stream, 1)
            message.ack()
    lines = logged(caplog)
    assert count(lines, f"subscription {env.subscription}: session open") == 1
    assert count(lines, f"stream of {env.subscription} open (stream ack deadline 60 s") >= 2
    assert count(lines, "flow control holds") >= 1
    assert any("of at most 2 / " in line for line in lines if "flow control holds" in line)
    assert count(lines, "reconnecting in") == 1
    assert count(lines, f"stream of {env.subscription} closed") == 1
    assert count(lines, f"subscription {env.subscription}: closing (") == 1
    [closed] = [line for line in lines if "session closed" in line]
    assert "received 5, acked 5" in closed
    assert "reconnects 1" in closed
    # The reconnect is the one INFO record: a stream end is worth knowing about.
    assert logged(caplog, logging.INFO) == [
        f"stream of {env.subscription} ended (UNAVAILABLE: stream dropped by fault injection "
        "(UNAVAILABLE)); reconnecting"
    ]


async def test_exactly_once_failures_and_retries_are_logged(
    srv: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "eoclient.subscriber")
    env = make_env(srv, exactly_once=True)
    ids = env.publish(3)
    srv.inject_ack_failure(
        env.subscription, ids[0], "PERMANENT_FAILURE_INVALID_ACK_ID", times=-1, operations=("ack",)
    )
    srv.inject_ack_failure(
        env.subscription, ids[1], "TRANSIENT_FAILURE_OTHER", times=1, operations=("ack",)
    )
    srv.inject_ack_failure(
        env.subscription, ids[2], "PERMANENT_FAILURE_INVALID_ACK_ID", operations=("modack",)
    )
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, ack_retry=FAST_RETRY) as stream,
    ):
        messages = await take(stream, 2)  # the third's receipt was refused
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
    assert sorted(s.name for s in statuses) == ["INVALID_ACK_ID", "SUCCESS"]
    lines = logged(caplog)
    assert count(lines, f"receipt of message {ids[2]} refused (INVALID_ACK_ID") == 1
    # The ack failures, as the stream confirmation or the unary answer reported them.
    refusals = [
        line
        for line in lines
        if "the server refused acks" in line or line.startswith("Acknowledge of ")
    ]
    assert refusals
    assert count(lines, "retrying 1 ack ids in") + count(lines, "1 retried by unary call") >= 1
    assert logged(caplog, logging.INFO) == []


async def test_lease_extensions_and_expiry_are_logged_without_a_line_per_message_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "eoclient.subscriber")
    clock = FakeClock()
    async with run_server(clock=clock) as srv:
        env = make_env(srv, exactly_once=False)
        env.publish(20)
        async with (
            SubscriberClient(srv.address, clock=clock) as client,
            client.subscribe(env.subscription, lease=LeaseSettings(max_lease=30)) as stream,
        ):
            messages = await take(stream, 20)

            def advance(seconds: float) -> None:
                clock.advance(seconds)
                srv.tick()
                stream.sender.wake.set()

            await eventually(stream.ledger.idle, what="receipts written")
            advance(6)
            await eventually(
                lambda: count(logged(caplog), "extending 20 leases") >= 1, what="an extension"
            )
            advance(30)  # past max_lease: all twenty released at once
            await eventually(lambda: stream.statistics().expired == 20, what="the release")
            for message in messages:
                assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
    info = logged(caplog, logging.INFO)
    assert info == [
        "20 messages held past max_lease (30 s) were released for redelivery",
    ]
    [ids] = [line for line in logged(caplog) if line.startswith("released past max_lease")]
    assert all(message.message_id in ids for message in messages)
