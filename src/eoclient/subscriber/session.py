"""One subscription's StreamingPull session: the async shell around the pure cores.

The decisions live in :class:`~eoclient.subscriber.dispatch.Dispatcher` (admission,
flow control, leases, settlement, shutdown) and :class:`~eoclient.subscriber.acker.Acker`
(the ledger of ack requests: batching, routing, confirmations). This shell performs
them. Its tasks, all in one TaskGroup (architecture principle 5):

* ``_receive``: opens the stream (reopening it with jittered exponential backoff on a
  retryable status) and feeds each response to the dispatcher;
* ``_send``: the only writer after the first request (principle 3): acks, nacks,
  modacks, lease extensions and keep-alives;
* one task per unary batch (exactly-once results by unary call, and retries).

Background tasks never raise into the group: a permanent failure is stored and reaches
the user once, as one exception, on their next ``await`` (``__anext__``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

from eoclient._clock import AsyncClock, MonotonicClock
from eoclient._proto import pubsub_pb2
from eoclient.errors import EoclientError, RpcError, StreamClosedError
from eoclient.subscriber.acker import Acker, AckMode, AckRequest, Operation
from eoclient.subscriber.dispatch import Dispatcher, unsent
from eoclient.subscriber.message import Message
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownBehavior,
    ShutdownOptions,
    StreamSettings,
)
from eoclient.subscriber.transport import PullStream, SubscriberTransport

logger = logging.getLogger("eoclient.subscriber")

# After waking, the sender waits this long before taking the pending acks. Zero still
# means one turn of the event loop, which is enough to batch every ack issued in the same
# turn (a burst of handlers finishing, or the consumer's loop, which yields every
# YIELD_EVERY_MESSAGES); measured with benchmarks/subscriber.py, 2 ms instead cost 10-25 %
# of throughput by holding acks back from the server's flow control.
ACK_BATCH_LATENCY = 0.0
# __anext__ lets other tasks run after handing out this many messages in a row: small
# enough that acks flow back while a large response is being consumed (pipelining with
# the server's flow control), large enough that the extra turn (~5 µs) costs < 0.1 µs each.
YIELD_EVERY_MESSAGES = 100
# How often requests awaiting a stream confirmation are checked for being late
# (acker.PROBE_TIMEOUT is 2 s, so a check every 0.5 s notices within a quarter).
OVERDUE_CHECK_INTERVAL = 0.5
# While shutdown flushes, how often it checks whether the acks have all been answered.
FLUSH_POLL_INTERVAL = 0.005


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
    ack_mode: str


class StreamingSession:
    """``async with client.subscribe(...) as stream: async for message in stream: ...``"""

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
    ) -> None:
        self.subscription = subscription
        self.transport = transport
        self.flow_settings = flow_control
        self.shutdown_options = shutdown
        self.stream_settings = stream
        self.client_id = client_id
        self.clock = clock or MonotonicClock()
        self.rng = rng or random.Random()
        self.state = SessionState.UNOPENED
        self.acker = Acker(subscription, transport, ack_retry, clock=self.clock, rng=self.rng)
        self._ready_event = asyncio.Event()
        self.dispatch = Dispatcher(
            self.acker,
            self,
            flow_control=flow_control,
            lease=lease,
            stream=stream,
            notify_ready=self._ready_event.set,
        )
        self._settled_event = asyncio.Event()
        self._closed_event = asyncio.Event()
        self._stream_ready = asyncio.Event()
        self._handed_since_yield = 0
        self._overdue_check_at = 0.0
        self._last_write = 0.0
        self._fatal: BaseException | None = None
        self._fatal_reported = False
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._receive_task: asyncio.Task[None] | None = None
        self._call: PullStream | None = None  # the current stream, None while reconnecting
        self._half_close = False  # shutdown asks the sender to half-close the stream
        self._half_closed_call: PullStream | None = None
        self._shutdown_nacked = False
        self._reconnects = 0

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
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._receive_task = self._spawn(self._receive(), f"eoclient-receive {self.subscription}")
        self._spawn(self._send(), f"eoclient-send {self.subscription}")
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
        try:
            await self._graceful_shutdown(wait_for_processing)
        finally:
            await self._hard_stop()

    async def _graceful_shutdown(self, wait_for_processing: bool) -> None:
        """Nack what was never handed out and close the stream at once (else the server
        would keep delivering on it); wait for handlers per the options, nack what they
        still hold, and flush. Later settlements go by unary call."""
        self.dispatch.stop()
        self._stream_ready.set()  # a sender waiting for a reconnect sends by unary call
        await self._close_stream()
        options = self.shutdown_options
        if wait_for_processing and options.behavior is ShutdownBehavior.WAIT_FOR_PROCESSING:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(options.timeout):
                    while self.dispatch.out and self._fatal is None:
                        self._settled_event.clear()
                        await self._settled_event.wait()
        self._shutdown_nacked = True
        self.dispatch.nack_outstanding()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(options.flush_timeout):
                while not self.acker.idle() and self._fatal is None:
                    self.acker.wake.set()
                    await self.clock.sleep(FLUSH_POLL_INTERVAL)

    async def _close_stream(self) -> None:
        """Half-close the stream (through the sender, its only writer) and read it to its
        end: confirmations and the deliveries in flight (nacked) arrive before it ends."""
        receiver = self._receive_task
        if receiver is None or receiver.done() or self._call is None:
            return  # between streams: nothing to half-close; _hard_stop cancels the receiver
        self._half_close = True
        self.acker.wake.set()
        await asyncio.wait({receiver}, timeout=self.shutdown_options.stream_close_timeout)

    async def _hard_stop(self) -> None:
        if not self._shutdown_nacked:
            # Cancelled before the graceful path got there: settle what the application
            # holds, or an ack of it arriving while the tasks wind down would wait for a
            # result nobody sends.
            self.dispatch.nack_outstanding()
        self.acker.fail_all("the subscriber was closed before the server answered")
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        group, self._group = self._group, None
        try:
            if group is not None:
                for task in list(self._tasks):
                    task.cancel()
                # Our own tasks' cancellation ends quietly inside the group; a
                # CancelledError here is the caller being cancelled, and propagates.
                await group.__aexit__(None, None, None)
        finally:
            self.state = SessionState.CLOSED
            self._closed_event.set()
            self._ready_event.set()

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None:
            self._fatal = error
            self.dispatch.failure = str(error)
            logger.warning("subscription %s failed: %s", self.subscription, error)
            # Nothing sends after a fatal error: resolve what waits.
            self.acker.fail_all(f"the subscriber failed before the server answered: {error}")
        self._ready_event.set()
        self._settled_event.set()

    # ================================================================ iteration

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        self._handed_since_yield += 1
        if self._handed_since_yield >= YIELD_EVERY_MESSAGES:
            # Without this, a consumer that awaits nothing else would take every ready
            # message before the sender runs: no pipelining of acks.
            self._handed_since_yield = 0
            await asyncio.sleep(0)
        while True:
            if self._fatal is not None:
                if self._fatal_reported:
                    raise StopAsyncIteration
                self._fatal_reported = True
                raise self._fatal
            message = self.dispatch.take()
            if message is not None:
                return message
            if self.state is not SessionState.RUNNING:
                raise StopAsyncIteration
            self._ready_event.clear()
            self._handed_since_yield = 0
            await self._ready_event.wait()

    # ======================================================= settling (_AckSink)

    def settle(self, message: Message, operation: Operation, seconds: int) -> AckRequest:
        """Called once per message by ``Message.ack`` / ``nack``."""
        if self.state is SessionState.CLOSED:
            return unsent(message.ack_id, operation, "the subscriber is closed")
        request = self.dispatch.settle(message, operation, seconds, self.clock.now())
        self._settled_event.set()
        return request

    def extend(self, message: Message, seconds: int) -> AckRequest:
        if self._fatal is not None or self.state is SessionState.CLOSED:
            return unsent(message.ack_id, Operation.MODACK, "the subscriber is closed or failed")
        return self.dispatch.extend(message, seconds, self.clock.now())

    # ================================================================ receiving

    def _initial_request(self) -> pubsub_pb2.StreamingPullRequest:
        return pubsub_pb2.StreamingPullRequest(
            subscription=self.subscription,
            stream_ack_deadline_seconds=int(self.dispatch.stream_ack_deadline()),
            client_id=self.client_id,
            max_outstanding_messages=self.flow_settings.max_messages,
            max_outstanding_bytes=self.flow_settings.max_bytes,
        )

    def _receiving(self) -> bool:
        # A method, not a field read, because shutdown flips the flag from another task.
        return not self.dispatch.stopped

    async def _receive(self) -> None:
        backoff = self.stream_settings.reconnect_initial_backoff
        try:
            while self._receiving():
                call = self.transport.open_stream(self.subscription)
                error: RpcError | None = None
                try:
                    with contextlib.suppress(StreamClosedError):  # receive() says how
                        await call.send(self._initial_request())
                        self._call = call
                        self._stream_ready.set()
                        self.acker.wake.set()
                    while (response := await call.receive()) is not None:
                        backoff = self.stream_settings.reconnect_initial_backoff
                        self._requeue(self.dispatch.on_response(response, self.clock.now()))
                    if not self._receiving():
                        return
                    # The server ended the stream with OK: reconnect at once.
                except RpcError as failure:
                    error = failure
                finally:
                    self._stream_ready.clear()
                    self._call = None
                    self._requeue(self.acker.stream_lost())
                if not self._receiving():
                    return
                if error is not None:
                    # Reconnect on a retryable status (the official clients' recover set,
                    # client-anchors §1.8: errors.py's table); any other ends the session.
                    if not error.retryable:
                        self._fail(error)
                        return
                    logger.info("stream of %s ended (%s); reconnecting", self.subscription, error)
                self._reconnects += 1
                await self.clock.sleep(self.rng.uniform(0, backoff))
                backoff = min(backoff * 2, self.stream_settings.reconnect_max_backoff)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    # ================================================================ sending

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None] | None:
        """Start a background task in the session's TaskGroup (and remember it to cancel)."""
        if self._group is None:
            coroutine.close()
            return None
        task = self._group.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _requeue(self, requests: list[AckRequest]) -> None:
        if requests:
            self._spawn(self._unary(requests), "eoclient-unary-acks")

    async def _unary(self, requests: list[AckRequest]) -> None:
        try:
            await self.acker.send_unary(requests)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    async def _send(self) -> None:
        try:
            while True:
                await self._wait_for_work()
                await self._send_once()
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    async def _wait_for_work(self) -> None:
        wakeups = [
            self._last_write + self.stream_settings.keepalive_interval,
            self.dispatch.lease_check_at,
        ]
        if self.acker.awaiting_confirmation():
            wakeups.append(self._overdue_check_at)
        delay = max(0.0, min(wakeups) - self.clock.now())
        half_close_due = self._half_close and self._call not in (None, self._half_closed_call)
        if not self.acker.pending and not half_close_due:
            self.acker.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.acker.wake.wait()
            # Let a burst of acks from handlers finishing together join one batch.
            await self.clock.sleep(ACK_BATCH_LATENCY)

    async def _send_once(self) -> None:
        now = self.clock.now()
        self.dispatch.due(now)
        if now >= self._overdue_check_at:
            self._overdue_check_at = now + OVERDUE_CHECK_INTERVAL
            self._requeue(self.acker.overdue(now))
        batch = self.acker.take_pending()
        call = self._call
        if self._half_close and call is not None and call is not self._half_closed_call:
            # Shutdown: write what is pending, then end our side of the stream.
            self._half_closed_call = call
            stream, unary = self.acker.route(batch, stream_open=True, stopping=True)
            self._requeue(unary)
            await self._write(call, stream, now, half_close=True)
            return
        stream_open = call is not None and not self._half_close
        stream, unary = self.acker.route(
            batch, stream_open=stream_open, stopping=self.dispatch.stopped
        )
        self._requeue(unary)
        if call is None and self.acker.pending and not self.dispatch.stopped:
            await self._stream_ready.wait()  # reconnecting: send on the next stream
            return
        if stream_open and (
            stream or now - self._last_write >= self.stream_settings.keepalive_interval
        ):
            await self._write(call, stream, now, half_close=False)

    async def _write(
        self, call: PullStream | None, batch: list[AckRequest], now: float, *, half_close: bool
    ) -> None:
        assert call is not None
        requests = self.acker.stream_requests(batch, now) if batch else []
        if not requests and not half_close:
            requests = [pubsub_pb2.StreamingPullRequest()]  # keep-alive
        try:
            for request in requests:
                await call.send(request)
            if half_close:
                await call.done_writing()
        except EoclientError:
            # The stream broke under us; the receiver reconnects and requeues.
            if self.acker.exactly_once:
                self._requeue(self.acker.stream_lost())
        self._last_write = now

    # ================================================================ statistics

    def statistics(self) -> SubscriberStatistics:
        dispatch = self.dispatch.statistics()
        acker = self.acker.stats
        return SubscriberStatistics(
            outstanding_messages=dispatch.outstanding_messages,
            outstanding_bytes=dispatch.outstanding_bytes,
            held_messages=dispatch.held_messages,
            leased_messages=dispatch.leased_messages,
            received=dispatch.received,
            acked=acker.acks,
            nacked=acker.nacks,
            expired=dispatch.expired,
            retried=acker.retried,
            reconnects=self._reconnects,
            ack_mode=self.acker.mode.value if self.acker.exactly_once else "stream",
        )


def new_client_id() -> str:
    return str(uuid.uuid4())


__all__ = ["AckMode", "SessionState", "StreamingSession", "SubscriberStatistics"]
