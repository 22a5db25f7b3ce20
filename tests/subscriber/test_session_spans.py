"""A session's spans (``spans.py``) on the paths a server that confirms on the stream does
not take, played by the fake transport: exactly-once results by unary call (Google's
emulator and the real service answer so), with a per-id failure; a stream that breaks
under a write. The spans go to a tracer provider of the test's own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eoclient.errors import Unavailable
from eoclient.subscriber.ack_results import AcknowledgeStatus
from eoclient.subscriber.session import StreamingSession
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownOptions,
    StreamSettings,
)
from eoclient.subscriber.spans import SessionSpans

from .fake_transport import (
    ACKNOWLEDGE,
    WRITE,
    FakeStream,
    FakeTransport,
    Response,
    UnaryCall,
    deliver,
    eod_ack_failure,
    has_acks,
    until,
)

pytestmark = pytest.mark.timeout(20)

SUBSCRIPTION = "projects/p/subscriptions/s"
FAST_RETRY = AckRetrySettings(initial_backoff=0.01, max_backoff=0.02, deadline=2.0)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


def traced_session(transport: FakeTransport, exporter: InMemorySpanExporter) -> StreamingSession:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return StreamingSession(
        transport,
        SUBSCRIPTION,
        flow_control=FlowControl(),
        lease=LeaseSettings(),
        shutdown=ShutdownOptions(),
        ack_retry=FAST_RETRY,
        stream=StreamSettings(reconnect_initial_backoff=0.01, reconnect_max_backoff=0.02),
        client_id="client-under-test",
        spans=SessionSpans(SUBSCRIPTION, provider),
    )


def on_first_stream(*responses: Response) -> Callable[[FakeStream], None]:
    def on_open(call: FakeStream) -> None:
        if call.index == 0:
            call.respond(*responses)

    return on_open


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def attribute(span: ReadableSpan, key: str) -> object:
    return (span.attributes or {})[key]


async def test_exactly_once_results_by_unary_call_are_traced_per_attempt(
    exporter: InMemorySpanExporter,
) -> None:
    transport = FakeTransport()
    # A server that never confirms on the stream: results come from unary calls. The first
    # Acknowledge fails for "a-2" for good and for everything else transiently (retried).
    answers = iter([eod_ack_failure({"a-2": "PERMANENT_FAILURE_INVALID_ACK_ID"})])

    def acknowledge(call: UnaryCall) -> Unavailable | None:
        return next(answers, None)  # type: ignore[return-value]

    transport.on_acknowledge = acknowledge
    transport.on_open = on_first_stream(deliver("a-1", "a-2", exactly_once=True))
    async with traced_session(transport, exporter) as session:
        first, second = [await anext(session) for _ in range(2)]
        results = await asyncio.gather(first.ack_result(), second.ack_result())
    assert [r.status for r in results] == [
        AcknowledgeStatus.SUCCESS,
        AcknowledgeStatus.INVALID_ACK_ID,
    ]
    subscribes = {
        attribute(s, "messaging.gcp_pubsub.message.ack_id"): s
        for s in named(exporter, "s subscribe")
    }
    assert attribute(subscribes["a-1"], "messaging.gcp_pubsub.result") == "acked"
    assert attribute(subscribes["a-2"], "messaging.gcp_pubsub.result") == "invalid_ack_id"
    assert subscribes["a-2"].status.status_code is trace.StatusCode.ERROR
    # One span per attempt of the Acknowledge call: the first reports the id it refused.
    acks = named(exporter, "s ack")
    assert attribute(acks[0], "messaging.batch.message_count") == 2
    assert attribute(acks[0], "messaging.gcp_pubsub.failed_count") == 1
    assert acks[0].status.status_code is trace.StatusCode.ERROR
    assert "INVALID_ACK_ID" in str(acks[0].status.description)
    # The receipt modack went on the stream (the probe) and by unary call: both receipts.
    receipts = named(exporter, "s modack")
    assert len(receipts) == 2
    assert all(attribute(s, "messaging.gcp_pubsub.is_receipt_modack") for s in receipts)
    assert all(attribute(s, "messaging.batch.message_count") == 2 for s in receipts)


async def test_a_write_the_stream_refuses_marks_its_span(exporter: InMemorySpanExporter) -> None:
    transport = FakeTransport()
    transport.on_open = on_first_stream(deliver("a-1", exactly_once=False))
    async with traced_session(transport, exporter) as session:
        [message] = [await anext(session)]
        await until(lambda: bool(named(exporter, "s modack")), what="the receipt written")
        gate = transport.block(WRITE, has_acks)
        message.ack()
        await gate.wait_reached()
        transport.stream.fail(Unavailable("the connection dropped"))
        gate.release()
        await until(lambda: bool(named(exporter, "s ack")), what="the ack span")
    [ack] = named(exporter, "s ack")
    assert ack.status.status_code is trace.StatusCode.ERROR
    # Without exactly-once an ack is best effort: written or not, the message is settled.
    [subscribe] = named(exporter, "s subscribe")
    assert attribute(subscribe, "messaging.gcp_pubsub.result") == "acked"


async def test_a_delivery_seen_again_before_its_result_ends_the_earlier_spans(
    exporter: InMemorySpanExporter,
) -> None:
    transport = FakeTransport()
    transport.on_open = on_first_stream(deliver("a-1", exactly_once=True))
    gate = transport.block(ACKNOWLEDGE)
    async with traced_session(transport, exporter) as session:
        [message] = [await anext(session)]
        message.ack()  # its lease ends here; the answer waits at the gate
        await gate.wait_reached()
        transport.stream.respond(deliver("a-1"))  # the server sends the delivery again
        [again] = [await anext(session)]
        assert again.ack_id == "a-1"
        [dropped] = named(exporter, "s subscribe")
        assert attribute(dropped, "messaging.gcp_pubsub.result") == "dropped"
        gate.release()
        again.ack()
    results = [attribute(s, "messaging.gcp_pubsub.result") for s in named(exporter, "s subscribe")]
    assert results == ["dropped", "acked"]
