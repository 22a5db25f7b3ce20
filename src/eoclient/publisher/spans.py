"""OpenTelemetry spans of one publisher client, as google-cloud-pubsub traces publishing.

Imported only by a ``PublisherClient(enable_open_telemetry_tracing=True)`` (it imports
:mod:`eoclient.tracing`, and with it ``opentelemetry``). The spans, their names and
attributes are :mod:`eoclient.tracing`'s; this module is the glue that tells it what the
client does, keeping one :class:`~eoclient.tracing.PublishTrace` per accepted message,
by the future of its id, until the message has its id or its error. Each part of the
client tells it what only that part sees:

* the pipeline (``pipeline.py``): a message published (its create span opens before the
  message is checked, since the trace context it carries counts in its size), refused,
  accepted (flow control looks at it), batched, and resolved — published with its id, or
  failed, withdrawn or closed before it was sent;
* the sender (``sender.py``): each batch's ``Publish``, retries included (one span, linked
  to the messages it carries).

With tracing off none of this exists: the pipeline and the sender hold ``None`` and test
it once where they would call in (a branch per message step, per batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping, Sequence

from opentelemetry import trace

from eoclient.tracing import PublisherTracing, PublishTrace

__all__ = ["PublishSpans"]


class PublishSpans:
    """The spans of every message a client accepted and has not resolved yet.

    Args:
        provider: the tracer provider of the client's spans (``None``: the global one).
    """

    __slots__ = ("_traces", "_tracing")

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._tracing = PublisherTracing(provider)
        self._traces: dict[asyncio.Future[str], PublishTrace] = {}

    def __repr__(self) -> str:
        return f"<PublishSpans open={len(self._traces)}>"

    def start(
        self, topic: str, ordering_key: str, data: bytes, attributes: MutableMapping[str, str]
    ) -> PublishTrace:
        """A message is published: its create span opens and its context goes into
        ``attributes`` (before the message's size is computed)."""
        return self._tracing.start(topic, ordering_key, data, attributes)

    def refused(self, message: PublishTrace, error: BaseException) -> None:
        """The message was refused before it had a future (invalid, or its key paused)."""
        message.failed(error)

    def accepted(self, future: asyncio.Future[str], message: PublishTrace) -> None:
        """The message has a future and goes to flow control."""
        self._traces[future] = message
        message.entering_flow_control()

    def batched(self, future: asyncio.Future[str]) -> None:
        message = self._traces.get(future)
        if message is not None:
            message.batched()

    def published(self, future: asyncio.Future[str], message_id: str) -> None:
        message = self._traces.pop(future, None)
        if message is not None:
            message.published(message_id)

    def failed(self, future: asyncio.Future[str], error: BaseException) -> None:
        """The message failed, was withdrawn while held, or the client closed first."""
        message = self._traces.pop(future, None)
        if message is not None:
            message.failed(error)

    def publish_started(self, topic: str, futures: Sequence[asyncio.Future[str]]) -> trace.Span:
        """A batch's ``Publish`` starts: its messages' batching spans end."""
        traces = [t for f in futures if (t := self._traces.get(f)) is not None]
        return self._tracing.start_publish_rpc(topic, traces)

    def publish_ended(self, span: trace.Span, error: BaseException | None = None) -> None:
        """The batch's ``Publish`` is answered, failed for good, or cancelled."""
        self._tracing.end_publish_rpc(span, error)
