"""``SubscriberClient``: the asyncio entry point for receiving messages."""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from eoclient._clock import AsyncClock, MonotonicClock
from eoclient._retrying import DEFAULT, Default, RetrySettings, call_with_retry, check_timeout
from eoclient._tasks import TaskOwner
from eoclient._transport import Endpoint, PubSubTransport
from eoclient.errors import ClosedError, RpcError
from eoclient.subscriber.ack_records import SUCCESS, Operation, Position
from eoclient.subscriber.ack_results import AckIdResults, AcknowledgeStatus, AckResult
from eoclient.subscriber.handler import run_handler
from eoclient.subscriber.ledger import AckLedger
from eoclient.subscriber.message import Message, message_from_wire
from eoclient.subscriber.sender import AckSender
from eoclient.subscriber.session import StreamingSession, new_client_id
from eoclient.subscriber.settings import (
    MAX_ACK_DEADLINE,
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownBehavior,
    ShutdownOptions,
    StreamSettings,
)

if TYPE_CHECKING:
    import grpc
    from opentelemetry.trace import TracerProvider

    from eoclient.subscriber.spans import SessionSpans

logger = logging.getLogger("eoclient.subscriber")

# aclose() gives settlements of pulled messages still in flight this long to finish
# (as a streaming session's default ShutdownOptions.flush_timeout).
SETTLE_TIMEOUT = 10.0

# Unary Pull as the official GAPIC configuration makes it (google-cloud-pubsub 2.44,
# pubsub_v1/services/subscriber/transports/base.py): retried after 0.1 s, x1.3 per attempt,
# at most 60 s apart, for 60 s, on ABORTED, INTERNAL, UNAVAILABLE and UNKNOWN; 60 s a call.
# Repeating a Pull is safe: messages a lost response carried come again once their ack
# deadline passes. DEADLINE_EXCEEDED is not retried (nor by GAPIC): the caller's budget
# is what ran out.
PULL_RETRY = RetrySettings(
    initial_backoff=0.1,
    max_backoff=60.0,
    multiplier=1.3,
    deadline=60.0,
    codes=frozenset({"ABORTED", "INTERNAL", "UNAVAILABLE", "UNKNOWN"}),
)
PULL_TIMEOUT = 60.0

T = TypeVar("T")


