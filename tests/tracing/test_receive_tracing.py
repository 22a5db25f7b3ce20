"""The receiving half of eoclient.tracing (the functions the subscriber calls): subscribe
spans continue the publisher's trace, process spans link to it, ack / nack / modack spans
link both ways, and each message's result — exactly-once failures included — ends its
subscribe span. Also: a message the real google-cloud-pubsub publisher traced is continued
by these functions."""

from __future__ import annotations

import asyncio

import pytest
from google.cloud import pubsub_v1
from opentelemetry import trace

from eoclient.server_stub.core.model import SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer
from eoclient.subscriber import SubscriberClient
from eoclient.tracing import (
    PublisherTracing,
    ReceiveTrace,
    end_settle_span,
    extract_context,
    start_receive,
    start_settle_span,
)

from .conftest import Spans

pytestmark = pytest.mark.timeout(30)

TOPIC = "projects/p/topics/orders"
SUBSCRIPTION = "projects/p/subscriptions/orders-service"


def receive(attributes: dict[str, str], ack_id: str = "ack-1") -> ReceiveTrace:
    return start_receive(
        SUBSCRIPTION,
        attributes=attributes,
        message_id="m-1",
        body_size=5,
        ack_id=ack_id,
        ordering_key="",
        exactly_once=True,
        delivery_attempt=0,
    )


def published_attributes() -> tuple[dict[str, str], trace.SpanContext]:
    """Attributes a traced eoclient publish writes, and its create span's context."""
    attributes = {"colour": "blue"}
    message = PublisherTracing().start(TOPIC, "", b"hello", attributes)
    context = message.create.get_span_context()
    message.published("m-1")
    return attributes, context


def test_a_received_message_continues_the_publishers_trace(spans: Spans) -> None:
    attributes, create = published_attributes()
    message = receive(attributes)
    process = message.start_process()
    message.handler_settled("ack")
    settle = start_settle_span("ack", [message])
    end_settle_span(settle)
    message.settled("ack")

    subscribe = spans.one("orders-service subscribe")
    assert subscribe.kind is trace.SpanKind.CONSUMER
    assert subscribe.parent is not None
    assert (subscribe.context.trace_id, subscribe.parent.span_id) == (  # type: ignore[union-attr]
        create.trace_id,
        create.span_id,
    )
    assert subscribe.attributes is not None
    assert subscribe.attributes["messaging.gcp_pubsub.message.exactly_once_delivery"] is True
    assert subscribe.attributes["messaging.gcp_pubsub.result"] == "acked"
    assert [e.name for e in subscribe.events] == ["ack start", "ack end"]
    processed = spans.one("orders-service process")
    assert processed.parent is not None
    assert processed.parent.span_id == subscribe.context.span_id  # type: ignore[union-attr]
    assert [link.context.span_id for link in processed.links] == [create.span_id]
    assert [e.name for e in processed.events] == ["ack called"]
    assert process.get_span_context().span_id == processed.context.span_id  # type: ignore[union-attr]
    ack = spans.one("orders-service ack")
    assert ack.kind is trace.SpanKind.CLIENT
    assert ack.attributes is not None
    assert ack.attributes["messaging.batch.message_count"] == 1
    assert [link.context.span_id for link in ack.links] == [
        subscribe.context.span_id  # type: ignore[union-attr]
    ]
    assert [dict(link.attributes or {}) for link in subscribe.links] == [
        {"messaging.operation.name": "ack"}
    ]


def test_exactly_once_failures_are_the_messages_result(spans: Spans) -> None:
    first, second = receive({}, "ack-1"), receive({}, "ack-2")
    settle = start_settle_span("ack", [first, second])
    end_settle_span(settle, failures={"ack-2": "INVALID_ACK_ID"})
    first.settled("ack")
    second.settled("ack", "INVALID_ACK_ID")
    ack = spans.one("orders-service ack")
    assert ack.status.status_code is trace.StatusCode.ERROR
    assert ack.attributes is not None
    assert ack.attributes["messaging.gcp_pubsub.failed_count"] == 1
    results = {
        (s.attributes or {})["messaging.gcp_pubsub.message.ack_id"]: (
            (s.attributes or {})["messaging.gcp_pubsub.result"],
            s.status.status_code,
        )
        for s in spans.named("orders-service subscribe")
    }
    assert results == {
        "ack-1": ("acked", trace.StatusCode.UNSET),
        "ack-2": ("invalid_ack_id", trace.StatusCode.ERROR),
    }
    # A message without a trace context starts a trace of its own.
    assert all(s.parent is None for s in spans.named("orders-service subscribe"))


def test_nack_and_modack_spans(spans: Spans) -> None:
    message = receive({})
    modack = start_settle_span("modack", [message], ack_deadline=60, receipt=True)
    end_settle_span(modack)
    nack = start_settle_span("nack", [message])
    end_settle_span(nack)
    message.settled("nack")
    modacked = spans.one("orders-service modack")
    assert modacked.attributes is not None
    assert modacked.attributes["messaging.gcp_pubsub.is_receipt_modack"] is True
    assert modacked.attributes["messaging.gcp_pubsub.message.ack_deadline"] == 60
    assert spans.one("orders-service nack").attributes["messaging.operation"] == "nack"  # type: ignore[index]
    subscribe = spans.one("orders-service subscribe")
    assert subscribe.attributes["messaging.gcp_pubsub.result"] == "nacked"  # type: ignore[index]
    assert [dict(link.attributes or {}) for link in subscribe.links] == [
        {"messaging.operation.name": "modack"},
        {"messaging.operation.name": "nack"},
    ]
    with pytest.raises(ValueError, match="at least one message"):
        start_settle_span("ack", [])


async def test_a_message_the_official_publisher_traced_is_continued(
    server: ReferenceServer, spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", server.address)
    server.broker.topics.create(TopicConfig(name=TOPIC))
    server.broker.subscriptions.create(SubscriptionConfig(name=SUBSCRIPTION, topic=TOPIC))
    publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_open_telemetry_tracing=True)
    )
    try:
        message_id = await asyncio.to_thread(
            lambda: publisher.publish(TOPIC, b"from the official client").result(10)
        )
    finally:
        await asyncio.to_thread(publisher.stop)
        publisher.transport.close()
    official_create = spans.one("orders create")
    async with SubscriberClient(server.address) as subscriber:
        [pulled] = await subscriber.pull(SUBSCRIPTION, 1)
        await pulled.ack_with_response()
    assert pulled.message_id == message_id
    assert trace.get_current_span(extract_context(pulled.attributes)).get_span_context().is_valid
    message = start_receive(
        SUBSCRIPTION,
        attributes=pulled.attributes,
        message_id=pulled.message_id,
        body_size=len(pulled.data),
        ack_id="a",
        ordering_key="",
        exactly_once=False,
        delivery_attempt=0,
    )
    message.settled("ack")
    subscribe = spans.one("orders-service subscribe")
    assert subscribe.parent is not None
    assert subscribe.parent.span_id == official_create.context.span_id  # type: ignore[union-attr]
    assert subscribe.context.trace_id == official_create.context.trace_id  # type: ignore[union-attr]
