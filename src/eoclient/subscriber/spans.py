"""OpenTelemetry spans of one subscription session, as google-cloud-pubsub traces receiving.

Imported only by a ``SubscriberClient(enable_open_telemetry_tracing=True)`` (it imports
:mod:`eoclient.tracing`, and with it ``opentelemetry``). The spans, their names and
attributes are :mod:`eoclient.tracing`'s; this module is the glue that tells it what the
session does, keeping one :class:`~eoclient.tracing.ReceiveTrace` per message by ack id
until the message's result is known. Each part of the session tells it what only that
part sees:

* the dispatch core (``observer``): each message as it arrives — its subscribe span opens,
  a child of the trace context the message carries — and a message let go without a
  settlement (held past ``max_lease``: ``expired``; a copy dropped because the server
  redelivers it: ``dropped``);
* the sender (``spans``): each request it writes on the stream or makes by unary call —
  one ack / nack / modack span per operation it carries (receipt modacks apart from lease
  extensions), linked to its messages — and every record that gets results: a message's
  ack or nack result ends its subscribe span (``acked``, ``nacked``, or the exactly-once
  failure), and so does a modack the server refuses for good (the lease is lost);
* the session: the application settling a message (the handler's process span ends,
  ``ack called``), and the session's end (what is still open ends, ``subscriber closed``);
* the handler runner (:meth:`SessionSpans.processing`): each handler runs under its
  message's process span, so spans the handler makes are its children.

With tracing off none of this exists: each of those parts holds ``None`` and tests it once
where it would call in (a branch per response, per settlement, per request).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from opentelemetry import trace

from eoclient.subscriber.ack_records import AckRecord, Operation, Position
from eoclient.subscriber.ack_results import AcknowledgeStatus
from eoclient.tracing import (
    ReceiveTrace,
    SettleOperation,
    end_settle_span,
    start_receive,
    start_settle_span,
)

if TYPE_CHECKING:
    from eoclient._proto import pubsub_pb2
    from eoclient.errors import EoclientError, RpcError
    from eoclient.subscriber.message import Message

__all__ = ["Processing", "SessionSpans"]

SUCCESS = AcknowledgeStatus.SUCCESS
# Modack failures that mean the lease is gone for good (the message will come again, under
# another ack id). OTHER does not: a transient failure that outlived its retries, or a
# session closing before the answer, says nothing about the lease.
LEASE_LOST = frozenset(
    {
        AcknowledgeStatus.INVALID_ACK_ID,
        AcknowledgeStatus.PERMISSION_DENIED,
        AcknowledgeStatus.FAILED_PRECONDITION,
    }
)


class Processing:
    """A handler's process span while it runs (:meth:`SessionSpans.processing`)."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span | None) -> None:
        self.span = span

    def failed(self, error: Exception) -> None:
        """The handler raised ``error``: recorded on its span (while it is open)."""
        span = self.span
        if span is not None and span.is_recording():
            span.record_exception(error)
            span.set_status(
                trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
            )


