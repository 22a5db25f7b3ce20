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

Transient failures are retried by unary call with tenacity's jittered exponential
backoff until ``AckRetrySettings.deadline``, then reported OTHER. An ack whose
first attempt may have been applied without us hearing back (stream broke, or the
call failed with a retryable code) is *ambiguous*: if a retry then finds the id
invalid, that may be because the first attempt succeeded, so it is reported OTHER
(may be redelivered) rather than a wrong INVALID_ACK_ID — never SUCCESS, which
would promise no redelivery.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from eoclient._proto import pubsub_pb2
from eoclient._transport import PubSubTransport
from eoclient.errors import RpcError
from eoclient.subscriber.ack_results import (
    AcknowledgeStatus,
    AckOutcome,
    AckResult,
    classify_confirmation,
    classify_unary_error,
)
from eoclient.subscriber.settings import AckRetrySettings

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
    operation: str  # "ack", "nack" or "modack"
    seconds: int  # modack deadline; 0 for ack and nack
    ambiguous: bool = False  # an earlier attempt may have been applied
    sent_at: float = 0.0
    result: AckResult | None = None
    waiters: list[asyncio.Future[AckResult]] | None = None
    # Called synchronously with the request once its result is known.
    callback: Callable[[AckRequest], None] | None = None

    @classmethod
    def resolved(cls, ack_id: str, operation: str, result: AckResult) -> AckRequest:
        return cls(ack_id, operation, 0, result=result)

    @property
    def wire_seconds(self) -> int:
        return 0 if self.operation == "nack" else self.seconds

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


class _RetryNeeded(Exception):
    """Raised inside a tenacity attempt when some ids must be retried."""


def _resolve(request: AckRequest, result: AckResult) -> None:
    if request.result is not None:
        return  # the first result stands
    request.result = result
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


