"""Exactly-once results end to end against the reference server.

Happy path, transient and permanent per-message failures, superseded ack ids, the
non-exactly-once path and the unary ``pull()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from eoclient import AcknowledgeStatus, AckRetrySettings, Message, SubscriberClient
from eoclient.server_stub.server import ReferenceServer, run_server

from .test_session_support import data_of, eventually, make_env, take

N = 50
# Fast retries keep the transient-failure tests short; the deadline stays generous.
FAST_RETRY = AckRetrySettings(initial_backoff=0.01, max_backoff=0.05, deadline=10.0)


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


async def test_happy_path_every_ack_succeeds_and_nothing_is_redelivered(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(N)
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription) as stream,
    ):
        messages = await take(stream, N)
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
        stats = stream.statistics()
    assert statuses == [AcknowledgeStatus.SUCCESS] * N
    assert sorted(m.message_id for m in messages) == sorted(ids)
    assert env.backlog() == 0
    for message_id in ids:
        history = env.history(message_id)
        assert len(history.deliveries) == 1, history
        assert len(history.successful_acks) == 1, history
    assert stats.acked == N
    assert stats.received == N
    assert stats.ack_mode == "stream"
    assert stats.outstanding_messages == 0


async def test_awaiting_each_ack_in_turn(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    env.publish(10)
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        for message in await take(s, 10):
            assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
    assert env.backlog() == 0


async def test_transient_ack_failures_are_retried_to_success(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(10)
    flaky = set(ids[::3])
    for message_id in flaky:
        srv.inject_ack_failure(
            env.subscription,
            message_id,
            "TRANSIENT_FAILURE_OTHER",
            times=2,
            operations=("ack",),
        )
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, ack_retry=FAST_RETRY) as stream,
    ):
        messages = await take(stream, 10)
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
        stats = stream.statistics()
    assert statuses == [AcknowledgeStatus.SUCCESS] * 10
    assert stats.retried > 0
    assert env.backlog() == 0
    for message_id in flaky:
        acks = env.history(message_id).acks
        assert [bool(a.failure) for a in acks] == [True, True, False], acks


async def test_transient_receipt_modack_failures_still_deliver(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    (message_id,) = env.publish(1)
    srv.inject_ack_failure(
        env.subscription, message_id, "TRANSIENT_FAILURE_OTHER", times=2, operations=("modack",)
    )
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, ack_retry=FAST_RETRY) as stream,
    ):
        (message,) = await take(stream, 1)
        assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
    # Both injected failures were answered to modacks of the message, and it was delivered
    # and acked all the same. Which modack met them (the receipt, its resend, or a lease
    # extension on the stream) depends on timing, so the client's own retry counter is not
    # asked: a lease extension that takes a failure is resent without counting as a retry.
    modacks = env.history(message_id).modacks
    assert sum(1 for m in modacks if m.failure == "TRANSIENT_FAILURE_OTHER") == 2, modacks
    assert env.backlog() == 0


async def test_permanent_failures_are_invalid_and_the_rest_of_the_batch_succeeds(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(12)
    broken = set(ids[1::4])
    flaky = set(ids[2::4])
    for message_id in broken:
        srv.inject_ack_failure(
            env.subscription,
            message_id,
            "PERMANENT_FAILURE_INVALID_ACK_ID",
            times=-1,
            operations=("ack",),
        )
    for message_id in flaky:
        srv.inject_ack_failure(
            env.subscription, message_id, "TRANSIENT_FAILURE_OTHER", times=1, operations=("ack",)
        )
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, ack_retry=FAST_RETRY) as stream,
    ):
        messages = await take(stream, 12)
        # All twelve acks leave in one batch: one mixed confirmation.
        results = await asyncio.gather(*(m.ack_result() for m in messages))
    by_id = {m.message_id: r for m, r in zip(messages, results, strict=True)}
    for message_id, result in by_id.items():
        if message_id in broken:
            assert result.status is AcknowledgeStatus.INVALID_ACK_ID, result
        else:
            assert result.status is AcknowledgeStatus.SUCCESS, (message_id, result)
    assert env.backlog() == len(broken)


async def test_superseded_ack_id_is_invalid(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    (message_id,) = env.publish(1)
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription) as stream,
    ):
        (first,) = await take(stream, 1)
        # Behind the client's back: the server takes the lease back and redelivers.
        srv.broker.acks.modify_ack_deadline(env.subscription, [first.ack_id], 0)
        (second,) = await take(stream, 1)
        assert second.message_id == message_id
        assert second.ack_id != first.ack_id
        assert await first.ack_with_response() is AcknowledgeStatus.INVALID_ACK_ID
        assert await second.ack_with_response() is AcknowledgeStatus.SUCCESS
    assert env.backlog() == 0
    assert len(env.history(message_id).deliveries) == 2


async def test_second_settlement_sends_nothing_and_returns_the_first_outcome(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    (message_id,) = env.publish(1)
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        (message,) = await take(s, 1)
        assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
        message.nack()
        message.ack()
        assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
        assert await message.nack_with_response() is AcknowledgeStatus.SUCCESS
    history = env.history(message_id)
    assert len(history.acks) == 1
    assert [m.seconds for m in history.modacks if m.seconds == 0] == []


async def test_without_exactly_once_results_are_success_and_a_second_ack_sends_nothing(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=False)
    ids = env.publish(N)
    async with SubscriberClient(srv.address) as client:
        async with client.subscribe(env.subscription) as stream:
            messages = await take(stream, N)
            statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
            again = await asyncio.gather(*(m.ack_with_response() for m in messages))
            nacked = await messages[0].nack_with_response()
            assert stream.statistics().ack_mode == "stream"
        await eventually(lambda: env.backlog() == 0, what="backlog 0")
    assert statuses == [AcknowledgeStatus.SUCCESS] * N
    assert again == statuses
    assert nacked is AcknowledgeStatus.SUCCESS
    for message_id in ids:
        history = env.history(message_id)
        assert len(history.acks) == 1, history
        assert len(history.deliveries) == 1, history


async def test_modify_ack_deadline_with_response(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    (message_id,) = env.publish(1)
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        (message,) = await take(s, 1)
        status = await message.modify_ack_deadline_with_response(120)
        assert status is AcknowledgeStatus.SUCCESS
        assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
    assert any(m.seconds == 120 for m in env.history(message_id).modacks)


async def test_pull_then_ack_with_response_by_unary_call(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(5)
    async with SubscriberClient(srv.address) as client:
        messages: list[Message] = []
        async with asyncio.timeout(5):
            while len(messages) < 5:
                messages += await client.pull(env.subscription, max_messages=5 - len(messages))
        assert sorted(m.message_id for m in messages) == sorted(ids)
        assert sorted(data_of(m) for m in messages) == [f"m-{i}" for i in range(5)]
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
        # A pulled message's second ack sends nothing either.
        assert await messages[0].ack_with_response() is AcknowledgeStatus.SUCCESS
    assert statuses == [AcknowledgeStatus.SUCCESS] * 5
    assert env.backlog() == 0
    for message_id in ids:
        history = env.history(message_id)
        assert [d.via for d in history.deliveries] == ["pull"]
        assert len(history.acks) == 1


async def test_pull_ack_of_a_superseded_id_is_invalid(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    env.publish(1)
    async with SubscriberClient(srv.address) as client:
        (message,) = await client.pull(env.subscription, 1)
        srv.broker.acks.modify_ack_deadline(env.subscription, [message.ack_id], 0)
        assert await message.ack_with_response() is AcknowledgeStatus.INVALID_ACK_ID
        (again,) = await client.pull(env.subscription, 1)
        assert again.message_id == message.message_id
        assert await again.ack_with_response() is AcknowledgeStatus.SUCCESS
