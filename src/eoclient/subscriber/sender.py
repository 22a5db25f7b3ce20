"""The sender: the one writer on a subscription's stream, and the maker of its unary calls.

It performs what the ack ledger (``ledger.py``) decides: it wakes when the ledger has
something to send (or a lease renewal, a keep-alive or an overdue check is due), takes it
(:meth:`AckLedger.take`), writes the stream requests (docs/architecture.md#one-task-owns-sending:
after the first request, nothing else writes on the stream), makes the unary calls with their
retries, and hands every answer back to the ledger, then the results to their waiters
(``waiters.deliver``).

The receiver (``receiver.py``) opens each stream, sends its first request and
:meth:`AckSender.attach` es it here; from then on the stream is the sender's until
:meth:`AckSender.detach`. Tasks run in the owner's TaskGroup (``spawn``) and never raise
into it: an unexpected failure goes to ``fail``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from eoclient._clock import AsyncClock
from eoclient._proto import pubsub_pb2
from eoclient.errors import EoclientError, RpcError
from eoclient.subscriber.ledger import AckLedger, Operation, Outgoing, Position, UnaryCall
from eoclient.subscriber.transport import PullStream, SubscriberTransport
from eoclient.subscriber.waiters import deliver

__all__ = ["ACK_BATCH_LATENCY", "OVERDUE_CHECK_INTERVAL", "AckSender"]

logger = logging.getLogger("eoclient.subscriber")

# After waking, the sender waits this long before taking what is pending. Zero still
# means one turn of the event loop, which is enough to batch every ack issued in the same
# turn (a burst of handlers finishing, or the consumer's loop, which yields every 100
# messages); measured with benchmarks/subscriber.py, 2 ms instead cost 10-25 % of
# throughput by holding acks back from the server's flow control.
ACK_BATCH_LATENCY = 0.0
# How often requests awaiting a stream confirmation are checked for being late
# (ledger.PROBE_TIMEOUT is 2 s, so a check every 0.5 s notices within a quarter).
OVERDUE_CHECK_INTERVAL = 0.5

Spawn = Callable[[Coroutine[Any, Any, None], str], object]


def _never(now: float) -> None:
    return None


class AckSender:
    """Sends what one :class:`AckLedger` holds: on the attached stream, or by unary call.

    Args:
        before_send: called with ``now`` before each take (the dispatch core queues the
            lease renewals due).
        next_due: when ``before_send`` next has something to do (the sender wakes then).
        keepalive_interval: seconds between writes on an idle stream.
    """

    def __init__(
        self,
        ledger: AckLedger,
        transport: SubscriberTransport,
        subscription: str,
        *,
        clock: AsyncClock,
        rng: random.Random,
        spawn: Spawn,
        fail: Callable[[BaseException], None],
        before_send: Callable[[float], None] = _never,
        next_due: Callable[[], float] = lambda: float("inf"),
        keepalive_interval: float = 30.0,
    ) -> None:
        self.ledger = ledger
        self.transport = transport
        self.subscription = subscription
        self.clock = clock
        self.rng = rng
        self._spawn = spawn
        self._fail = fail
        self._before_send = before_send
        self._next_due = next_due
        self._keepalive_interval = keepalive_interval
        self.wake = asyncio.Event()  # set when there is something to send
        self.ready = asyncio.Event()  # set while a stream is attached (or at shutdown)
        self.call: PullStream | None = None  # the attached stream
        self._stopping = False  # shutdown: no stream will come for what is pending
        self._half_close = False  # shutdown: end our side of the stream
        self._half_closed_call: PullStream | None = None
        self._last_write = 0.0
        self._overdue_check_at = 0.0

    # ============================================================ the stream

    def attach(self, call: PullStream) -> None:
        """A stream is open (its first request sent): the sender writes on it from now."""
        self.call = call
        self.ready.set()
        self.wake.set()

    def detach(self, call: PullStream) -> None:
        """``call`` has ended: what awaited its confirmations goes by unary call."""
        if self.call is call:
            self.call = None
            self.ready.clear()
        self.resend(self.ledger.stream_lost(), ambiguous=True)

    def confirmed(self, response: pubsub_pb2.StreamingPullResponse) -> None:
        """A response's confirmations: resolve what they settle, retry what they refuse."""
        resolved, retry = self.ledger.on_confirmation(response)
        deliver(resolved)
        self.resend(retry, ambiguous=False)

    def begin_shutdown(self) -> None:
        """Nothing more will be received: pending requests no longer wait for a stream."""
        self._stopping = True
        self.ready.set()  # a sender waiting for a reconnect sends by unary call instead
        self.wake.set()

    def half_close(self) -> None:
        """Write what is pending on the stream, then end our side of it."""
        self._half_close = True
        self.wake.set()

    def fail_all(self, info: str) -> None:
        """Resolve everything unresolved as OTHER with ``info`` (nothing will send it)."""
        deliver(self.ledger.fail_all(info))

    # ============================================================ the task

    async def run(self) -> None:
        """The sender task: wait for work, send it, for as long as the session runs."""
        try:
            while True:
                await self._wait_for_work()
                await self._send_once()
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    async def _wait_for_work(self) -> None:
        wakeups = [self._last_write + self._keepalive_interval, self._next_due()]
        if self.ledger.awaiting_confirmation():
            wakeups.append(self._overdue_check_at)
        delay = max(0.0, min(wakeups) - self.clock.now())
        half_close_due = self._half_close and self.call not in (None, self._half_closed_call)
        if not self.ledger.has_pending and not half_close_due:
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.wake.wait()
            # Let a burst of acks from handlers finishing together join one batch.
            await self.clock.sleep(ACK_BATCH_LATENCY)

    async def _send_once(self) -> None:
        ledger = self.ledger
        now = self.clock.now()
        self._before_send(now)
        if now >= self._overdue_check_at:
            self._overdue_check_at = now + OVERDUE_CHECK_INTERVAL
            self.resend(ledger.overdue(now), ambiguous=True)
        call = self.call
        if self._half_close and call is not None and call is not self._half_closed_call:
            # Shutdown: write what is pending, then end our side of the stream.
            self._half_closed_call = call
            outgoing = ledger.take(now, stream_open=True, stopping=True)
            self.start_unary(outgoing.unary)
            await self._write(call, outgoing, now, half_close=True)
            return
        stream_open = call is not None and not self._half_close
        outgoing = ledger.take(now, stream_open=stream_open, stopping=self._stopping)
        self.start_unary(outgoing.unary)
        if call is None and ledger.has_pending and not self._stopping:
            await self.ready.wait()  # reconnecting: send on the next stream
            return
        keepalive_due = now - self._last_write >= self._keepalive_interval
        if call is not None and stream_open and (outgoing.stream or keepalive_due):
            await self._write(call, outgoing, now, half_close=False)

    async def _write(
        self, call: PullStream, outgoing: Outgoing, now: float, *, half_close: bool
    ) -> None:
        requests = outgoing.stream
        if not requests and not half_close:
            requests = [pubsub_pb2.StreamingPullRequest()]  # keep-alive
        try:
            for request in requests:
                await call.send(request)
            if half_close:
                await call.done_writing()
        except EoclientError:
            # The stream broke under us. The receiver reads what the server wrote before
            # the break (confirmations of acks it applied among them), then detaches the
            # stream, which resends whatever is still unconfirmed. Declaring them lost
            # here, before those confirmations are read, sent acks the server had applied
            # to unary retries that found them settled: OTHER (docs/soak.md).
            pass
        self._last_write = now
        # Without exactly-once, written is done (and a broken stream loses acks, which are
        # best effort there).
        deliver(outgoing.resolved)

    # ============================================================ unary calls

    def resend(self, positions: Sequence[Position], *, ambiguous: bool) -> None:
        """Send ``positions`` by unary call, in a task of their own."""
        if positions:
            self.start_unary(
                self.ledger.plan_unary(positions, self.clock.now(), ambiguous=ambiguous)
            )

    def start_unary(self, calls: list[UnaryCall]) -> None:
        """Make ``calls`` (and their retries) in a task of their own."""
        if calls:
            self._spawn(self._unary_task(calls), "eoclient-unary-acks")

    async def _unary_task(self, calls: list[UnaryCall]) -> None:
        try:
            await self.send_unary(calls)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)

    async def send_unary(self, calls: list[UnaryCall]) -> None:
        """Make ``calls``, all in flight together (they are independent of each other),
        each retried until its ids have results or the retry deadline passes."""
        if len(calls) == 1:
            await self._call_with_retry(calls[0])
            return
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(self._call_with_retry(call))

    async def _call_with_retry(self, call: UnaryCall) -> None:
        ledger = self.ledger
        while call.positions:
            ack_ids = call.ack_ids()
            error: RpcError | None = None
            try:
                if call.kind is Operation.ACK:
                    await self.transport.acknowledge(self.subscription, ack_ids)
                else:
                    await self.transport.modify_ack_deadline(
                        self.subscription, ack_ids, call.seconds
                    )
            except RpcError as failure:
                error = failure
            deliver(ledger.apply_unary_answer(call, error))
            if not call.positions:
                return
            delay = ledger.retry_delay(call.attempt, self.clock.now() - call.started, self.rng)
            if delay is None:
                deliver(ledger.give_up(call))
                return
            await self.clock.sleep(delay)
