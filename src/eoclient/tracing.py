"""OpenTelemetry tracing of publish and receive, as google-cloud-pubsub traces them.

Imported only by a client created with ``enable_open_telemetry_tracing=True`` (it imports
``opentelemetry``, the optional extra ``eoclient[otel]``): the SDK without tracing never
loads OpenTelemetry.

Names, kinds and attributes are those of google-cloud-pubsub 2.44
(``pubsub_v1/open_telemetry/``), so a trace reads the same whichever client wrote each
half, and the trace context crosses the service inside the message, as the W3C trace
context in the attribute ``googclient_traceparent`` (``googclient_tracestate`` when there
is one), which every official client reads and writes (docs/protocol.md#trace-context-in-messages).

Publishing
----------

=========================  ========  ==================================================
span                       kind      from - to
=========================  ========  ==================================================
``<topic id> create``      PRODUCER  ``publish`` accepts the message - its id or error
                                     arrives (a child of the caller's current span; its
                                     context is what the message carries)
``publisher flow control`` INTERNAL  child of create: while flow control holds it
``publisher batching``     INTERNAL  child of create: while it waits in its batch
``<topic id> publish``     CLIENT    the batch's Publish, retries included; a root span
                                     linked to each sampled create span it carries, and
                                     each create span links back to it
=========================  ========  ==================================================

Two differences, on purpose: the batching span lasts until the batch is sent (the
official client ends it as soon as the message is added, which says nothing), and the
message body size is ``len(data)`` (the official publisher reports ``sys.getsizeof``,
33 bytes more; its subscriber reports ``len``).

Receiving
---------

The subscriber's half, as functions over plain values (``eoclient.subscriber.spans`` calls
them for a session; nothing here knows the subscriber's classes): :func:`start_receive`
opens ``<subscription id> subscribe`` (CONSUMER) per message as a child of the context
the message carries, and ``<subscription id> process`` for the handler, linked to the
publisher's create span; :func:`start_settle_span` opens one ``<subscription id> ack`` /
``nack`` / ``modack`` (CLIENT) span per request, linked to the messages' subscribe spans
(which link back); and :meth:`ReceiveTrace.settled` records each message's result —
``acked`` / ``nacked``, or its exactly-once failure — and ends its subscribe span
(:meth:`ReceiveTrace.let_go`: ``expired`` or ``dropped`` for a message let go unsettled).

=================================  ========  ============================================
span                               kind      from - to
=================================  ========  ============================================
``<subscription id> subscribe``    CONSUMER  the message arrives - its ack / nack result
                                             (a child of the context it carries)
``<subscription id> process``      INTERNAL  child of subscribe: the handler runs (current
                                             while it does) - it returns or settles
``<subscription id> ack``          CLIENT    one request's acks (written on the stream,
``... nack``, ``... modack``                 or one unary attempt); a root span linked to
                                             its messages' subscribe spans
=================================  ========  ============================================
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "ATTRIBUTE_PREFIX",
    "MESSAGING_SYSTEM",
    "TRACER_NAME",
    "PublishTrace",
    "PublisherTracing",
    "ReceiveTrace",
    "SettleOperation",
    "extract_context",
    "start_receive",
    "start_settle_span",
    "tracer",
]

TRACER_NAME = "eoclient"
MESSAGING_SYSTEM = "gcp_pubsub"
# Trace context keys travel as message attributes with this prefix (the official clients').
ATTRIBUTE_PREFIX = "googclient_"

try:
    _VERSION = importlib.metadata.version("eoclient")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
    _VERSION = ""

_PROPAGATOR = TraceContextTextMapPropagator()
_EMPTY_CONTEXT = otel_context.Context()


@functools.cache
def tracer(provider: trace.TracerProvider | None = None) -> trace.Tracer:
    """eoclient's tracer from ``provider``, or from the global tracer provider.

    Made once per provider (``get_tracer`` costs ~90 µs with the SDK's provider, too much
    for every span). The global one, asked for before a provider is set, is the API's
    proxy, which follows the provider set later.
    """
    if provider is None:
        return trace.get_tracer(TRACER_NAME, _VERSION)
    return provider.get_tracer(TRACER_NAME, _VERSION)


def _now() -> str:
    # The official clients add this attribute to every event they record.
    return str(datetime.datetime.now())


def _split(name: str, kind: str) -> tuple[str, str]:
    """(project, id) of ``projects/<project>/<kind>/<id>``."""
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != kind:
        raise ValueError(f"not a {kind[:-1]} name, projects/<project>/{kind}/<id>: {name!r}")
    return parts[1], parts[3]


class _AttributeSetter(Setter[MutableMapping[str, str]]):
    def set(self, carrier: MutableMapping[str, str], key: str, value: str) -> None:
        carrier[ATTRIBUTE_PREFIX + key] = value


class _AttributeGetter(Getter[Mapping[str, str]]):
    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(ATTRIBUTE_PREFIX + key)
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier)


_SETTER = _AttributeSetter()
_GETTER = _AttributeGetter()


def extract_context(attributes: Mapping[str, str]) -> otel_context.Context:
    """The trace context a message's attributes carry (an empty context if none)."""
    return _PROPAGATOR.extract(attributes, getter=_GETTER)