class SessionSpans:
    """The spans of one session's messages (see the module docstring)."""

    def __init__(self, subscription: str, provider: trace.TracerProvider | None) -> None:
        self.subscription = subscription
        self.provider = provider
        self.traces: dict[str, ReceiveTrace] = {}  # ack id → its message's spans
        # Ack ids whose receipt modack has no result yet: a modack of them is their receipt
        # (its retries too, and both copies while the ledger learns whether the server
        # confirms on the stream: docs/protocol.md#receipt-modacks).
        self._awaiting_receipt: set[str] = set()

    def __repr__(self) -> str:
        return f"<SessionSpans {self.subscription}: {len(self.traces)} messages open>"

    # ================================================================ dispatch core

    def received(self, messages: Sequence[Message], exactly_once: bool) -> None:
        """Messages arrived (duplicates of leased ones already left out)."""
        traces = self.traces
        for message in messages:
            earlier = traces.get(message.ack_id)
            if earlier is not None:
                # The same delivery again after this session let its lease go, its result
                # still unknown: the earlier copy is given up, its spans end.
                earlier.let_go("dropped")
            traces[message.ack_id] = start_receive(
                self.subscription,
                attributes=message.attributes,
                message_id=message.message_id,
                body_size=len(message.data),
                ack_id=message.ack_id,
                ordering_key=message.ordering_key,
                exactly_once=exactly_once,
                delivery_attempt=message.delivery_attempt or 0,
                provider=self.provider,
            )
        self._awaiting_receipt.update(message.ack_id for message in messages)

    def released(self, message: Message, result: str) -> None:
        """The session let ``message`` go without settling it: ``"expired"`` or
        ``"dropped"``."""
        traced = self.traces.pop(message.ack_id, None)
        self._awaiting_receipt.discard(message.ack_id)
        if traced is not None:
            traced.let_go(result)

    # ================================================================ session

    def application_settled(self, ack_id: str, operation: Operation) -> None:
        """The application acked or nacked a message: its process span ends."""
        traced = self.traces.get(ack_id)
        if traced is not None:
            traced.handler_settled(operation)

    @contextlib.contextmanager
    def processing(self, message: Message) -> Iterator[Processing]:
        """Run the body (the message's handler) under its process span: current while it
        runs, ended when it returns (unless the handler settled the message first);
        ``failed(error)`` on what it yields records a handler's failure there."""
        traced = self.traces.get(message.ack_id)
        if traced is None:  # already let go (e.g. expired before its handler started)
            yield Processing(None)
            return
        process = traced.start_process()
        try:
            with trace.use_span(process, end_on_exit=False):
                yield Processing(process)
        finally:
            traced.end_process()

    def close(self) -> None:
        """The session has ended: the spans of messages without a result end too."""
        traces, self.traces = self.traces, {}
        self._awaiting_receipt.clear()
        for traced in traces.values():
            traced.closed()

    # ================================================================ sender

    def writing(
        self, requests: Sequence[pubsub_pb2.StreamingPullRequest]
    ) -> list[tuple[trace.Span, list[str]]]:
        """Stream requests about to be written: a span per operation each carries, with the
        ack ids of its messages; end them with :meth:`written`."""
        spans = []
        for request in requests:
            if request.ack_ids:
                spans += self._start(SettleOperation.ACK, 0, list(request.ack_ids))
            modacks: dict[int, list[str]] = {}  # deadline (0: a nack) → ack ids
            for ack_id, seconds in zip(
                request.modify_deadline_ack_ids, request.modify_deadline_seconds, strict=True
            ):
                modacks.setdefault(seconds, []).append(ack_id)
            for seconds, ack_ids in modacks.items():
                operation = SettleOperation.NACK if seconds == 0 else SettleOperation.MODACK
                spans += self._start(operation, seconds, ack_ids)
        return spans

    def written(
        self, spans: list[tuple[trace.Span, list[str]]], error: EoclientError | None
    ) -> None:
        """The requests of :meth:`writing` are written (or the stream broke: ``error``)."""
        for span, _ in spans:
            end_settle_span(span, error=error)

    def calling(
        self, kind: Operation, seconds: int, ack_ids: Sequence[str]
    ) -> list[tuple[trace.Span, list[str]]]:
        """One attempt of a unary Acknowledge (``kind`` ACK) or ModifyAckDeadline (MODACK;
        ``seconds`` 0 is a nack) is about to be made; end its span with :meth:`called`."""
        if kind is Operation.ACK:
            return self._start(SettleOperation.ACK, 0, list(ack_ids))
        operation = SettleOperation.NACK if seconds == 0 else SettleOperation.MODACK
        return self._start(operation, seconds, list(ack_ids))

    def called(
        self,
        spans: list[tuple[trace.Span, list[str]]],
        attempted: Sequence[Position],
        error: RpcError | None,
    ) -> None:
        """The attempt of :meth:`calling` is answered: the ids it settled with a failure
        are counted on its span; a failure of the whole call is its error."""
        failures: dict[str, str] = {}
        for record, index in attempted:
            result = record.result(index)
            if result is not None and result.status is not SUCCESS:
                failures[record.ack_ids[index]] = result.status.name
        for span, ack_ids in spans:
            mine = {ack_id: failures[ack_id] for ack_id in ack_ids if ack_id in failures}
            end_settle_span(span, failures=mine, error=None if mine else error)

    def resolved(self, records: Iterable[AckRecord]) -> None:
        """Records got results: each message acked or nacked (or whose lease a modack
        found lost) has its result on its subscribe span, which ends."""
        traces, awaiting = self.traces, self._awaiting_receipt
        for record in records:
            results = record.results
            if results is None:
                continue
            operation = record.operation
            if operation is Operation.MODACK:
                for ack_id, result in zip(record.ack_ids, results, strict=True):
                    if result is None:
                        continue
                    awaiting.discard(ack_id)  # its receipt (or a later modack) is answered
                    if result.status in LEASE_LOST:
                        traced = traces.pop(ack_id, None)
                        if traced is not None:
                            traced.settled(SettleOperation.MODACK, result.status.name)
                continue
            for ack_id, result in zip(record.ack_ids, results, strict=True):
                if result is None:
                    continue
                traced = traces.pop(ack_id, None)
                if traced is not None:
                    traced.settled(
                        operation, None if result.status is SUCCESS else result.status.name
                    )

    def _start(
        self, operation: str, seconds: int, ack_ids: list[str]
    ) -> list[tuple[trace.Span, list[str]]]:
        """The span(s) of one operation on ``ack_ids``: the ids of traced messages only,
        and for a modack one span for receipts and one for lease extensions."""
        traces = self.traces
        known = [ack_id for ack_id in ack_ids if ack_id in traces]
        if not known:
            return []
        if operation != SettleOperation.MODACK:
            messages = [traces[ack_id] for ack_id in known]
            return [(start_settle_span(operation, messages), known)]
        awaiting = self._awaiting_receipt
        receipts = [ack_id for ack_id in known if ack_id in awaiting]
        extensions = [ack_id for ack_id in known if ack_id not in awaiting]
        spans = []
        for group, receipt in ((receipts, True), (extensions, False)):
            if group:
                span = start_settle_span(
                    operation,
                    [traces[ack_id] for ack_id in group],
                    ack_deadline=seconds,
                    receipt=receipt,
                )
                spans.append((span, group))
        return spans
