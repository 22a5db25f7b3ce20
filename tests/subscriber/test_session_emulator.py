"""End to end against Google's Pub/Sub emulator (the ``emulator`` fixture, tests/conftest.py).

The emulator sends no stream confirmations (docs/protocol.md#streamingpull-confirmations): on an
exactly-once subscription results come from unary calls from the start, and the session's probe
(modacks also sent on the stream) times out.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from eoclient import AcknowledgeStatus, AckRetrySettings, Message, SubscriberClient
from eoclient._proto import pubsub_pb2
from eoclient._transport import Endpoint, PubSubTransport, create_channel

from .test_session_support import eventually, take

pytestmark = pytest.mark.emulator

N = 20


@pytest.fixture
async def admin(emulator: str) -> AsyncIterator[PubSubTransport]:
    transport = PubSubTransport(create_channel(Endpoint(emulator, secure=False)))
    yield transport
    await transport.close()


async def create(
    admin: PubSubTransport, *, exactly_once: bool, ordered: bool = False
) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:12]
    topic = f"projects/eo-emulator/topics/t-{suffix}"
    subscription = f"projects/eo-emulator/subscriptions/s-{suffix}"
    await admin.call("Publisher", "CreateTopic", pubsub_pb2.Topic(name=topic), pubsub_pb2.Topic)
    await admin.call(
        "Subscriber",
        "CreateSubscription",
        pubsub_pb2.Subscription(
            name=subscription,
            topic=topic,
            enable_exactly_once_delivery=exactly_once,
            enable_message_ordering=ordered,
        ),
        pubsub_pb2.Subscription,
    )
    return topic, subscription


async def publish(admin: PubSubTransport, topic: str, count: int, key: str = "") -> list[str]:
    return await admin.publish(
        topic,
        [pubsub_pb2.PubsubMessage(data=f"m-{i}".encode(), ordering_key=key) for i in range(count)],
    )


async def test_exactly_once_on_the_emulator_goes_unary_and_succeeds(
    emulator: str, admin: PubSubTransport
) -> None:
    topic, subscription = await create(admin, exactly_once=True)
    ids = await publish(admin, topic, N)
    async with SubscriberClient(emulator) as client:
        async with client.subscribe(subscription) as stream:
            messages = await take(stream, N, timeout=10)
            statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
            # The results came by unary call while the mode was still being learnt (no
            # wait for the probe); the probe then concludes that the emulator does not
            # confirm on the stream.
            await eventually(lambda: stream.statistics().ack_mode == "unary", timeout=10)
            stats = stream.statistics()
            # A second ack sends nothing and reports the first outcome.
            assert await messages[0].ack_with_response() is AcknowledgeStatus.SUCCESS
        assert sorted(m.message_id for m in messages) == sorted(ids)
        assert statuses == [AcknowledgeStatus.SUCCESS] * N
        assert stats.acked == N


async def test_superseded_ack_id_on_the_emulator_is_invalid(
    emulator: str, admin: PubSubTransport
) -> None:
    topic, subscription = await create(admin, exactly_once=True)
    await publish(admin, topic, 1)
    async with SubscriberClient(emulator) as client:
        (first,) = await client.pull(subscription, 1)
        await admin.modify_ack_deadline(subscription, [first.ack_id], 0)
        second: list[Message] = []
        async with asyncio.timeout(10):
            while not second:
                second = await client.pull(subscription, 1)
        assert await first.ack_with_response() is AcknowledgeStatus.INVALID_ACK_ID
        assert await second[0].ack_with_response() is AcknowledgeStatus.SUCCESS


async def test_plain_subscription_on_the_emulator(emulator: str, admin: PubSubTransport) -> None:
    topic, subscription = await create(admin, exactly_once=False)
    ids = await publish(admin, topic, N)
    async with SubscriberClient(emulator) as client, client.subscribe(subscription) as stream:
        messages = await take(stream, N, timeout=10)
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
        assert stream.statistics().ack_mode == "stream"
    assert sorted(m.message_id for m in messages) == sorted(ids)
    assert statuses == [AcknowledgeStatus.SUCCESS] * N


async def test_many_superseded_acks_in_one_unary_call_each_report_invalid(
    emulator: str, admin: PubSubTransport
) -> None:
    # The streaming path: on the emulator, exactly-once acks go by unary
    # call; one that fails for hundreds of ids carries an ErrorInfo trailer far over
    # gRPC's default 16 KiB metadata limit. Each id must come back INVALID_ACK_ID (the
    # whole answer read), not OTHER after the retry deadline. (Over the 16 KiB default
    # the emulator resets the stream, INTERNAL "RST_STREAM with error code 1", which is
    # retried as transient: the short deadline makes that fail fast.)
    count = 600
    topic, subscription = await create(admin, exactly_once=True)
    await publish(admin, topic, count)
    async with SubscriberClient(emulator) as client:
        retry = AckRetrySettings(initial_backoff=0.1, max_backoff=0.5, deadline=5.0)
        async with client.subscribe(subscription, ack_retry=retry) as stream:
            messages = await take(stream, count, timeout=20)
            # Another client releases every delivery: the stream's ack ids are superseded.
            ack_ids = [m.ack_id for m in messages]
            for start in range(0, count, 200):
                await admin.modify_ack_deadline(subscription, ack_ids[start : start + 200], 0)
            results = await asyncio.gather(*(m.ack_result() for m in messages))
    assert {r.status for r in results} == {AcknowledgeStatus.INVALID_ACK_ID}