class Acker:
    """Pending ack requests of one subscription and the resolution of their results."""

    def __init__(
        self,
        subscription: str,
        transport: PubSubTransport,
        retry: AckRetrySettings,
        *,
        exactly_once: bool = False,
        stream_capable: bool = True,
    ) -> None:
        self.subscription = subscription
        self.transport = transport
        self.retry = retry
        self.exactly_once = exactly_once
        # A pull()-only acker has no stream: everything goes by unary call.
        self.mode = AckMode.UNKNOWN if stream_capable else AckMode.UNARY
        self.stats = AckerStatistics()
        self.pending: list[AckRequest] = []
        self.awaiting: dict[tuple[str, str], AckRequest] = {}  # (kind, ack_id) → request
        self.in_flight: set[AckRequest] = set()  # in unary calls (and their retries)
        self.wake = asyncio.Event()

    # ------------------------------------------------------------------ intake

    def submit(self, ack_id: str, operation: str, seconds: int = 0) -> AckRequest:
        if operation == "ack":
            self.stats.acks += 1
        elif operation == "nack":
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
        return [r for r in batch if r.operation == "modack"]

    # ------------------------------------------------------------ stream path

    def stream_requests(
        self, batch: Sequence[AckRequest], now: float
    ) -> list[pubsub_pb2.StreamingPullRequest]:
        """Build the stream requests for ``batch`` and record what awaits confirmation.

        Without exactly-once the batch resolves SUCCESS here: written is done.
        """
        requests: list[pubsub_pb2.StreamingPullRequest] = []
        acks = [r for r in batch if r.operation == "ack"]
        modacks = [r for r in batch if r.operation != "ack"]
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
                _resolve(request, _SUCCESS)
        else:
            for request in batch:
                request.sent_at = now
                self.awaiting[(_kind(request), request.ack_id)] = request
        return requests

    def on_confirmation(self, response: pubsub_pb2.StreamingPullResponse) -> list[AckRequest]:
        """Resolve what a response confirms; returns requests to retry by unary call."""
        retry: list[AckRequest] = []
        if response.HasField("acknowledge_confirmation"):
            c = response.acknowledge_confirmation
            retry += self._apply_confirmation(
                "ack",
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
            retry += self._apply_confirmation(
                "modack",
                classify_confirmation(
                    [*m.ack_ids, *m.invalid_ack_ids, *m.temporary_failed_ack_ids],
                    confirmed=m.ack_ids,
                    invalid=m.invalid_ack_ids,
                    temporary_failed=m.temporary_failed_ack_ids,
                ),
            )
        return retry

    def _apply_confirmation(self, kind: str, outcome: AckOutcome) -> list[AckRequest]:
        retry: list[AckRequest] = []
        for ack_id, result in outcome.final.items():
            request = self.awaiting.pop((kind, ack_id), None)
            if request is not None:
                self.mode = AckMode.STREAM
                _resolve(request, result)
        for ack_id in outcome.retry:
            request = self.awaiting.pop((kind, ack_id), None)
            if request is not None:
                self.mode = AckMode.STREAM
                retry.append(request)
        return retry

    def overdue(self, now: float) -> list[AckRequest]:
        """Requests sent on the stream whose confirmation is late: resend them by unary call.

        While the mode is UNKNOWN, a late confirmation means the server does not
        confirm on streams: the mode becomes UNARY.
        """
        if not self.awaiting:
            return []
        limit = PROBE_TIMEOUT if self.mode is AckMode.UNKNOWN else CONFIRMATION_TIMEOUT
        late = [r for r in self.awaiting.values() if now - r.sent_at >= limit]
        if not late:
            return []
        if self.mode is AckMode.UNKNOWN:
            # No confirmation will come for any of them: give up on all at once, not
            # each after its own timeout.
            self.mode = AckMode.UNARY
            late = list(self.awaiting.values())
        for request in late:
            del self.awaiting[(_kind(request), request.ack_id)]
            request.ambiguous = request.ambiguous or request.operation == "ack"
        # Probe modacks already answered by their unary copy need nothing more.
        return [r for r in late if r.result is None]

    def stream_lost(self) -> list[AckRequest]:
        """The stream broke: what was awaiting confirmation goes unary, as ambiguous."""
        lost = list(self.awaiting.values())
        self.awaiting.clear()
        for request in lost:
            request.ambiguous = request.ambiguous or request.operation == "ack"
        return lost

    # ------------------------------------------------------------- unary path

    async def send_unary(self, batch: Iterable[AckRequest]) -> None:
        """Send ``batch`` by unary calls (grouped by operation), retrying transient failures.

        Until they resolve, the requests count as in flight (``idle()`` is false), and
        ``fail_all`` resolves them if the session is torn down first.
        """
        batch = list(batch)
        self.in_flight.update(batch)
        try:
            groups: dict[tuple[str, int], list[AckRequest]] = {}
            for request in batch:
                groups.setdefault((_kind(request), request.wire_seconds), []).append(request)
            calls = [
                self._unary_with_retry(kind, seconds, requests[start : start + ACK_IDS_PER_REQUEST])
                for (kind, seconds), requests in groups.items()
                for start in range(0, len(requests), ACK_IDS_PER_REQUEST)
            ]
            if len(calls) == 1:
                await calls[0]
            else:
                # The calls of one batch (acks, nacks, modacks of each deadline) are
                # independent: in flight together, not one after another.
                async with asyncio.TaskGroup() as group:
                    for call in calls:
                        group.create_task(call)
        finally:
            self.in_flight.difference_update(batch)

    async def _unary_with_retry(self, kind: str, seconds: int, requests: list[AckRequest]) -> None:
        remaining = {r.ack_id: r for r in requests}
        last_reason: dict[str, str] = {}
        retrying = AsyncRetrying(
            stop=stop_after_delay(self.retry.deadline),
            # initial × multiplier^(n-1), capped, plus up to one initial_backoff of
            # jitter. Composed from wait_exponential + wait_random rather than
            # wait_exponential_jitter, whose ``initial`` argument tenacity 9.1
            # deprecated (a warning, i.e. an error under -W error) and whose
            # replacement, ``multiplier``, 9.0 does not have.
            wait=wait_exponential(
                multiplier=self.retry.initial_backoff,
                max=self.retry.max_backoff,
                exp_base=self.retry.multiplier,
            )
            + wait_random(0, self.retry.initial_backoff),
            retry=retry_if_exception_type(_RetryNeeded),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    ids = list(remaining)
                    error: RpcError | None = None
                    self.stats.unary_calls += 1
                    try:
                        if kind == "ack":
                            await self.transport.acknowledge(self.subscription, ids)
                        else:
                            await self.transport.modify_ack_deadline(
                                self.subscription, ids, seconds
                            )
                    except RpcError as failure:
                        error = failure
                    outcome = classify_unary_error(ids, error, exactly_once=True)
                    for ack_id, result in outcome.final.items():
                        request = remaining.pop(ack_id)
                        if result.status is AcknowledgeStatus.INVALID_ACK_ID and request.ambiguous:
                            result = AckResult(
                                AcknowledgeStatus.OTHER,
                                "an earlier attempt may have been applied but its answer was "
                                f"lost; a retry found the id settled ({result.info})",
                            )
                        _resolve(request, result)
                    whole_call_failed = error is not None and not error.error_info
                    for ack_id, reason in outcome.retry.items():
                        last_reason[ack_id] = reason
                        if whole_call_failed and kind == "ack":
                            # A retryable status for the whole call: it may have been
                            # applied before the failure (e.g. DEADLINE_EXCEEDED).
                            remaining[ack_id].ambiguous = True
                    if remaining:
                        self.stats.retried += len(remaining)
                        raise _RetryNeeded
        except _RetryNeeded:
            for ack_id, request in remaining.items():
                _resolve(
                    request,
                    AckResult(
                        AcknowledgeStatus.OTHER,
                        f"still failing after the {self.retry.deadline:g} s retry deadline: "
                        f"{last_reason.get(ack_id, 'transient failure')}",
                    ),
                )

    # ---------------------------------------------------------------- closing

    def fail_all(self, info: str) -> None:
        """Resolve everything unresolved as OTHER (shutdown after the flush deadline)."""
        for request in [*self.pending, *self.awaiting.values(), *self.in_flight]:
            _resolve(request, AckResult(AcknowledgeStatus.OTHER, info))
        self.pending.clear()
        self.awaiting.clear()
        self.in_flight.clear()

    def idle(self) -> bool:
        return not self.pending and not self.awaiting and not self.in_flight


def _kind(request: AckRequest) -> str:
    return "ack" if request.operation == "ack" else "modack"
