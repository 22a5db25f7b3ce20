"""One subscription's StreamingPull session: the async shell around the pure cores.

The decisions live in two pure cores: :class:`~eoclient.subscriber.dispatch.Dispatcher`
(admission, flow control, leases, settlement, shutdown) and
:class:`~eoclient.subscriber.ledger.AckLedger` (acks, nacks and modacks from settlement to
result: batching, routing, confirmations, retries). The shells perform them: the
lifecycle, iteration and settlement here, the stream's reading (and reconnecting) in
:class:`~eoclient.subscriber.receiver.StreamReceiver`, its writing and the unary calls in
:class:`~eoclient.subscriber.sender.AckSender`, the ordered way out in
:class:`~eoclient.subscriber.session_shutdown.SessionShutdown`. Every task belongs to the
session's one TaskGroup (:class:`eoclient._tasks.TaskOwner`;
docs/architecture.md#every-background-task-belongs-to-one-taskgroup) and never raises into
it: a permanent failure is stored and reaches the user once, as one exception, on their next
``await`` (``__anext__``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eoclient._clock import AsyncClock, MonotonicClock
from eoclient._tasks import TaskOwner
from eoclient.subscriber.ack_records import Operation, Position
from eoclient.subscriber.batch import MessageBatch
from eoclient.subscriber.dispatch import Dispatcher, unsent
from eoclient.subscriber.ledger import AckLedger, AckMode
from eoclient.subscriber.message import Message
from eoclient.subscriber.receiver import StreamReceiver
from eoclient.subscriber.sender import AckSender
from eoclient.subscriber.session_shutdown import SessionShutdown
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownOptions,
    StreamSettings,
)
from eoclient.subscriber.transport import SubscriberTransport

if TYPE_CHECKING:
    # Imported at run time only by a client with tracing on (it imports opentelemetry).
    from eoclient.subscriber.spans import SessionSpans

logger = logging.getLogger("eoclient.subscriber")

# __anext__ lets other tasks run (the sender, the application's handlers) after handing out
# half the flow-control window in a row: the acks of that half go back while the server
# still has the other half to deliver, so its flow control never runs dry. Fewer turns mean
# fewer, larger ack requests; measured with benchmarks/subscriber.py (max_messages=1000),
# a turn every 500 messages cost 5.2-6.2 µs of client CPU a message with plain acks against
# 7.1-9.0 µs for a turn every 100, at the same or a better rate. Never fewer than 100 (a
# turn costs ~5 µs), and 500 when the window is unlimited.
MIN_YIELD_EVERY = 100
UNLIMITED_YIELD_EVERY = 500


def yield_every(flow_control: FlowControl) -> int:
    """After how many messages in a row ``__anext__`` yields to the event loop."""
    if not flow_control.max_messages:
        return UNLIMITED_YIELD_EVERY
    return max(MIN_YIELD_EVERY, flow_control.max_messages // 2)


class SessionState(enum.Enum):
    UNOPENED = "unopened"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(frozen=True)
class SubscriberStatistics:
    """A snapshot of one session (``statistics()``)."""

    outstanding_messages: int  # handed to the application, not yet acked or nacked
    outstanding_bytes: int
    held_messages: int  # received and leased, waiting for flow control or their key
    leased_messages: int
    received: int
    acked: int
    nacked: int
    expired: int  # given up after max_lease (released, not acked)
    retried: int  # ack ids resent after a transient failure
    reconnects: int
    # How acks travel: "stream" (written on the stream; on an exactly-once subscription
    # their results come back as the stream's confirmations), "unary" (exactly-once
    # results from Acknowledge/ModifyAckDeadline calls: a server that sends no
    # confirmations) or "unknown" (exactly-once, no confirmation seen yet).
    ack_mode: str
    # Final results of this session's acks, by AcknowledgeStatus name ("SUCCESS",
    # "INVALID_ACK_ID", ...): each ack counted once, when its result is known.
    ack_results: Mapping[str, int] = field(default_factory=dict)


class StreamingSession:
    """One subscription's StreamingPull session (``client.subscribe(...)``).

    ::

        async with client.subscribe(subscription) as stream:
            async for message in stream:                      # one message at a time
                status = await message.ack_with_response()
            async for batch in stream.batches(max_messages=100):   # or what has arrived
                statuses = await batch.ack_with_response()     # one request, one await

    ``statistics()`` is a snapshot of its counters; ``aclose()`` (or leaving the ``async
    with``) stops receiving, settles what is left per the shutdown options and closes.
    """

    def __init__(
        self,
        transport: SubscriberTransport,
        subscription: str,
        *,
        flow_control: FlowControl,
        lease: LeaseSettings,
        shutdown: ShutdownOptions,
        ack_retry: AckRetrySettings,
        stream: StreamSettings,
        client_id: str,
        clock: AsyncClock | None = None,
        rng: random.Random | None = None,
        spans: SessionSpans | None = None,
    ) -> None:
        self.subscription = subscription
        # The session's tracing (spans.py), or None: tracing off costs a test per response,
        # per settlement and per request sent.
        self.spans = spans
        self.transport = transport
        self.flow_settings = flow_control
        self.shutdown_options = shutdown
        self.stream_settings = stream
        self.client_id = client_id
        self.clock = clock or MonotonicClock()
        self.rng = rng or random.Random()
        self.state = SessionState.UNOPENED
        self._ready_event = asyncio.Event()
        self._tasks = TaskOwner()  # the session's one TaskGroup
        self.ledger = AckLedger(ack_retry, on_pending=self._wake_sender)
        self.dispatch = Dispatcher(
            self.ledger,
            self,
            flow_control=flow_control,
            lease=lease,
            stream=stream,
            notify_ready=self._ready_event.set,
            observer=spans,
        )
        self.sender = AckSender(
            self.ledger,
            transport,
            subscription,
            clock=self.clock,
            rng=self.rng,
            spawn=self._tasks.spawn,
            fail=self._fail,
            before_send=self.dispatch.due,
            next_due=self._next_lease_check,
            keepalive_interval=stream.keepalive_interval,
            spans=spans,
        )
        self.receiver = StreamReceiver(
            transport,
            subscription,
            sender=self.sender,
            dispatch=self.dispatch,
            flow_control=flow_control,
            stream=stream,
            client_id=client_id,
            clock=self.clock,
            rng=self.rng,
            fail=self._fail,
        )
        self._shutdown = SessionShutdown(
            self.dispatch,
            self.ledger,
            self.sender,
            shutdown,
            self.clock,
            subscription=subscription,
            failed=lambda: self._fatal is not None,
        )
        self._closed_event = asyncio.Event()
        self._handed_since_yield = 0
        self._yield_every = yield_every(flow_control)
        self._fatal: BaseException | None = None
        self._fatal_reported = False
        self._receive_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        d = self.dispatch
        return (
            f"<StreamingSession {self.subscription} {self.state.value} "
            f"[{len(d.out)} out, {len(d.held)} held, {len(d.ready)} ready]>"
        )

    # ================================================================ lifecycle

    async def __aenter__(self) -> StreamingSession:
        if self.state is not SessionState.UNOPENED:
            raise RuntimeError(
                f"a subscription session cannot be entered twice ({self.state.value})"
            )
        self.state = SessionState.RUNNING
        await self._tasks.open()
        self._receive_task = self._tasks.spawn(
            self.receiver.run(), f"eoclient-receive {self.subscription}"
        )
        self._tasks.spawn(self.sender.run(), f"eoclient-send {self.subscription}")
        logger.debug(
            "subscription %s: session open (client id %s, %s, %s)",
            self.subscription,
            self.client_id,
            self.flow_settings,
            "traced" if self.spans is not None else "not traced",
        )
        return self

    async def __aexit__(self, exc_type: object, *_: object) -> None:
        # Left by an exception or a cancellation, the code that held the outstanding
        # messages is gone: nobody will settle them, so they are nacked at once
        # whatever the shutdown behaviour (waiting, under cancellation, only delays it).
        await self._close(wait_for_processing=exc_type is None)

    async def aclose(self) -> None:
        """Stop pulling, settle what is left per the shutdown options, flush acks, close.

        Idempotent. Cancelling it still closes the stream and ends every task.
        """
        await self._close(wait_for_processing=True)

    async def _close(self, *, wait_for_processing: bool) -> None:
        if self.state in (SessionState.CLOSING, SessionState.CLOSED):
            await self._closed_event.wait()
            return
        if self.state is SessionState.UNOPENED:
            self.state = SessionState.CLOSED
            self._closed_event.set()
            return
        self.state = SessionState.CLOSING
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "subscription %s: closing (%d messages out, %d held, %d ready; %s)",
                self.subscription,
                len(self.dispatch.out),
                len(self.dispatch.held),
                len(self.dispatch.ready),
                "waiting for processing" if wait_for_processing else "nacking what is out",
            )
        try:
            # Nack what was never handed out and close the stream at once (else the server
            # would keep delivering on it); wait for handlers per the options, nack what
            # they still hold, and flush (session_shutdown.py).
            await self._shutdown.graceful(
                wait_for_processing=wait_for_processing,
                receive_task=self._receive_task,
            )
        finally:
            await self._hard_stop()

    async def _hard_stop(self) -> None:
        self._shutdown.settle_the_rest()
        try:
            await self._tasks.close()
        finally:
            self.state = SessionState.CLOSED
            self._closed_event.set()
            self._ready_event.set()
            if self.spans is not None:
                self.spans.close()
            if logger.isEnabledFor(logging.DEBUG):
                stats = self.statistics()
                logger.debug(
                    "subscription %s: session closed (received %d, acked %d, nacked %d, "
                    "expired %d, reconnects %d, ack results %s)",
                    self.subscription,
                    stats.received,
                    stats.acked,
                    stats.nacked,
                    stats.expired,
                    stats.reconnects,
                    stats.ack_results,
                )

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None:
            self._fatal = error
            self.dispatch.fail(str(error))
            logger.warning("subscription %s failed: %s", self.subscription, error)
            # Nothing sends after a fatal error: resolve what waits.
            self.sender.fail_all(f"the subscriber failed before the server answered: {error}")
        self._ready_event.set()
        self._shutdown.settled.set()

    # ================================================================ iteration

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        self._handed_since_yield += 1
        if self._handed_since_yield >= self._yield_every:
            # Without this, a consumer that awaits nothing else would take every ready
            # message before the sender runs: no pipelining of acks.
            self._handed_since_yield = 0
            await asyncio.sleep(0)
        while True:
            self._raise_fatal_once()
            message = self.dispatch.take()
            if message is not None:
                return message
            await self._wait_for_ready()

    async def batches(self, max_messages: int = 100) -> AsyncIterator[MessageBatch]:
        """Messages in batches as they arrive: ``async for batch in stream.batches(100)``.

        Each batch holds what is ready when the previous one was taken, up to
        ``max_messages`` (at least one; no waiting for a batch to fill). Settle a batch with
        one request and one awaitable — ``batch.ack()``, ``await batch.ack_with_response()``
        (one :class:`AcknowledgeStatus` per message, in order), ``nack`` and
        ``modify_ack_deadline`` likewise — or its messages one by one. Flow control, leases,
        ordering keys and exactly-once results work per message, as with ``async for
        message in stream``. Ends like the message iteration: when the session closes, or
        by raising its permanent failure once.
        """
        if max_messages < 1:
            raise ValueError(f"batches: max_messages must be >= 1, got {max_messages}")
        while True:
            await asyncio.sleep(0)  # let acks flow between batches (see yield_every)
            try:
                self._raise_fatal_once()
            except StopAsyncIteration:
                return
            messages = self.dispatch.take_up_to(max_messages)
            if messages:
                yield MessageBatch(messages, self)
                continue
            try:
                await self._wait_for_ready()
            except StopAsyncIteration:
                return

    def _raise_fatal_once(self) -> None:
        if self._fatal is not None:
            if self._fatal_reported:
                raise StopAsyncIteration
            self._fatal_reported = True
            raise self._fatal

    async def _wait_for_ready(self) -> None:
        """Wait until a message may be ready; StopAsyncIteration once none will be."""
        if self.state is not SessionState.RUNNING:
            raise StopAsyncIteration
        self._ready_event.clear()
        self._handed_since_yield = 0
        await self._ready_event.wait()

    # ============================================== settling (AckSink, BatchSink)

    def settle(self, message: Message, operation: Operation, seconds: int) -> Position:
        """Called once per message by ``Message.ack`` / ``nack``.

        :meta private:
        """
        if self.state is SessionState.CLOSED:
            return unsent(message.ack_id, operation, "the subscriber is closed")
        if self.spans is not None:
            self.spans.application_settled(message.ack_id, operation)
        position = self.dispatch.settle(message, operation, seconds, self.clock.now())
        if self.state is not SessionState.RUNNING:
            self._shutdown.settled.set()  # a closing session waits for the outstanding ones
        return position

    def settle_batch(
        self, messages: list[Message], operation: Operation, seconds: int
    ) -> list[Position]:
        """Called by ``MessageBatch`` for its messages not yet settled: one ledger record.

        :meta private:
        """
        if self.state is SessionState.CLOSED or (
            operation is Operation.MODACK and self._fatal is not None
        ):
            return [
                unsent(m.ack_id, operation, "the subscriber is closed or failed") for m in messages
            ]
        positions = self.dispatch.settle_batch(messages, operation, seconds, self.clock.now())
        if self.state is not SessionState.RUNNING:
            self._shutdown.settled.set()
        return positions

    def extend(self, message: Message, seconds: int) -> Position:
        """Called by ``Message.modify_ack_deadline``.

        :meta private:
        """
        if self._fatal is not None or self.state is SessionState.CLOSED:
            return unsent(message.ack_id, Operation.MODACK, "the subscriber is closed or failed")
        return self.dispatch.extend(message, seconds, self.clock.now())

    def _wake_sender(self) -> None:
        self.sender.wake.set()

    def _next_lease_check(self) -> float:
        return self.dispatch.lease_check_at

    # ================================================================ statistics

    def statistics(self) -> SubscriberStatistics:
        dispatch = self.dispatch.statistics()
        ledger = self.ledger.stats
        return SubscriberStatistics(
            outstanding_messages=dispatch.outstanding_messages,
            outstanding_bytes=dispatch.outstanding_bytes,
            held_messages=dispatch.held_messages,
            leased_messages=dispatch.leased_messages,
            received=dispatch.received,
            acked=ledger.acks,
            nacked=ledger.nacks,
            expired=dispatch.expired,
            retried=ledger.retried,
            reconnects=self.receiver.reconnects,
            ack_mode=self.ledger.mode.value if self.ledger.exactly_once else "stream",
            ack_results=dict(ledger.ack_results),
        )


def new_client_id() -> str:
    return str(uuid.uuid4())


__all__ = ["AckMode", "SessionState", "StreamingSession", "SubscriberStatistics"]
