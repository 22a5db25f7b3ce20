"""Acks, nacks and modacks: batching, the two result paths, and retries.

Requests queue here; the session's one sender task takes them in batches. Where
results come from (architecture principle 4, one pure classifier in ``ack_results``):

* Without exactly-once: requests go on the stream and resolve SUCCESS once written
  (acks are best effort; client-anchors §1.6).
* With exactly-once, on a server that confirms on the stream (our reference server):
  requests go on the stream and resolve from ``acknowledge_confirmation`` /
  ``modify_ack_deadline_confirmation``.
* With exactly-once, on a server that does not (Google's emulator 0.8.20 sends no
  confirmations; wire-contract §2.3): unary Acknowledge / ModifyAckDeadline, whose
  INVALID_ARGUMENT + ErrorInfo says which ids failed.

The mode is learnt without holding anything back. While it is UNKNOWN, every request
goes by unary call (which gives exactly-once results on any server), and the modacks
with a deadline (receipts, lease extensions) also go on the stream as the probe: a
modack is idempotent, so applying it twice is harmless, and the first result of the
two stands. The first stream confirmation makes the mode STREAM; none within
``PROBE_TIMEOUT`` makes it UNARY (Google's emulator, and the official clients' way with
the service). Acks and nacks are not doubled: the second copy of an applied ack would
come back INVALID_ACK_ID, and could be read first.

Transient failures are retried by unary call (``unary.py``) with jittered exponential
backoff (:meth:`Acker.retry_delay`) until ``AckRetrySettings.deadline``, then reported
OTHER. An ack whose first attempt may have been applied without us hearing back (stream
broke, or the call failed with a retryable code) is *ambiguous*: if a retry then finds
the id invalid, that may be because the first attempt succeeded, so it is reported
OTHER (may be redelivered) rather than a wrong INVALID_ACK_ID — never SUCCESS, which
would promise no redelivery.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from eoclient._clock import AsyncClock, MonotonicClock
from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError
from eoclient.subscriber.ack_results import (
    AcknowledgeStatus,
    AckOutcome,
    AckResult,
    classify_confirmation,
    classify_unary_error,
)
from eoclient.subscriber.settings import AckRetrySettings
from eoclient.subscriber.transport import SubscriberTransport
from eoclient.subscriber.unary import send_unary

# Ids per request. Go's client derives 2500 from the service's 512 KiB limit per
# Acknowledge/ModifyAckDeadline request and ack ids of up to 164 bytes (2979 would
# fit; 2500 leaves room for the rest of the request) — client-anchors §3.3.
ACK_IDS_PER_REQUEST = 2500
# How long the probe modacks sent on the stream wait for a confirmation before the
# session concludes the server does not confirm on streams. Our server answers within
# milliseconds; 2 s leaves a loaded CI machine ample room. Nothing waits for it: the
# same modacks went by unary call too.
PROBE_TIMEOUT = 2.0
# Sent on the stream under exactly-once, a request that has had no confirmation
# for this long (the server may leave confirmations out: proto comment) is resent
# by unary call, as an ambiguous attempt.
CONFIRMATION_TIMEOUT = 30.0

_SUCCESS = AckResult(AcknowledgeStatus.SUCCESS)


class Operation(enum.StrEnum):
    """What a settlement asks of the server for one ack id.

    A nack is a modack to 0 seconds on the wire; it is its own operation because its
    result and its meaning to the session (the message goes back) differ.
    """

    ACK = "ack"
    NACK = "nack"
    MODACK = "modack"


class AckMode(enum.Enum):
    UNKNOWN = "unknown"  # exactly-once, no confirmation seen yet
    STREAM = "stream"  # exactly-once results arrive as stream confirmations
    UNARY = "unary"  # exactly-once results come from unary calls


@dataclass(eq=False, slots=True)
class AckRequest:
    """One ack, nack or modack of one ack id, and (once known) its result.

    Nobody needs a future for a fire-and-forget ``ack()``, so futures exist only
    for callers that wait: each :meth:`wait` gets a future of its own, so
    cancelling one waiter never cancels the result for another (which sharing one
    future would, and ``asyncio.shield`` would cost a second future per wait).
    """

    ack_id: str
    operation: Operation
    seconds: int  # modack deadline; 0 for ack and nack
    ambiguous: bool = False  # an earlier attempt may have been applied
    sent_at: float = 0.0
    result: AckResult | None = None
    waiters: list[asyncio.Future[AckResult]] | None = None
    # Called synchronously with the request once its result is known.
    callback: Callable[[AckRequest], None] | None = None

    @classmethod
    def resolved(cls, ack_id: str, operation: Operation, result: AckResult) -> AckRequest:
        return cls(ack_id, operation, 0, result=result)

    @property
    def wire_seconds(self) -> int:
        return 0 if self.operation is Operation.NACK else self.seconds

    def wait(self) -> asyncio.Future[AckResult]:
        """A future of the result, for one waiter."""
        future: asyncio.Future[AckResult] = asyncio.get_running_loop().create_future()
        if self.result is not None:
            future.set_result(self.result)
        elif self.waiters is None:
            self.waiters = [future]
        else:
            self.waiters.append(future)
        return future


def _resolve(request: AckRequest, result: AckResult, stats: AckerStatistics | None = None) -> None:
    if request.result is not None:
        return  # the first result stands
    request.result = result
    if stats is not None and request.operation is Operation.ACK:
        stats.ack_resolved(result.status)
    if request.waiters:
        for waiter in request.waiters:
            if not waiter.done():
                waiter.set_result(result)
        request.waiters = None
    if request.callback is not None:
        request.callback(request)


@dataclass
class AckerStatistics:
    acks: int = 0
    nacks: int = 0
    modacks: int = 0
    retried: int = 0
    unary_calls: int = 0
    stream_requests: int = 0
    # Final results of acks, by AcknowledgeStatus name (each ack counted once).
    ack_results: dict[str, int] = field(default_factory=dict)

    def ack_resolved(self, status: AcknowledgeStatus) -> None:
        self.ack_results[status.name] = self.ack_results.get(status.name, 0) + 1


class Acker:
    """Pending ack requests of one subscription and the resolution of their results."""

    def __init__(
        self,
        subscription: str,
        transport: SubscriberTransport,
        retry: AckRetrySettings,
        *,
        exactly_once: bool = False,
        stream_capable: bool = True,
        clock: AsyncClock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.subscription = subscription
        self.transport = transport
        self.retry = retry
        self.clock = clock or MonotonicClock()  # what unary retries wait on
        self.rng = rng or random.Random()  # their jitter
        self.exactly_once = exactly_once
        # A pull()-only acker has no stream: everything goes by unary call.
        self.mode = AckMode.UNKNOWN if stream_capable else AckMode.UNARY
        self.stats = AckerStatistics()
        self.pending: list[AckRequest] = []
        # Sent on the stream, awaiting a confirmation: ack id → request, one table per
        # confirmation kind (a nack is confirmed as a modack).
        self.awaiting_acks: dict[str, AckRequest] = {}
        self.awaiting_modacks: dict[str, AckRequest] = {}
        self.in_flight: set[AckRequest] = set()  # in unary calls (and their retries)
        self.wake = asyncio.Event()

    # ------------------------------------------------------------------ intake

    def submit(self, ack_id: str, operation: Operation, seconds: int = 0) -> AckRequest:
        if operation is Operation.ACK:
            self.stats.acks += 1
        elif operation is Operation.NACK:
            self.stats.nacks += 1
        else:
            self.stats.modacks += 1
        request = AckRequest(ack_id, operation, seconds)
        self.pending.append(request)
        self.wake.set()
        return request

    def take_pending(self) -> list[AckRequest]:
        batch, self.pending = self.pending, []
        return batch

    @property
    def uses_stream(self) -> bool:
        """Whether requests go on the stream (else by unary call; see :meth:`probe`)."""
        return not self.exactly_once or self.mode is AckMode.STREAM

    @property
    def probing(self) -> bool:
        return self.exactly_once and self.mode is AckMode.UNKNOWN

    @staticmethod
    def probe(batch: Sequence[AckRequest]) -> list[AckRequest]:
        """While the mode is unknown: the part of ``batch`` that also goes on the stream.

        Modacks with a deadline only: applying one twice is harmless; an ack or a nack
        applied twice reports INVALID_ACK_ID the second time.
        """
        return [r for r in batch if r.operation is Operation.MODACK]

    def route(
        self, batch: list[AckRequest], *, stream_open: bool, stopping: bool
    ) -> tuple[list[AckRequest], list[AckRequest]]:
        """Where the requests of ``batch`` go: ``(on the stream, by unary call)``.

        Requests for the stream while none is open wait for the next one (back in
        ``pending``; ack ids stay valid across streams), unless the session is stopping:
        no stream will come, and ack ids are not tied to one, so a unary call does.
        While the mode is unknown a request may go both ways (:meth:`probe`).
        """
        if not batch:
            return [], []
        if not self.uses_stream:
            return (self.probe(batch) if self.probing and stream_open else []), batch
        if stream_open:
            return batch, []
        if stopping:
            return [], batch
        self.pending[:0] = batch
        return [], []

    # ------------------------------------------------------------ stream path

    def stream_requests(
        self, batch: Sequence[AckRequest], now: float
    ) -> list[pubsub_pb2.StreamingPullRequest]:
        """Build the stream requests for ``batch`` and record what awaits confirmation.

        Without exactly-once the batch resolves SUCCESS here: written is done.
        """
        requests: list[pubsub_pb2.StreamingPullRequest] = []
        acks = [r for r in batch if r.operation is Operation.ACK]
        modacks = [r for r in batch if r.operation is not Operation.ACK]
        for start in range(0, max(len(acks), len(modacks)), ACK_IDS_PER_REQUEST):
            chunk_acks = acks[start : start + ACK_IDS_PER_REQUEST]
            chunk_modacks = modacks[start : start + ACK_IDS_PER_REQUEST]
            requests.append(
                pubsub_pb2.StreamingPullRequest(
                    ack_ids=[r.ack_id for r in chunk_acks],
                    modify_deadline_ack_ids=[r.ack_id for r in chunk_modacks],
                    modify_deadline_seconds=[r.wire_seconds for r in chunk_modacks],
                )
            )
        self.stats.stream_requests += len(requests)
        if not self.exactly_once:
            for request in batch:
                _resolve(request, _SUCCESS, self.stats)
        else:
            for request in acks:
                request.sent_at = now
                self.awaiting_acks[request.ack_id] = request
            for request in modacks:
                request.sent_at = now
                self.awaiting_modacks[request.ack_id] = request
        return requests

    def on_confirmation(self, response: pubsub_pb2.StreamingPullResponse) -> list[AckRequest]:
        """Resolve what a response confirms; returns requests to retry by unary call."""
        retry: list[AckRequest] = []
        if response.HasField("acknowledge_confirmation"):
            c = response.acknowledge_confirmation
            if not (c.invalid_ack_ids or c.unordered_ack_ids or c.temporary_failed_ack_ids):
                self._confirm_all(self.awaiting_acks, c.ack_ids)  # the common case, fast
            else:
                retry += self._apply_confirmation(
                    self.awaiting_acks,
                    classify_confirmation(
                        [
                            *c.ack_ids,
                            *c.invalid_ack_ids,
                            *c.unordered_ack_ids,
                            *c.temporary_failed_ack_ids,
                        ],
                        confirmed=c.ack_ids,
                        invalid=c.invalid_ack_ids,
                        unordered=c.unordered_ack_ids,
                        temporary_failed=c.temporary_failed_ack_ids,
                    ),
                )
        if response.HasField("modify_ack_deadline_confirmation"):
            m = response.modify_ack_deadline_confirmation
            if not (m.invalid_ack_ids or m.temporary_failed_ack_ids):
                self._confirm_all(self.awaiting_modacks, m.ack_ids)
            else:
                retry += self._apply_confirmation(
                    self.awaiting_modacks,
                    classify_confirmation(
                        [*m.ack_ids, *m.invalid_ack_ids, *m.temporary_failed_ack_ids],
                        confirmed=m.ack_ids,
                        invalid=m.invalid_ack_ids,
                        temporary_failed=m.temporary_failed_ack_ids,
                    ),
                )
        return retry

    def _confirm_all(self, awaiting: dict[str, AckRequest], ack_ids: Iterable[str]) -> None:
        """A confirmation listing only successes: what ``classify_confirmation`` would say
        (every listed id SUCCESS), without building its tables (the per-message hot path)."""
        pop = awaiting.pop
        confirmed = False
        for ack_id in ack_ids:
            request = pop(ack_id, None)
            if request is not None:
                confirmed = True
                _resolve(request, _SUCCESS, self.stats)
        if confirmed:
            self.mode = AckMode.STREAM

    def _apply_confirmation(
        self, awaiting: dict[str, AckRequest], outcome: AckOutcome
    ) -> list[AckRequest]:
        retry: list[AckRequest] = []
        for ack_id, result in outcome.final.items():
            request = awaiting.pop(ack_id, None)
            if request is not None:
                self.mode = AckMode.STREAM
                _resolve(request, result, self.stats)
        for ack_id in outcome.retry:
            request = awaiting.pop(ack_id, None)
            if request is not None:
                self.mode = AckMode.STREAM
                retry.append(request)
        return retry

    def awaiting_confirmation(self) -> bool:
        return bool(self.awaiting_acks or self.awaiting_modacks)

    def overdue(self, now: float) -> list[AckRequest]:
        """Requests sent on the stream whose confirmation is late: resend them by unary call.

        While the mode is UNKNOWN, a late confirmation means the server does not
        confirm on streams: the mode becomes UNARY.
        """
        if not self.awaiting_confirmation():
            return []
        limit = PROBE_TIMEOUT if self.mode is AckMode.UNKNOWN else CONFIRMATION_TIMEOUT
        everything = [*self.awaiting_acks.values(), *self.awaiting_modacks.values()]
        late = [r for r in everything if now - r.sent_at >= limit]
        if not late:
            return []
        if self.mode is AckMode.UNKNOWN:
            # No confirmation will come for any of them: give up on all at once, not
            # each after its own timeout.
            self.mode = AckMode.UNARY
            late = everything
        for request in late:
            awaiting = (
                self.awaiting_acks if kind_of(request) is Operation.ACK else self.awaiting_modacks
            )
            del awaiting[request.ack_id]
            request.ambiguous = request.ambiguous or request.operation is Operation.ACK
        # Probe modacks already answered by their unary copy need nothing more.
        return [r for r in late if r.result is None]

    def stream_lost(self) -> list[AckRequest]:
        """The stream broke: what was awaiting confirmation goes unary, as ambiguous."""
        lost = [*self.awaiting_acks.values(), *self.awaiting_modacks.values()]
        self.awaiting_acks.clear()
        self.awaiting_modacks.clear()
        for request in lost:
            request.ambiguous = request.ambiguous or request.operation is Operation.ACK
        return lost

    # ------------------------------------------------------------- unary path

    async def send_unary(self, batch: Iterable[AckRequest]) -> None:
        """Send ``batch`` by unary calls, retrying transient failures (``unary.py``).

        Until they resolve, the requests count as in flight (``idle()`` is false), and
        ``fail_all`` resolves them if the session is torn down first.
        """
        batch = list(batch)
        self.in_flight.update(batch)
        try:
            await send_unary(self, batch)
        finally:
            self.in_flight.difference_update(batch)

    def apply_unary_answer(
        self,
        kind: Operation,
        remaining: dict[str, AckRequest],
        error: RpcError | None,
        last_reason: dict[str, str],
    ) -> None:
        """Resolve what one unary call's answer settles; leave the rest in ``remaining``.

        An INVALID_ACK_ID for an ambiguous ack (an earlier attempt may have been applied)
        is reported OTHER, never a wrong INVALID_ACK_ID (module docstring). A retryable
        status for the whole call makes its acks ambiguous: it may have been applied
        before the failure (e.g. DEADLINE_EXCEEDED).
        """
        outcome = classify_unary_error(list(remaining), error, exactly_once=True)
        for ack_id, result in outcome.final.items():
            request = remaining.pop(ack_id)
            if result.status is AcknowledgeStatus.INVALID_ACK_ID and request.ambiguous:
                result = AckResult(
                    AcknowledgeStatus.OTHER,
                    "an earlier attempt may have been applied but its answer was "
                    f"lost; a retry found the id settled ({result.info})",
                )
            _resolve(request, result, self.stats)
        whole_call_failed = error is not None and not error.error_info
        for ack_id, reason in outcome.retry.items():
            last_reason[ack_id] = reason
            if whole_call_failed and kind is Operation.ACK:
                remaining[ack_id].ambiguous = True
        if remaining:
            self.stats.retried += len(remaining)

    def retry_delay(self, attempt: int, elapsed: float, rng: random.Random) -> float | None:
        """Seconds to wait before retry number ``attempt`` (1, 2, ...), or ``None``: give up.

        ``initial × multiplier^(attempt-1)``, capped at ``max_backoff``, plus up to one
        ``initial_backoff`` of jitter; none once ``deadline`` has passed since the first
        attempt (``AckRetrySettings``).
        """
        retry = self.retry
        if elapsed >= retry.deadline:
            return None
        backoff = min(retry.max_backoff, retry.initial_backoff * retry.multiplier ** (attempt - 1))
        return backoff + rng.uniform(0, retry.initial_backoff)

    def give_up(self, remaining: dict[str, AckRequest], last_reason: dict[str, str]) -> None:
        for ack_id, request in remaining.items():
            _resolve(
                request,
                AckResult(
                    AcknowledgeStatus.OTHER,
                    f"still failing after the {self.retry.deadline:g} s retry deadline: "
                    f"{last_reason.get(ack_id, 'transient failure')}",
                ),
                self.stats,
            )

    # ---------------------------------------------------------------- closing

    def fail_all(self, info: str) -> None:
        """Resolve everything unresolved as OTHER (shutdown after the flush deadline)."""
        for request in [*self.pending, *self.stream_lost(), *self.in_flight]:
            _resolve(request, AckResult(AcknowledgeStatus.OTHER, info), self.stats)
        self.pending.clear()
        self.in_flight.clear()

    def idle(self) -> bool:
        return not self.pending and not self.awaiting_confirmation() and not self.in_flight


def kind_of(request: AckRequest) -> Operation:
    """The RPC a request goes in: Acknowledge (ACK) or ModifyAckDeadline (MODACK)."""
    return Operation.ACK if request.operation is Operation.ACK else Operation.MODACK
