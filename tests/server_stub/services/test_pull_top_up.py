"""After a unary Pull's answer the server tops its window up (services/subscriber.py,
``after_answer``; ``Services.call`` runs it once the answer is handed on): only on a store
that bounds the window, never while a commit runs (the store's reads would wait for it),
and never before the answer."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from eoclient._clock import SystemClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.core import Broker
from eoclient.server_stub.services.table import Services
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p1/topics/top-up"
SUB = "projects/p1/subscriptions/top-up"


class HeldStore(SqliteStore):
    """A SqliteStore whose commits wait in their thread while ``go`` is clear."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, window=10, gc_interval=0)
        self.go = threading.Event()
        self.go.set()
        self.entered = threading.Event()

    def finish_commit(self) -> None:
        self.entered.set()
        assert self.go.wait(10)
        super().finish_commit()


async def _setup(services: Services, exactly_once: bool) -> None:
    await services.call("CreateTopic", pb.Topic(name=TOPIC))
    subscription = pb.Subscription(name=SUB, topic=TOPIC, enable_exactly_once_delivery=exactly_once)
    await services.call("CreateSubscription", subscription)
    messages = [pb.PubsubMessage(data=b"x")] * 30
    await services.call("Publish", pb.PublishRequest(topic=TOPIC, messages=messages))


def _window(services: Services) -> tuple[int, int]:
    window = services.broker.delivery_state(SUB).waiting.window
    return len(window.entries), window.cold()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("exactly_once", [False, True])
async def test_a_pull_tops_the_window_up_after_its_answer(
    tmp_path: Path, exactly_once: bool
) -> None:
    store = HeldStore(tmp_path)
    services = Services(Broker(SystemClock(), store=store, record_history=False))
    runner = asyncio.create_task(services.group_commit.run())
    await asyncio.sleep(0)
    try:
        await _setup(services, exactly_once)
        assert _window(services) == (10, 20)
        answer = await services.call("Pull", pb.PullRequest(subscription=SUB, max_messages=8))
        assert len(answer.received_messages) == 8
        assert _window(services) == (2, 20)  # answered first
        await asyncio.sleep(0)
        assert _window(services) == (10, 12)
    finally:
        await services.group_commit.aclose()
        await runner
        store.close()


@pytest.mark.timeout(30)
async def test_no_top_up_while_a_commit_runs(tmp_path: Path) -> None:
    store = HeldStore(tmp_path)
    services = Services(Broker(SystemClock(), store=store, record_history=False))
    group = services.group_commit
    runner = asyncio.create_task(group.run())
    await asyncio.sleep(0)
    try:
        await _setup(services, False)
        # A change somebody waits for: its commit's thread is held.
        store.go.clear()
        store.entered.clear()
        create = asyncio.create_task(services.call("CreateTopic", pb.Topic(name=TOPIC + "-2")))
        assert await asyncio.to_thread(store.entered.wait, 10)
        assert group.in_flight
        # A plain Pull answers without waiting for that commit; its top-up is skipped,
        # and nothing waits for the held commit on the loop.
        answer = await services.call("Pull", pb.PullRequest(subscription=SUB, max_messages=8))
        assert len(answer.received_messages) == 8
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not create.done()
        store.go.set()
        await create
        assert not group.in_flight
        assert _window(services) == (2, 20)
        # The next Pull refills inside it, as without top-ups (at least ``MIN_LOAD``
        # rows: all 20), and leaves nothing cold to top up.
        await services.call("Pull", pb.PullRequest(subscription=SUB, max_messages=8))
        await asyncio.sleep(0)
        assert _window(services) == (14, 0)
    finally:
        store.go.set()
        await group.aclose()
        await runner
        store.close()


async def test_a_memory_store_has_no_top_up() -> None:
    services = Services(Broker(SystemClock(), record_history=False))
    assert services.methods["Pull"].after_answer is None
