"""Client flow control and ordering keys against the reference server."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest

from eoclient import AcknowledgeStatus, AckRetrySettings, FlowControl, Message, SubscriberClient
from eoclient.server_stub.server import ReferenceServer, run_server

from .test_session_support import Env, data_of, eventually, make_env, nothing_within, take

FAST_RETRY = AckRetrySettings(initial_backoff=0.05, max_backoff=0.1, deadline=10.0)


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


# ------------------------------------------------------------------ flow control


async def test_flow_control_holds_excess_messages_and_drops_none(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(40)
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, flow_control=FlowControl(max_messages=5)) as stream,
    ):
        first = await take(stream, 5)
        await nothing_within(stream)
        # The server counts leases per stream: a new stream gets five more, which
        # the client must hold (leased), not hand out and not drop.
        srv.drop_streams("UNAVAILABLE")
        await eventually(lambda: stream.statistics().held_messages == 5, what="5 held")
        await nothing_within(stream)
        stats = stream.statistics()
        assert stats.outstanding_messages == 5
        assert stats.leased_messages == 10
        # Settling one lets exactly one held message out, oldest first.
        assert await first[0].ack_with_response() is AcknowledgeStatus.SUCCESS
        (sixth,) = await take(stream, 1)
        await nothing_within(stream, 0.05)
        assert stream.statistics().held_messages == 4

        seen = [m.message_id for m in first] + [sixth.message_id]
        unsettled: set[Message] = {*first[1:], sixth}
        most = len(unsettled)
        rng = random.Random(7)

        async def settle_later(message: Message) -> None:
            await asyncio.sleep(rng.uniform(0, 0.003))
            unsettled.discard(message)
            assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS

        async with asyncio.TaskGroup() as settlers:
            for message in (*first[1:], sixth):
                settlers.create_task(settle_later(message))
            async with asyncio.timeout(10):
                while len(seen) < len(ids):
                    message = await anext(stream)
                    seen.append(message.message_id)
                    unsettled.add(message)
                    most = max(most, len(unsettled))
                    assert len(unsettled) <= 5
                    assert stream.statistics().outstanding_messages <= 5
                    settlers.create_task(settle_later(message))
    assert most == 5
    assert sorted(seen) == sorted(ids)
    assert env.backlog() == 0


async def test_flow_control_by_bytes(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=False)
    env.publish(12, prefix="x" * 200)
    async with SubscriberClient(srv.address) as client:
        async with client.subscribe(env.subscription) as probe:
            (one,) = await take(probe, 1)
            one.nack()
        size = one.size
        limit = 3 * size + size // 2  # room for three
        async with client.subscribe(
            env.subscription, flow_control=FlowControl(max_messages=0, max_bytes=limit)
        ) as stream:
            out = await take(stream, 3)
            await nothing_within(stream)
            assert stream.statistics().outstanding_bytes == sum(m.size for m in out) <= limit
            assert stream.statistics().held_messages + len(out) <= 12
            for message in out:
                message.ack()
            rest = await take(stream, 3)
            assert stream.statistics().outstanding_bytes == sum(m.size for m in rest) <= limit
            await nothing_within(stream, 0.05)
            for message in rest:
                message.ack()


# ------------------------------------------------------------------ ordering keys


async def consume_ordered(
    env: Env, client: SubscriberClient, expected: int, *, nack_once: set[str]
) -> dict[str, list[str]]:
    """Consume ``expected`` deliveries, checking one-at-a-time per key; returns the sequences."""
    sequences: dict[str, list[str]] = defaultdict(list)
    out_per_key: dict[str, int] = defaultdict(int)
    nacked: set[str] = set()
    rng = random.Random(3)

    async def settle(message: Message) -> None:
        await asyncio.sleep(rng.uniform(0, 0.002))
        out_per_key[message.ordering_key] -= 1
        if data_of(message) in nack_once and data_of(message) not in nacked:
            nacked.add(data_of(message))
            message.nack()
        else:
            assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS

    async with client.subscribe(env.subscription, ack_retry=FAST_RETRY) as stream:
        async with asyncio.TaskGroup() as settlers, asyncio.timeout(10):
            received = 0
            while received < expected:
                message = await anext(stream)
                received += 1
                key = message.ordering_key
                if key:
                    assert out_per_key[key] == 0, f"two messages of key {key!r} out at once"
                    out_per_key[key] += 1
                sequences[key].append(data_of(message))
                settlers.create_task(settle(message))
        await eventually(lambda: env.backlog() == 0, what="backlog 0")
    return sequences


@pytest.mark.parametrize("exactly_once", [True, False], ids=["eod", "plain"])
async def test_ordering_keys_one_at_a_time_in_order(
    srv: ReferenceServer, exactly_once: bool
) -> None:
    env = make_env(srv, exactly_once=exactly_once, ordered=True)
    env.publish(10, prefix="a", ordering_key="a")
    env.publish(10, prefix="b", ordering_key="b")
    env.publish(5, prefix="u")
    async with SubscriberClient(srv.address) as client:
        sequences = await consume_ordered(env, client, 25, nack_once=set())
    assert sequences["a"] == [f"a-{i}" for i in range(10)]
    assert sequences["b"] == [f"b-{i}" for i in range(10)]
    assert sorted(sequences[""]) == [f"u-{i}" for i in range(5)]


@pytest.mark.parametrize("exactly_once", [True, False], ids=["eod", "plain"])
async def test_after_a_nack_the_rest_of_the_key_comes_again_in_order(
    srv: ReferenceServer, exactly_once: bool
) -> None:
    env = make_env(srv, exactly_once=exactly_once, ordered=True)
    env.publish(10, prefix="a", ordering_key="a")
    env.publish(10, prefix="b", ordering_key="b")
    async with SubscriberClient(srv.address) as client:
        sequences = await consume_ordered(env, client, 20 + 2, nack_once={"a-3", "b-9"})
    assert sequences["a"] == [f"a-{i}" for i in (0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9)]
    assert sequences["b"] == [f"b-{i}" for i in (*range(10), 9)]


async def test_ordered_messages_in_separate_responses_stay_in_order_when_a_receipt_is_retried(
    srv: ReferenceServer,
) -> None:
    """Exactly-once: a key's message waits for its receipt modack; a later message of
    the key, whose receipt succeeds first, must still wait for it."""
    env = make_env(srv, exactly_once=True, ordered=True)
    (first_id,) = env.publish(1, prefix="a0", ordering_key="a")
    srv.inject_ack_failure(
        env.subscription, first_id, "TRANSIENT_FAILURE_OTHER", times=2, operations=("modack",)
    )
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, ack_retry=FAST_RETRY) as stream,
    ):
        # Failed on the stream and by the first unary call; the retry waits a backoff.
        await eventually(lambda: len(env.history(first_id).modacks) >= 2, what="receipt")
        (second_id,) = env.publish(1, prefix="a1", ordering_key="a")
        await eventually(lambda: bool(env.history(second_id).deliveries), what="a1 sent")
        (first,) = await take(stream, 1)
        assert first.message_id == first_id
        await nothing_within(stream, 0.1)
        assert await first.ack_with_response() is AcknowledgeStatus.SUCCESS
        (second,) = await take(stream, 1)
        assert second.message_id == second_id
        assert await second.ack_with_response() is AcknowledgeStatus.SUCCESS
    assert env.backlog() == 0
