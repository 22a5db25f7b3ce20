"""The two tasks that work a subscription's StreamingPull stream, for the session shell.

* :meth:`StreamTasks.receive` opens the stream (reopening it with jittered exponential
  backoff on a retryable status) and feeds each response to the dispatch core;
* :meth:`StreamTasks.send` is the only writer after the first request (architecture
  principle 3): acks, nacks, modacks, lease extensions and keep-alives, routed by the
  ledger (``Acker.route``) to the stream or to unary calls.

Both run in the session's TaskGroup and never raise into it: a permanent failure goes to
the session's ``fail`` callback. The decisions are the cores' (``Dispatcher``, ``Acker``);
this performs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

from eoclient._clock import AsyncClock
from eoclient._proto import pubsub_pb2
from eoclient.errors import EoclientError, RpcError, StreamClosedError
from eoclient.subscriber.acker import Acker, AckRequest
from eoclient.subscriber.dispatch import Dispatcher
from eoclient.subscriber.settings import FlowControl, StreamSettings
from eoclient.subscriber.transport import PullStream, SubscriberTransport

logger = logging.getLogger("eoclient.subscriber")

# After waking, the sender waits this long before taking the pending acks. Zero still
# means one turn of the event loop, which is enough to batch every ack issued in the same
# turn (a burst of handlers finishing, or the consumer's loop, which yields every 100
# messages); measured with benchmarks/subscriber.py, 2 ms instead cost 10-25 % of
# throughput by holding acks back from the server's flow control.
ACK_BATCH_LATENCY = 0.0
# How often requests awaiting a stream confirmation are checked for being late
# (acker.PROBE_TIMEOUT is 2 s, so a check every 0.5 s notices within a quarter).
OVERDUE_CHECK_INTERVAL = 0.5

Spawn = Callable[[Coroutine[Any, Any, None], str], object]


class StreamTasks:
    """The stream of one session: its receiver and its sender."""

    def __init__(
        self,
        transport: SubscriberTransport,
        subscription: str,
        *,
        acker: Acker,
        dispatch: Dispatcher,
        flow_control: FlowControl,
        stream: StreamSettings,
        client_id: str,
        clock: AsyncClock,
        rng: random.Random,
        spawn: Spawn,
        fail: Callable[[BaseException], None],
    ) -> None:
        self.transport = transport
        self.subscription = subscription
        self.acker = acker
        self.dispatch = dispatch
        self.flow_settings = flow_control
        self.stream_settings = stream
        self.client_id = client_id
        self.clock = clock
        self.rng = rng
        self._spawn = spawn
        self._fail = fail
        self.call: PullStream | None = None  # the current stream, None while reconnecting
        self.ready = asyncio.Event()  # set while a stream is open (or at shutdown)
        self.half_close = False  # shutdown asks the sender to half-close the stream
        self._half_closed_call: PullStream | None = None
        self._last_write = 0.0
        self._overdue_check_at = 0.0
        self.reconnects = 0

    def initial_request(self) -> pubsub_pb2.StreamingPullRequest:
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

    def requeue(self, requests: list[AckRequest]) -> None:
        """Send ``requests`` by unary call, in a task of their own."""
        if requests:
            self._spawn(self._unary(requests), "eoclient-unary-acks")

    async def _unary(self, requests: list[AckRequest]) -> None:
        try:
            await self.acker.send_unary(requests)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    # ================================================================ receiving

    async def receive(self) -> None:
        backoff = self.stream_settings.reconnect_initial_backoff
        try:
            while self._receiving():
                call = self.transport.open_stream(self.subscription)
                error: RpcError | None = None
                try:
                    with contextlib.suppress(StreamClosedError):  # receive() says how
                        await call.send(self.initial_request())
                        self.call = call
                        self.ready.set()
                        self.acker.wake.set()
                    while (response := await call.receive()) is not None:
                        backoff = self.stream_settings.reconnect_initial_backoff
                        self.requeue(self.dispatch.on_response(response, self.clock.now()))
                    if not self._receiving():
                        return
                    # The server ended the stream with OK: reconnect at once.
                except RpcError as failure:
                    error = failure
                finally:
                    self.ready.clear()
                    self.call = None
                    self.requeue(self.acker.stream_lost())
                if not self._receiving():
                    return
                if error is not None:
                    # Reconnect on a retryable status (the official clients' recover set,
                    # client-anchors §1.8: errors.py's table); any other ends the session.
                    if not error.retryable:
                        self._fail(error)
                        return
                    logger.info("stream of %s ended (%s); reconnecting", self.subscription, error)
                self.reconnects += 1
                await self.clock.sleep(self.rng.uniform(0, backoff))
                backoff = min(backoff * 2, self.stream_settings.reconnect_max_backoff)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    # ================================================================ sending

    async def send(self) -> None:
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
        half_close_due = self.half_close and self.call not in (None, self._half_closed_call)
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
            self.requeue(self.acker.overdue(now))
        batch = self.acker.take_pending()
        call = self.call
        if self.half_close and call is not None and call is not self._half_closed_call:
            # Shutdown: write what is pending, then end our side of the stream.
            self._half_closed_call = call
            stream, unary = self.acker.route(batch, stream_open=True, stopping=True)
            self.requeue(unary)
            await self._write(call, stream, now, half_close=True)
            return
        stream_open = call is not None and not self.half_close
        stream, unary = self.acker.route(
            batch, stream_open=stream_open, stopping=self.dispatch.stopped
        )
        self.requeue(unary)
        if call is None and self.acker.pending and not self.dispatch.stopped:
            await self.ready.wait()  # reconnecting: send on the next stream
            return
        keepalive_due = now - self._last_write >= self.stream_settings.keepalive_interval
        if call is not None and stream_open and (stream or keepalive_due):
            await self._write(call, stream, now, half_close=False)

    async def _write(
        self, call: PullStream, batch: list[AckRequest], now: float, *, half_close: bool
    ) -> None:
        requests = self.acker.stream_requests(batch, now) if batch else []
        if not requests and not half_close:
            requests = [pubsub_pb2.StreamingPullRequest()]  # keep-alive
        try:
            for request in requests:
                await call.send(request)
            if half_close:
                await call.done_writing()
        except EoclientError:
            # The stream broke under us. The receiver reads what the server wrote before
            # the break (confirmations of acks it applied among them), then reconnects and
            # requeues whatever is still unconfirmed (``stream_lost`` in its ``finally``).
            # Declaring them lost here, before those confirmations are read, sent acks the
            # server had applied to unary retries that found them settled: OTHER (docs/soak.md).
            pass
        self._last_write = now
