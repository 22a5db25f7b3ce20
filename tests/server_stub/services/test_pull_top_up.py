"""After a unary Pull's answer the server tops its window up (services/subscriber.py,
``after_answer``; ``Services.call`` runs it once the answer is handed on), and a
StreamingPull tops it up once its answers are written and it idles
(services/streaming_pull.py): only on a store that bounds the window, never while a commit
runs (the store's reads would wait for it), and never before the answer."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eoclient._clock import SystemClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.core import Broker
from eoclient.server_stub.services.streaming_pull import DeliveryBatch, Step, StreamingPullSession
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


@contextlib.asynccontextmanager
async def _serving(directory: Path) -> AsyncIterator[tuple[Services, HeldStore]]:
    """Services on a ``HeldStore`` in ``directory``, with their commit loop running."""
    store = HeldStore(directory)
    services = Services(Broker(SystemClock(), store=store, record_history=False))
    runner = asyncio.create_task(services.group_commit.run())
    await asyncio.sleep(0)
    try:
        yield services, store
    finally:
        store.go.set()
        await services.group_commit.aclose()
        await runner
        store.close()


async def _hold_a_commit(services: Services, store: HeldStore) -> asyncio.Task[object]:
    """A change somebody waits for, its commit's thread held until ``store.go`` is set:
    the waiting call."""
    store.go.clear()
    store.entered.clear()
    create = asyncio.create_task(services.call("CreateTopic", pb.Topic(name=TOPIC + "-2")))
    assert await asyncio.to_thread(store.entered.wait, 10)
    assert services.group_commit.in_flight
    return create


@pytest.mark.timeout(30)
@pytest.mark.parametrize("exactly_once", [False, True])
async def test_a_pull_tops_the_window_up_after_its_answer(
    tmp_path: Path, exactly_once: bool
) -> None:
    async with _serving(tmp_path) as (services, _):
        await _setup(services, exactly_once)
        assert _window(services) == (10, 20)
        answer = await services.call("Pull", pb.PullRequest(subscription=SUB, max_messages=8))
        assert len(answer.received_messages) == 8
        assert _window(services) == (2, 20)  # answered first
        await asyncio.sleep(0)
        assert _window(services) == (10, 12)


@pytest.mark.timeout(30)
async def test_no_top_up_while_a_commit_runs(tmp_path: Path) -> None:
    async with _serving(tmp_path) as (services, store):
        await _setup(services, False)
        create = await _hold_a_commit(services, store)
        # A plain Pull answers without waiting for that commit; its top-up is skipped,
        # and nothing waits for the held commit on the loop.
        answer = await services.call("Pull", pb.PullRequest(subscription=SUB, max_messages=8))
        assert len(answer.received_messages) == 8
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not create.done()
        store.go.set()
        await create
        assert not services.group_commit.in_flight
        assert _window(services) == (2, 20)
        # The next Pull refills inside it, as without top-ups (at least ``MIN_LOAD``
        # rows: all 20), and leaves nothing cold to top up.
        await services.call("Pull", pb.PullRequest(subscription=SUB, max_messages=8))
        await asyncio.sleep(0)
        assert _window(services) == (14, 0)


async def test_a_memory_store_has_no_top_up() -> None:
    services = Services(Broker(SystemClock(), record_history=False))
    assert services.methods["Pull"].after_answer is None


def _open_stream(services: Services, outstanding: int) -> StreamingPullSession:
    first = pb.StreamingPullRequest(
        subscription=SUB, stream_ack_deadline_seconds=30, max_outstanding_messages=outstanding
    )
    return services.streaming_pull.open(first, None, "ipv4:127.0.0.1:1")


async def _idles(session: StreamingPullSession) -> asyncio.Future[Step]:
    """``next_step`` with nothing to send (flow control holds the next lease back)."""
    task = asyncio.ensure_future(session.next_step())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    return task


@pytest.mark.timeout(30)
@pytest.mark.parametrize("exactly_once", [False, True])
async def test_an_idle_stream_tops_the_window_up_after_its_answer(
    tmp_path: Path, exactly_once: bool
) -> None:
    async with _serving(tmp_path) as (services, _):
        await _setup(services, exactly_once)
        assert _window(services) == (10, 20)
        session = _open_stream(services, 8)
        step = await asyncio.wait_for(session.next_step(), 5)
        assert sum(len(r.deliveries) for r in step.responses if isinstance(r, DeliveryBatch)) == 8
        assert _window(services) == (2, 20)  # answered first
        idle = await _idles(session)  # the answer written, the stream idles: topped up
        assert _window(services) == (10, 12)
        idle.cancel()
        session.close()


@pytest.mark.timeout(30)
async def test_a_stream_does_not_top_up_while_a_commit_runs(tmp_path: Path) -> None:
    async with _serving(tmp_path) as (services, store):
        await _setup(services, False)
        session = _open_stream(services, 8)
        await asyncio.wait_for(session.next_step(), 5)
        create = await _hold_a_commit(services, store)
        idle = await _idles(session)
        assert _window(services) == (2, 20)  # skipped: nothing waits for the held commit
        assert not create.done()
        store.go.set()
        await create
        idle.cancel()
        session.close()
