"""Broker policies with real clients: eviction and TTL under a live exactly-once
stream of eoclient's SubscriberClient (no SUCCESS is ever reported for a message the
broker acknowledged itself), delayed delivery published by the official
google-cloud-pubsub client, and policies surviving a restart of a durable server.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import pubsub_v1
from support.wire import Wire

from eoclient import AcknowledgeStatus, Message, PublisherClient, SubscriberClient
from eoclient._clock import FakeClock
from eoclient.admin import (
    AdminClient,
    BacklogQuota,
    BacklogQuotaAction,
    RetentionPolicy,
    SkipOutcome,
    SubscriptionPolicies,
    TopicPolicies,
)
from eoclient.delayed_delivery import deliver_after
from eoclient.server_stub.server import ReferenceServer, run_server

SECOND = datetime.timedelta(seconds=1)
WAIT = 10.0  # seconds any single expectation may take


async def take(stream: AsyncIterator[Message], count: int) -> list[Message]:
    received: list[Message] = []
    async with asyncio.timeout(WAIT):
        while len(received) < count:
            received.append(await anext(stream))
    return received


async def topic_and_subscription(admin: AdminClient, name: str) -> tuple[str, str]:
    topic = (await admin.create_topic(f"projects/e2e/topics/{name}")).name
    sub = await admin.create_subscription(
        f"projects/e2e/subscriptions/{name}", topic, enable_exactly_once_delivery=True
    )
    return topic, sub.name


# ================================================================ exactly-once streams


async def test_eviction_under_a_live_exactly_once_stream_never_reports_success(
    reference: ReferenceServer,
) -> None:
    async with AdminClient(reference.address) as admin:
        topic, sub = await topic_and_subscription(admin, "evicted-live")
        await admin.set_topic_backlog_quota(
            topic, limit_bytes=10, action=BacklogQuotaAction.CONSUMER_BACKLOG_EVICTION
        )
        async with (
            PublisherClient(reference.address) as publisher,
            SubscriberClient(reference.address) as client,
            client.subscribe(sub) as stream,
        ):
            first = [await publisher.publish(topic, b"%d" % i) for i in range(10)]
            held = await take(stream, 10)  # leased and held: the backlog is at the quota
            more = [await publisher.publish(topic, b"%d" % i) for i in range(10, 15)]
            held += await take(stream, 5)
            statuses = await asyncio.gather(*(m.ack_with_response() for m in held))
        counters = await admin.get_subscription_policy_counters(sub)

    by_id = {m.message_id: s for m, s in zip(held, statuses, strict=True)}
    assert sorted(by_id, key=int) == first + more
    evicted = [i for i, s in by_id.items() if s is AcknowledgeStatus.INVALID_ACK_ID]
    assert set(by_id.values()) <= {AcknowledgeStatus.SUCCESS, AcknowledgeStatus.INVALID_ACK_ID}
    assert len(evicted) == counters.evicted >= 5
    assert evicted == first[: len(evicted)]  # the oldest went first
    for message_id, status in by_id.items():
        history = reference.history(sub, message_id)
        if status is AcknowledgeStatus.SUCCESS:
            assert len(history.successful_acks) == 1, history
        else:  # the broker acknowledged it: the subscriber's ack never succeeded
            assert history.successful_acks == [], history
    assert counters.backlog_messages == 0


async def test_ttl_under_a_live_exactly_once_stream_never_reports_success(
    reference: ReferenceServer, clock: FakeClock
) -> None:
    async with AdminClient(reference.address) as admin:
        topic, sub = await topic_and_subscription(admin, "ttl-live")
        await admin.set_subscription_message_ttl(sub, 30 * SECOND)
        async with (
            PublisherClient(reference.address) as publisher,
            SubscriberClient(reference.address) as client,
            client.subscribe(sub) as stream,
        ):
            old = [await publisher.publish(topic, b"old") for _ in range(3)]
            held = await take(stream, 3)
            clock.advance(31)  # the held messages outlive the TTL while leased
            reference.tick()
            new = await publisher.publish(topic, b"new")
            held += await take(stream, 1)
            statuses = [await m.ack_with_response() for m in held]
        counters = await admin.get_subscription_policy_counters(sub)
    assert [m.message_id for m in held] == [*old, new]
    assert statuses == [AcknowledgeStatus.INVALID_ACK_ID] * 3 + [AcknowledgeStatus.SUCCESS]
    assert counters.expired_by_ttl == 3


# ================================================================ the official client


@pytest.fixture
def official_publisher(
    reference: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pubsub_v1.PublisherClient]:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", reference.address)
    client = pubsub_v1.PublisherClient()
    yield client
    client.stop()
    client.transport.close()


async def test_delayed_delivery_published_by_the_official_client(
    official_publisher: pubsub_v1.PublisherClient,
    wire: Wire,
    clock: FakeClock,
    reference: ReferenceServer,
) -> None:
    topic, sub = await wire.subscription()
    future = official_publisher.publish(topic, b"later", **deliver_after(90 * SECOND))
    message_id = await asyncio.to_thread(future.result, WAIT)
    await wire.pull_nothing(sub)
    clock.advance(91)
    reference.tick()
    [delivered] = await wire.pull(sub, 1)
    assert delivered.message.message_id == message_id
    assert dict(delivered.message.attributes) == {"eoclient-deliver-after": "90s"}

    bad = official_publisher.publish(topic, b"bad", **{"eoclient-deliver-after": "soon"})
    with pytest.raises(api_exceptions.InvalidArgument, match="eoclient-deliver-after='soon'"):
        await asyncio.to_thread(bad.result, WAIT)


# ================================================================ durability


async def test_policies_and_their_effects_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    quota = BacklogQuota(limit_bytes=1000, action=BacklogQuotaAction.PRODUCER_EXCEPTION)
    async with run_server(data_dir=data_dir) as server, AdminClient(server.address) as admin:
        topic, sub = await topic_and_subscription(admin, "durable")
        await admin.set_topic_retention(topic, time=3600 * SECOND, size_bytes=None)
        await admin.set_topic_backlog_quota(
            topic, limit_bytes=1000, action=BacklogQuotaAction.PRODUCER_EXCEPTION
        )
        await admin.set_topic_message_ttl(topic, 600 * SECOND)
        await admin.set_subscription_message_ttl(sub, 300 * SECOND)
        async with PublisherClient(server.address) as publisher:
            skipped = await publisher.publish(topic, b"skipped")
            delayed = await publisher.publish(topic, b"delayed", **deliver_after(3600 * SECOND))
            kept = await publisher.publish(topic, b"kept")
        assert await admin.skip_messages(sub, [skipped]) == {skipped: SkipOutcome.SKIPPED}
        before = await admin.get_topic_policies(topic)

    async with run_server(data_dir=data_dir) as server, AdminClient(server.address) as admin:
        assert (
            await admin.get_topic_policies(topic)
            == before
            == TopicPolicies(topic, RetentionPolicy(3600 * SECOND, None), quota, 600 * SECOND)
        )
        assert await admin.get_subscription_policies(sub) == SubscriptionPolicies(
            sub, 300 * SECOND, 300 * SECOND
        )
        counters = await admin.get_subscription_policy_counters(sub)
        assert (counters.backlog_messages, counters.delayed_pending) == (2, 1)
        assert (await admin.get_topic_policy_counters(topic)).retained_messages == 3
        assert await admin.skip_messages(sub, [skipped]) == {
            skipped: SkipOutcome.ALREADY_ACKNOWLEDGED
        }
        wire = Wire(server.address)
        try:
            [only] = await wire.pull(sub, 1)
            assert only.message.message_id == kept  # not the skipped one, not the delayed
            await wire.pull_nothing(sub)
        finally:
            await wire.close()
        assert delayed not in (skipped, kept)


async def test_an_unknown_method_of_the_extension_is_unimplemented(wire: Wire) -> None:
    call = wire.channel.unary_unary("/eoclient.broker.v1.BrokerPolicies/Nope")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(b"")
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
