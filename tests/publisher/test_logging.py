"""The publisher's debug records on the ``eoclient.publisher`` logger: what a user turning
on debug logging sees of retries, flow-control holds, paused keys and the lifecycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from eoclient.errors import InvalidArgument
from eoclient.publisher import (
    BatchSettings,
    LimitExceededBehavior,
    PublisherClient,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.server_stub.core.model import TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

pytestmark = pytest.mark.timeout(20)

TOPIC = "projects/p/topics/logged"
FAST_RETRY = PublishRetrySettings(initial_backoff=0.01, max_backoff=0.02)


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        server.broker.topics.create(TopicConfig(name=TOPIC))
        yield server


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "eoclient.publisher"]


async def test_retries_holds_pauses_and_the_lifecycle_are_logged(
    srv: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "eoclient.publisher")
    flow = PublishFlowControl(max_messages=1, behavior=LimitExceededBehavior.BLOCK)
    async with PublisherClient(
        srv.address,
        retry=FAST_RETRY,
        flow_control=flow,
        batch=BatchSettings(max_latency=0),
        enable_message_ordering=True,
    ) as client:
        srv.faults.fail("Publish", "UNAVAILABLE", "a blip", times=1)
        first = client.publish_nowait(TOPIC, b"first")
        second = client.publish_nowait(TOPIC, b"second")  # held: one message at a time
        await asyncio.gather(first, second)
        srv.faults.fail("Publish", "INVALID_ARGUMENT", "not this one", times=1)
        with pytest.raises(InvalidArgument):
            await client.publish(TOPIC, b"refused", "key")
        client.resume_publish(TOPIC, "key")
    logged = messages(caplog)
    expected = [
        "publisher open: 127.0.0.1:",
        f"Publish of 1 messages to {TOPIC} failed (attempt 1): UNAVAILABLE: a blip; retrying in ",
        f"flow control holds a message of 8 bytes for {TOPIC}: 1 messages / ",
        f"Publish of 1 messages to {TOPIC} failed for good: INVALID_ARGUMENT: not this one",
        f"ordering key 'key' of {TOPIC} paused by: INVALID_ARGUMENT: not this one",
        f"ordering key 'key' of {TOPIC} resumed",
        "publisher closing: 0 messages outstanding (timeout None)",
        "publisher closed: 2 published, 1 failed",
    ]
    for start in expected:
        assert any(line.startswith(start) for line in logged), (start, logged)


async def test_nothing_is_formatted_above_debug(
    srv: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "eoclient.publisher")
    async with PublisherClient(srv.address) as client:
        await client.publish(TOPIC, b"quiet")
    assert messages(caplog) == []
