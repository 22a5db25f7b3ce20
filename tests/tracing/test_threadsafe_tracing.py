"""A message published from another thread with ``publish_threadsafe`` is traced under
that thread's current span, as if it had been published there."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace

from eoclient.publisher import PublisherClient
from eoclient.server_stub.core.model import TopicConfig
from eoclient.server_stub.server import ReferenceServer

from .conftest import Spans

pytestmark = pytest.mark.timeout(20)

TOPIC = "projects/p/topics/threads"


async def test_the_calling_threads_span_is_the_messages_parent(
    server: ReferenceServer, spans: Spans
) -> None:
    server.broker.topics.create(TopicConfig(name=TOPIC))
    async with PublisherClient(server.address, enable_open_telemetry_tracing=True) as client:

        def handle_request() -> tuple[int, str]:
            with trace.get_tracer("web app").start_as_current_span("POST /orders") as request:
                message_id = client.publish_threadsafe(TOPIC, b"order").result(10)
            return request.get_span_context().span_id, message_id

        parent, message_id = await asyncio.to_thread(handle_request)
    create = spans.one("threads create")
    assert create.parent is not None
    assert create.parent.span_id == parent
    assert create.attributes is not None
    assert create.attributes["messaging.message.id"] == message_id
