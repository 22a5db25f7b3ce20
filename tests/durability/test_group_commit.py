"""GroupCommit over SqliteStore: callers wait for the commit that holds their change, and
a store read while a commit is in flight waits for it instead of deadlocking."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eoclient._clock import SystemClock
from eoclient.server_stub.core import Broker, NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.group_commit import GroupCommit
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p1/topics/group-commit"
SUB = "projects/p1/subscriptions/group-commit"


@pytest.mark.timeout(30)
async def test_reads_interleaved_with_commits_never_deadlock(tmp_path: Path) -> None:
    # A window of one message: every pull reads the store (a refill), so reads land
    # between a commit's start and its thread's start as often as they can.
    store = SqliteStore(tmp_path, window=1, gc_interval=0)
    broker = Broker(SystemClock(), store=store, record_history=False)
    group = GroupCommit(store)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(group.run())  # the commit loop, as the server runs it
        acked = await _serve(broker, group)
    assert sum(acked) == 2_000
    assert group.commits > 10
    store.close()
    reopened = SqliteStore(tmp_path)
    try:
        assert reopened.load().subscriptions[0].backlog == 0  # every ack was committed
    finally:
        reopened.close()


async def _serve(broker: Broker, group: GroupCommit) -> list[int]:
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    await group.durable()

    async def publisher() -> None:
        for _ in range(200):
            broker.publishing.publish(TOPIC, [NewMessage(b"x")] * 10)
            await group.durable()

    pulled = 0

    async def consumer() -> int:
        nonlocal pulled
        acked = 0
        while pulled < 2_000:
            deliveries = broker.leasing.pull(SUB, 1)
            pulled += len(deliveries)
            if deliveries:
                broker.acks.acknowledge(SUB, [d.ack_id for d in deliveries])
                acked += len(deliveries)
            # Plain acks wait for nothing: this loop stays ready, so its next pull (a
            # store read) can run right after a commit began, before its thread starts.
            await asyncio.sleep(0)
        return acked

    async def ticker() -> None:
        # The server's ticker: garbage collection reads and writes the store.
        while pulled < 2_000:
            broker.tick()
            await asyncio.sleep(0)

    _, _, *acked = await asyncio.gather(publisher(), ticker(), *(consumer() for _ in range(4)))
    await group.durable()
    await group.aclose()  # the loop ends once the commit in flight is done
    return acked


async def test_without_its_loop_a_commit_is_made_at_once(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    broker = Broker(SystemClock(), store=store, record_history=False)
    group = GroupCommit(store)
    broker.topics.create(TopicConfig(TOPIC))
    assert store.dirty
    await group.durable()
    assert not store.dirty
    store.close()