def _sampled(span: trace.Span) -> bool:
    return span.get_span_context().trace_flags.sampled


def _end(span: trace.Span, error: BaseException | None = None) -> None:
    if error is not None:
        span.record_exception(error)
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
    span.end()


# ====================================================================== publishing


@dataclass(slots=True)
class PublishTrace:
    """The spans of one published message, from ``publish`` to its id."""

    tracer: trace.Tracer
    create: trace.Span
    flow_control: trace.Span | None = None
    batching: trace.Span | None = None

    def entering_flow_control(self) -> None:
        """Flow control looks at the message (and may hold it): its span starts."""
        self.flow_control = self.tracer.start_span(
            "publisher flow control",
            context=trace.set_span_in_context(self.create),
            kind=trace.SpanKind.INTERNAL,
        )

    def batched(self) -> None:
        """The message joined a batch: flow control let it go."""
        if self.flow_control is not None:
            self.flow_control.end()
            self.flow_control = None
        self.batching = self.tracer.start_span(
            "publisher batching",
            context=trace.set_span_in_context(self.create),
            kind=trace.SpanKind.INTERNAL,
        )

    def published(self, message_id: str) -> None:
        self.create.add_event("publish end", {"timestamp": _now()})
        self.create.set_attribute("messaging.message.id", message_id)
        self.create.end()

    def failed(self, error: BaseException) -> None:
        """The message failed: before it was sent (flow control, a paused key, closing)
        or with its batch."""
        for span in (self.flow_control, self.batching):
            if span is not None and span.is_recording():
                _end(span, error)
        _end(self.create, error)


