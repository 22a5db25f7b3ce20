"""PublisherClient against the in-process reference server (tier 3).

Publish RPCs are counted by wrapping ``srv.broker.publishing.publish`` (the server has no RPC
counter); injected failures (``srv.faults``) are refused before the broker is reached,
so the spy sees only the requests the server accepted, while the client's
``statistics().publish_rpcs`` counts every attempt.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from eoclient._clock import FakeClock
from eoclient.errors import (
    ClosedError,
    FlowControlLimitError,
    InvalidArgument,
    MessageTooLargeError,
    NotFound,
    OrderingKeyPausedError,
    SizeLimitExceeded,
    Unavailable,
)
from eoclient.publisher import PublisherClient, PublisherState
from eoclient.publisher.settings import (
    BatchSettings,
    LimitExceededBehavior,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.server_stub.core.model import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

FAST_RETRY = PublishRetrySettings(initial_backoff=0.01, max_backoff=0.05, multiplier=2.0)
NEVER_SEND = BatchSettings(max_latency=float("inf"))  # only full batches, or aclose
_names = itertools.count(1)

pytestmark = pytest.mark.timeout(10)


@dataclass
class Request:
    topic: str
    messages: list[NewMessage]
    request_bytes: int
    outstanding: int  # the client's outstanding messages when the server got it


@dataclass
class Spy:
    """Every Publish the broker accepted, in arrival order."""

    requests: list[Request] = field(default_factory=list)
    client: PublisherClient | None = None

    @property
    def data(self) -> list[bytes]:
        return [m.data for r in self.requests for m in r.messages]

    def data_of_key(self, key: str) -> list[bytes]:
        return [m.data for r in self.requests for m in r.messages if m.ordering_key == key]


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


@pytest.fixture
def spy(srv: ReferenceServer) -> Spy:
    recorder = Spy()
    original = srv.broker.publishing.publish

    def publish(topic: str, messages: Sequence[NewMessage], request_bytes: int = 0) -> list[str]:
        ids = original(topic, messages, request_bytes)  # raises for unknown topics
        client = recorder.client
        outstanding = client.statistics().outstanding_messages if client else -1
        recorder.requests.append(Request(topic, list(messages), request_bytes, outstanding))
        return ids

    srv.broker.publishing.publish = publish  # type: ignore[method-assign, assignment]
    return recorder


def new_topic(srv: ReferenceServer) -> tuple[str, str]:
    """A new topic with one subscription (created before publishing, so it sees all)."""
    n = next(_names)
    topic, sub = f"projects/p1/topics/pub-{n}", f"projects/p1/subscriptions/pub-{n}"
    srv.broker.topics.create(TopicConfig(name=topic))
    srv.broker.subscriptions.create(SubscriptionConfig(name=sub, topic=topic))
    return topic, sub


def client_for(srv: ReferenceServer, spy: Spy | None = None, **kwargs: Any) -> PublisherClient:
    kwargs.setdefault("retry", FAST_RETRY)
    client = PublisherClient(srv.address, **kwargs)
    if spy is not None:
        spy.client = client
    return client


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def live_tasks() -> set[asyncio.Task[Any]]:
    """Unfinished tasks other than this one and the in-process server's own (grpc.aio
    serves each call in tasks of its own, which may outlive the call briefly)."""
    return {
        t
        for t in asyncio.all_tasks()
        if not t.done() and "AioServer." not in repr(t) and "aio/server.pyx" not in repr(t)
    } - {asyncio.current_task()}


# ======================================================================== basics


async def test_publish_returns_ids_and_messages_arrive_intact(srv: ReferenceServer) -> None:
    topic, sub = new_topic(srv)
    async with client_for(srv, enable_message_ordering=True) as client:
        first = await client.publish(topic, b"hello", colour="blue", size="L")
        second = await client.publish(topic, b"ordered", ordering_key="k1", n="2")
        third = await client.publish(topic, b"", only="attributes")
    assert len({first, second, third}) == 3
    delivered = {d.message.message_id: d.message for d in srv.broker.leasing.pull(sub, 10)}
    assert set(delivered) == {first, second, third}
    assert delivered[first].data == b"hello"
    assert dict(delivered[first].attributes) == {"colour": "blue", "size": "L"}
    assert delivered[first].ordering_key == ""
    assert delivered[second].data == b"ordered"
    assert delivered[second].ordering_key == "k1"
    assert dict(delivered[second].attributes) == {"n": "2"}
    assert delivered[third].data == b""
    assert dict(delivered[third].attributes) == {"only": "attributes"}


async def test_publish_nowait_250_messages_make_three_rpcs(srv: ReferenceServer, spy: Spy) -> None:
    topic, sub = new_topic(srv)
    async with client_for(srv, spy, batch=BatchSettings(max_messages=100)) as client:
        futures = [client.publish_nowait(topic, b"m%d" % i) for i in range(250)]
        ids = await asyncio.gather(*futures)
        stats = client.statistics()
    # Unordered batches are in flight together, so they may arrive in any order.
    assert sorted(len(r.messages) for r in spy.requests) == [50, 100, 100]
    assert sorted(spy.data) == sorted(b"m%d" % i for i in range(250))
    assert len(set(ids)) == 250
    assert stats.publish_rpcs == 3
    assert stats.published_messages == 250
    assert stats.outstanding_messages == 0
    assert len(srv.broker.leasing.pull(sub, 1000)) == 250


async def test_batches_never_exceed_max_bytes(srv: ReferenceServer, spy: Spy) -> None:
    topic, _ = new_topic(srv)
    settings = BatchSettings(max_bytes=1000, max_latency=float("inf"))
    async with client_for(srv, spy, batch=settings) as client:
        futures = [client.publish_nowait(topic, bytes([i]) * 300) for i in range(10)]
        await client.aclose()  # also sends the last, partial batch
    assert all(f.done() and not f.exception() for f in futures)
    # Each message is 303 bytes encoded and 306 in a request, after 26 of topic field.
    assert sorted(len(r.messages) for r in spy.requests) == [1, 3, 3, 3]
    assert all(0 < r.request_bytes <= 1000 for r in spy.requests)
    assert sorted(spy.data) == [bytes([i]) * 300 for i in range(10)]


async def test_a_partial_batch_leaves_after_max_latency(srv: ReferenceServer, spy: Spy) -> None:
    """The batch timer reads the injected clock: nothing leaves until it has advanced."""
    topic, _ = new_topic(srv)
    clock = FakeClock(start=100.0)
    async with client_for(srv, spy, batch=BatchSettings(max_latency=0.05), clock=clock) as client:
        future = client.publish_nowait(topic, b"alone")
        await asyncio.sleep(0.2)  # real time passes; the client's time does not
        assert spy.requests == []
        assert client.statistics().batching_messages == 1
        clock.advance(0.05)
        assert await asyncio.wait_for(future, 5)
    assert len(spy.requests) == 1


# ======================================================================= retries


async def test_retryable_failures_are_retried_until_success(srv: ReferenceServer, spy: Spy) -> None:
    topic, _ = new_topic(srv)
    srv.faults.fail("Publish", "UNAVAILABLE", times=2)
    async with client_for(srv, spy) as client:
        message_id = await client.publish(topic, b"persistent")
        stats = client.statistics()
    assert message_id
    assert stats.publish_rpcs == 3
    assert stats.retried_rpcs == 2
    assert len(spy.requests) == 1


async def test_retries_stop_at_the_deadline_with_the_last_error(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    srv.faults.fail("Publish", "UNAVAILABLE", "the backend is down", times=-1)
    retry = PublishRetrySettings(
        initial_backoff=0.01, max_backoff=0.05, multiplier=2.0, deadline=0.3
    )
    async with client_for(srv, retry=retry) as client:
        started = time.monotonic()
        with pytest.raises(Unavailable) as raised:
            await client.publish(topic, b"doomed")
        elapsed = time.monotonic() - started
        stats = client.statistics()
    assert raised.value.message == "the backend is down"
    assert 0.2 <= elapsed < 2.0
    assert stats.publish_rpcs >= 2
    assert stats.failed_messages == 1


async def test_non_retryable_error_fails_the_whole_batch_with_the_server_message(
    srv: ReferenceServer, spy: Spy
) -> None:
    topic, _ = new_topic(srv)
    srv.faults.fail("Publish", "INVALID_ARGUMENT", "the server says no")
    async with client_for(srv, spy) as client:
        futures = [client.publish_nowait(topic, b"x%d" % i) for i in range(3)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        stats = client.statistics()
    assert all(isinstance(r, InvalidArgument) for r in results)
    assert all(r.message == "the server says no" for r in results)  # type: ignore[union-attr]
    assert stats.publish_rpcs == 1  # not retried
    assert stats.failed_messages == 3
    assert spy.requests == []


async def test_a_size_limit_is_not_retried_but_a_quota_is(srv: ReferenceServer) -> None:
    # Both are RESOURCE_EXHAUSTED; only the message tells a gRPC size limit (permanent)
    # from a quota (transient): errors.py's classification table.
    topic, _ = new_topic(srv)
    srv.faults.fail(
        "Publish", "RESOURCE_EXHAUSTED", "SERVER: Received message larger than max (9 vs. 4)"
    )
    async with client_for(srv) as client:
        with pytest.raises(SizeLimitExceeded, match="larger than max"):
            await client.publish(topic, b"too big for this server")
        assert client.statistics().publish_rpcs == 1
    srv.faults.fail("Publish", "RESOURCE_EXHAUSTED", "Quota exceeded for this topic", times=2)
    async with client_for(srv) as client:
        assert await client.publish(topic, b"fits once the quota refills")
        assert client.statistics().publish_rpcs == 3


async def test_publishing_to_a_missing_topic_fails_with_not_found(srv: ReferenceServer) -> None:
    async with client_for(srv) as client:
        with pytest.raises(NotFound, match="Resource not found"):
            await client.publish("projects/p1/topics/does-not-exist", b"lost")
        assert client.statistics().publish_rpcs == 1


# ====================================================================== ordering


async def test_order_per_key_is_kept_across_many_batches_and_retries(
    srv: ReferenceServer, spy: Spy
) -> None:
    topic, _ = new_topic(srv)
    srv.faults.fail("Publish", "UNAVAILABLE", times=3)
    keys = ["a", "b", "c"]
    async with client_for(
        srv, spy, batch=BatchSettings(max_messages=7), enable_message_ordering=True
    ) as client:
        futures: dict[str, list[asyncio.Future[str]]] = {key: [] for key in keys}
        for i in range(60):
            for key in keys:
                futures[key].append(
                    client.publish_nowait(topic, b"%s%d" % (key.encode(), i), ordering_key=key)
                )
            if i % 10 == 0:
                await asyncio.sleep(0)  # let some batches leave while others form
        ids = {key: await asyncio.gather(*fs) for key, fs in futures.items()}
        stats = client.statistics()
    assert stats.retried_rpcs == 3
    for key in keys:
        assert spy.data_of_key(key) == [b"%s%d" % (key.encode(), i) for i in range(60)]
        numeric = [int(message_id) for message_id in ids[key]]
        assert numeric == sorted(numeric)  # the server numbers ids in arrival order
    assert all(len({m.ordering_key for m in r.messages}) == 1 for r in spy.requests)


async def test_order_per_key_is_kept_when_flow_control_parks_messages(
    srv: ReferenceServer, spy: Spy
) -> None:
    topic, _ = new_topic(srv)
    flow = PublishFlowControl(max_messages=5, behavior=LimitExceededBehavior.BLOCK)
    async with client_for(
        srv,
        spy,
        batch=BatchSettings(max_messages=3),
        flow_control=flow,
        enable_message_ordering=True,
    ) as client:
        futures = [
            client.publish_nowait(topic, b"%d" % i, ordering_key="k" if i % 2 else "")
            for i in range(40)
        ]
        assert client.statistics().waiting_messages == 35
        await asyncio.gather(*futures)
    assert spy.data_of_key("k") == [b"%d" % i for i in range(1, 40, 2)]
    assert sorted(spy.data_of_key("")) == sorted(b"%d" % i for i in range(0, 40, 2))
    assert all(r.outstanding <= 5 for r in spy.requests)


async def test_a_permanent_failure_pauses_the_key_until_resumed(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    async with client_for(
        srv, batch=BatchSettings(max_messages=10), enable_message_ordering=True
    ) as client:
        assert await client.publish(topic, b"before", ordering_key="k")
        srv.broker.topics.delete(topic)
        futures = [client.publish_nowait(topic, b"%d" % i, ordering_key="k") for i in range(25)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert isinstance(results[0], NotFound)
        assert all(isinstance(r, NotFound) for r in results[:10])  # the batch that was sent
        paused = results[10:]
        assert all(isinstance(r, OrderingKeyPausedError) for r in paused)
        assert all("'k'" in str(r) and topic in str(r) for r in paused)
        assert client.statistics().paused_keys == ((topic, "k"),)

        # Later publishes fail fast, without an RPC.
        rpcs = client.statistics().publish_rpcs
        with pytest.raises(OrderingKeyPausedError, match="resume_publish"):
            client.publish_nowait(topic, b"later", ordering_key="k")
        with pytest.raises(OrderingKeyPausedError):
            await client.publish(topic, b"later", ordering_key="k")
        assert client.statistics().publish_rpcs == rpcs

        srv.broker.topics.create(TopicConfig(name=topic))
        assert await client.publish(topic, b"other key", ordering_key="j")  # not paused
        client.resume_publish(topic, "k")
        client.resume_publish(topic, "k")  # harmless when not paused
        assert client.statistics().paused_keys == ()
        assert await client.publish(topic, b"after", ordering_key="k")


async def test_ordering_keys_need_ordering_enabled(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    async with client_for(srv) as client:
        with pytest.raises(ValueError, match="enable_message_ordering=True"):
            client.publish_nowait(topic, b"x", ordering_key="k")
        with pytest.raises(ValueError, match="ordering is disabled"):
            await client.publish(topic, b"x", ordering_key="k")
        with pytest.raises(ValueError, match="enable_message_ordering"):
            client.resume_publish(topic, "k")
        assert client.statistics().outstanding_messages == 0


# ==================================================================== validation


async def test_invalid_messages_are_rejected_before_enqueue(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    async with client_for(srv) as client:
        with pytest.raises(ValueError, match="non-empty data or at least one attribute"):
            await client.publish(topic, b"")
        with pytest.raises(TypeError, match="must be bytes"):
            await client.publish(topic, "text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="must be a str"):
            await client.publish(topic, b"x", n=1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="the limit is 1024"):
            await client.publish(topic, b"x", big="v" * 1025)
        with pytest.raises(MessageTooLargeError):
            await client.publish(topic, b"x" * 10_000_000)
        with pytest.raises(ValueError, match="topic must be a full topic name"):
            await client.publish("", b"x")
        stats = client.statistics()
        assert stats.outstanding_messages == 0
        assert stats.publish_rpcs == 0


# ================================================================== flow control


async def test_flow_control_error_raises_at_once(srv: ReferenceServer, spy: Spy) -> None:
    topic, _ = new_topic(srv)
    flow = PublishFlowControl(max_messages=2, behavior=LimitExceededBehavior.ERROR)
    async with client_for(srv, spy, batch=NEVER_SEND, flow_control=flow) as client:
        futures = [client.publish_nowait(topic, b"1"), client.publish_nowait(topic, b"2")]
        with pytest.raises(FlowControlLimitError, match="messages 3 / 2"):
            client.publish_nowait(topic, b"3")
        with pytest.raises(FlowControlLimitError):
            await client.publish(topic, b"3")
        assert client.statistics().outstanding_messages == 2
    assert all(f.result() for f in futures)
    assert spy.data == [b"1", b"2"]


async def test_flow_control_block_waits_first_in_first_out(srv: ReferenceServer, spy: Spy) -> None:
    topic, _ = new_topic(srv)
    flow = PublishFlowControl(max_messages=1, behavior=LimitExceededBehavior.BLOCK)
    async with client_for(
        srv, spy, batch=BatchSettings(max_messages=1), flow_control=flow
    ) as client:
        tasks = [asyncio.create_task(client.publish(topic, b"%d" % i)) for i in range(10)]
        await asyncio.sleep(0)  # all ten have asked; one is admitted, nine wait
        assert client.statistics().waiting_messages == 9
        ids = await asyncio.gather(*tasks)
    assert len(set(ids)) == 10
    assert spy.data == [b"%d" % i for i in range(10)]  # admission order is arrival order
    assert all(r.outstanding == 1 for r in spy.requests)  # never more than the limit


async def test_publish_nowait_parks_messages_under_block(srv: ReferenceServer, spy: Spy) -> None:
    topic, _ = new_topic(srv)
    flow = PublishFlowControl(max_messages=3, behavior=LimitExceededBehavior.BLOCK)
    async with client_for(
        srv, spy, batch=BatchSettings(max_messages=2), flow_control=flow
    ) as client:
        futures = [client.publish_nowait(topic, b"%d" % i) for i in range(12)]
        stats = client.statistics()
        assert (stats.outstanding_messages, stats.waiting_messages) == (3, 9)
        ids = await asyncio.gather(*futures)
    assert len(set(ids)) == 12
    assert sorted(spy.data) == sorted(b"%d" % i for i in range(12))
    assert all(0 < r.outstanding <= 3 for r in spy.requests)


async def test_cancelling_a_blocked_publish_withdraws_the_message(
    srv: ReferenceServer, spy: Spy
) -> None:
    topic, _ = new_topic(srv)
    flow = PublishFlowControl(max_messages=1, behavior=LimitExceededBehavior.BLOCK)
    async with client_for(srv, spy, batch=NEVER_SEND, flow_control=flow) as client:
        first = client.publish_nowait(topic, b"admitted")
        blocked = asyncio.create_task(client.publish(topic, b"withdrawn"))
        parked = client.publish_nowait(topic, b"withdrawn too")
        await asyncio.sleep(0)
        assert client.statistics().waiting_messages == 2
        blocked.cancel()
        parked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        await asyncio.sleep(0)
        assert client.statistics().waiting_messages == 0
    assert first.result()
    assert spy.data == [b"admitted"]


async def test_block_rejects_a_message_that_could_never_fit(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    flow = PublishFlowControl(max_bytes=100, behavior=LimitExceededBehavior.BLOCK)
    async with client_for(srv, flow_control=flow) as client:
        with pytest.raises(FlowControlLimitError, match="would wait forever"):
            await client.publish(topic, b"x" * 200)


# ===================================================================== lifecycle


async def test_aclose_flushes_pending_messages_and_is_idempotent(
    srv: ReferenceServer, spy: Spy
) -> None:
    topic, sub = new_topic(srv)
    client = client_for(srv, spy, batch=NEVER_SEND)
    async with client:
        futures = [client.publish_nowait(topic, b"%d" % i) for i in range(5)]
        await asyncio.sleep(0.05)
        assert spy.requests == []
        assert client.statistics().batching_messages == 5
        await asyncio.gather(client.aclose(), client.aclose())  # concurrent closers
        assert all(f.done() and f.result() for f in futures)
    await client.aclose()
    assert client.state is PublisherState.CLOSED
    assert len(spy.requests) == 1
    assert len(srv.broker.leasing.pull(sub, 10)) == 5
    with pytest.raises(ClosedError):
        client.publish_nowait(topic, b"late")
    with pytest.raises(ClosedError):
        await client.publish(topic, b"late")


async def test_a_client_must_be_entered_before_publishing(srv: ReferenceServer) -> None:
    client = client_for(srv)
    with pytest.raises(RuntimeError, match="async with PublisherClient"):
        await client.publish("projects/p1/topics/t", b"x")
    await client.aclose()
    assert client.state is PublisherState.CLOSED
    with pytest.raises(RuntimeError, match="cannot be entered twice"):
        await client.__aenter__()


async def test_no_task_is_left_behind(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    before = live_tasks()
    async with client_for(srv, enable_message_ordering=True) as client:
        futures = [
            client.publish_nowait(topic, b"%d" % i, ordering_key=f"k{i % 3}") for i in range(50)
        ]
        futures.append(client.publish_nowait(topic, b"unordered"))
        assert any(t.get_name() == "eoclient-publish-sender" for t in live_tasks())
    assert all(f.result() for f in futures)
    assert live_tasks() - before == set()


async def test_aclose_timeout_fails_what_is_still_in_flight(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    srv.faults.fail("Publish", "UNAVAILABLE", times=-1)
    before = live_tasks()
    forever = PublishRetrySettings(initial_backoff=0.01, max_backoff=0.02, deadline=float("inf"))
    client = client_for(srv, retry=forever, batch=BatchSettings(max_messages=1))
    async with client:
        in_flight = client.publish_nowait(topic, b"retrying forever")
        await eventually(lambda: client.statistics().retried_rpcs >= 1)
        await client.aclose(timeout=0.1)
    with pytest.raises(ClosedError, match="closed before the server answered"):
        in_flight.result()
    assert live_tasks() - before == set()


async def test_cancelling_aclose_propagates_and_still_cleans_up(srv: ReferenceServer) -> None:
    topic, _ = new_topic(srv)
    srv.faults.fail("Publish", "UNAVAILABLE", times=-1)
    before = live_tasks()
    forever = PublishRetrySettings(initial_backoff=0.01, max_backoff=0.02, deadline=float("inf"))
    flow = PublishFlowControl(max_messages=1, behavior=LimitExceededBehavior.BLOCK)
    client = client_for(srv, retry=forever, flow_control=flow)
    await client.__aenter__()
    in_flight = client.publish_nowait(topic, b"retrying forever")
    parked = client.publish_nowait(topic, b"never admitted")
    closer = asyncio.create_task(client.aclose())
    await asyncio.sleep(0.05)
    assert client.state is PublisherState.CLOSING
    closer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closer
    assert client.statistics().state is PublisherState.CLOSED
    for future in (in_flight, parked):
        with pytest.raises(ClosedError):
            future.result()
    assert live_tasks() - before == set()


async def test_an_ordering_keys_next_batch_keeps_filling_while_one_is_in_flight(
    srv: ReferenceServer, spy: Spy
) -> None:
    # max_latency=0 would close every one-message batch at once; while the key has a
    # batch in flight the next one is held open instead, so it leaves full-ish.
    topic, _ = new_topic(srv)
    async with client_for(
        srv,
        spy,
        enable_message_ordering=True,
        batch=BatchSettings(max_messages=100, max_latency=0),
    ) as client:
        futures = []
        for i in range(200):
            futures.append(client.publish_nowait(topic, f"m{i}".encode(), ordering_key="k"))
            await asyncio.sleep(0)
        await asyncio.gather(*futures)
    assert spy.data_of_key("k") == [f"m{i}".encode() for i in range(200)]
    assert len(spy.requests) <= 20, f"{len(spy.requests)} Publish calls for 200 messages"
