"""Per-call ``retry=`` and ``timeout=`` on ``publish`` / ``publish_nowait``, against the
in-process reference server and its fault injection.

A message's retry and timeout are those of the ``Publish`` that carries it: a message
published with other ones than its key's open batch starts a new batch (so no message
travels under another's settings), and a key's messages still leave in order. The timeout
is the whole request's budget, retries included, and each attempt is sent with what
remains: a request the server holds (a PRODUCER_REQUEST_HOLD backlog quota) ends with
DEADLINE_EXCEEDED at the caller's timeout, not the server's hold.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import AsyncIterator, Sequence

import pytest

from eoclient._clock import MonotonicClock
from eoclient.admin import AdminClient, BacklogQuotaAction
from eoclient.errors import DeadlineExceeded, Unavailable
from eoclient.publisher import BatchSettings, PublisherClient, PublishRetrySettings
from eoclient.server_stub.core.model import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

FAST_RETRY = PublishRetrySettings(initial_backoff=0.01, max_backoff=0.05, multiplier=2.0)
NEVER_SEND = BatchSettings(max_latency=float("inf"))  # only full batches, or aclose
_names = itertools.count(1)

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


def new_topic(srv: ReferenceServer) -> str:
    n = next(_names)
    topic = f"projects/p1/topics/options-{n}"
    srv.broker.topics.create(TopicConfig(name=topic))
    srv.broker.subscriptions.create(
        SubscriptionConfig(name=f"projects/p1/subscriptions/options-{n}", topic=topic)
    )
    return topic


def record_requests(srv: ReferenceServer) -> list[list[bytes]]:
    """The data of each Publish the broker accepted, in arrival order."""
    requests: list[list[bytes]] = []
    original = srv.broker.publishing.publish

    def publish(topic: str, messages: Sequence[NewMessage], request_bytes: int = 0) -> list[str]:
        ids = original(topic, messages, request_bytes)
        requests.append([m.data for m in messages])
        return ids

    srv.broker.publishing.publish = publish  # type: ignore[method-assign, assignment]
    return requests


# ====================================================================== retry=


async def test_retry_none_makes_one_attempt_while_the_default_retries(
    srv: ReferenceServer,
) -> None:
    topic = new_topic(srv)
    async with PublisherClient(srv.address, retry=FAST_RETRY) as client:
        srv.faults.fail("Publish", "UNAVAILABLE", "down for a moment", times=1)
        with pytest.raises(Unavailable, match="down for a moment"):
            await client.publish(topic, b"once", retry=None)
        assert client.statistics().publish_rpcs == 1
        srv.faults.fail("Publish", "UNAVAILABLE", times=2)
        assert await client.publish(topic, b"retried")  # the client's retry
        stats = client.statistics()
    assert (stats.publish_rpcs, stats.retried_rpcs) == (4, 2)


async def test_a_per_call_retry_replaces_the_clients(srv: ReferenceServer) -> None:
    topic = new_topic(srv)
    srv.faults.fail("Publish", "UNAVAILABLE", "the backend is down", times=-1)
    # The client would retry for 600 s; this message's request gives up after 0.2 s.
    short = PublishRetrySettings(initial_backoff=0.01, max_backoff=0.02, deadline=0.2)
    async with PublisherClient(srv.address, retry=FAST_RETRY) as client:
        with pytest.raises(Unavailable, match="the backend is down"):
            await client.publish(topic, b"doomed", retry=short)
        stats = client.statistics()
    assert stats.publish_rpcs >= 2
    assert stats.failed_messages == 1


# ====================================================================== timeout=


async def test_the_timeout_bounds_all_attempts_together(srv: ReferenceServer) -> None:
    topic = new_topic(srv)
    srv.faults.fail("Publish", "UNAVAILABLE", times=-1)
    delays: list[float] = []

    class RecordingClock(MonotonicClock):
        async def sleep(self, seconds: float) -> None:
            delays.append(seconds)
            await super().sleep(seconds)

    async with PublisherClient(srv.address, retry=FAST_RETRY, clock=RecordingClock()) as client:
        # The last attempt goes out with what remains of the budget: answered in time, the
        # call ends with the server's UNAVAILABLE; still unanswered when the budget ends (a
        # busy machine can take longer than the ~0.05 s that may be left), with
        # DEADLINE_EXCEEDED. Either way it ends, and with no attempt after the budget.
        with pytest.raises((Unavailable, DeadlineExceeded)):
            await client.publish(topic, b"doomed", timeout=0.3)
        stats = client.statistics()
    assert stats.publish_rpcs >= 2  # it did retry ...
    assert sum(delays) < 0.3  # ... and no attempt was due after the budget


async def test_an_attempt_is_sent_with_the_time_that_remains(srv: ReferenceServer) -> None:
    """The server holds a Publish for 30 s (a backlog quota); the caller's timeout ends it."""
    topic = new_topic(srv)
    async with AdminClient(srv.address) as admin:
        await admin.set_topic_backlog_quota(
            topic,
            limit_bytes=4,
            action=BacklogQuotaAction.PRODUCER_REQUEST_HOLD,
            hold_timeout=datetime.timedelta(seconds=30),
        )
    async with PublisherClient(srv.address, retry=FAST_RETRY) as client:
        await client.publish(topic, b"12345")  # over the 4-byte quota from now on
        with pytest.raises(DeadlineExceeded):
            await client.publish(topic, b"held", timeout=0.5)
        stats = client.statistics()
    # DEADLINE_EXCEEDED is retryable, but the budget was spent: no second attempt.
    assert stats.publish_rpcs == 2


