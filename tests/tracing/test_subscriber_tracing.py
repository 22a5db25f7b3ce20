"""The subscriber traced end to end: ``SubscriberClient(enable_open_telemetry_tracing=True)``
against the reference server, its spans read back from the in-memory exporter.

A received message's ``<subscription id> subscribe`` span continues the trace its publisher
started and ends with its result (``acked``, ``nacked``, an exactly-once failure,
``expired``, ``dropped``); receipt modacks, lease extensions, acks and nacks each have a
span per request, linked both ways to the messages they carry; a ``run`` handler runs under
its message's ``process`` span; batches are traced like single messages. Tracing off
records nothing and loads no OpenTelemetry.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eoclient import AcknowledgeStatus, LeaseSettings, Message, PublisherClient, SubscriberClient
from eoclient._clock import FakeClock
from eoclient.server_stub.core.model import SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

from .conftest import Spans

pytestmark = pytest.mark.timeout(30)

TOPIC = "projects/p/topics/orders"
SUBSCRIPTION = "projects/p/subscriptions/orders-service"
SUBSCRIBE = "orders-service subscribe"


def setup(server: ReferenceServer, *, exactly_once: bool = False, ordered: bool = False) -> None:
    server.broker.topics.create(TopicConfig(name=TOPIC))
    server.broker.subscriptions.create(
        SubscriptionConfig(
            name=SUBSCRIPTION,
            topic=TOPIC,
            enable_exactly_once_delivery=exactly_once,
            enable_message_ordering=ordered,
        )
    )


async def publish_traced(address: str, *payloads: bytes, ordering_key: str = "") -> list[str]:
    async with PublisherClient(
        address, enable_open_telemetry_tracing=True, enable_message_ordering=bool(ordering_key)
    ) as publisher:
        return [
            await publisher.publish(TOPIC, data, ordering_key=ordering_key) for data in payloads
        ]


async def take(stream: AsyncIterator[Message], count: int) -> list[Message]:
    taken: list[Message] = []
    async for message in stream:
        taken.append(message)
        if len(taken) == count:
            break
    return taken


async def eventually(condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.01)


def attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    identifier: int = span.context.span_id
    return identifier


def linked(span: ReadableSpan) -> set[int]:
    return {link.context.span_id for link in span.links}


def by_message(spans: Spans) -> dict[str, ReadableSpan]:
    return {str(attributes(s)["messaging.message.id"]): s for s in spans.named(SUBSCRIBE)}


async def test_a_received_message_continues_the_publishers_trace(
    server: ReferenceServer, spans: Spans
) -> None:
    setup(server)
    with trace.get_tracer("shop").start_as_current_span("checkout") as checkout:
        [message_id] = await publish_traced(server.address, b"order 1")
    async with (
        SubscriberClient(server.address, enable_open_telemetry_tracing=True) as client,
        client.subscribe(SUBSCRIPTION) as stream,
    ):
        [message] = await take(stream, 1)
        message.ack()

    create = spans.one("orders create")
    subscribe = spans.one(SUBSCRIBE)
    assert subscribe.kind is trace.SpanKind.CONSUMER
    assert subscribe.context is not None
    assert subscribe.context.trace_id == checkout.get_span_context().trace_id
    assert subscribe.parent is not None
    assert subscribe.parent.span_id == span_id(create)
    # The attributes google-cloud-pubsub 2.44 gives the span, with the same values.
    assert attributes(subscribe) == {
        "messaging.system": "gcp_pubsub",
        "messaging.destination.name": "orders-service",
        "gcp.project_id": "p",
        "messaging.message.id": message_id,
        "messaging.message.body.size": len(b"order 1"),
        "messaging.gcp_pubsub.message.ack_id": message.ack_id,
        "messaging.gcp_pubsub.message.ordering_key": "",
        "messaging.gcp_pubsub.message.exactly_once_delivery": False,
        "code.function": "_on_response",
        "messaging.gcp_pubsub.message.delivery_attempt": 0,
        "messaging.gcp_pubsub.result": "acked",
    }
    assert [event.name for event in subscribe.events] == ["ack start", "ack end"]
    # The receipt modack and the ack: one span per request, linked both ways.
    receipt = spans.one("orders-service modack")
    ack = spans.one("orders-service ack")
    assert receipt.kind is ack.kind is trace.SpanKind.CLIENT
    assert attributes(receipt)["messaging.gcp_pubsub.is_receipt_modack"] is True
    # The first lease is the 10 s floor (99th percentile of no ack times yet), as the
    # official client's first lease.
    assert attributes(receipt)["messaging.gcp_pubsub.message.ack_deadline"] == 10
    assert attributes(ack)["messaging.batch.message_count"] == 1
    assert linked(receipt) == linked(ack) == {span_id(subscribe)}
    assert {
        (link.context.span_id, dict(link.attributes or {})["messaging.operation.name"])
        for link in subscribe.links
    } == {(span_id(receipt), "modack"), (span_id(ack), "ack")}
    assert spans.named("orders-service process") == []  # no handler: nothing ran "under" it


async def test_exactly_once_results_end_each_messages_span(
    server: ReferenceServer, spans: Spans
) -> None:
    setup(server, exactly_once=True)
    ids = await publish_traced(server.address, b"a", b"b", b"c")
    refused = ids[1]
    server.inject_ack_failure(
        SUBSCRIPTION, refused, "PERMANENT_FAILURE_INVALID_ACK_ID", times=-1, operations=("ack",)
    )
    async with (
        SubscriberClient(server.address, enable_open_telemetry_tracing=True) as client,
        client.subscribe(SUBSCRIPTION) as stream,
    ):
        messages = await take(stream, 3)
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
        # The result is on each message's span as soon as it is known, session open.
        results = {
            message_id: (attributes(s)["messaging.gcp_pubsub.result"], s.status.status_code)
            for message_id, s in by_message(spans).items()
        }
    assert statuses.count(AcknowledgeStatus.INVALID_ACK_ID) == 1
    assert results == {
        ids[0]: ("acked", trace.StatusCode.UNSET),
        refused: ("invalid_ack_id", trace.StatusCode.ERROR),
        ids[2]: ("acked", trace.StatusCode.UNSET),
    }
    for subscribe in spans.named(SUBSCRIBE):
        assert attributes(subscribe)["messaging.gcp_pubsub.message.exactly_once_delivery"] is True
    # Every message is carried by some ack span (the stream's, or a unary call's).
    carried = set().union(*(linked(s) for s in spans.named("orders-service ack")))
    assert carried == {span_id(s) for s in spans.named(SUBSCRIBE)}


async def test_the_handler_runs_under_its_process_span(
    server: ReferenceServer, spans: Spans
) -> None:
    setup(server)
    [first, failing] = await publish_traced(server.address, b"fine", b"fails once")
    work = trace.get_tracer("shop")
    failed_once: set[str] = set()
    settled: list[str] = []

    async def handler(message: Message) -> None:
        with work.start_as_current_span("bill the order"):
            if message.message_id == failing and failing not in failed_once:
                failed_once.add(failing)
                raise RuntimeError("the billing service is down")
            message.ack()
            settled.append(message.message_id)

    async with SubscriberClient(server.address, enable_open_telemetry_tracing=True) as client:
        running = asyncio.create_task(client.run(SUBSCRIPTION, handler))
        try:
            await eventually(lambda: sorted(settled) == sorted([first, failing]), "both acked")
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    creates = {attributes(s)["messaging.message.id"]: s for s in spans.named("orders create")}
    processes = spans.named("orders-service process")
    assert len(processes) == 3  # the failing message twice: nacked, then redelivered
    subscribes = {span_id(s): s for s in spans.named(SUBSCRIBE)}
    for process in processes:
        assert process.parent is not None
        subscribe = subscribes[process.parent.span_id]
        message_id = attributes(subscribe)["messaging.message.id"]
        # Linked to the publisher's create span, as google-cloud-pubsub links it.
        assert linked(process) == {span_id(creates[message_id])}
        # The handler's own span is the process span's child.
        [billed] = [
            s
            for s in spans.named("bill the order")
            if s.parent is not None and s.parent.span_id == span_id(process)
        ]
        assert billed.context is not None
        if process.status.status_code is trace.StatusCode.ERROR:
            assert [e.name for e in process.events] == ["exception", "nack called"]
            assert "the billing service is down" in str(process.status.description)
            assert attributes(subscribe)["messaging.gcp_pubsub.result"] == "nacked"
        else:
            assert [e.name for e in process.events] == ["ack called"]
            assert attributes(subscribe)["messaging.gcp_pubsub.result"] == "acked"
    assert len(spans.named("orders-service nack")) == 1


async def test_batches_are_traced_like_single_messages(
    server: ReferenceServer, spans: Spans
) -> None:
    setup(server, exactly_once=True)
    ids = await publish_traced(server.address, *(b"event %d" % n for n in range(6)))
    async with (
        SubscriberClient(server.address, enable_open_telemetry_tracing=True) as client,
        client.subscribe(SUBSCRIPTION) as stream,
    ):
        received = 0
        async for batch in stream.batches(max_messages=10):
            assert set(await batch.ack_with_response()) == {AcknowledgeStatus.SUCCESS}
            received += len(batch)
            if received == len(ids):
                break
    subscribes = by_message(spans)
    assert set(subscribes) == set(ids)
    assert {attributes(s)["messaging.gcp_pubsub.result"] for s in subscribes.values()} == {"acked"}
    acks = spans.named("orders-service ack")
    # A batch is one request: its span carries (and links) every message of the batch.
    counts = [attributes(s)["messaging.batch.message_count"] for s in acks]
    assert sum(count for count in counts if isinstance(count, int)) >= len(ids)
    for ack in acks:
        assert len(ack.links) == attributes(ack)["messaging.batch.message_count"]
    assert set().union(*(linked(s) for s in acks)) == {span_id(s) for s in subscribes.values()}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def timed_server(clock: FakeClock) -> AsyncIterator[ReferenceServer]:
    async with run_server(clock=clock) as server:
        yield server


async def test_lease_extensions_and_expiry_are_traced(
    timed_server: ReferenceServer, clock: FakeClock, spans: Spans
) -> None:
    server = timed_server
    setup(server, exactly_once=True)
    [message_id] = await publish_traced(server.address, b"slow work")

    async with (
        SubscriberClient(server.address, enable_open_telemetry_tracing=True, clock=clock) as client,
        client.subscribe(SUBSCRIPTION, lease=LeaseSettings(max_lease=100)) as stream,
    ):

        def advance(seconds: float) -> None:
            clock.advance(seconds)
            server.tick()
            stream.sender.wake.set()

        [message] = await take(stream, 1)
        await eventually(stream.ledger.idle, "receipt answered")
        advance(55)
        await eventually(
            lambda: any(
                not attributes(s)["messaging.gcp_pubsub.is_receipt_modack"]
                for s in spans.named("orders-service modack")
            ),
            "a lease extension span",
        )
        advance(50)  # past max_lease: released for redelivery
        await eventually(lambda: spans.named(SUBSCRIBE), "the subscribe span ends")
        # Settled late (the server's last extension still runs): its span has ended.
        await message.ack_with_response()

    [subscribe] = spans.named(SUBSCRIBE)
    assert attributes(subscribe)["messaging.message.id"] == message_id
    assert attributes(subscribe)["messaging.gcp_pubsub.result"] == "expired"
    modacks = spans.named("orders-service modack")
    receipts = [s for s in modacks if attributes(s)["messaging.gcp_pubsub.is_receipt_modack"]]
    extensions = [s for s in modacks if s not in receipts]
    # The receipt went on the stream and by unary call (the ledger learns how the server
    # answers): both copies are the receipt.
    assert receipts
    assert extensions
    assert all(attributes(s)["messaging.gcp_pubsub.message.ack_deadline"] == 60 for s in modacks)
    assert all(linked(s) == {span_id(subscribe)} for s in modacks)


async def test_the_parked_messages_of_a_nacked_key_are_dropped(
    server: ReferenceServer, spans: Spans
) -> None:
    setup(server, ordered=True)
    ids = await publish_traced(server.address, b"1", b"2", b"3", ordering_key="cart-7")
    async with (
        SubscriberClient(server.address, enable_open_telemetry_tracing=True) as client,
        client.subscribe(SUBSCRIPTION) as stream,
    ):
        [first] = await take(stream, 1)
        assert first.message_id == ids[0]
        await eventually(lambda: stream.statistics().held_messages == 2, "the key's rest parked")
        first.nack()  # the server redelivers the key from this message on
        await eventually(lambda: len(spans.named(SUBSCRIBE)) >= 3, "three spans end")
        results = {
            message_id: attributes(s)["messaging.gcp_pubsub.result"]
            for message_id, s in by_message(spans).items()
        }
        assert results == {ids[0]: "nacked", ids[1]: "dropped", ids[2]: "dropped"}
        # The redelivery is a new delivery, with a span of its own.
        [again] = await take(stream, 1)
        assert again.message_id == ids[0]
        again.ack()
    assert attributes(spans.named(SUBSCRIBE)[-1])["messaging.gcp_pubsub.result"] in (
        "acked",
        "nacked",  # a parked copy nacked at close
    )


async def test_without_tracing_nothing_is_recorded(server: ReferenceServer, spans: Spans) -> None:
    setup(server)
    await publish_traced(server.address, b"traced by its publisher only")
    async with SubscriberClient(server.address) as client, client.subscribe(SUBSCRIPTION) as stream:
        [message] = await take(stream, 1)
        assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
        assert stream.spans is None
    assert sorted({s.name for s in spans.all()}) == [
        "orders create",
        "orders publish",
        "publisher batching",
        "publisher flow control",
    ]


def test_the_subscriber_without_tracing_never_imports_opentelemetry() -> None:
    code = (
        "import sys, asyncio\n"
        "import eoclient\n"
        "async def main():\n"
        "    async with eoclient.SubscriberClient('127.0.0.1:1') as client:\n"
        "        client.subscribe('projects/p/subscriptions/s')\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
        "sys.modules['opentelemetry'] = None  # as if it were not installed\n"
        "try:\n"
        "    eoclient.SubscriberClient('127.0.0.1:1', enable_open_telemetry_tracing=True)\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded, said = done.stdout.strip().splitlines()
    assert loaded == "[]"
    assert "pip install 'eoclient[otel]'" in said


async def test_a_subscriber_can_have_a_tracer_provider_of_its_own(
    server: ReferenceServer, spans: Spans
) -> None:
    setup(server)
    await publish_traced(server.address, b"to my provider")
    own = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(own))
    async with (
        SubscriberClient(
            server.address, enable_open_telemetry_tracing=True, tracer_provider=provider
        ) as client,
        client.subscribe(SUBSCRIPTION) as stream,
    ):
        [message] = await take(stream, 1)
        message.ack()
    assert sorted(s.name for s in own.get_finished_spans()) == [
        "orders-service ack",
        "orders-service modack",
        SUBSCRIBE,
    ]
    assert spans.named(SUBSCRIBE) == []  # nothing reached the global provider
    with pytest.raises(ValueError, match="needs enable_open_telemetry_tracing=True"):
        SubscriberClient(server.address, tracer_provider=provider)