class SubscriberClient:
    """Receives from ``endpoint``, or ``PUBSUB_EMULATOR_HOST``, or the real service.

    ::

        async with SubscriberClient() as client:
            async with client.subscribe(subscription) as stream:
                async for message in stream:
                    status = await message.ack_with_response()

    Args:
        endpoint: where to connect (:class:`~eoclient.Endpoint`): a string is TLS with
            Application Default Credentials unless it is a loopback address or
            ``PUBSUB_EMULATOR_HOST``'s value (plain text); ``None`` =
            ``PUBSUB_EMULATOR_HOST`` if set, else the service.
        channel: a ``grpc.aio.Channel`` to use instead of opening one (e.g. one
            ``Endpoint.create_channel()`` made for several clients); the client never
            closes it. Not together with ``endpoint``.
        enable_open_telemetry_tracing: trace every message a ``subscribe`` session
            receives with OpenTelemetry, as google-cloud-pubsub does
            (:mod:`eoclient.tracing`; needs the extra ``eoclient[otel]``): a ``<subscription
            id> subscribe`` span per message, continuing the trace its publisher started,
            ``process`` around a ``run`` handler, and a span per ack / nack / modack
            request. Messages of :meth:`pull` are not traced (nor are the official
            client's). Spans go to the global tracer provider.
        tracer_provider: an OpenTelemetry ``TracerProvider`` for this client's spans
            instead of the global one (with ``enable_open_telemetry_tracing=True``).
        clock: monotonic seconds for leases, retries and backoffs (tests pass a
            ``FakeClock``).
    """

    def __init__(
        self,
        endpoint: str | Endpoint | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        enable_open_telemetry_tracing: bool = False,
        tracer_provider: TracerProvider | None = None,
        clock: AsyncClock | None = None,
    ) -> None:
        if endpoint is not None and channel is not None:
            raise ValueError("pass endpoint= or channel=, not both")
        self._tracing: Callable[[str], SessionSpans] | None = None
        if enable_open_telemetry_tracing:
            self._tracing = _load_tracing(tracer_provider)
        elif tracer_provider is not None:
            raise ValueError("tracer_provider= needs enable_open_telemetry_tracing=True")
        self._endpoint = Endpoint.resolve(endpoint) if channel is None else None
        self._channel = channel
        self._transport: PubSubTransport | None = None
        self._closed = False
        self._clock = clock
        # Stable across reconnects so the server can keep affinity
        # (docs/protocol.md#initial-streamingpull-request).
        self.client_id = new_client_id()
        self._rng = random.Random()  # the jitter of pull()'s retries
        # Sessions not yet garbage: aclose() closes the ones still open before the channel.
        self._sessions: weakref.WeakSet[StreamingSession] = weakref.WeakSet()
        # pull(): one unary sink per subscription and retry settings, and the group of the
        # unary settlement tasks (opened by the first pull; aclose() lets them finish).
        self._unary_sinks: dict[tuple[str, AckRetrySettings], _PulledSettler] = {}
        self._settling = TaskOwner()

    def __repr__(self) -> str:
        return f"<SubscriberClient {self._where()}{' closed' if self._closed else ''}>"

    def _where(self) -> str:
        return self._endpoint.target if self._endpoint is not None else "shared channel"

    async def __aenter__(self) -> SubscriberClient:
        self._get_transport()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session still open (per its shutdown options), then the channel.

        Idempotent.
        """
        self._closed = True
        for session in list(self._sessions):
            await session.aclose()
        for sink in self._unary_sinks.values():
            sink.flush()  # settled in this turn of the loop, not yet sent
        # Settlements of pulled messages still in flight finish first (bounded).
        await self._settling.close(grace=SETTLE_TIMEOUT)
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()

    def _get_transport(self) -> PubSubTransport:
        if self._closed:
            raise ClosedError("the SubscriberClient is closed")
        if self._transport is None:
            if self._endpoint is not None:
                self._transport = PubSubTransport(self._endpoint.create_channel())
            else:
                assert self._channel is not None
                self._transport = PubSubTransport(self._channel, owns_channel=False)
        return self._transport

    def subscribe(
        self,
        subscription: str,
        *,
        flow_control: FlowControl | None = None,
        lease: LeaseSettings | None = None,
        shutdown: ShutdownOptions | None = None,
        ack_retry: AckRetrySettings | None = None,
        stream: StreamSettings | None = None,
        rng: random.Random | None = None,
    ) -> StreamingSession:
        """A StreamingPull session; use it with ``async with`` and ``async for``."""
        session = StreamingSession(
            self._get_transport(),
            subscription,
            flow_control=flow_control or FlowControl(),
            lease=lease or LeaseSettings(),
            shutdown=shutdown or ShutdownOptions(),
            ack_retry=ack_retry or AckRetrySettings(),
            stream=stream or StreamSettings(),
            client_id=self.client_id,
            clock=self._clock,
            rng=rng,
            spans=None if self._tracing is None else self._tracing(subscription),
        )
        self._sessions.add(session)
        return session

    async def run(
        self,
        subscription: str,
        handler: Callable[[Message], Awaitable[Any]],
        **settings: Any,
    ) -> None:
        """Run ``handler`` for every message until cancelled (or a permanent error).

        One coroutine per message, as many at once as flow control allows. A
        handler that raises has its message nacked. With tracing on, each handler runs
        under its message's ``<subscription id> process`` span.
        """
        # The library owns the handlers: leaving waits for the running ones
        # (docs/protocol.md#subscriber-shutdown) unless the options choose otherwise.
        shutdown = settings.pop("shutdown", None) or ShutdownOptions()
        settings["shutdown"] = shutdown._with_default_behavior(ShutdownBehavior.WAIT_FOR_PROCESSING)
        async with self.subscribe(subscription, **settings) as session:
            await run_handler(session, handler, session.spans)

    async def pull(
        self,
        subscription: str,
        max_messages: int = 100,
        *,
        ack_retry: AckRetrySettings | None = None,
        retry: RetrySettings | Default | None = DEFAULT,
        timeout: float | Default | None = DEFAULT,
    ) -> list[Message]:
        """One unary Pull. The messages are not leased: settle them before the deadline.

        Their acks, nacks and modacks go by unary call; all those made in one turn of the
        event loop (a loop over the messages, or a ``gather`` of ``ack_with_response()``)
        share one call per operation (2,500 ids a call), not one call each.

        Args:
            ack_retry: how those settlements are retried.
            retry: how the Pull itself is retried: by default as the official client's
                GAPIC configuration (:data:`PULL_RETRY`: ABORTED, INTERNAL, UNAVAILABLE
                and UNKNOWN, for 60 s); a :class:`~eoclient.admin.RetrySettings` of your
                own (its ``codes``, or those when it names none); ``None``: one attempt.
            timeout: the call's whole budget in seconds, retries included (60 by
                default); ``None``: only the retry deadline bounds it.
        """
        transport = self._get_transport()
        response = await self._pull_with_retry(
            subscription,
            lambda seconds: transport.pull(subscription, max_messages, timeout=seconds),
            retry,
            timeout,
        )
        await self._settling.open()  # before any message can be settled
        sink = self._unary_sink(subscription, ack_retry or AckRetrySettings())
        now = self._now()
        return [message_from_wire(received, sink, now) for received in response.received_messages]

    async def pull_raw(
        self,
        subscription: str,
        max_messages: int = 100,
        *,
        retry: RetrySettings | Default | None = DEFAULT,
        timeout: float | Default | None = DEFAULT,
    ) -> bytes:
        """One unary Pull whose answer is left undecoded: the wire bytes of a
        ``google.pubsub.v1.PullResponse``.

        For consumers that decode messages into a form of their own (columns for Arrow or
        a dataframe, a journal, another process) without a :class:`Message` object per
        message. The messages are not leased: settle them by ack id with
        :meth:`acknowledge` / :meth:`modify_ack_deadline` before their deadline, and keep
        long work leased with :class:`LeaseGroups`. Retried as :meth:`pull` is (``retry``,
        ``timeout``: the same defaults and meaning).
        """
        transport = self._get_transport()
        return await self._pull_with_retry(
            subscription,
            lambda seconds: transport.pull_serialized(subscription, max_messages, timeout=seconds),
            retry,
            timeout,
        )

    async def _pull_with_retry(
        self,
        subscription: str,
        attempt: Callable[[float | None], Awaitable[T]],
        retry: RetrySettings | Default | None,
        timeout: float | Default | None,
    ) -> T:
        if not (retry is DEFAULT or retry is None or isinstance(retry, RetrySettings)):
            raise TypeError(f"retry must be a RetrySettings or None (one attempt), got {retry!r}")
        backoff = PULL_RETRY if retry is DEFAULT else retry
        budget = PULL_TIMEOUT if timeout is DEFAULT else check_timeout(timeout)
        codes = PULL_RETRY.codes if backoff is None or backoff.codes is None else backoff.codes
        assert codes is not None
        clock = self._clock or MonotonicClock()

        def on_retry(number: int, error: RpcError, delay: float) -> None:
            logger.debug(
                "Pull %s failed (attempt %d): %s; retrying in %.3f s",
                subscription,
                number,
                error,
                delay,
            )

        return await call_with_retry(
            attempt,
            backoff=backoff,
            codes=frozenset(codes),
            timeout=budget,
            now=clock.now,
            sleep=clock.sleep,
            rng=self._rng,
            on_retry=on_retry,
        )

    def _now(self) -> float:
        return self.clock.now()

    @property
    def clock(self) -> AsyncClock:
        """What this client measures leases, retries and backoffs on (its ``clock=``, else
        monotonic time): the ``now`` of a :class:`LeaseGroups` kept for its pulls."""
        return self._clock or MonotonicClock()

    async def acknowledge(
        self,
        subscription: str,
        ack_ids: Iterable[str],
        *,
        ack_retry: AckRetrySettings | None = None,
    ) -> AckIdResults:
        """Acknowledge deliveries by ack id; the result of each distinct id.

        For ack ids kept from earlier (:meth:`pull_raw`, a journal, another process), in
        bulk: one call per 2,500 ids, all in flight together, and no step per id when a
        call succeeds. The answer maps every distinct id to its :class:`AckResult`; its
        ``failed`` holds only those that did not succeed. On an exactly-once subscription
        SUCCESS means the message will not be delivered again, and INVALID_ACK_ID that the
        delivery is no longer current (expired, superseded by a redelivery, or already
        acked). Transient failures are retried per ``ack_retry`` (then OTHER). Without
        exactly-once the server does not check ids: every id reports SUCCESS.
        """
        return await self._settle_by_id(subscription, ack_ids, Operation.ACK, 0, ack_retry)

    async def modify_ack_deadline(
        self,
        subscription: str,
        ack_ids: Iterable[str],
        seconds: int,
        *,
        ack_retry: AckRetrySettings | None = None,
    ) -> AckIdResults:
        """Set the deadline of deliveries, by ack id, to ``seconds`` from now (0..600).

        ``0`` releases them for redelivery now (a nack); a longer deadline extends their
        lease (:class:`LeaseGroups` says when). The result of each distinct id, as for
        :meth:`acknowledge`; an INVALID_ACK_ID lease is lost (the message comes again).
        """
        if not 0 <= seconds <= MAX_ACK_DEADLINE:
            raise ValueError(
                f"modify_ack_deadline: seconds must be in 0..{MAX_ACK_DEADLINE}, got {seconds}"
            )
        operation = Operation.NACK if seconds == 0 else Operation.MODACK
        return await self._settle_by_id(subscription, ack_ids, operation, seconds, ack_retry)

    async def _settle_by_id(
        self,
        subscription: str,
        ack_ids: Iterable[str],
        operation: Operation,
        seconds: int,
        ack_retry: AckRetrySettings | None,
    ) -> AckIdResults:
        transport = self._get_transport()  # a closed client refuses (ClosedError)
        distinct = list(dict.fromkeys(ack_ids))
        if not distinct:
            return AckIdResults()
        # A ledger of its own: these calls are awaited here, apart from pulled messages'.
        settler = _PulledSettler(
            subscription, transport, ack_retry or AckRetrySettings(), self._clock, self._settling
        )
        records = settler.ledger.submit_many(distinct, operation, seconds)
        await settler.send_now()
        results = AckIdResults()
        for record in records:
            # Every unary call ends with a result for each id.
            outcomes = cast("list[AckResult]", record.results)
            results.update(zip(record.ack_ids, outcomes, strict=True))
            if outcomes.count(SUCCESS) != len(outcomes):  # no step per id when all succeeded
                for ack_id, result in zip(record.ack_ids, outcomes, strict=True):
                    if result.status is not AcknowledgeStatus.SUCCESS:
                        results.failed[ack_id] = result
        return results

    def _unary_sink(self, subscription: str, ack_retry: AckRetrySettings) -> _PulledSettler:
        key = (subscription, ack_retry)
        sink = self._unary_sinks.get(key)
        if sink is None:
            sink = self._unary_sinks[key] = _PulledSettler(
                subscription, self._get_transport(), ack_retry, self._clock, self._settling
            )
        return sink


def _load_tracing(provider: TracerProvider | None) -> Callable[[str], SessionSpans]:
    """What makes a session's spans, for a client with ``enable_open_telemetry_tracing``."""
    try:
        from eoclient.subscriber.spans import SessionSpans
    except ImportError as error:
        raise ImportError(
            "enable_open_telemetry_tracing=True needs OpenTelemetry: pip install "
            f"'eoclient[otel]' (or opentelemetry-api) ({error})"
        ) from error

    def session_spans(subscription: str) -> SessionSpans:
        return SessionSpans(subscription, provider)

    return session_spans


