"""Settling thousands of expired ack ids in one call.

An exactly-once Acknowledge / ModifyAckDeadline that the server rejects lists every
failed id in the ErrorInfo of its ``grpc-status-details-bin`` trailer
(docs/protocol.md#exactly-once-error-details): ~400 bytes an id, so ~285 ids exceed gRPC's default
16 KiB metadata limit. A client channel with that default receives a locally generated
RESOURCE_EXHAUSTED instead of the answer, which is permanent: retrying it only burns the retry
deadline and ends in OTHER for every id. These tests check the answer gets through whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from eoclient import AcknowledgeStatus, AckRetrySettings, Message, SubscriberClient
from eoclient._clock import FakeClock
from eoclient.server_stub.core import SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

from .test_session_support import PROJECT, Env

COUNT = 2000
ACK_DEADLINE = 10
# Long enough that a client treating the failure as transient would still be retrying
# when the test's own timeout fires; the assertions are on the results, not on time.
RETRY = AckRetrySettings(initial_backoff=0.05, max_backoff=0.2, deadline=120.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def srv(clock: FakeClock) -> AsyncIterator[ReferenceServer]:
    async with run_server(clock=clock, record_history=False, rest_port=None) as server:
        yield server


def short_deadline_env(srv: ReferenceServer, name: str) -> Env:
    topic = f"projects/{PROJECT}/topics/{name}"
    subscription = f"projects/{PROJECT}/subscriptions/{name}"
    srv.broker.topics.create(TopicConfig(topic))
    srv.broker.subscriptions.create(
        SubscriptionConfig(
            subscription,
            topic,
            ack_deadline_seconds=ACK_DEADLINE,
            enable_exactly_once_delivery=True,
        )
    )
    return Env(srv, topic, subscription)


async def pull_expired(
    client: SubscriberClient, env: Env, srv: ReferenceServer, clock: FakeClock
) -> list[Message]:
    env.publish(COUNT)
    messages: list[Message] = []
    while len(messages) < COUNT:
        messages += await client.pull(env.subscription, COUNT - len(messages))
    clock.advance(ACK_DEADLINE + 1)
    srv.tick()
    return messages


@pytest.mark.timeout(30)
async def test_acknowledging_thousands_of_expired_ids_reports_each_invalid(
    srv: ReferenceServer, clock: FakeClock
) -> None:
    env = short_deadline_env(srv, "expired-acks")
    async with SubscriberClient(srv.address, clock=clock) as client:
        messages = await pull_expired(client, env, srv, clock)
        results = await client.acknowledge(
            env.subscription, [m.ack_id for m in messages], ack_retry=RETRY
        )
    assert len(results) == COUNT
    assert {r.status for r in results.values()} == {AcknowledgeStatus.INVALID_ACK_ID}
    assert {r.info for r in results.values()} == {"PERMANENT_FAILURE_INVALID_ACK_ID"}


@pytest.mark.timeout(30)
async def test_modifying_thousands_of_expired_ids_reports_each_invalid(
    srv: ReferenceServer, clock: FakeClock
) -> None:
    env = short_deadline_env(srv, "expired-modacks")
    async with SubscriberClient(srv.address, clock=clock) as client:
        messages = await pull_expired(client, env, srv, clock)
        ack_ids = [m.ack_id for m in messages]
        extended = await client.modify_ack_deadline(env.subscription, ack_ids, 60, ack_retry=RETRY)
        released = await client.modify_ack_deadline(env.subscription, ack_ids, 0, ack_retry=RETRY)
    for results in (extended, released):
        assert len(results) == COUNT
        assert {r.status for r in results.values()} == {AcknowledgeStatus.INVALID_ACK_ID}
