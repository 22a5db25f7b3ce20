"""Fixtures of the tracing tests: one in-memory span exporter behind the process's global
tracer provider (OpenTelemetry lets a process set it once, and the official client only
ever uses the global one), emptied before each test; a reference server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eoclient.server_stub.server import ReferenceServer, run_server

_EXPORTER = InMemorySpanExporter()


def _install() -> None:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))


_install()


class Spans:
    """The spans finished during one test."""

    def all(self) -> list[ReadableSpan]:
        return list(_EXPORTER.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.all() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        [span] = self.named(name)
        return span


@pytest.fixture
def spans() -> Iterator[Spans]:
    _EXPORTER.clear()
    yield Spans()
    _EXPORTER.clear()


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv
