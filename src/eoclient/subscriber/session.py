"""One subscription's StreamingPull session: the thin async shell around the pure cores.

Tasks, all in one TaskGroup owned by the session (architecture principle 5):

* ``_receive``: opens the stream (and reopens it with jittered exponential backoff
  on retryable statuses), reads responses, leases and admits messages, and feeds
  stream confirmations to the acker;
* ``_send``: the only writer after the first request (principle 3): acks, nacks,
  modacks, lease extensions and keep-alives;
* one task per unary ack batch (exactly-once without stream confirmations), and,
  in handler form, one per running handler.

Background tasks never raise into the group: a permanent failure is stored and
reaches the user once, as one exception, on their next ``await`` (``__anext__``).

Admission path of a received message: lease table → (exactly-once: wait for the
receipt modack's result) → ordering gate (one message out per key) → flow gate (at
most max_messages / max_bytes out) → the queue the application reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import random
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import grpc

from eoclient._clock import Clock, MonotonicClock
from eoclient._proto import pubsub_pb2
from eoclient._transport import PubSubTransport, rpc_error_from_grpc
from eoclient.errors import RpcError
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.acker import Acker, AckMode, AckRequest
from eoclient.subscriber.flow_control import FlowGate
from eoclient.subscriber.histogram import LatencyHistogram, bounded_deadline
from eoclient.subscriber.leases import LeaseActions, LeaseTable
from eoclient.subscriber.message import Message, message_from_wire
from eoclient.subscriber.ordering import OrderingGate
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownBehavior,
    ShutdownOptions,
    StreamSettings,
)

logger = logging.getLogger("eoclient.subscriber")

# After waking, the sender waits this long before taking the pending acks. Zero
# still means one turn of the event loop, which is enough to batch every ack
# issued in the same turn (a burst of handlers finishing, or the consumer's loop,
# which yields every YIELD_EVERY_MESSAGES); measured with benchmarks/subscriber.py,
# 2 ms instead cost 10-25 % of throughput by holding acks back from the server's
# flow control.
ACK_BATCH_LATENCY = 0.0
# __anext__ lets other tasks run after handing out this many messages in a row:
# small enough that acks flow back while a large response is being consumed
# (pipelining with the server's flow control), large enough that the extra loop
# turn (~5 µs) costs well under 0.1 µs a message.
YIELD_EVERY_MESSAGES = 100
# How often requests awaiting a stream confirmation are checked for being late
# (acker.PROBE_TIMEOUT is 2 s, so a check every 0.5 s notices within a quarter).
OVERDUE_CHECK_INTERVAL = 0.5
# After shutdown starts, pending acks get this long to be sent and answered.
FLUSH_TIMEOUT = 10.0
# After the client half-closes its stream at shutdown, the server gets this long to
# send what it had in flight (confirmations, deliveries) and end the call; ours does
# so within milliseconds.
STREAM_CLOSE_TIMEOUT = 2.0


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


class _Closed(Exception):
    pass


class StreamingSession:
    """``async with client.subscribe(...) as stream: async for message in stream: ...``"""

    def __init__(
        self,
        transport: PubSubTransport,
        subscription: str,
        *,
        flow_control: FlowControl,
        lease: LeaseSettings,
        shutdown: ShutdownOptions,
        ack_retry: AckRetrySettings,
        stream: StreamSettings,
        client_id: str,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.subscription = subscription
        self.transport = transport
        self.flow_settings = flow_control
        self.lease_settings = lease
        self.shutdown_options = shutdown
        self.stream_settings = stream
        self.client_id = client_id
        self.clock = clock or MonotonicClock()
        self.rng = rng or random.Random()
        self.state = SessionState.UNOPENED
        self.acker = Acker(subscription, transport, ack_retry)
        self.leases = LeaseTable(max_lease=lease.max_lease)
        self.flow = FlowGate(flow_control)
        self.ordering: OrderingGate[Message] = OrderingGate()
        self.histogram = LatencyHistogram()
        self._ready: deque[Message] = deque()
        self._ready_event = asyncio.Event()
        self._held: dict[str, Message] = {}  # ack id → message waiting in the flow gate
        self._out: dict[str, Message] = {}  # ack id → message handed to the application
        self._settled_event = asyncio.Event()
        self._closed_event = asyncio.Event()
        self._handed_since_yield = 0
        self._lease_check_at = math.inf  # see _due_leases
        self._overdue_check_at = 0.0
        self._fatal: BaseException | None = None
        self._fatal_reported = False
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._call: Any = None  # the current StreamingPull call, None while reconnecting
        self._stream_ready = asyncio.Event()
        self._shutdown_nacked = False
        self._half_close = False  # shutdown asks the sender to half-close the stream
        # Exactly-once: per ordering key, messages waiting for their receipt modack's
        # result, in arrival order, and the results that came in out of that order.
        self._awaiting_receipt: dict[str, deque[Message]] = {}
        self._receipt_results: dict[str, AckResult] = {}
        self._half_closed_call: Any = None
        self._receive_task: asyncio.Task[None] | None = None
        self._received = 0
        self._reconnects = 0
        self._last_write = 0.0
        self._stop_receiving = False

    def __repr__(self) -> str:
        return (
            f"<StreamingSession {self.subscription} {self.state.value} "
            f"[{len(self._out)} out, {len(self._held)} held, {len(self._ready)} ready]>"
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
        """Stop receiving: nack what was never handed out and close the stream at once;
        then wait for handlers (per the options), nack what they still hold, and flush.

        The stream is closed first because the server would otherwise keep delivering
        on it, the nacked messages among them. What the application settles after that
        goes by unary call (ack ids are not tied to a stream), exactly-once results
        included.
        """
        self._stop_receiving = True
        # A sender waiting for a reconnect (which will not come now) sends by unary call.
        self._stream_ready.set()
        never_out = list(self._ready) + list(self._held.values()) + self.ordering.drain()
        self._ready.clear()
        for message in never_out:
            self._forget(message)
            self.acker.submit(message.ack_id, "nack")
        self._held.clear()
        await self._close_stream()
        options = self.shutdown_options
        if (
            wait_for_processing
            and options.behavior is ShutdownBehavior.WAIT_FOR_PROCESSING
            and self._out
        ):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(options.timeout):
                    while self._out and self._fatal is None:
                        self._settled_event.clear()
                        await self._settled_event.wait()
        self._nack_outstanding()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_TIMEOUT):
                while not self.acker.idle() and self._fatal is None:
                    self.acker.wake.set()
                    await asyncio.sleep(0.005)

    async def _close_stream(self) -> None:
        """Half-close the stream (through the sender, its only writer) and read it to its end.

        The sender first writes what is pending (the nacks of messages never handed
        out, acks); their confirmations and the messages the server had in flight
        arrive before the call ends (the latter are nacked, by unary call).
        """
        receiver = self._receive_task
        if receiver is None or receiver.done():
            return
        if self._call is None:
            # Between streams (reconnect backoff, or the next one still opening):
            # nothing to half-close; _hard_stop cancels the receiver.
            return
        self._half_close = True
        self.acker.wake.set()
        await asyncio.wait({receiver}, timeout=STREAM_CLOSE_TIMEOUT)

    def _nack_outstanding(self) -> None:
        """Shutdown: nack what the application still holds; its later acks report OTHER."""
        self._shutdown_nacked = True
        for message in list(self._out.values()):
            message._settled_as = "nack"
            self.acker.submit(message.ack_id, "nack")
            message._settlement = AckRequest.resolved(
                message.ack_id,
                "nack",
                AckResult(AcknowledgeStatus.OTHER, "shutdown initiated, already nacked"),
            )
            self._forget(message)
        self._out.clear()

    async def _hard_stop(self) -> None:
        if not self._shutdown_nacked:
            # Cancelled before the graceful path got there: settle what the application
            # holds, or it would stay counted and leased, and an ack of it arriving
            # while the tasks wind down would wait for a result nobody sends.
            self._nack_outstanding()
        self.acker.fail_all("the subscriber was closed before the server answered")
        call = self._call
        self._call = None
        if call is not None:
            call.cancel()
        group = self._group
        self._group = None
        try:
            if group is not None:
                for task in list(self._tasks):
                    task.cancel()
                # Our own tasks' cancellation ends quietly inside the group; a
                # CancelledError here is the caller being cancelled, and propagates
                # (the group still waits for every task first).
                await group.__aexit__(None, None, None)
        finally:
            self.state = SessionState.CLOSED
            self._closed_event.set()
            self._ready_event.set()

    # ================================================================ iteration

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        self._handed_since_yield += 1
        if self._handed_since_yield >= YIELD_EVERY_MESSAGES:
            # A consumer that never awaits anything else would otherwise take every
            # ready message before the sender runs: acks would leave only after a
            # whole response, and the server could refill only then (no pipelining).
            self._handed_since_yield = 0
            await asyncio.sleep(0)
        while True:
            self._raise_fatal_once()
            if self._ready:
                message = self._ready.popleft()
                self._out[message.ack_id] = message
                return message
            if self.state is not SessionState.RUNNING:
                raise StopAsyncIteration
            self._ready_event.clear()
            self._handed_since_yield = 0
            await self._ready_event.wait()

    def _raise_fatal_once(self) -> None:
        if self._fatal is not None and not self._fatal_reported:
            self._fatal_reported = True
            raise self._fatal
        if self._fatal is not None:
            raise StopAsyncIteration

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None:
            self._fatal = error
            logger.warning("subscription %s failed: %s", self.subscription, error)
            # Nothing sends after a fatal error: resolve what waits rather than leave
            # an ack_with_response() hanging.
            self.acker.fail_all(f"the subscriber failed before the server answered: {error}")
        self._ready_event.set()
        self._settled_event.set()

    # ================================================================ receiving

    def _initial_request(self) -> pubsub_pb2.StreamingPullRequest:
        fc = self.flow_settings
        return pubsub_pb2.StreamingPullRequest(
            subscription=self.subscription,
            stream_ack_deadline_seconds=int(self._stream_ack_deadline()),
            client_id=self.client_id,
            max_outstanding_messages=fc.max_messages,
            max_outstanding_bytes=fc.max_bytes,
        )

    def _stream_ack_deadline(self) -> float:
        # The stream deadline covers messages until their receipt modack; like the
        # official clients use 60 s, or max_extension when set (client-anchors §1.3).
        if self.lease_settings.max_extension:
            return max(10.0, min(600.0, self.lease_settings.max_extension))
        return self.stream_settings.stream_ack_deadline

    def _lease_deadline(self) -> float:
        return bounded_deadline(
            self.histogram.percentile(99),
            min_extension=self.lease_settings.min_extension,
            max_extension=self.lease_settings.max_extension,
            exactly_once=self.acker.exactly_once,
        )

    def _receiving(self) -> bool:
        # A method, not a field read, because shutdown flips the flag from another task.
        return not self._stop_receiving

    async def _receive(self) -> None:
        backoff = self.stream_settings.reconnect_initial_backoff
        try:
            while self._receiving():
                call = self.transport.streaming_pull(self.subscription)
                error: RpcError | None = None
                try:
                    await call.write(self._initial_request())
                    self._call = call
                    self._stream_ready.set()
                    self.acker.wake.set()
                    async for response in call:
                        backoff = self.stream_settings.reconnect_initial_backoff
                        self._on_response(response)
                    if not self._receiving():
                        return
                    # The server ended the stream with OK: reconnect at once.
                except grpc.aio.AioRpcError as failure:
                    error = rpc_error_from_grpc(failure)
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
                await asyncio.sleep(self.rng.uniform(0, backoff))
                backoff = min(backoff * 2, self.stream_settings.reconnect_max_backoff)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    def _on_response(self, response: pubsub_pb2.StreamingPullResponse) -> None:
        if response.HasField("subscription_properties"):
            self.acker.exactly_once = response.subscription_properties.exactly_once_delivery_enabled
        if response.HasField("acknowledge_confirmation") or response.HasField(
            "modify_ack_deadline_confirmation"
        ):
            self._requeue(self.acker.on_confirmation(response))
        if not response.received_messages:
            return
        if self._stop_receiving:
            # Shutting down: what the server had in flight goes back at once (by unary
            # call: the stream is half-closed or about to be).
            for received in response.received_messages:
                self.acker.submit(received.ack_id, "nack")
            return
        now = self.clock.now()
        stream_deadline = self._stream_ack_deadline()
        deadline = int(self._lease_deadline())
        arrived: list[Message] = []
        for received in response.received_messages:
            message = message_from_wire(received, self, now)
            if received.ack_id in self.leases:
                continue  # a duplicate delivery of a lease we hold
            self.leases.add(
                received.ack_id,
                message.size,
                now,
                deadline=stream_deadline,
                ordering_key=message.ordering_key,
            )
            arrived.append(message)
        self._received += len(arrived)
        receipts = [self.acker.submit(m.ack_id, "modack", deadline) for m in arrived]
        self.leases.extended([m.ack_id for m in arrived], deadline, now)
        if arrived:
            self._lease_check_soon(now, min(deadline, stream_deadline))
        if self.acker.exactly_once:
            # Hand out only messages whose receipt modack succeeded: an invalid id
            # means the lease is already lost (client-anchors §1.5).
            for message in arrived:
                if message.ordering_key:
                    self._awaiting_receipt.setdefault(message.ordering_key, deque()).append(message)
            pending = _ReceiptBatch(arrived, receipts, self._admit_after_receipt)
            for receipt in receipts:
                receipt.callback = pending.one_done
        else:
            for message in arrived:
                self._admit(message)

    def _admit_after_receipt(self, messages: list[Message], results: list[AckResult]) -> None:
        for message, result in zip(messages, results, strict=True):
            if not message.ordering_key:
                self._after_receipt(message, result)
                continue
            # A key's messages go on in arrival order, whichever receipt resolved
            # first: a later message of the key (another response, whose receipt
            # succeeded at once) must not overtake one whose receipt is being retried.
            self._receipt_results[message.ack_id] = result
            queue = self._awaiting_receipt.get(message.ordering_key)
            while queue and queue[0].ack_id in self._receipt_results:
                head = queue.popleft()
                self._after_receipt(head, self._receipt_results.pop(head.ack_id))
            if not queue:
                self._awaiting_receipt.pop(message.ordering_key, None)

    def _after_receipt(self, message: Message, result: AckResult) -> None:
        if self._stop_receiving:
            self.leases.remove(message.ack_id)
            self.acker.submit(message.ack_id, "nack")
        elif result.status is AcknowledgeStatus.SUCCESS:
            self._admit(message)
        else:
            self.leases.remove(message.ack_id)

    def _admit(self, message: Message) -> None:
        if self.ordering.offer(message.ordering_key, message):
            self._offer_flow(message)

    def _offer_flow(self, message: Message) -> None:
        if self.flow.offer(message.ack_id, message.size):
            self._hand_out(message)
        else:
            self._held[message.ack_id] = message

    def _hand_out(self, message: Message) -> None:
        self._ready.append(message)
        self._ready_event.set()

    # ================================================================ settling

    def settle(self, message: Message, operation: str, seconds: int) -> AckRequest:
        """Called once per message by ``Message.ack`` / ``nack`` (the _AckSink protocol)."""
        if self.state is SessionState.CLOSED:
            return _resolved(message, operation, "the subscriber is closed")
        now = self.clock.now()
        if operation == "ack":
            self.histogram.record(now - message.received_at)
        was_out = self._out.pop(message.ack_id, None) is not None
        self._forget(message)
        if operation == "nack" and message.ordering_key:
            # The server redelivers the rest of the key in order: drop our copies.
            for stale in self.ordering.discard_key(message.ordering_key):
                self._forget(stale)
        if was_out or message.ordering_key:
            released = self.ordering.done(message.ordering_key) if message.ordering_key else None
            if released is not None:
                self._offer_flow(released)
        self._settled_event.set()
        if self._fatal is not None:
            # Nothing will send it: the session has failed (_fail).
            return _resolved(message, operation, f"the subscriber failed: {self._fatal}")
        return self.acker.submit(message.ack_id, operation, seconds)

    def extend(self, message: Message, seconds: int) -> AckRequest:
        if self._fatal is not None or self.state is SessionState.CLOSED:
            return _resolved(message, "modack", "the subscriber is closed or failed")
        now = self.clock.now()
        self.leases.extended([message.ack_id], seconds, now)
        self._lease_check_soon(now, seconds)
        return self.acker.submit(message.ack_id, "modack", seconds)

    def _forget(self, message: Message) -> None:
        """Stop leasing and counting a message (acked, nacked, dropped)."""
        self.leases.remove(message.ack_id)
        self._held.pop(message.ack_id, None)
        for admitted in self.flow.release(message.ack_id):
            held = self._held.pop(admitted, None)
            if held is not None:
                self._hand_out(held)

    def _requeue(self, requests: list[AckRequest]) -> None:
        if requests:
            self._spawn(self._unary(requests), "eoclient-unary-acks")

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None] | None:
        """Start a background task in the session's TaskGroup (and remember it to cancel)."""
        if self._group is None:
            coroutine.close()
            return None
        task = self._group.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _unary(self, requests: list[AckRequest]) -> None:
        try:
            await self.acker.send_unary(requests)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    # ================================================================ sending

    async def _send(self) -> None:
        try:
            while True:
                await self._wait_for_work()
                await self._send_once()
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    def _due_leases(self, now: float) -> LeaseActions:
        """``LeaseTable.due``, but only when something can be due.

        ``due`` and ``next_wakeup`` scan the whole table; the sender wakes for every
        batch of acks, so it asks them only once ``_lease_check_at`` has come. That
        time is a lower bound of the next renewal: new leases and shorter modacks
        pull it earlier (``_lease_check_soon``).
        """
        if now < self._lease_check_at:
            return LeaseActions()
        actions = self.leases.due(now, self._lease_deadline())
        wakeup = self.leases.next_wakeup(now)
        self._lease_check_at = math.inf if wakeup is None else wakeup
        return actions

    def _lease_check_soon(self, now: float, lease_seconds: float) -> None:
        # A lease of d seconds is renewed at least d/2 after it starts (leases.py:
        # renewal_margin is at most half the lease), so now + d/2 is never late.
        self._lease_check_at = min(self._lease_check_at, now + lease_seconds / 2)

    async def _wait_for_work(self) -> None:
        now = self.clock.now()
        wakeups = [self._last_write + self.stream_settings.keepalive_interval, self._lease_check_at]
        if self.acker.awaiting:
            wakeups.append(self._overdue_check_at)
        delay = max(0.0, min(wakeups) - now)
        if not self.acker.pending and not self._half_close_due():
            self.acker.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.acker.wake.wait()
            # Let a burst of acks from handlers finishing together join one batch.
            await asyncio.sleep(ACK_BATCH_LATENCY)

    async def _send_once(self) -> None:
        now = self.clock.now()
        actions = self._due_leases(now)
        for released in actions.released:
            message = self._out.pop(released.ack_id, None) or self._held.pop(released.ack_id, None)
            for admitted in self.flow.release(released.ack_id):
                held = self._held.pop(admitted, None)
                if held is not None:
                    self._hand_out(held)
            if message is not None:
                logger.info("message %s held past max_lease; released", message.message_id)
        for ack_id in actions.extend:
            self.acker.submit(ack_id, "modack", actions.deadline_seconds)
        if now >= self._overdue_check_at:
            self._overdue_check_at = now + OVERDUE_CHECK_INTERVAL
            self._requeue(self.acker.overdue(now))
        batch = self.acker.take_pending()
        call = self._call
        if self._half_close:
            await self._half_close_stream(call, batch, now)
            return
        if not batch and now - self._last_write < self.stream_settings.keepalive_interval:
            return
        if batch and not self.acker.uses_stream:
            self._requeue(batch)
            if not self.acker.probing:
                return
            # The mode is not known yet: everything went by unary call; the modacks also
            # go on the stream, where a confirmation shows the server confirms there.
            batch = self.acker.probe(batch) if call is not None else []
            if not batch:
                return
        if call is None:
            if self._stop_receiving:
                # Shutting down: no new stream will come. Ack ids are not tied to a
                # stream, so a unary call does as well.
                self._requeue(batch)
                return
            # Reconnecting: ack ids stay valid across streams; send on the next one.
            self.acker.pending[:0] = batch
            await self._stream_ready.wait()
            return
        requests = (
            self.acker.stream_requests(batch, now)
            if batch
            else [
                pubsub_pb2.StreamingPullRequest()  # keep-alive
            ]
        )
        try:
            for request in requests:
                await call.write(request)
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            # The stream broke under us; the receiver reconnects and requeues.
            if self.acker.exactly_once:
                self._requeue(self.acker.stream_lost())
        self._last_write = now

    async def _half_close_stream(self, call: Any, batch: list[AckRequest], now: float) -> None:
        """Shutdown: write what is pending, then end our side of the stream; anything
        submitted later goes by unary call."""
        if call is None or call is self._half_closed_call:
            self._requeue(batch)
            return
        self._half_closed_call = call
        try:
            if batch and self.acker.uses_stream:
                for request in self.acker.stream_requests(batch, now):
                    await call.write(request)
            elif batch:
                self._requeue(batch)
            await call.done_writing()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            if self.acker.exactly_once:
                self._requeue(self.acker.stream_lost())

    def _half_close_due(self) -> bool:
        return (
            self._half_close
            and self._call is not None
            and (self._call is not self._half_closed_call)
        )

    # ================================================================ statistics

    def statistics(self) -> SubscriberStatistics:
        flow = self.flow.statistics()
        leases = self.leases.statistics()
        acker = self.acker.stats
        return SubscriberStatistics(
            outstanding_messages=flow.outstanding_messages,
            outstanding_bytes=flow.outstanding_bytes,
            held_messages=len(self._held) + self.ordering.statistics().parked_messages,
            leased_messages=leases.leased_messages,
            received=self._received,
            acked=acker.acks,
            nacked=acker.nacks,
            expired=leases.released_for_max_lease,
            retried=acker.retried,
            reconnects=self._reconnects,
            ack_mode=self.acker.mode.value if self.acker.exactly_once else "stream",
        )


