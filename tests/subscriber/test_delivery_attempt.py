"""``Message.delivery_attempt``: counted only under a dead-letter policy (1, 2, ... with each
redelivery), ``None`` without one, as google-cloud-pubsub reports it; streamed and pulled
messages alike, against the reference server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from eoclient import AdminClient, PublisherClient, SubscriberClient
from eoclient.admin import DeadLetterPolicy
from eoclient.server_stub.server import ReferenceServer, run_server

pytestmark = pytest.mark.timeout(30)

TOPIC = "projects/p/topics/orders"
DEAD = "projects/p/topics/orders-dead"
COUNTED = "projects/p/subscriptions/counted"
UNCOUNTED = "projects/p/subscriptions/uncounted"


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        async with AdminClient(server.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_topic(DEAD)
            await admin.create_subscription(UNCOUNTED, TOPIC)
            await admin.create_subscription(
                COUNTED, TOPIC, dead_letter_policy=DeadLetterPolicy(DEAD, max_delivery_attempts=5)
            )
        async with PublisherClient(server.address) as publisher:
            await publisher.publish(TOPIC, b"order 1")
        yield server


async def test_without_a_dead_letter_policy_attempts_are_not_counted(srv: ReferenceServer) -> None:
    async with SubscriberClient(srv.address) as client:
        async with client.subscribe(UNCOUNTED) as stream:
            async for message in stream:
                assert message.delivery_attempt is None
                message.nack()
                break
        [pulled] = await client.pull(UNCOUNTED, max_messages=1)
        assert pulled.delivery_attempt is None
        assert "delivery_attempt=None" in repr(pulled)
        pulled.ack()


async def test_a_dead_letter_policy_counts_each_delivery(srv: ReferenceServer) -> None:
    attempts: list[int | None] = []
    async with SubscriberClient(srv.address) as client, client.subscribe(COUNTED) as stream:
        async for message in stream:
            attempts.append(message.delivery_attempt)
            if len(attempts) < 3:
                message.nack()
                continue
            message.ack()
            break
    assert attempts == [1, 2, 3]
