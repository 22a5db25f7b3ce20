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
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Protocol

from eoclient._clock import AsyncClock
from eoclient._proto import pubsub_pb2
from eoclient._retrying import retry_delay
from eoclient.errors import EoclientError, RpcError
from eoclient.subscriber.ack_records import AckRecord, Operation, Position
from eoclient.subscriber.ledger import AckLedger, AckMode, Outgoing
from eoclient.subscriber.transport import PullStream, SubscriberTransport
from eoclient.subscriber.unary_acks import UnaryCall
from eoclient.subscriber.waiters import deliver

__all__ = ["ACK_BATCH_LATENCY", "OVERDUE_CHECK_INTERVAL", "AckSender", "RequestSpans"]

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


class RequestSpans(Protocol):
    """The tracing of what the sender sends (``spans.py``): a span per operation of each
    request it writes or calls, and each message's result as its record gets it."""

    def writing(self, requests: Sequence[pubsub_pb2.StreamingPullRequest]) -> Any:
        """Stream requests about to be written; returns what :meth:`written` ends."""
        ...

    def written(self, spans: Any, error: EoclientError | None) -> None: ...

    def calling(self, kind: Operation, seconds: int, ack_ids: Sequence[str]) -> Any:
        """A unary attempt about to be made; returns what :meth:`called` ends."""
        ...

    def called(self, spans: Any, attempted: Sequence[Position], error: RpcError | None) -> None: ...

    def resolved(self, records: Iterable[AckRecord]) -> None:
        """``records`` got results (some positions, or all)."""
        ...


def _never(now: float) -> None:
    return None


class AckSender:
    """Sends what one :class:`AckLedger` holds: on the attached stream, or by unary call.

    Args:
        before_send: called with ``now`` before each take (the dispatch core queues the
            lease renewals due).
        next_due: when ``before_send`` next has something to do (the sender wakes then).
        keepalive_interval: seconds between writes on an idle stream.
        spans: the session's tracing; ``None`` (tracing off) costs one test per request
            written, unary attempt and batch of results.
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
        spans: RequestSpans | None = None,
    ) -> None:
        self.ledger = ledger
        self.spans = spans
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
        lost = self.ledger.stream_lost()
        if lost:
            logger.debug(
                "stream of %s ended with %d ack ids unconfirmed: resent by unary call",
                self.subscription,
                len(lost),
            )
        self.resend(lost, ambiguous=True)

    def confirmed(self, response: pubsub_pb2.StreamingPullResponse) -> None:
        """A response's confirmations: resolve what they settle, retry what they refuse."""
        resolved, retry = self.ledger.on_confirmation(response)
        self._deliver(resolved)
        if logger.isEnabledFor(logging.DEBUG) and (retry or _refused(response)):
            _log_refusals(self.subscription, response, len(retry))
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
        self._deliver(self.ledger.fail_all(info))

    def _deliver(self, records: list[AckRecord]) -> None:
        """Hand results to their waiters (``waiters.deliver``), then to the tracing."""
        deliver(records)
        if self.spans is not None and records:
            self.spans.resolved(records)

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
            probing = ledger.mode is AckMode.UNKNOWN
            overdue = ledger.overdue(now)
            if overdue or (probing and ledger.mode is AckMode.UNARY):
                logger.debug(
                    "%s: %d ack ids had no stream confirmation in time: resent by unary call%s",
                    self.subscription,
                    len(overdue),
                    " (the server does not confirm on streams: exactly-once results by "
                    "unary call from now)"
                    if probing and ledger.mode is AckMode.UNARY
                    else "",
                )
            self.resend(overdue, ambiguous=True)
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
        spans = None if self.spans is None else self.spans.writing(requests)
        broken: EoclientError | None = None
        try:
            for request in requests:
                await call.send(request)
            if half_close:
                await call.done_writing()
        except EoclientError as error:
            # The stream broke under us. The receiver reads what the server wrote before
            # the break (confirmations of acks it applied among them), then detaches the
            # stream, which resends whatever is still unconfirmed. Declaring them lost
            # here, before those confirmations are read, sent acks the server had applied
            # to unary retries that found them settled: OTHER (docs/soak.md).
            broken = error
        if spans is not None:
            assert self.spans is not None
            self.spans.written(spans, broken)
        self._last_write = now
        # Without exactly-once, written is done (and a broken stream loses acks, which are
        # best effort there).
        self._deliver(outgoing.resolved)

    # ============================================================ unary calls

    def resend(self, positions: Sequence[Position], *, ambiguous: bool) -> None:
        """Send ``positions`` by unary call, in a task of their own."""
        if positions:
            self.start_unary(
                self.ledger.unary.plan(positions, self.clock.now(), ambiguous=ambiguous)
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
        while call:
            ack_ids = call.ack_ids()
            attempted = call.positions if self.spans is not None else []
            spans = (
                None if self.spans is None else self.spans.calling(call.kind, call.seconds, ack_ids)
            )
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
            resolved = ledger.unary.apply_answer(call, error)
            if spans is not None:
                assert self.spans is not None
                self.spans.called(spans, attempted, error)
            self._deliver(resolved)
            if error is not None:
                _log_unary_failure(self.subscription, call, len(ack_ids), error)
            if not call:
                return
            elapsed = self.clock.now() - call.started
            delay = retry_delay(ledger.retry, call.attempt, elapsed, self.rng)
            if delay is None:
                logger.debug(
                    "%s: %d ack ids still failing after the %g s retry deadline: reported OTHER",
                    self.subscription,
                    len(call),
                    ledger.retry.deadline,
                )
                self._deliver(ledger.unary.give_up(call))
                return
            logger.debug("%s: retrying %d ack ids in %.3f s", self.subscription, len(call), delay)
            await self.clock.sleep(delay)


def _refused(response: pubsub_pb2.StreamingPullResponse) -> bool:
    """Whether a response's confirmations list any failure."""
    ack = response.acknowledge_confirmation
    modack = response.modify_ack_deadline_confirmation
    return bool(
        ack.invalid_ack_ids
        or ack.unordered_ack_ids
        or ack.temporary_failed_ack_ids
        or modack.invalid_ack_ids
        or modack.temporary_failed_ack_ids
    )


def _log_refusals(
    subscription: str, response: pubsub_pb2.StreamingPullResponse, retried: int
) -> None:
    """Exactly-once failures a stream confirmation reported (debug)."""
    ack = response.acknowledge_confirmation
    modack = response.modify_ack_deadline_confirmation
    logger.debug(
        "%s: the server refused acks (%d invalid, %d unordered, %d temporarily failed) and "
        "modacks (%d invalid, %d temporarily failed); %d retried by unary call",
        subscription,
        len(ack.invalid_ack_ids),
        len(ack.unordered_ack_ids),
        len(ack.temporary_failed_ack_ids),
        len(modack.invalid_ack_ids),
        len(modack.temporary_failed_ack_ids),
        retried,
    )


def _log_unary_failure(subscription: str, call: UnaryCall, sent: int, error: RpcError) -> None:
    """A unary Acknowledge / ModifyAckDeadline that failed, wholly or for some ids (debug)."""
    if not logger.isEnabledFor(logging.DEBUG):
        return
    rpc = "Acknowledge" if call.kind is Operation.ACK else f"ModifyAckDeadline({call.seconds} s)"
    logger.debug(
        "%s of %d ack ids on %s failed (attempt %d): %s; %d of them to retry",
        rpc,
        sent,
        subscription,
        call.attempt,
        error,
        len(call),
    )