# ============================================================ handler form


async def run_handler(
    session: StreamingSession,
    handler: Callable[[Message], Awaitable[Any]],
) -> None:
    """Run ``handler`` once per message, concurrently (bounded by flow control).

    A handler that raises gets its message nacked (if it did not settle it). Returns
    when cancelled or when the session ends; a fatal session error is raised.
    """
    failure: Exception | None = None
    async with asyncio.TaskGroup() as handlers:
        try:
            async for message in session:
                handlers.create_task(_run_one(handler, message))
        except Exception as error:  # the session's fatal error, from __anext__
            failure = error
    if failure is not None:
        # Raised as itself once the running handlers have finished, not wrapped in
        # the TaskGroup's ExceptionGroup.
        raise failure


async def _run_one(handler: Callable[[Message], Awaitable[Any]], message: Message) -> None:
    try:
        await handler(message)
    except asyncio.CancelledError:
        # run() was cancelled: give the message back now (nobody will settle it; the
        # session's shutdown would otherwise wait for it).
        if not message.settled:
            message.nack()
        raise
    except Exception:
        logger.exception("handler failed for message %s; nacking it", message.message_id)
        if not message.settled:
            message.nack()


class _ReceiptBatch:
    """The receipt modacks of one response: when all have results, admit the messages.

    Plain callbacks rather than a gathered future per modack: one fewer future,
    callback and loop iteration per message on the exactly-once hot path.
    """

    __slots__ = ("_done", "_messages", "_remaining", "_requests")

    def __init__(
        self,
        messages: list[Message],
        requests: list[AckRequest],
        done: Callable[[list[Message], list[AckResult]], None],
    ) -> None:
        self._messages = messages
        self._requests = requests
        self._remaining = len(requests)
        self._done = done

    def one_done(self, _: AckRequest) -> None:
        self._remaining -= 1
        if self._remaining == 0:
            results: list[AckResult] = []
            for request in self._requests:
                assert request.result is not None  # called only once a result is set
                results.append(request.result)
            self._done(self._messages, results)


def _resolved(message: Message, operation: str, info: str) -> AckRequest:
    return AckRequest.resolved(message.ack_id, operation, AckResult(AcknowledgeStatus.OTHER, info))


def new_client_id() -> str:
    return str(uuid.uuid4())


__all__ = ["AckMode", "SessionState", "StreamingSession", "SubscriberStatistics", "run_handler"]
