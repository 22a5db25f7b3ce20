"""Settling by ack id (``SubscriberClient.acknowledge`` / ``modify_ack_deadline``) and the
batching of ``pull()`` settlements, against the reference server (exactly-once results).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from eoclient import AckIdResults, AcknowledgeStatus, AckRetrySettings, Message, SubscriberClient
from eoclient._proto import pubsub_pb2
from eoclient.errors import ClosedError
from eoclient.server_stub.server import ReferenceServer, run_server

from .test_session_support import Env, make_env

FAST_RETRY = AckRetrySettings(initial_backoff=0.01, max_backoff=0.05, deadline=10.0)


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


async def pull_all(client: SubscriberClient, env: Env, count: int) -> list[Message]:
    messages: list[Message] = []
    async with asyncio.timeout(5):
        while len(messages) < count:
            messages += await client.pull(env.subscription, count - len(messages))
    return messages


async def test_acknowledge_by_id_from_another_client(srv: ReferenceServer) -> None:
    env = make_env(srv)
    ids = env.publish(20)
    async with SubscriberClient(srv.address) as puller:
        ack_ids = [m.ack_id for m in await pull_all(puller, env, 20)]
    # A second client (as after a restart) acks with the ids kept from the first.
    async with SubscriberClient(srv.address) as client:
        results = await client.acknowledge(env.subscription, ack_ids)
        assert list(results) == ack_ids
        assert {r.status for r in results.values()} == {AcknowledgeStatus.SUCCESS}
        assert env.backlog() == 0
        again = await client.acknowledge(env.subscription, ack_ids[:3])
    assert [r.status for r in again.values()] == [AcknowledgeStatus.INVALID_ACK_ID] * 3
    for message_id in ids:
        assert len(env.history(message_id).successful_acks) == 1


async def test_acknowledge_reports_each_id_and_sends_duplicates_once(srv: ReferenceServer) -> None:
    env = make_env(srv)
    env.publish(3)
    async with SubscriberClient(srv.address) as client:
        first, second, third = await pull_all(client, env, 3)
        # The server releases the second delivery: its ack id is superseded.
        srv.broker.acks.modify_ack_deadline(env.subscription, [second.ack_id], 0)
        results = await client.acknowledge(
            env.subscription, [first.ack_id, second.ack_id, first.ack_id, third.ack_id]
        )
    assert [(ack_id, r.status) for ack_id, r in results.items()] == [
        (first.ack_id, AcknowledgeStatus.SUCCESS),
        (second.ack_id, AcknowledgeStatus.INVALID_ACK_ID),
        (third.ack_id, AcknowledgeStatus.SUCCESS),
    ]
    assert "PERMANENT_FAILURE_INVALID_ACK_ID" in results[second.ack_id].info
    assert len(env.history(first.message_id).acks) == 1
    assert env.backlog() == 1


async def test_acknowledge_retries_transient_failures(srv: ReferenceServer) -> None:
    env = make_env(srv)
    ids = env.publish(5)
    srv.inject_ack_failure(env.subscription, ids[2], "TRANSIENT_FAILURE_OTHER", times=2)
    async with SubscriberClient(srv.address) as client:
        messages = await pull_all(client, env, 5)
        results = await client.acknowledge(
            env.subscription, [m.ack_id for m in messages], ack_retry=FAST_RETRY
        )
    assert {r.status for r in results.values()} == {AcknowledgeStatus.SUCCESS}
    assert [a.failure for a in env.history(ids[2]).acks] == [
        "TRANSIENT_FAILURE_OTHER",
        "TRANSIENT_FAILURE_OTHER",
        "",
    ]
    assert env.backlog() == 0


async def test_acknowledge_permanent_failure_is_reported_at_once(srv: ReferenceServer) -> None:
    env = make_env(srv)
    env.publish(2)
    srv.faults.fail("Acknowledge", "PERMISSION_DENIED")
    async with SubscriberClient(srv.address) as client:
        messages = await pull_all(client, env, 2)
        results = await client.acknowledge(env.subscription, [m.ack_id for m in messages])
    assert {r.status for r in results.values()} == {AcknowledgeStatus.PERMISSION_DENIED}


async def test_modify_ack_deadline_by_id_extends_and_releases(srv: ReferenceServer) -> None:
    env = make_env(srv)
    env.publish(2)
    async with SubscriberClient(srv.address) as client:
        kept, released = await pull_all(client, env, 2)
        extended = await client.modify_ack_deadline(env.subscription, [kept.ack_id], 120)
        assert extended[kept.ack_id].status is AcknowledgeStatus.SUCCESS
        assert [m.seconds for m in env.history(kept.message_id).modacks] == [120]
        nacked = await client.modify_ack_deadline(env.subscription, [released.ack_id], 0)
        assert nacked[released.ack_id].status is AcknowledgeStatus.SUCCESS
        (again,) = await pull_all(client, env, 1)
        assert again.message_id == released.message_id
        assert await client.modify_ack_deadline(env.subscription, [], 30) == {}
        with pytest.raises(ValueError, match=r"0\.\.600"):
            await client.modify_ack_deadline(env.subscription, [kept.ack_id], 601)


async def test_settling_by_id_on_a_closed_client_is_refused(srv: ReferenceServer) -> None:
    env = make_env(srv)
    client = SubscriberClient(srv.address)
    await client.aclose()
    with pytest.raises(ClosedError):
        await client.acknowledge(env.subscription, ["x"])


async def test_pulled_messages_settled_in_one_loop_turn_share_one_call(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv)
    env.publish(40)
    # The next Acknowledge call fails permanently: with one call for all forty acks, all
    # forty report it; with a call per ack, only the first would.
    srv.faults.fail("Acknowledge", "PERMISSION_DENIED")
    async with SubscriberClient(srv.address) as client:
        messages = await pull_all(client, env, 40)
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
        assert statuses == [AcknowledgeStatus.PERMISSION_DENIED] * 40
        # The fault was for one call only: the same ids, acked again, succeed.
        results = await client.acknowledge(env.subscription, [m.ack_id for m in messages])
        assert {r.status for r in results.values()} == {AcknowledgeStatus.SUCCESS}
    assert env.backlog() == 0


async def test_fire_and_forget_acks_of_pulled_messages_finish_before_aclose(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv)
    env.publish(30)
    async with SubscriberClient(srv.address) as client:
        for message in await pull_all(client, env, 30):
            message.ack()
    # aclose() waited for the acks in flight instead of closing the channel under them.
    assert env.backlog() == 0


async def test_bulk_results_list_only_the_failures_apart(srv: ReferenceServer) -> None:
    """5,001 ids: three calls in flight together; ``failed`` holds the ids that did not
    succeed (here: the superseded delivery), every other id maps to SUCCESS."""
    env = make_env(srv)
    env.publish(3)
    async with SubscriberClient(srv.address) as client:
        first, second, third = await pull_all(client, env, 3)
        srv.broker.acks.modify_ack_deadline(env.subscription, [second.ack_id], 0)
        unknown = [f"{first.ack_id[:-1]}x{n}" for n in range(4998)]  # ids never issued
        ack_ids = [first.ack_id, second.ack_id, third.ack_id, *unknown]
        results = await client.acknowledge(env.subscription, ack_ids)
        assert isinstance(results, AckIdResults)
        assert len(results) == 5001
        assert results[first.ack_id].status is AcknowledgeStatus.SUCCESS
        assert results[third.ack_id].status is AcknowledgeStatus.SUCCESS
        assert second.ack_id in results.failed
        assert first.ack_id not in results.failed
        assert set(results.failed) == {r for r, v in results.items() if v.status.name != "SUCCESS"}
        assert env.backlog() == 1
        # All applied: nothing failed, and one shared result (no object per id).
        (again,) = await pull_all(client, env, 1)
        clean = await client.acknowledge(env.subscription, [again.ack_id])
        assert clean.failed == {}
        assert repr(clean) == "<AckIdResults of 1 ack ids, 0 failed>"


async def test_pull_raw_answers_the_pull_response_bytes(srv: ReferenceServer) -> None:
    env = make_env(srv)
    ids = env.publish(3)
    async with SubscriberClient(srv.address) as client:
        received: list[pubsub_pb2.ReceivedMessage] = []
        async with asyncio.timeout(5):
            while len(received) < 3:
                raw = await client.pull_raw(env.subscription, 3 - len(received))
                assert isinstance(raw, bytes)
                received += pubsub_pb2.PullResponse.FromString(raw).received_messages
        assert sorted(r.message.message_id for r in received) == sorted(ids)
        # Settled by id, in bulk.
        results = await client.acknowledge(env.subscription, [r.ack_id for r in received])
        assert results.failed == {}
    assert env.backlog() == 0