class _PulledSettler:
    """Settles pulled messages by unary calls, one batch per event-loop turn.

    The first settlement of a turn schedules a flush with ``call_soon`` (the ledger's
    ``on_pending``); everything settled before the flush runs (the rest of that turn) is
    sent together: one call per operation and deadline.
    """

    def __init__(
        self,
        subscription: str,
        transport: PubSubTransport,
        ack_retry: AckRetrySettings,
        clock: AsyncClock | None,
        tasks: TaskOwner,
    ) -> None:
        self._clock = clock or MonotonicClock()
        self._tasks = tasks
        self.ledger = AckLedger(
            ack_retry, exactly_once=True, stream_capable=False, on_pending=self._schedule_flush
        )
        self.sender = AckSender(
            self.ledger,
            transport,
            subscription,
            clock=self._clock,
            rng=random.Random(),
            spawn=tasks.spawn,
            fail=self._log_failure,
        )
        self._flush_scheduled = False

    def settle(self, message: Message, operation: Operation, seconds: int) -> Position:
        return self.ledger.submit(message.ack_id, operation, seconds)

    def extend(self, message: Message, seconds: int) -> Position:
        return self.ledger.submit(message.ack_id, Operation.MODACK, seconds)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Send what was settled since the last flush (the scheduled one, or aclose)."""
        self._flush_scheduled = False
        outgoing = self.ledger.take(self._clock.now(), stream_open=False, stopping=True)
        self.sender.start_unary(outgoing.unary)

    async def send_now(self) -> None:
        """Send what is pending and wait for every result."""
        outgoing = self.ledger.take(self._clock.now(), stream_open=False, stopping=True)
        await self.sender.send_unary(outgoing.unary)

    def _log_failure(self, error: BaseException) -> None:
        logger.error("settling pulled messages failed: %s", error, exc_info=error)