async def test_bad_options_are_refused_at_once(srv: ReferenceServer) -> None:
    topic = new_topic(srv)
    async with PublisherClient(srv.address) as client:
        # As in google-cloud-pubsub, retry and timeout are parameters: an attribute of that
        # name is refused with a message saying so, not sent.
        with pytest.raises(TypeError, match="parameters, not message attributes"):
            client.publish_nowait(topic, b"x", timeout="5")  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="retry must be a PublishRetrySettings"):
            client.publish_nowait(topic, b"x", retry="forever")  # type: ignore[call-overload]
        with pytest.raises(ValueError, match="timeout must be > 0"):
            client.publish_nowait(topic, b"x", timeout=0)
        assert client.statistics().outstanding_messages == 0


# ====================================================================== batches


async def test_messages_share_a_request_only_with_the_same_options(srv: ReferenceServer) -> None:
    topic = new_topic(srv)
    requests = record_requests(srv)
    quick = PublishRetrySettings(initial_backoff=0.01, deadline=1.0)
    async with PublisherClient(srv.address, batch=NEVER_SEND, retry=FAST_RETRY) as client:
        futures = [
            client.publish_nowait(topic, b"a1"),
            client.publish_nowait(topic, b"a2"),
            client.publish_nowait(topic, b"b1", retry=quick),
            client.publish_nowait(topic, b"b2", retry=quick),  # equal settings: same batch
            client.publish_nowait(topic, b"c1", timeout=30),
            client.publish_nowait(topic, b"a3"),
        ]
        await client.aclose()
    assert all(f.result() for f in futures)
    # Without an ordering key the four requests go out together, in any order.
    assert sorted(requests) == [[b"a1", b"a2"], [b"a3"], [b"b1", b"b2"], [b"c1"]]


async def test_an_ordering_key_keeps_its_order_across_options(srv: ReferenceServer) -> None:
    topic = new_topic(srv)
    requests = record_requests(srv)
    async with PublisherClient(
        srv.address, batch=NEVER_SEND, retry=FAST_RETRY, enable_message_ordering=True
    ) as client:
        for i in range(6):
            client.publish_nowait(topic, b"%d" % i, "key", timeout=10 if i % 2 else None)
        await client.aclose()
    assert [data for request in requests for data in request] == [b"%d" % i for i in range(6)]
    assert len(requests) == 6