class PublisherTracing:
    """What a ``PublisherClient`` with tracing calls; spans go to ``provider`` (the global
    tracer provider when ``None``)."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.tracer = tracer(provider)

    def start(
        self, topic: str, ordering_key: str, data: bytes, attributes: MutableMapping[str, str]
    ) -> PublishTrace:
        """Open the message's create span (a child of the caller's current span) and put
        its context in ``attributes``."""
        project, topic_id = _split(topic, "topics")
        create = self.tracer.start_span(
            f"{topic_id} create",
            kind=trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.destination.name": topic_id,
                "code.function": "publish",
                "messaging.gcp_pubsub.message.ordering_key": ordering_key,
                "messaging.operation": "create",
                "gcp.project_id": project,
                "messaging.message.body.size": len(data),
            },
        )
        create.add_event("publish start", {"timestamp": _now()})
        _PROPAGATOR.inject(attributes, context=trace.set_span_in_context(create), setter=_SETTER)
        return PublishTrace(self.tracer, create)

    def start_publish_rpc(self, topic: str, traces: Sequence[PublishTrace]) -> trace.Span:
        """The batch is sent: its batching spans end, its Publish span starts."""
        for message in traces:
            if message.batching is not None:
                message.batching.end()
                message.batching = None
        project, topic_id = _split(topic, "topics")
        rpc = self.tracer.start_span(
            f"{topic_id} publish",
            # A root span, as the official client's (started on its commit thread): the
            # batch belongs to many traces, which the links name.
            context=_EMPTY_CONTEXT,
            kind=trace.SpanKind.CLIENT,
            attributes={
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.destination.name": topic_id,
                "gcp.project_id": project,
                "messaging.batch.message_count": len(traces),
                "messaging.operation": "publish",
                "code.function": "_commit",
            },
            links=[trace.Link(m.create.get_span_context()) for m in traces if _sampled(m.create)],
        )
        rpc_context = rpc.get_span_context()
        for message in traces:
            if _sampled(message.create):
                message.create.add_link(rpc_context)
        return rpc

    def end_publish_rpc(self, rpc: trace.Span, error: BaseException | None = None) -> None:
        _end(rpc, error)


# ====================================================================== receiving


class SettleOperation:
    """The three settling requests, as the spans name them."""

    ACK = "ack"
    NACK = "nack"
    MODACK = "modack"


@dataclass(slots=True)
class ReceiveTrace:
    """The spans of one received message, from its arrival to its ack or nack."""

    tracer: trace.Tracer
    subscribe: trace.Span
    subscription_id: str
    project: str
    publisher_context: trace.SpanContext | None
    process: trace.Span | None = field(default=None)

    def start_process(self) -> trace.Span:
        """``<subscription id> process``: the handler's span (a child of the subscribe
        span, linked to the publisher's create span); make it current while the handler
        runs so the handler's own spans nest under it."""
        links = [] if self.publisher_context is None else [trace.Link(self.publisher_context)]
        self.process = self.tracer.start_span(
            f"{self.subscription_id} process",
            context=trace.set_span_in_context(self.subscribe),
            kind=trace.SpanKind.INTERNAL,
            attributes={"messaging.system": MESSAGING_SYSTEM},
            links=links,
        )
        return self.process

    def handler_settled(self, operation: str) -> None:
        """The handler called ack / nack: the process span ends ("ack called")."""
        if self.process is not None and self.process.is_recording():
            self.process.add_event(f"{operation} called", {"timestamp": _now()})
            self.process.end()

    def end_process(self) -> None:
        """The handler returned (or raised) without settling: its process span ends."""
        if self.process is not None and self.process.is_recording():
            self.process.end()

    def event(self, name: str) -> None:
        """An event on the subscribe span, e.g. ``"ack start"`` when the request leaves."""
        self.subscribe.add_event(name, {"timestamp": _now()})

    def settled(self, operation: str, result: str | None = None) -> None:
        """The message's ack / nack is done: ``result`` is ``None`` for success, else its
        exactly-once failure (the ``AcknowledgeStatus`` name, e.g. ``"INVALID_ACK_ID"``).
        The subscribe span records it and ends."""
        self.event(f"{operation} end")
        if result is None:
            self.subscribe.set_attribute(
                "messaging.gcp_pubsub.result", "acked" if operation == "ack" else "nacked"
            )
        else:
            self.subscribe.set_attribute("messaging.gcp_pubsub.result", result.lower())
            self.subscribe.set_status(
                trace.Status(trace.StatusCode.ERROR, f"{operation} failed: {result}")
            )
        if self.process is not None and self.process.is_recording():
            self.process.end()
        self.subscribe.end()

    def let_go(self, result: str) -> None:
        """The subscriber let the message go unsettled: ``"expired"`` (held past its
        lease's limit, the official clients' result) or ``"dropped"`` (an eoclient result:
        a copy given up because the server redelivers it, e.g. the later messages of an
        ordering key after a nack). Both spans record it and end."""
        if self.process is not None and self.process.is_recording():
            self.process.add_event(result, {"timestamp": _now()})
            self.process.end()
        self.subscribe.set_attribute("messaging.gcp_pubsub.result", result)
        self.subscribe.end()

    def closed(self) -> None:
        """The subscriber closed before the message's result was known: its spans end
        with the event ``"subscriber closed"`` and no result."""
        self.event("subscriber closed")
        if self.process is not None and self.process.is_recording():
            self.process.end()
        self.subscribe.end()


