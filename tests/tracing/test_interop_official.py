"""One trace across two clients, both ways, through the reference server: eoclient
publishes and the real google-cloud-pubsub subscriber (2.44, tracing on) receives, or the
official publisher publishes and eoclient's subscriber receives; either way the receiving
client's spans continue the trace the publishing client started.

The official client runs on its own threads and finds the server through
PUBSUB_EMULATOR_HOST, as a user would point it; both write to the same in-memory exporter.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from google.cloud import pubsub_v1
from opentelemetry import trace

from eoclient.publisher import PublisherClient
from eoclient.server_stub.core.model import SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer
from eoclient.subscriber import SubscriberClient

from .conftest import Spans

pytestmark = pytest.mark.timeout(30)

TOPIC = "projects/interop/topics/orders"
SUBSCRIPTION = "projects/interop/subscriptions/orders-service"
WAIT = 10.0


async def eventually(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {WAIT} s"
        await asyncio.sleep(0.02)


async def test_the_official_subscriber_continues_an_eoclient_trace(
    server: ReferenceServer, spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", server.address)
    server.broker.topics.create(TopicConfig(name=TOPIC))
    server.broker.subscriptions.create(SubscriptionConfig(name=SUBSCRIPTION, topic=TOPIC))

    with trace.get_tracer("the shop").start_as_current_span("checkout") as checkout:
        async with PublisherClient(enable_open_telemetry_tracing=True) as publisher:
            message_id = await publisher.publish(TOPIC, b"order 1")

    received: list[pubsub_v1.subscriber.message.Message] = []
    arrived = threading.Event()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        received.append(message)
        message.ack()
        arrived.set()

    subscriber = pubsub_v1.SubscriberClient(
        subscriber_options=pubsub_v1.types.SubscriberOptions(enable_open_telemetry_tracing=True)
    )
    streaming = subscriber.subscribe(SUBSCRIPTION, callback)
    try:
        assert await asyncio.to_thread(arrived.wait, WAIT), "the official client got nothing"
        # Its subscribe span ends once the ack is done.
        await eventually(lambda: spans.named("orders-service subscribe"), "subscribe span")
    finally:
        streaming.cancel()
        await asyncio.to_thread(streaming.result, WAIT)
        subscriber.close()

    [message] = received
    assert message.message_id == message_id
    create = spans.one("orders create")
    subscribe = spans.one("orders-service subscribe")
    process = spans.one("orders-service process")
    ack = spans.one("orders-service ack")
    trace_id = checkout.get_span_context().trace_id
    # One trace: the caller's span -> eoclient's create -> the official client's subscribe.
    assert create.context.trace_id == trace_id  # type: ignore[union-attr]
    assert subscribe.context.trace_id == trace_id  # type: ignore[union-attr]
    assert subscribe.parent is not None
    assert subscribe.parent.span_id == create.context.span_id  # type: ignore[union-attr]
    assert subscribe.kind is trace.SpanKind.CONSUMER
    assert subscribe.attributes is not None
    assert subscribe.attributes["messaging.message.id"] == message_id
    assert subscribe.attributes["messaging.gcp_pubsub.result"] == "acked"
    # The handler's span links back to the publisher's create span; the ack to the message.
    assert [link.context.span_id for link in process.links] == [
        create.context.span_id  # type: ignore[union-attr]
    ]
    assert [link.context.span_id for link in ack.links] == [
        subscribe.context.span_id  # type: ignore[union-attr]
    ]


async def test_eoclient_continues_a_trace_the_official_publisher_started(
    server: ReferenceServer, spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", server.address)
    server.broker.topics.create(TopicConfig(name=TOPIC))
    server.broker.subscriptions.create(
        SubscriptionConfig(name=SUBSCRIPTION, topic=TOPIC, enable_exactly_once_delivery=True)
    )
    publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_open_telemetry_tracing=True)
    )

    def publish() -> tuple[str, int]:
        # The official client's create span is a child of the caller's current span.
        with trace.get_tracer("the shop").start_as_current_span("checkout") as checkout:
            message_id = publisher.publish(TOPIC, b"order 2").result(WAIT)
        return message_id, checkout.get_span_context().trace_id

    try:
        message_id, trace_id = await asyncio.to_thread(publish)
    finally:
        await asyncio.to_thread(publisher.stop)
        publisher.transport.close()

    billed: list[str] = []

    async def handler(message: Any) -> None:
        with trace.get_tracer("the shop").start_as_current_span("bill"):
            billed.append(message.message_id)
            await message.ack_with_response()

    async with SubscriberClient(enable_open_telemetry_tracing=True) as subscriber:
        running = asyncio.create_task(subscriber.run(SUBSCRIPTION, handler))
        try:
            await eventually(lambda: spans.named("orders-service subscribe"), "subscribe span")
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

    assert billed == [message_id]
    create = spans.one("orders create")  # the official publisher's
    subscribe = spans.one("orders-service subscribe")  # eoclient's, and the rest below
    process = spans.one("orders-service process")
    bill = spans.one("bill")
    # One trace: the caller's span -> the official create -> eoclient's subscribe -> its
    # process span -> the handler's own span.
    for span in (create, subscribe, process, bill):
        assert span.context is not None
        assert span.context.trace_id == trace_id, span.name
    assert subscribe.parent is not None
    assert subscribe.parent.span_id == create.context.span_id  # type: ignore[union-attr]
    assert process.parent is not None
    assert process.parent.span_id == subscribe.context.span_id  # type: ignore[union-attr]
    assert bill.parent is not None
    assert bill.parent.span_id == process.context.span_id  # type: ignore[union-attr]
    assert [link.context.span_id for link in process.links] == [
        create.context.span_id  # type: ignore[union-attr]
    ]
    assert subscribe.attributes is not None
    assert subscribe.attributes["messaging.message.id"] == message_id
    assert subscribe.attributes["messaging.gcp_pubsub.message.exactly_once_delivery"] is True
    assert subscribe.attributes["messaging.gcp_pubsub.result"] == "acked"
