"""Backlog quotas meeting publishers (docs/protocol.md#backlog-quotas): a
PRODUCER_REQUEST_HOLD quota holds Publish until space frees or its hold times out into
RESOURCE_EXHAUSTED, and eoclient's PublisherClient retries RESOURCE_EXHAUSTED within its
retry settings, surfacing the server's text when they run out.

Hold timeouts are short (a fraction of a second); nothing here asserts how long anything
took: a held publish is shown to be held by a bounded "still waiting" check, and released
by what the test does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
import pytest
from support.wire import Wire

from eoclient import PublisherClient, PublishRetrySettings
from eoclient._proto import pubsub_pb2 as pb
from eoclient.errors import ResourceExhausted
from eoclient.server_stub.server import ReferenceServer

from .policies_support import PolicyWire


def fast_retry(deadline: float) -> PublishRetrySettings:
    """Fast publisher retries (with short hold timeouts, these tests stay CI-sized)."""
    return PublishRetrySettings(
        initial_backoff=0.01, max_backoff=0.05, multiplier=2.0, deadline=deadline
    )


@pytest.fixture
def policies(wire: Wire) -> PolicyWire:
    return PolicyWire(wire)


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        await asyncio.sleep(0.01)


async def quota(policies: PolicyWire, topic: str, action: str, hold: str = "30s") -> None:
    await policies.set_topic(
        topic,
        {"backlogQuota": {"limitBytes": "4", "action": action, "holdTimeout": hold}},
        "backlog_quota",
    )


async def test_a_held_publish_times_out_into_resource_exhausted(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, sub = await wire.subscription()
    await quota(policies, topic, "PRODUCER_REQUEST_HOLD", hold="0.2s")
    await wire.publish(topic, b"12345")  # over the 4-byte quota from now on

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.publish(topic, b"held")
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    text = caught.value.details() or ""
    assert "Backlog quota exceeded" in text
    assert sub in text
    assert "held 0.2 s (producer_request_hold)" in text
    counters = await policies.topic_counters(topic)
    assert (counters.held_publishes, counters.held_then_refused) == (1, 1)
    [only] = await wire.pull(sub, 1)  # the held message was never stored
    assert only.message.data == b"12345"
    await wire.pull_nothing(sub)


async def test_a_held_publish_is_admitted_once_the_subscriber_acknowledges(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, sub = await wire.subscription()
    await quota(policies, topic, "PRODUCER_REQUEST_HOLD", hold="30s")
    await wire.publish(topic, b"12345")
    [backlog] = await wire.pull(sub, 1)

    held = asyncio.ensure_future(wire.publish(topic, b"held"))
    done, _ = await asyncio.wait({held}, timeout=0.3)
    assert not done, "the publish should be held while the backlog is over the quota"
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[backlog.ack_id]))
    [message_id] = await asyncio.wait_for(held, 10)

    [admitted] = await wire.pull(sub, 1)
    assert admitted.message.message_id == message_id
    counters = await policies.topic_counters(topic)
    assert (counters.held_publishes, counters.held_then_refused) == (1, 0)


async def test_a_hold_ends_with_the_new_answer_when_the_quota_changes(
    wire: Wire, policies: PolicyWire
) -> None:
    topic, _sub = await wire.subscription()
    await quota(policies, topic, "PRODUCER_REQUEST_HOLD", hold="30s")
    await wire.publish(topic, b"12345")
    held = asyncio.ensure_future(wire.publish(topic, b"held"))
    done, _ = await asyncio.wait({held}, timeout=0.3)
    assert not done
    await quota(policies, topic, "PRODUCER_EXCEPTION")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(held, 10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "producer_exception" in (caught.value.details() or "")
    counters = await policies.topic_counters(topic)
    assert (counters.held_publishes, counters.held_then_refused) == (1, 1)


async def test_the_publisher_retries_a_quota_until_the_backlog_frees(
    reference: ReferenceServer, wire: Wire, policies: PolicyWire
) -> None:
    topic, sub = await wire.subscription()
    await quota(policies, topic, "PRODUCER_EXCEPTION")
    await wire.publish(topic, b"12345")
    [backlog] = await wire.pull(sub, 1)

    async with PublisherClient(reference.address, retry=fast_retry(30.0)) as publisher:
        future = publisher.publish_nowait(topic, b"retried")
        await eventually(lambda: publisher.statistics().retried_rpcs >= 2)  # refused, retrying
        await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[backlog.ack_id]))
        message_id = await asyncio.wait_for(future, 10)
    [delivered] = await wire.pull(sub, 1)
    assert delivered.message.message_id == message_id
    assert (await policies.topic_counters(topic)).refused_publishes >= 2


async def test_the_publisher_surfaces_the_quota_when_its_retries_run_out(
    reference: ReferenceServer, wire: Wire, policies: PolicyWire
) -> None:
    topic, _ = await wire.subscription()
    await quota(policies, topic, "PRODUCER_REQUEST_HOLD", hold="0.05s")
    await wire.publish(topic, b"12345")

    async with PublisherClient(reference.address, retry=fast_retry(0.3)) as publisher:
        with pytest.raises(ResourceExhausted) as caught:
            await asyncio.wait_for(publisher.publish(topic, b"never"), 10)
        stats = publisher.statistics()
    assert "Backlog quota exceeded on topic" in caught.value.message
    assert "producer_request_hold" in caught.value.message
    assert stats.retried_rpcs >= 1
    assert stats.failed_messages == 1
