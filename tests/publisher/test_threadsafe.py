"""``PublisherClient.publish_threadsafe`` from a pool of threads while the client runs on
the test's event loop (as a synchronous web framework's threads would call it), and the
refusals that keep it from deadlocking or publishing into a closed client."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import Counter

import pytest

from eoclient.errors import ClosedError, OrderingKeyPausedError
from eoclient.publisher import (
    LimitExceededBehavior,
    PublisherClient,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.server_stub.core.model import SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

pytestmark = pytest.mark.timeout(30)

TOPIC = "projects/p/topics/threads"
SUBSCRIPTION = "projects/p/subscriptions/threads"
THREADS = 8
PER_THREAD = 50


@pytest.fixture
async def srv() -> ReferenceServer:  # type: ignore[misc]
    async with run_server() as server:
        server.broker.topics.create(TopicConfig(name=TOPIC))
        server.broker.subscriptions.create(SubscriptionConfig(name=SUBSCRIPTION, topic=TOPIC))
        yield server


async def test_threads_publish_through_one_client(srv: ReferenceServer) -> None:
    # BLOCK with little room: the threads' result() calls are their back-pressure.
    flow = PublishFlowControl(max_messages=20, behavior=LimitExceededBehavior.BLOCK)
    async with PublisherClient(
        srv.address, flow_control=flow, enable_message_ordering=True
    ) as client:

        def worker(n: int) -> list[str]:
            futures = [
                client.publish_threadsafe(TOPIC, b"%d-%d" % (n, i), f"thread-{n}", n=str(n))
                for i in range(PER_THREAD)
            ]
            return [future.result(timeout=20) for future in futures]

        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            results = await asyncio.gather(
                *(loop.run_in_executor(pool, worker, n) for n in range(THREADS))
            )
        stats = client.statistics()
    ids = [message_id for result in results for message_id in result]
    assert len(set(ids)) == THREADS * PER_THREAD
    assert stats.published_messages == THREADS * PER_THREAD
    delivered = srv.broker.leasing.pull(SUBSCRIPTION, THREADS * PER_THREAD + 1)
    # Each thread's messages arrive in the order the thread published them (its own key).
    by_thread: dict[str, list[bytes]] = {}
    for record in delivered:
        by_thread.setdefault(record.message.ordering_key, []).append(record.message.data)
    assert Counter(len(v) for v in by_thread.values()) == {PER_THREAD: THREADS}
    for key, data in by_thread.items():
        n = key.removeprefix("thread-")
        assert data == [b"%s-%d" % (n.encode(), i) for i in range(PER_THREAD)]


async def test_errors_arrive_through_the_future(srv: ReferenceServer) -> None:
    srv.faults.fail("Publish", "INVALID_ARGUMENT", "refused here")
    retry = PublishRetrySettings(initial_backoff=0.01, deadline=0.1)
    async with PublisherClient(srv.address, retry=retry, enable_message_ordering=True) as client:

        def in_a_thread() -> tuple[BaseException | None, ...]:
            invalid = client.publish_threadsafe("", b"x")  # no topic
            empty = client.publish_threadsafe(TOPIC, b"", "key")
            refused = client.publish_threadsafe(TOPIC, b"x", "k")
            refused.exception(timeout=10)  # the key is paused from now on
            paused = client.publish_threadsafe(TOPIC, b"y", "k")
            return tuple(f.exception(timeout=10) for f in (invalid, empty, refused, paused))

        invalid, empty, refused, paused = await asyncio.to_thread(in_a_thread)
    assert isinstance(invalid, ValueError)
    assert isinstance(empty, ValueError)
    assert "refused here" in str(refused)
    assert isinstance(paused, OrderingKeyPausedError)


async def test_refusals_that_keep_it_safe(srv: ReferenceServer) -> None:
    client = PublisherClient(srv.address)
    with pytest.raises(RuntimeError, match="not started"):
        client.publish_threadsafe(TOPIC, b"too early")
    async with client:
        with pytest.raises(RuntimeError, match="own event loop"):
            client.publish_threadsafe(TOPIC, b"deadlock")

        def held_back() -> concurrent.futures.Future[str]:
            return client.publish_threadsafe(TOPIC, b"in flight at close")

        pending = await asyncio.to_thread(held_back)
    assert pending.result(timeout=10)  # aclose sent it
    with pytest.raises(ClosedError):
        await asyncio.to_thread(client.publish_threadsafe, TOPIC, b"too late")