def start_receive(
    subscription: str,
    *,
    attributes: Mapping[str, str],
    message_id: str,
    body_size: int,
    ack_id: str,
    ordering_key: str,
    exactly_once: bool,
    delivery_attempt: int,
    provider: trace.TracerProvider | None = None,
) -> ReceiveTrace:
    """Open ``<subscription id> subscribe`` (CONSUMER) for one received message: a child
    of the context its attributes carry (a root span when they carry none); this
    message's spans go to ``provider`` (the global one when ``None``)."""
    project, subscription_id = _split(subscription, "subscriptions")
    parent = extract_context(attributes)
    publisher = trace.get_current_span(parent).get_span_context()
    chosen = tracer(provider)
    span = chosen.start_span(
        f"{subscription_id} subscribe",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.destination.name": subscription_id,
            "gcp.project_id": project,
            "messaging.message.id": message_id,
            "messaging.message.body.size": body_size,
            "messaging.gcp_pubsub.message.ack_id": ack_id,
            "messaging.gcp_pubsub.message.ordering_key": ordering_key,
            "messaging.gcp_pubsub.message.exactly_once_delivery": exactly_once,
            "code.function": "_on_response",
            "messaging.gcp_pubsub.message.delivery_attempt": delivery_attempt,
        },
    )
    valid = publisher if publisher.is_valid else None
    return ReceiveTrace(chosen, span, subscription_id, project, valid)


def start_settle_span(
    operation: str,
    messages: Iterable[ReceiveTrace],
    *,
    ack_deadline: float | None = None,
    receipt: bool = False,
) -> trace.Span:
    """One ``<subscription id> ack|nack|modack`` span (CLIENT) for a request settling
    ``messages`` (of one subscription), linked to each sampled subscribe span, which
    links back (attribute ``messaging.operation.name``); each subscribe span gets the
    ``"<operation> start"`` event. ``ack_deadline`` and ``receipt`` describe a modack.
    End it with :func:`end_settle_span` once the answer is in."""
    traces = list(messages)
    if not traces:
        raise ValueError("a settle span needs at least one message")
    first = traces[0]
    attributes: dict[str, str | int | float | bool] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.batch.message_count": len(traces),
        "gcp.project_id": first.project,
        "messaging.destination.name": first.subscription_id,
    }
    if operation == SettleOperation.MODACK:
        attributes.update(
            {
                "messaging.gcp_pubsub.message.ack_deadline": ack_deadline or 0.0,
                "messaging.operation.name": "modack",
                "code.function": "_send_lease_modacks",
                "messaging.gcp_pubsub.is_receipt_modack": receipt,
            }
        )
    else:
        attributes["messaging.operation"] = operation
        attributes["code.function"] = "ack" if operation == "ack" else "modify_ack_deadline"
    sampled = [t for t in traces if _sampled(t.subscribe)]
    span = first.tracer.start_span(
        f"{first.subscription_id} {operation}",
        context=_EMPTY_CONTEXT,
        kind=trace.SpanKind.CLIENT,
        attributes=attributes,
        links=[trace.Link(t.subscribe.get_span_context()) for t in sampled],
    )
    for message in traces:
        if operation != SettleOperation.MODACK:
            message.event(f"{operation} start")
        if _sampled(message.subscribe):
            message.subscribe.add_link(
                span.get_span_context(), {"messaging.operation.name": operation}
            )
    return span


def end_settle_span(
    span: trace.Span,
    *,
    failures: Mapping[str, str] | None = None,
    error: BaseException | None = None,
) -> None:
    """End a settle span: ``failures`` maps each exactly-once failure's ack id to its
    status name (counted on the span, ``messaging.gcp_pubsub.failed_count``, an eoclient
    attribute); ``error`` is a failure of the whole request."""
    if failures:
        span.set_attribute("messaging.gcp_pubsub.failed_count", len(failures))
        span.set_status(
            trace.Status(
                trace.StatusCode.ERROR,
                f"{len(failures)} failed: " + ", ".join(sorted(set(failures.values()))),
            )
        )
    _end(span, error)
