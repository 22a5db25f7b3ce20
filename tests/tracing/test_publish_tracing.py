"""PublisherClient(enable_open_telemetry_tracing=True): the spans google-cloud-pubsub 2.44
writes, with its names, kinds and attributes, and the trace context in the message.

Spans are read from an in-memory exporter; messages from the reference server.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from eoclient.errors import FlowControlLimitError, InvalidArgument
from eoclient.publisher import (
    BatchSettings,
    LimitExceededBehavior,
    PublisherClient,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.server_stub.core.model import SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer
from eoclient.subscriber import SubscriberClient

from .conftest import Spans

pytestmark = pytest.mark.timeout(20)

TOPIC = "projects/tracing-project/topics/orders"
SUBSCRIPTION = "projects/tracing-project/subscriptions/orders"
FAST_RETRY = PublishRetrySettings(initial_backoff=0.01, max_backoff=0.02, deadline=0.2)


def create_topic(server: ReferenceServer) -> None:
    server.broker.topics.create(TopicConfig(name=TOPIC))
    server.broker.subscriptions.create(SubscriptionConfig(name=SUBSCRIPTION, topic=TOPIC))


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


async def test_a_traced_publish_writes_the_official_spans(
    server: ReferenceServer, spans: Spans
) -> None:
    create_topic(server)
    tracer = trace.get_tracer("the application")
    async with PublisherClient(
        server.address,
        batch=BatchSettings(max_latency=0.05),
        enable_open_telemetry_tracing=True,
    ) as publisher:
        with tracer.start_as_current_span("handle request") as request:
            futures = [
                publisher.publish_nowait(TOPIC, b"order %d" % i, colour="blue") for i in range(3)
            ]
        ids = await asyncio.gather(*futures)

    creates = spans.named("orders create")
    assert len(creates) == 3
    rpc = spans.one("orders publish")
    by_id = {create.attributes["messaging.message.id"]: create for create in creates}  # type: ignore[index]
    assert set(by_id) == set(ids)
    for create in creates:
        assert create.kind is trace.SpanKind.PRODUCER
        assert parent_id(create) == request.get_span_context().span_id  # the caller's span
        assert dict(create.attributes or {}) == {
            "messaging.system": "gcp_pubsub",
            "messaging.destination.name": "orders",
            "code.function": "publish",
            "messaging.gcp_pubsub.message.ordering_key": "",
            "messaging.operation": "create",
            "gcp.project_id": "tracing-project",
            "messaging.message.body.size": 7,
            "messaging.message.id": create.attributes["messaging.message.id"],  # type: ignore[index]
        }
        assert [event.name for event in create.events] == ["publish start", "publish end"]
        assert [link.context.span_id for link in create.links] == [span_id(rpc)]
    for name in ("publisher flow control", "publisher batching"):
        children = spans.named(name)
        assert sorted(parent_id(s) or 0 for s in children) == sorted(span_id(c) for c in creates)
        assert all(s.kind is trace.SpanKind.INTERNAL for s in children)
    assert rpc.kind is trace.SpanKind.CLIENT
    assert rpc.parent is None  # a root: the batch belongs to three traces
    assert dict(rpc.attributes or {}) == {
        "messaging.system": "gcp_pubsub",
        "messaging.destination.name": "orders",
        "gcp.project_id": "tracing-project",
        "messaging.batch.message_count": 3,
        "messaging.operation": "publish",
        "code.function": "_commit",
    }
    assert sorted(link.context.span_id for link in rpc.links) == sorted(map(span_id, creates))

    # The message carries its create span's context, as the official clients read it.
    async with SubscriberClient(server.address) as subscriber:
        received = await subscriber.pull(SUBSCRIPTION, 10)
        for message in received:
            assert message.attributes["colour"] == "blue"
            assert message.attributes["googclient_traceparent"] == traceparent(
                by_id[message.message_id]
            )
            await message.ack_with_response()
    assert len(received) == 3


async def test_a_failed_batch_marks_its_spans_with_the_error(
    server: ReferenceServer, spans: Spans
) -> None:
    create_topic(server)
    server.faults.fail("Publish", "INVALID_ARGUMENT", "the server says no")
    async with PublisherClient(server.address, enable_open_telemetry_tracing=True) as publisher:
        with pytest.raises(InvalidArgument):
            await publisher.publish(TOPIC, b"refused")
    create = spans.one("orders create")
    rpc = spans.one("orders publish")
    for span in (create, rpc):
        assert span.status.status_code is trace.StatusCode.ERROR
        assert "the server says no" in (span.status.description or "")
        assert [event.name for event in span.events][-1] == "exception"


async def test_flow_control_is_traced_while_it_holds_or_refuses(
    server: ReferenceServer, spans: Spans
) -> None:
    create_topic(server)
    refuse = PublishFlowControl(max_messages=1, behavior=LimitExceededBehavior.ERROR)
    block = PublishFlowControl(max_messages=1, behavior=LimitExceededBehavior.BLOCK)
    slow = BatchSettings(max_latency=0.05)
    async with PublisherClient(
        server.address, flow_control=refuse, batch=slow, enable_open_telemetry_tracing=True
    ) as publisher:
        first = publisher.publish_nowait(TOPIC, b"first")
        with pytest.raises(FlowControlLimitError):
            publisher.publish_nowait(TOPIC, b"no room")
        await first
    [refused] = [s for s in spans.named("orders create") if s.status.status_code.name == "ERROR"]
    assert refused.attributes is not None
    assert refused.attributes["messaging.message.body.size"] == len(b"no room")
    spans_before = len(spans.all())
    async with PublisherClient(
        server.address, flow_control=block, batch=slow, enable_open_telemetry_tracing=True
    ) as publisher:
        held = [publisher.publish_nowait(TOPIC, b"m%d" % i) for i in range(3)]
        await asyncio.gather(*held)
    new = spans.all()[spans_before:]
    holds = [s for s in new if s.name == "publisher flow control"]
    assert len(holds) == 3
    assert all(s.status.status_code is trace.StatusCode.UNSET for s in holds)
    assert len([s for s in new if s.name == "orders publish"]) == 3  # one message a batch


async def test_without_tracing_nothing_is_recorded_or_sent(
    server: ReferenceServer, spans: Spans
) -> None:
    create_topic(server)
    async with PublisherClient(server.address) as publisher:
        await publisher.publish(TOPIC, b"untraced")
    assert spans.all() == []
    async with SubscriberClient(server.address) as subscriber:
        [message] = await subscriber.pull(SUBSCRIPTION, 1)
    assert message.attributes == {}


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_sdk_without_tracing_never_imports_opentelemetry() -> None:
    loaded = run_python(
        "import sys, asyncio\n"
        "import eoclient, eoclient.admin, eoclient.publisher, eoclient.subscriber\n"
        "async def main():\n"
        "    async with eoclient.PublisherClient('127.0.0.1:1'):\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    assert loaded == "[]"


def test_tracing_without_opentelemetry_says_what_to_install() -> None:
    said = run_python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if it were not installed\n"
        "import eoclient\n"
        "try:\n"
        "    eoclient.PublisherClient('127.0.0.1:1', enable_open_telemetry_tracing=True)\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    assert "pip install 'eoclient[otel]'" in said


async def test_a_client_can_have_a_tracer_provider_of_its_own(
    server: ReferenceServer, spans: Spans
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    create_topic(server)
    own = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(own))
    async with PublisherClient(
        server.address, enable_open_telemetry_tracing=True, tracer_provider=provider
    ) as publisher:
        await publisher.publish(TOPIC, b"to my provider")
    assert sorted(s.name for s in own.get_finished_spans()) == [
        "orders create",
        "orders publish",
        "publisher batching",
        "publisher flow control",
    ]
    assert spans.all() == []  # nothing reached the global provider
    with pytest.raises(ValueError, match="needs enable_open_telemetry_tracing=True"):
        PublisherClient(server.address, tracer_provider=provider)
