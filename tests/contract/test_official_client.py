"""The real google-cloud-pubsub client (sync, threads) against ``eoclient serve``.

The server runs in a subprocess (the ``served`` fixture) and the client finds it through
PUBSUB_EMULATOR_HOST, exactly as a user would point it at Google's emulator. The
exactly-once results are parsed by the client's own code (the streaming pull manager's
``_get_status`` / ``_get_ack_errors``, docs/protocol.md#rich-status-trailer), so these tests
prove the server's error shape, not just our reading of it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures as cf
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.exceptions import AcknowledgeError, AcknowledgeStatus
from google.cloud.pubsub_v1.subscriber.message import Message
from support.wire import unique

from eoclient.server_stub.server import ReferenceServer

WAIT = 10.0  # seconds any single expectation may take


@pytest.fixture
def emulator_host(served: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", served)
    return served


@pytest.fixture
def publisher(emulator_host: str) -> Iterator[pubsub_v1.PublisherClient]:
    client = pubsub_v1.PublisherClient()
    yield client
    client.stop()
    client.transport.close()


@pytest.fixture
def ordered_publisher(emulator_host: str) -> Iterator[pubsub_v1.PublisherClient]:
    client = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    yield client
    client.stop()
    client.transport.close()


@pytest.fixture
def subscriber(emulator_host: str) -> Iterator[pubsub_v1.SubscriberClient]:
    with pubsub_v1.SubscriberClient() as client:
        yield client


class Received:
    """Collects messages delivered to a streaming-pull callback, for the test thread."""

    def __init__(self, handle: Callable[[Message, Received], None]) -> None:
        self.handle = handle
        self.messages: list[Message] = []
        self.futures: list[cf.Future[Any]] = []
        self.errors: list[BaseException] = []
        self._changed = threading.Condition()

    def __call__(self, message: Message) -> None:
        try:
            self.handle(message, self)
        except BaseException as error:  # surfaced by wait_for()
            self.errors.append(error)
            raise
        finally:
            with self._changed:
                self.messages.append(message)
                self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = WAIT) -> list[Message]:
        with self._changed:
            done = self._changed.wait_for(
                lambda: len(self.messages) >= count or self.errors, timeout
            )
        assert not self.errors, self.errors
        assert done, f"received {len(self.messages)} of {count} messages"
        return list(self.messages)


def ack_with_response(message: Message, received: Received) -> None:
    received.futures.append(message.ack_with_response())


def subscribe(subscriber: pubsub_v1.SubscriberClient, subscription: str, received: Received) -> Any:
    return subscriber.subscribe(
        subscription,
        callback=received,
        flow_control=pubsub_v1.types.FlowControl(max_messages=100),
    )


def stop(streaming_pull_future: Any) -> None:
    streaming_pull_future.cancel()
    streaming_pull_future.result(timeout=WAIT)


def make_topic_and_subscription(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    **fields: Any,
) -> tuple[str, str]:
    topic = unique("topic")
    subscription = unique("sub")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": subscription, "topic": topic, **fields})
    return topic, subscription


# --------------------------------------------------------------------- admin


def test_admin_round_trip(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    project = f"projects/contract-{unique('topic').rsplit('-', 2)[1]}"
    topic = f"{project}/topics/orders"
    subscription = f"{project}/subscriptions/orders-eod"

    created = publisher.create_topic(request={"name": topic, "labels": {"env": "test"}})
    assert created.name == topic
    assert publisher.get_topic(topic=topic).labels["env"] == "test"
    updated = publisher.update_topic(
        request={
            "topic": {"name": topic, "labels": {"env": "prod"}},
            "update_mask": {"paths": ["labels"]},
        }
    )
    assert updated.labels["env"] == "prod"
    assert [t.name for t in publisher.list_topics(project=project)] == [topic]
    with pytest.raises(api_exceptions.AlreadyExists):
        publisher.create_topic(name=topic)

    sub = subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "enable_exactly_once_delivery": True}
    )
    assert sub.ack_deadline_seconds == 60
    assert sub.enable_exactly_once_delivery
    assert subscriber.get_subscription(subscription=subscription).topic == topic
    changed = subscriber.update_subscription(
        request={
            "subscription": {"name": subscription, "ack_deadline_seconds": 30},
            "update_mask": {"paths": ["ack_deadline_seconds"]},
        }
    )
    assert changed.ack_deadline_seconds == 30
    assert [s.name for s in subscriber.list_subscriptions(project=project)] == [subscription]
    assert list(publisher.list_topic_subscriptions(topic=topic)) == [subscription]
    with pytest.raises(api_exceptions.NotFound):
        subscriber.create_subscription(
            name=f"{project}/subscriptions/missing-topic", topic=topic + "-gone"
        )
    with pytest.raises(api_exceptions.InvalidArgument):
        subscriber.create_subscription(
            name=f"{project}/subscriptions/short-deadline", topic=topic, ack_deadline_seconds=5
        )

    subscriber.delete_subscription(subscription=subscription)
    publisher.delete_topic(topic=topic)
    with pytest.raises(api_exceptions.NotFound):
        subscriber.get_subscription(subscription=subscription)
    with pytest.raises(api_exceptions.NotFound):
        publisher.get_topic(topic=topic)


def test_31_day_retention_without_an_expiration_policy(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    # "ttl must be longer than message_retention_duration" binds a policy the caller
    # sets, not the 31-day default (docs/protocol.md#retention-and-expiration).
    month = {"seconds": 31 * 24 * 3600}
    _, subscription = make_topic_and_subscription(
        publisher, subscriber, message_retention_duration=month
    )
    created = subscriber.get_subscription(subscription=subscription)
    assert created.message_retention_duration.total_seconds() == 31 * 24 * 3600
    assert created.expiration_policy.ttl.total_seconds() == 31 * 24 * 3600
    with pytest.raises(api_exceptions.InvalidArgument, match="must be longer than"):
        make_topic_and_subscription(
            publisher,
            subscriber,
            message_retention_duration=month,
            expiration_policy={"ttl": month},
        )


# ------------------------------------------------------------ publish / pull


def test_publish_then_unary_pull_and_ack(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    topic, subscription = make_topic_and_subscription(publisher, subscriber)
    sent = [publisher.publish(topic, b"m%d" % i, n=str(i)) for i in range(10)]
    ids = [f.result(timeout=WAIT) for f in sent]
    assert len(set(ids)) == 10

    received: list[Any] = []
    deadline = time.monotonic() + WAIT
    while len(received) < 10 and time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=10 - len(received))
        received.extend(response.received_messages)
    assert sorted(m.message.message_id for m in received) == sorted(ids)
    assert {m.message.data: m.message.attributes["n"] for m in received}[b"m3"] == "3"
    subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in received])
    # Everything was acked: the next pull waits (about a second) and comes back empty.
    assert not subscriber.pull(subscription=subscription, max_messages=10).received_messages


def test_unary_superseded_ack_carries_error_info(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    topic, subscription = make_topic_and_subscription(
        publisher, subscriber, enable_exactly_once_delivery=True
    )
    publisher.publish(topic, b"m").result(timeout=WAIT)
    [old] = subscriber.pull(subscription=subscription, max_messages=1).received_messages
    subscriber.modify_ack_deadline(
        subscription=subscription, ack_ids=[old.ack_id], ack_deadline_seconds=0
    )
    [new] = subscriber.pull(subscription=subscription, max_messages=1).received_messages
    with pytest.raises(api_exceptions.InvalidArgument) as caught:
        subscriber.acknowledge(subscription=subscription, ack_ids=[old.ack_id])
    # google-api-core's own parsing of grpc-status-details-bin.
    assert caught.value.reason == "EXACTLY_ONCE_ACKID_FAILURE"
    assert caught.value.domain == "pubsub.googleapis.com"
    assert caught.value.metadata == {old.ack_id: "PERMANENT_FAILURE_INVALID_ACK_ID"}
    subscriber.acknowledge(subscription=subscription, ack_ids=[new.ack_id])


# --------------------------------------------------------- streaming pull


def test_streaming_exactly_once_every_ack_succeeds(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    topic, subscription = make_topic_and_subscription(
        publisher, subscriber, enable_exactly_once_delivery=True
    )
    ids = {publisher.publish(topic, b"%d" % i).result(timeout=WAIT) for i in range(30)}
    received = Received(ack_with_response)
    future = subscribe(subscriber, subscription, received)
    try:
        messages = received.wait_for(30)
        results = [f.result(timeout=WAIT) for f in received.futures]
    finally:
        stop(future)
    assert results == [AcknowledgeStatus.SUCCESS] * 30
    assert {m.message_id for m in messages} == ids
    assert len(messages) == 30  # nothing was redelivered


def test_streaming_superseded_ack_id_is_invalid_ack_id(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    topic, subscription = make_topic_and_subscription(
        publisher, subscriber, enable_exactly_once_delivery=True
    )
    outcomes: dict[str, cf.Future[Any]] = {}

    def handle(message: Message, received: Received) -> None:
        if not received.messages:  # first delivery: nack it, keep the object
            outcomes["nack"] = message.nack_with_response()
        else:  # the redelivery: ack through the superseded id first, then the new one
            outcomes["stale"] = received.messages[0].ack_with_response()
            outcomes["stale"].exception(timeout=WAIT)
            outcomes["fresh"] = message.ack_with_response()

    received = Received(handle)
    publisher.publish(topic, b"m").result(timeout=WAIT)
    future = subscribe(subscriber, subscription, received)
    try:
        first, second = received.wait_for(2)
        assert outcomes["nack"].result(timeout=WAIT) == AcknowledgeStatus.SUCCESS
        with pytest.raises(AcknowledgeError) as caught:
            outcomes["stale"].result(timeout=WAIT)
        assert outcomes["fresh"].result(timeout=WAIT) == AcknowledgeStatus.SUCCESS
    finally:
        stop(future)
    assert caught.value.error_code == AcknowledgeStatus.INVALID_ACK_ID
    assert first.message_id == second.message_id
    assert first.ack_id != second.ack_id


def test_streaming_ordering_keys_arrive_in_order(
    ordered_publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    topic, subscription = make_topic_and_subscription(
        ordered_publisher,
        subscriber,
        enable_message_ordering=True,
        enable_exactly_once_delivery=True,
    )
    keys = ["a", "b", "c"]
    sent = [
        ordered_publisher.publish(topic, f"{key}{i}".encode(), ordering_key=key)
        for i in range(10)
        for key in keys
    ]
    for f in sent:
        f.result(timeout=WAIT)
    received = Received(ack_with_response)
    future = subscribe(subscriber, subscription, received)
    try:
        messages = received.wait_for(30)
        results = [f.result(timeout=WAIT) for f in received.futures]
    finally:
        stop(future)
    for key in keys:
        data = [m.data for m in messages if m.ordering_key == key]
        assert data == [f"{key}{i}".encode() for i in range(10)]
    # The client acks each key in order, so no TRANSIENT_FAILURE_UNORDERED_ACK_ID occurs.
    assert results == [AcknowledgeStatus.SUCCESS] * 30


# ------------------------------------- in-process server, for fault injection
#
# These run the official client (threads) against ``run_server()`` on the test's event
# loop, so the test can inject faults; blocking waits go through asyncio.to_thread.


@pytest.fixture
async def in_process(
    reference: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[ReferenceServer, pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]]:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", reference.address)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    yield reference, publisher, subscriber
    await asyncio.to_thread(publisher.stop)
    await asyncio.to_thread(publisher.transport.close)
    await asyncio.to_thread(subscriber.close)


async def test_streaming_reconnects_after_a_dropped_stream(in_process: Any) -> None:
    server, publisher, subscriber = in_process
    topic, subscription = await asyncio.to_thread(
        make_topic_and_subscription, publisher, subscriber, enable_exactly_once_delivery=True
    )
    received = Received(ack_with_response)
    future = subscribe(subscriber, subscription, received)
    try:
        await asyncio.to_thread(publisher.publish(topic, b"before").result, WAIT)
        await asyncio.to_thread(received.wait_for, 1)
        assert server.drop_streams("UNAVAILABLE") == 1  # recoverable: the client reopens
        await asyncio.to_thread(publisher.publish(topic, b"after").result, WAIT)
        messages = await asyncio.to_thread(received.wait_for, 2)
        results = [await asyncio.to_thread(f.result, WAIT) for f in received.futures]
    finally:
        await asyncio.to_thread(stop, future)
    assert [m.data for m in messages] == [b"before", b"after"]
    assert results == [AcknowledgeStatus.SUCCESS] * 2


async def test_transient_ack_failure_is_retried_then_succeeds(in_process: Any) -> None:
    server, publisher, subscriber = in_process
    topic, subscription = await asyncio.to_thread(
        make_topic_and_subscription, publisher, subscriber, enable_exactly_once_delivery=True
    )
    message_id = await asyncio.to_thread(publisher.publish(topic, b"m").result, WAIT)
    server.inject_ack_failure(
        subscription, message_id, "TRANSIENT_FAILURE_OTHER", operations=["ack"]
    )
    received = Received(ack_with_response)
    future = subscribe(subscriber, subscription, received)
    try:
        await asyncio.to_thread(received.wait_for, 1)
        # The client retries transient failures after ~1 s
        # (docs/protocol.md#exactly-once-result-mapping).
        result = await asyncio.to_thread(received.futures[0].result, WAIT)
    finally:
        await asyncio.to_thread(stop, future)
    assert result == AcknowledgeStatus.SUCCESS
    acks = server.history(subscription, message_id).acks
    assert [a.failure for a in acks] == ["TRANSIENT_FAILURE_OTHER", ""]


async def test_permanent_ack_failure_reaches_the_future(in_process: Any) -> None:
    server, publisher, subscriber = in_process
    topic, subscription = await asyncio.to_thread(
        make_topic_and_subscription, publisher, subscriber, enable_exactly_once_delivery=True
    )
    message_id = await asyncio.to_thread(publisher.publish(topic, b"m").result, WAIT)
    server.inject_ack_failure(
        subscription, message_id, "PERMANENT_FAILURE_OTHER", operations=["ack"]
    )
    received = Received(ack_with_response)
    future = subscribe(subscriber, subscription, received)
    try:
        await asyncio.to_thread(received.wait_for, 1)
        error = await asyncio.to_thread(received.futures[0].exception, WAIT)
    finally:
        await asyncio.to_thread(stop, future)
    assert isinstance(error, AcknowledgeError)
    assert error.error_code == AcknowledgeStatus.OTHER
    assert error.info == "PERMANENT_FAILURE_OTHER"
