"""Which unary answers wait for the commit of their changes (group_commit.py): on a durable
store, a Pull, ModifyAckDeadline or Acknowledge of an exactly-once subscription is answered
only once its changes are committed; without exactly-once the answer goes at once and the
changes wait for the next commit. Publish always waits.

The group commit runs here without its loop, so a commit an answer waits for is made at once
on the caller's thread: whether the store is still dirty after an answer says whether that
answer waited.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient._transport import Endpoint, PubSubTransport, create_channel
from eoclient.server_stub.core import Broker
from eoclient.server_stub.server import run_server
from eoclient.server_stub.services.table import Services
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p1/topics/answers"
SUB = "projects/p1/subscriptions/answers"


@pytest.mark.parametrize("exactly_once", [False, True], ids=["plain", "exactly-once"])
async def test_delivery_answers_wait_for_their_commit_only_with_exactly_once(
    tmp_path: Path, exactly_once: bool
) -> None:
    store = SqliteStore(tmp_path)
    try:
        services = Services(Broker(FakeClock(), store=store))
        await services.call("CreateTopic", pb.Topic(name=TOPIC))
        await services.call(
            "CreateSubscription",
            pb.Subscription(name=SUB, topic=TOPIC, enable_exactly_once_delivery=exactly_once),
        )
        published = await services.call(
            "Publish",
            pb.PublishRequest(topic=TOPIC, messages=[pb.PubsubMessage(data=b"x")] * 3),
        )
        assert len(published.message_ids) == 3
        assert not store.dirty  # message ids leave only once the messages are committed

        answer = await services.call("Pull", pb.PullRequest(subscription=SUB, max_messages=3))
        ack_ids = [received.ack_id for received in answer.received_messages]
        assert len(ack_ids) == 3
        assert store.dirty is not exactly_once  # the leases
        store.commit()

        await services.call(
            "ModifyAckDeadline",
            pb.ModifyAckDeadlineRequest(
                subscription=SUB, ack_ids=ack_ids[:1], ack_deadline_seconds=30
            ),
        )
        assert store.dirty is not exactly_once  # the extended lease
        store.commit()

        await services.call("Acknowledge", pb.AcknowledgeRequest(subscription=SUB, ack_ids=ack_ids))
        assert store.dirty is not exactly_once  # the acks
    finally:
        store.close()


async def test_the_rule_waits_for_a_subscription_it_cannot_find() -> None:
    services = Services(Broker(FakeClock()))
    rules = {rpc.name: rpc.answer_after_commit for rpc in services.subscriber.methods()}
    missing = "projects/p1/subscriptions/missing"
    assert rules["Pull"](pb.PullRequest(subscription=missing))
    assert rules["Acknowledge"](pb.AcknowledgeRequest(subscription=missing))
    assert rules["GetSubscription"](pb.GetSubscriptionRequest(subscription=missing))


async def test_a_server_commits_what_answers_did_not_wait_for(tmp_path: Path) -> None:
    # Without exactly-once, the leases and acks of a Pull and an Acknowledge go with the
    # next commit: the ticker's, within MAX_TICK_INTERVAL, when no other call waits.
    async with run_server(data_dir=tmp_path, rest_port=None) as server:
        transport = PubSubTransport(create_channel(Endpoint.resolve(server.address)))
        try:
            await transport.call("Publisher", "CreateTopic", pb.Topic(name=TOPIC), pb.Topic)
            await transport.call(
                "Subscriber",
                "CreateSubscription",
                pb.Subscription(name=SUB, topic=TOPIC),
                pb.Subscription,
            )
            await transport.publish(TOPIC, [pb.PubsubMessage(data=b"x")] * 2)
            answer = await transport.call(
                "Subscriber",
                "Pull",
                pb.PullRequest(subscription=SUB, max_messages=1),
                pb.PullResponse,
            )
            assert len(answer.received_messages) == 1
            store = server.broker.store
            for _ in range(200):  # 2 s, eight times the ticker's longest interval
                if not store.dirty:
                    break
                await asyncio.sleep(0.01)
            assert not store.dirty
        finally:
            await transport.close()
