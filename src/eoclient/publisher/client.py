"""``PublisherClient``: the asyncio publisher's public surface and its lifecycle.

::

    async with PublisherClient(batch=BatchSettings(max_latency=0.005)) as client:
        message_id = await client.publish(topic, b"payload", colour="blue")
        futures = [client.publish_nowait(topic, data) for data in payloads]
        message_ids = await asyncio.gather(*futures)

The client checks what only it knows (its state, the topic, whether ordering is on, the
per-call ``retry`` and ``timeout``) and hands each message to the rooms that do the work:

* ``pipeline.py``: a message's way from accepted to resolved, synchronous — validation,
  flow control (parking under ``BLOCK``), batching, sequencing per ordering key, results,
  keys paused by a failure;
* ``sender.py``: the one sender task that decides which batches leave and when, and one
  send task per batch: its ``Publish`` with retries, its outcome reported back;
* ``spans.py``: the OpenTelemetry spans, loaded only with tracing on;
* ``threadsafe.py``: ``publish_threadsafe``'s crossing to the client's loop and back.

All tasks belong to one ``asyncio.TaskGroup``, the sender's
(docs/architecture.md#every-background-task-belongs-to-one-taskgroup); none of them ever
raises into it. ``aclose`` (or leaving ``async with``) sends everything still batched at
once, waits until every accepted message has a result, then stops the tasks and closes the
channel; with a ``timeout``, or when it is cancelled, messages still unresolved fail with
:class:`~eoclient.errors.ClosedError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
from typing import TYPE_CHECKING, overload

from eoclient._clock import AsyncClock, MonotonicClock
from eoclient._retrying import DEFAULT, Default
from eoclient._transport import Endpoint, PubSubTransport
from eoclient.errors import ClosedError
from eoclient.publisher.pipeline import Pipeline
from eoclient.publisher.sender import Sender
from eoclient.publisher.settings import (
    BatchSettings,
    CallOptions,
    PublishFlowControl,
    PublishRetrySettings,
    call_options,
)
from eoclient.publisher.state import PublisherState, PublisherStatistics
from eoclient.publisher.threadsafe import accept_from_thread

if TYPE_CHECKING:
    import grpc

    # Imported at run time only by a client with tracing on (they import opentelemetry).
    from opentelemetry.trace import TracerProvider

    from eoclient.publisher.spans import PublishSpans

__all__ = ["PublisherClient"]

_log = logging.getLogger("eoclient.publisher")


class PublisherClient:
    """Publishes to ``endpoint``, or ``PUBSUB_EMULATOR_HOST``, or the real service.

    Args:
        endpoint: where to connect (:class:`~eoclient.Endpoint`): a string is TLS with
            Application Default Credentials unless it is a loopback address or
            ``PUBSUB_EMULATOR_HOST``'s value (plain text); ``None`` =
            ``PUBSUB_EMULATOR_HOST`` if set, else the service.
        channel: a ``grpc.aio.Channel`` to use instead of opening one (e.g. one
            ``Endpoint.create_channel()`` made for several clients); the client never
            closes it. Not together with ``endpoint``.
        batch: how messages are grouped into ``PublishRequest`` s.
        flow_control: how many messages may be outstanding, and what ``publish`` does
            when one more would not fit.
        retry: how failed ``Publish`` calls are retried (``publish(retry=...)``
            changes it for one message).
        enable_message_ordering: allow non-empty ordering keys (sequenced per key).
        enable_open_telemetry_tracing: trace every message with OpenTelemetry, as
            google-cloud-pubsub does (:mod:`eoclient.tracing`; needs the extra
            ``eoclient[otel]``). Spans go to the global tracer provider.
        tracer_provider: an OpenTelemetry ``TracerProvider`` for this client's spans
            instead of the global one (with ``enable_open_telemetry_tracing=True``).
        clock: monotonic seconds for batch latencies, retry deadlines and timeouts,
            and what retry backoff awaits (tests pass a ``FakeClock``); the batch
            timer waits the differences on the event loop.
        rng: the random source of the backoff jitter.

    Use it as ``async with PublisherClient() as client:``; publishing before entering
    raises ``RuntimeError``, after ``aclose`` ``ClosedError``.
    """

    def __init__(
        self,
        endpoint: str | Endpoint | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        batch: BatchSettings | None = None,
        flow_control: PublishFlowControl | None = None,
        retry: PublishRetrySettings | None = None,
        enable_message_ordering: bool = False,
        enable_open_telemetry_tracing: bool = False,
        tracer_provider: TracerProvider | None = None,
        clock: AsyncClock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if endpoint is not None and channel is not None:
            raise ValueError("pass endpoint= or channel=, not both")
        self._endpoint = Endpoint.resolve(endpoint) if channel is None else None
        self._channel = channel
        self.batch_settings = batch or BatchSettings()
        self.flow_control_settings = flow_control or PublishFlowControl()
        self.retry_settings = retry or PublishRetrySettings()
        self._default_options = CallOptions(self.retry_settings, None)
        self.enable_message_ordering = enable_message_ordering
        spans = None
        if enable_open_telemetry_tracing:
            spans = _load_spans(tracer_provider)
        elif tracer_provider is not None:
            raise ValueError("tracer_provider= needs enable_open_telemetry_tracing=True")
        clock = clock or MonotonicClock()
        wake = asyncio.Event()  # the sender has something to look at
        self._drained = asyncio.Event()  # closing and every accepted message resolved
        self._closed = asyncio.Event()
        self._pipeline = Pipeline(
            self.batch_settings,
            self.flow_control_settings,
            clock=clock,
            spans=spans,
            notify_sender=wake.set,
            notify_drained=self._drained.set,
        )
        self._sender = Sender(
            self._pipeline,
            wake=wake,
            clock=clock,
            retry=self.retry_settings,
            rng=rng or random.Random(),
            spans=spans,
        )
        self._state = PublisherState.UNOPENED
        self._transport: PubSubTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it runs on

    def __repr__(self) -> str:
        flow = self._pipeline.flow_statistics()
        return (
            f"<PublisherClient {self._where()} {self._state.value} "
            f"outstanding={flow.outstanding_messages} waiting={flow.waiting_messages} "
            f"in_flight={self._pipeline.batches_in_flight} "
            f"paused_keys={len(self._pipeline.paused_keys)}>"
        )

    def _where(self) -> str:
        return self._endpoint.target if self._endpoint is not None else "shared channel"

    @property
    def state(self) -> PublisherState:
        return self._state

    # ================================================================ lifecycle

    async def __aenter__(self) -> PublisherClient:
        if self._state is not PublisherState.UNOPENED:
            raise RuntimeError(f"a PublisherClient cannot be entered twice ({self._state.value})")
        if self._endpoint is not None:
            self._transport = PubSubTransport(self._endpoint.create_channel())
        else:
            assert self._channel is not None
            self._transport = PubSubTransport(self._channel, owns_channel=False)
        self._loop = asyncio.get_running_loop()
        await self._sender.start(self._transport)
        self._state = PublisherState.OPEN
        _log.debug("publisher open: %s", self._where())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self, timeout: float | None = None) -> None:
        """Send everything still batched, wait for every result, stop, close the channel.

        Idempotent; concurrent callers all return once the client is closed. After
        ``timeout`` seconds (``None`` = as long as retries take), or if the caller is
        cancelled, unresolved messages fail with ``ClosedError``; the cancellation
        still propagates, and no task of the client survives either way.
        """
        if self._state is PublisherState.CLOSED:
            return
        if self._state is PublisherState.CLOSING:
            await self._closed.wait()
            return
        if self._state is PublisherState.UNOPENED:
            self._state = PublisherState.CLOSED
            self._closed.set()
            return
        self._state = PublisherState.CLOSING
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug(
                "publisher closing: %d messages outstanding (timeout %s)",
                self._pipeline.flow_statistics().outstanding_messages,
                timeout,
            )
        try:
            self._pipeline.close()  # the sender flushes every open batch from now on
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._drained.wait()
        finally:
            await self._hard_stop()

    async def _hard_stop(self) -> None:
        try:
            await self._sender.stop()
        finally:
            transport, self._transport = self._transport, None
            try:
                if transport is not None:
                    await transport.close()
            finally:
                self._state = PublisherState.CLOSED
                self._closed.set()
                self._drained.set()
                _log.debug(
                    "publisher closed: %d published, %d failed",
                    self._pipeline.published,
                    self._pipeline.failed,
                )

    # ================================================================ publishing

    # Two signatures for type checkers: without retry/timeout, a mapping unpacked as
    # attributes (publish(topic, data, **attributes)) type-checks; with them, it cannot
    # (its keys could be "retry" or "timeout").
    @overload
    async def publish(
        self, topic: str, data: bytes, /, ordering_key: str = "", **attributes: str
    ) -> str: ...

    @overload
    async def publish(
        self,
        topic: str,
        data: bytes,
        /,
        ordering_key: str = "",
        *,
        retry: PublishRetrySettings | Default | None = DEFAULT,
        timeout: float | None = None,
        **attributes: str,
    ) -> str: ...

    async def publish(
        self,
        topic: str,
        data: bytes,
        /,
        ordering_key: str = "",
        *,
        retry: object = DEFAULT,  # checked by _options: the overloads give the types
        timeout: object = None,
        **attributes: str,
    ) -> str:
        """Publish one message and return its server-assigned message id.

        Args:
            topic: the topic's full name, ``projects/<project>/topics/<topic>``.
            data: the payload (``bytes``; may be empty if there are attributes).
            ordering_key: messages with the same non-empty key are published in order;
                needs ``enable_message_ordering=True``.
            retry: how the ``Publish`` carrying this message is retried: the client's
                ``retry`` by default, ``None`` = one attempt.
            timeout: seconds the ``Publish`` carrying this message may take, retries
                included (each attempt is sent with what remains, and at most
                ``retry.attempt_timeout``); ``None`` = as long as ``retry.deadline``.
            **attributes: string attributes (``ordering_key``, ``retry`` and
                ``timeout`` are parameters, as in google-cloud-pubsub).

        A message published with another ``retry`` or ``timeout`` than the messages
        batched before it for its topic and key starts a new batch, so every message's
        request is sent with its own settings.

        Raises:
            ValueError / TypeError / MessageTooLargeError: the message is invalid.
            FlowControlLimitError: flow control ``ERROR`` and no room (or, under
                ``BLOCK``, the message alone exceeds ``max_bytes``).
            OrderingKeyPausedError: the key is paused; see :meth:`resume_publish`.
            RpcError: the server refused the batch (its message is in the error), or a
                retryable failure lasted past ``retry.deadline``.
            ClosedError: the client is closing or closed.

        Under ``BLOCK`` this waits, first in first out, for room. Cancelling it while
        it waits withdraws the message; once the message is batched, cancelling only
        stops waiting for the id (the message is still sent).
        """
        return await self._accept(topic, data, ordering_key, retry, timeout, attributes)

    @overload
    def publish_nowait(
        self, topic: str, data: bytes, /, ordering_key: str = "", **attributes: str
    ) -> asyncio.Future[str]: ...

    @overload
    def publish_nowait(
        self,
        topic: str,
        data: bytes,
        /,
        ordering_key: str = "",
        *,
        retry: PublishRetrySettings | Default | None = DEFAULT,
        timeout: float | None = None,
        **attributes: str,
    ) -> asyncio.Future[str]: ...

    def publish_nowait(
        self,
        topic: str,
        data: bytes,
        /,
        ordering_key: str = "",
        *,
        retry: object = DEFAULT,
        timeout: object = None,
        **attributes: str,
    ) -> asyncio.Future[str]:
        """Accept one message and return a future of its message id, without waiting.

        Everything that can be checked now raises now, as in :meth:`publish`; the
        future carries the outcome of sending. For fire-and-collect::

            futures = [client.publish_nowait(topic, d) for d in payloads]
            ids = await asyncio.gather(*futures)

        Under ``BLOCK`` flow control a message that does not fit is *parked* (it
        waits, in order, for room before joining a batch); nothing can make this
        call wait, so a caller that needs back-pressure should await
        :meth:`publish` instead. Cancelling the future of a parked message withdraws
        it.
        """
        return self._accept(topic, data, ordering_key, retry, timeout, attributes)

    @overload
    def publish_threadsafe(
        self, topic: str, data: bytes, /, ordering_key: str = "", **attributes: str
    ) -> concurrent.futures.Future[str]: ...

    @overload
    def publish_threadsafe(
        self,
        topic: str,
        data: bytes,
        /,
        ordering_key: str = "",
        *,
        retry: PublishRetrySettings | Default | None = DEFAULT,
        timeout: float | None = None,
        **attributes: str,
    ) -> concurrent.futures.Future[str]: ...

    def publish_threadsafe(
        self,
        topic: str,
        data: bytes,
        /,
        ordering_key: str = "",
        *,
        retry: object = DEFAULT,
        timeout: object = None,
        **attributes: str,
    ) -> concurrent.futures.Future[str]:
        """:meth:`publish_nowait` from any thread: a ``concurrent.futures.Future`` of the
        message id, while the client runs on its event loop in another thread.

        For code outside the loop, e.g. a thread of a synchronous web framework::

            future = client.publish_threadsafe(topic, b"payload", colour="blue")
            message_id = future.result(timeout=30)

        The name follows asyncio's ``call_soon_threadsafe`` / ``run_coroutine_threadsafe``:
        the only method of the client that may be called off its loop. The message is
        handed to the loop and accepted there, in the order calls from one thread were
        made; every error, a refused message included, arrives through the future. The
        calling thread's context (its current OpenTelemetry span) is the message's, so
        its create span is a child of the caller's span. A future can be cancelled until
        the loop accepts the message, not after. Under ``BLOCK`` flow control the future
        resolves once the message had room and was sent: ``result()`` is the thread's
        back-pressure.

        Raises at once: ``RuntimeError`` before the client is started or when called on
        the client's own loop (blocking on the future there would deadlock; use
        :meth:`publish` there), ``ClosedError`` once it is closed.
        """
        return accept_from_thread(
            self._loop,
            self._state is PublisherState.CLOSED,
            lambda: self._accept(topic, data, ordering_key, retry, timeout, attributes),
        )

    def _accept(
        self,
        topic: str,
        data: bytes,
        ordering_key: str,
        retry: object,
        timeout: object,
        attributes: dict[str, str],
    ) -> asyncio.Future[str]:
        self._check_open()
        if not isinstance(topic, str) or not topic:
            raise ValueError(
                "topic must be a full topic name, 'projects/<project>/topics/<topic>'; "
                f"got {topic!r}"
            )
        if ordering_key and not self.enable_message_ordering:
            raise ValueError(
                f"cannot publish with ordering key {ordering_key!r}: message ordering is "
                "disabled; create the client with PublisherClient(enable_message_ordering=True)"
            )
        options = call_options(retry, timeout, self._default_options)
        return self._pipeline.accept(topic, ordering_key, data, attributes, options)

    def _check_open(self) -> None:
        if self._state is PublisherState.OPEN:
            if self._sender.fatal is not None:
                raise ClosedError(
                    f"the PublisherClient stopped after an internal error: {self._sender.fatal!r}"
                ) from self._sender.fatal
            return
        if self._state is PublisherState.UNOPENED:
            raise RuntimeError(
                "the PublisherClient is not started: use `async with PublisherClient(...) as "
                "client:` (or `await client.__aenter__()`) before publishing"
            )
        raise ClosedError(f"the PublisherClient is {self._state.value}; it cannot publish")

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        """Accept publishes to a key paused by a failure again (no-op if not paused)."""
        if not self.enable_message_ordering:
            raise ValueError(
                "resume_publish: message ordering is disabled, so no ordering key is ever "
                "paused; create the client with PublisherClient(enable_message_ordering=True)"
            )
        self._pipeline.resume(topic, ordering_key)

    def statistics(self) -> PublisherStatistics:
        pipeline = self._pipeline
        flow = pipeline.flow_statistics()
        return PublisherStatistics(
            state=self._state,
            published_messages=pipeline.published,
            failed_messages=pipeline.failed,
            publish_rpcs=self._sender.rpcs,
            retried_rpcs=self._sender.retries,
            batching_messages=pipeline.batching_messages,
            batches_in_flight=pipeline.batches_in_flight,
            outstanding_messages=flow.outstanding_messages,
            outstanding_bytes=flow.outstanding_bytes,
            waiting_messages=flow.waiting_messages,
            waiting_bytes=flow.waiting_bytes,
            paused_keys=pipeline.paused_keys,
        )


def _load_spans(provider: TracerProvider | None) -> PublishSpans:
    """The tracing half of a client with ``enable_open_telemetry_tracing=True``."""
    try:
        from eoclient.publisher.spans import PublishSpans
    except ImportError as error:
        raise ImportError(
            "enable_open_telemetry_tracing=True needs OpenTelemetry: pip install "
            f"'eoclient[otel]' (or opentelemetry-api) ({error})"
        ) from error
    return PublishSpans(provider)
