"""The receiving half of eoclient.tracing (the functions the subscriber calls): subscribe
spans continue the publisher's trace, process spans link to it, ack / nack / modack spans
link both ways, and each message's result — exactly-once failures included — ends its
subscribe span. (The subscriber calling them end to end, and the real google-cloud-pubsub
on either side: test_subscriber_tracing.py, test_interop_official.py.)"""

from __future__ import annotations

import pytest
from opentelemetry import trace

from eoclient.tracing import (
    PublisherTracing,
    ReceiveTrace,
    end_settle_span,
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
