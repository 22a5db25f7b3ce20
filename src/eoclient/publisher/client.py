"""``PublisherClient``: the asyncio shell over the pure publisher cores.

::

    async with PublisherClient(batch=BatchSettings(max_latency=0.005)) as client:
        message_id = await client.publish(topic, b"payload", colour="blue")
        futures = [client.publish_nowait(topic, data) for data in payloads]
        message_ids = await asyncio.gather(*futures)

Path of a message (every step but the RPC is synchronous, so the order of calls is the
order of messages):

1. ``publish_nowait`` checks the client state, the ordering key, the message
   (:func:`~eoclient.publisher.validation.validate_message`) and whether its key is
   paused (:meth:`Sequencer.check_publish`), all raising at once;
2. flow control (:class:`PublishFlowController`) admits it, raises
   (``ERROR``), or *parks* it (``BLOCK``): a parked message waits, first in first out,
   until earlier messages resolve, and then joins a batch exactly as if it had just
   been published; cancelling its future while it is parked withdraws it;
3. the :class:`Batcher` puts it in the open batch of its (topic, ordering key);
   batches it closes go to a ready list;
4. the client's one **sender task** owns the decision of what leaves when: it wakes
   on new ready batches and at the batcher's next deadline, hands ready and due
   batches to the :class:`Sequencer` (at most one batch per ordering key in flight,
   in order) and starts one **send task** per batch it may send;
5. a send task calls ``Publish``, retried (jittered exponential backoff, only
   :data:`RETRYABLE_PUBLISH_CODES`, no new attempt that would start after
   ``retry.deadline`` or the call's ``timeout``: :mod:`eoclient._retrying`) with the
   retry and timeout its messages were published with (a message published with other
   ones than its key's open batch starts a new batch), resolves the batch's futures with
   the message ids or the
   error (the server's message is in it), releases flow control and reports the
   outcome to the sequencer, which may release the key's next batch or, on a final
   failure, pause the key: the key's queued, ready and open batches then fail with
   :class:`~eoclient.errors.OrderingKeyPausedError`, and so does every publish to it
   until :meth:`PublisherClient.resume_publish`.

All tasks belong to one ``asyncio.TaskGroup`` owned by the client (architecture
principle 5); none of them ever raises into it. ``aclose`` (or leaving ``async with``)
sends everything still batched at once, waits until every accepted message has a
result, then stops the tasks and closes the channel; with a ``timeout``, or when it is
cancelled, messages still unresolved fail with :class:`~eoclient.errors.ClosedError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import enum
import logging
import math
import random
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, overload

import grpc

from eoclient._clock import Clock, MonotonicClock
from eoclient._proto import pubsub_pb2
from eoclient._retrying import DEFAULT, Default, call_with_retry, check_timeout
from eoclient._transport import Endpoint, PubSubTransport
from eoclient.errors import (
    ClosedError,
    FlowControlLimitError,
    Internal,
    OrderingKeyPausedError,
    RpcError,
)
from eoclient.publisher.batcher import Batch, Batcher
from eoclient.publisher.flow_control import PublishFlowController
from eoclient.publisher.sequencer import Sequencer, SequencerActions
from eoclient.publisher.settings import (
    RETRYABLE_PUBLISH_CODES,
    BatchSettings,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.publisher.validation import validate_message

if TYPE_CHECKING:
    # Imported at run time only by a client with tracing on (they import opentelemetry).
    from opentelemetry.trace import TracerProvider

    from eoclient.tracing import PublisherTracing, PublishTrace

__all__ = ["PublisherClient", "PublisherState", "PublisherStatistics"]

_Batch: TypeAlias = Batch[pubsub_pb2.PubsubMessage, "asyncio.Future[str]"]


@dataclass(frozen=True, slots=True)
class _CallOptions:
    """What a batch's ``Publish`` is sent with: the retry and timeout its messages were
    published with (``retry=None``: one attempt; ``timeout=None``: no budget but the retry
    deadline)."""

    retry: PublishRetrySettings | None
    timeout: float | None


@dataclass(frozen=True, slots=True)
class _Parked:
    """A message BLOCK flow control holds until there is room."""

    topic: str
    ordering_key: str
    message: pubsub_pb2.PubsubMessage
    size: int
    options: _CallOptions


_log = logging.getLogger("eoclient.publisher")


class PublisherState(enum.Enum):
    UNOPENED = "unopened"  # constructed, not entered
    OPEN = "open"  # accepting publishes
    CLOSING = "closing"  # aclose() running: no new publishes, sending what is left
    CLOSED = "closed"  # tasks ended, channel closed


@dataclass(frozen=True, slots=True)
class PublisherStatistics:
    """A snapshot of one client (:meth:`PublisherClient.statistics`).

    Attributes:
        state: the client's :class:`PublisherState`.
        published_messages: futures resolved with a message id.
        failed_messages: futures failed (server errors, paused keys, closing).
        publish_rpcs: ``Publish`` attempts, retries included.
        retried_rpcs: attempts that failed with a retryable status and were retried.
        batching_messages: messages in batches not yet handed to the sequencer.
        batches_in_flight: batches sent (or being retried) and not yet resolved.
        outstanding_messages / outstanding_bytes: admitted by flow control, not yet
            resolved (counted under every behaviour).
        waiting_messages / waiting_bytes: parked by ``BLOCK`` flow control.
        paused_keys: (topic, ordering key) pairs paused by a failure, in pause order.
    """

    state: PublisherState
    published_messages: int
    failed_messages: int
    publish_rpcs: int
    retried_rpcs: int
    batching_messages: int
    batches_in_flight: int
    outstanding_messages: int
    outstanding_bytes: int
    waiting_messages: int
    waiting_bytes: int
    paused_keys: tuple[tuple[str, str], ...]


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
        clock: monotonic seconds for batch latencies (only ever compared with
            each other; the timer waits the differences on the event loop).
        sleep: what retry backoff awaits (tests may pass a faster one); retry
            deadlines and timeouts are measured in monotonic time.
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
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if endpoint is not None and channel is not None:
            raise ValueError("pass endpoint= or channel=, not both")
        self._endpoint = Endpoint.resolve(endpoint) if channel is None else None
        self._channel = channel
        self.batch_settings = batch or BatchSettings()
        self.flow_control_settings = flow_control or PublishFlowControl()
        self.retry_settings = retry or PublishRetrySettings()
        self._default_options = _CallOptions(self.retry_settings, None)
        self.enable_message_ordering = enable_message_ordering
        self._clock = clock or MonotonicClock()
        self._retry_clock = MonotonicClock()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._state = PublisherState.UNOPENED
        self._transport: PubSubTransport | None = None
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._batcher: Batcher[pubsub_pb2.PubsubMessage, asyncio.Future[str]] = Batcher(
            self.batch_settings
        )
        self._sequencer: Sequencer[_Batch] = Sequencer()
        self._flow: PublishFlowController[asyncio.Future[str]] = PublishFlowController(
            self.flow_control_settings
        )
        self._parked: dict[asyncio.Future[str], _Parked] = {}
        self._ready: list[_Batch] = []  # closed by the batcher, not yet sequenced
        self._paused: dict[tuple[str, str], None] = {}  # an ordered set
        self._wake = asyncio.Event()  # the sender has something to look at
        self._drained = asyncio.Event()  # closing and every accepted message resolved
        self._closed = asyncio.Event()
        self._stopping = False  # hard stop: whatever is left fails with ClosedError
        self._fatal: BaseException | None = None
        self._published = 0
        self._failed = 0
        self._rpcs = 0
        self._retries = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it runs on
        self._tracing: PublisherTracing | None = None
        self._traces: dict[asyncio.Future[str], PublishTrace] = {}  # while unresolved
        if enable_open_telemetry_tracing:
            self._tracing = _load_tracing(tracer_provider)
        elif tracer_provider is not None:
            raise ValueError("tracer_provider= needs enable_open_telemetry_tracing=True")

    def __repr__(self) -> str:
        flow = self._flow.statistics()
        return (
            f"<PublisherClient {self._where()} {self._state.value} "
            f"outstanding={flow.outstanding_messages} waiting={flow.waiting_messages} "
            f"in_flight={self._sequencer.in_flight} paused_keys={len(self._paused)}>"
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
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._loop = asyncio.get_running_loop()
        self._state = PublisherState.OPEN
        self._spawn(self._run_sender(), "eoclient-publish-sender")
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
                self._flow.statistics().outstanding_messages,
                timeout,
            )
        try:
            self._wake.set()  # the sender flushes every open batch from now on
            self._check_drained()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._drained.wait()
        finally:
            await self._hard_stop()

    async def _hard_stop(self) -> None:
        self._stopping = True
        try:
            for task in list(self._tasks):
                task.cancel()  # a send task fails its own batch with ClosedError
            group, self._group = self._group, None
            if group is not None:
                # Waits for the cancelled tasks even if this caller is cancelled meanwhile
                # (TaskGroup absorbs it, then re-raises it after its tasks are done).
                await group.__aexit__(None, None, None)
        finally:
            self._fail_everything(
                ClosedError("the PublisherClient was closed before the message was sent")
            )
            transport, self._transport = self._transport, None
            try:
                if transport is not None:
                    await transport.close()
            finally:
                self._state = PublisherState.CLOSED
                self._closed.set()
                self._drained.set()
                _log.debug(
                    "publisher closed: %d published, %d failed", self._published, self._failed
                )

    def _fail_everything(self, error: BaseException) -> None:
        """Fail every message not in flight: parked, batched, ready and queued."""
        while self._parked:
            future = next(iter(self._parked))
            del self._parked[future]
            admitted = self._flow.cancel(future)
            self._fail(future, error)
            self._admit(admitted)
        batches = [*self._ready, *self._batcher.flush(), *self._sequencer.drain()]
        self._ready.clear()
        for batch in batches:
            self._settle(batch, error=error)

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
        loop = self._loop
        if loop is None:
            raise RuntimeError(
                "the PublisherClient is not started: publish_threadsafe needs it running "
                "on its event loop (`async with PublisherClient(...)` in that loop's thread)"
            )
        if self._state is PublisherState.CLOSED or loop.is_closed():
            raise ClosedError("the PublisherClient is closed; it cannot publish")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError(
                "publish_threadsafe was called on the client's own event loop, where waiting "
                "for its future would block the loop: use publish() or publish_nowait()"
            )
        result: concurrent.futures.Future[str] = concurrent.futures.Future()

        def accept() -> None:
            if not result.set_running_or_notify_cancel():
                return  # cancelled before the loop got to it
            try:
                accepted = self._accept(topic, data, ordering_key, retry, timeout, attributes)
            except BaseException as error:
                result.set_exception(error)
                return
            accepted.add_done_callback(lambda done: _copy_outcome(done, result))

        try:
            loop.call_soon_threadsafe(accept, context=contextvars.copy_context())
        except RuntimeError as error:  # the loop closed meanwhile
            raise ClosedError(f"the PublisherClient's event loop is closed: {error}") from error
        return result

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
        options = self._options(retry, timeout)
        trace = None
        if self._tracing is not None:
            # Before the size is computed: the trace context travels as an attribute.
            trace = self._tracing.start(topic, ordering_key, data, attributes)
        try:
            size = validate_message(data, attributes, ordering_key, topic=topic)
            self._sequencer.check_publish(topic, ordering_key)
        except BaseException as error:
            if trace is not None:
                trace.failed(error)
            raise
        # Empty fields are left out: an empty attributes dict still goes through the
        # map's Python-level update() (~1 µs a message in the profile).
        if attributes:
            message = pubsub_pb2.PubsubMessage(
                data=data, attributes=attributes, ordering_key=ordering_key
            )
        elif ordering_key:
            message = pubsub_pb2.PubsubMessage(data=data, ordering_key=ordering_key)
        else:
            message = pubsub_pb2.PubsubMessage(data=data)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if trace is not None:
            self._traces[future] = trace
            trace.entering_flow_control()
        try:
            admitted = self._flow.acquire(size, future)
        except FlowControlLimitError as error:  # behaviour ERROR
            self._trace_failed(future, error)
            raise
        if admitted:
            self._enqueue(topic, ordering_key, message, future, size, options)
        else:
            if _log.isEnabledFor(logging.DEBUG):
                flow = self._flow.statistics()
                _log.debug(
                    "flow control holds a message of %d bytes for %s: %d messages / %d bytes "
                    "outstanding, %d waiting",
                    size,
                    topic,
                    flow.outstanding_messages,
                    flow.outstanding_bytes,
                    flow.waiting_messages,
                )
            self._parked[future] = _Parked(topic, ordering_key, message, size, options)
            future.add_done_callback(self._on_parked_done)
        return future

    def _options(self, retry: object, timeout: object) -> _CallOptions:
        if retry is DEFAULT and timeout is None:
            return self._default_options  # the common case: one shared object
        if retry is DEFAULT:
            retry = self.retry_settings
        elif retry is not None and not isinstance(retry, PublishRetrySettings):
            raise TypeError(
                f"retry must be a PublishRetrySettings or None (one attempt), got {retry!r} "
                "(publish's ordering_key, retry and timeout are parameters, not message "
                "attributes)"
            )
        return _CallOptions(retry, check_timeout(timeout))

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        """Accept publishes to a key paused by a failure again (no-op if not paused)."""
        if not self.enable_message_ordering:
            raise ValueError(
                "resume_publish: message ordering is disabled, so no ordering key is ever "
                "paused; create the client with PublisherClient(enable_message_ordering=True)"
            )
        self._sequencer.resume(topic, ordering_key)
        if (topic, ordering_key) in self._paused:
            del self._paused[topic, ordering_key]
            _log.debug("ordering key %r of %s resumed", ordering_key, topic)

    def statistics(self) -> PublisherStatistics:
        flow = self._flow.statistics()
        return PublisherStatistics(
            state=self._state,
            published_messages=self._published,
            failed_messages=self._failed,
            publish_rpcs=self._rpcs,
            retried_rpcs=self._retries,
            batching_messages=self._batcher.pending_messages + sum(len(b) for b in self._ready),
            batches_in_flight=self._sequencer.in_flight,
            outstanding_messages=flow.outstanding_messages,
            outstanding_bytes=flow.outstanding_bytes,
            waiting_messages=flow.waiting_messages,
            waiting_bytes=flow.waiting_bytes,
            paused_keys=tuple(self._paused),
        )

    def _check_open(self) -> None:
        if self._state is PublisherState.OPEN:
            if self._fatal is not None:
                raise ClosedError(
                    f"the PublisherClient stopped after an internal error: {self._fatal!r}"
                ) from self._fatal
            return
        if self._state is PublisherState.UNOPENED:
            raise RuntimeError(
                "the PublisherClient is not started: use `async with PublisherClient(...) as "
                "client:` (or `await client.__aenter__()`) before publishing"
            )
        raise ClosedError(f"the PublisherClient is {self._state.value}; it cannot publish")

    def _enqueue(
        self,
        topic: str,
        ordering_key: str,
        message: pubsub_pb2.PubsubMessage,
        future: asyncio.Future[str],
        size: int,
        options: _CallOptions,
    ) -> None:
        if self._traces:
            trace = self._traces.get(future)
            if trace is not None:
                trace.batched()
        ready = self._batcher.add(
            topic, ordering_key, message, future, size, self._clock.now(), options
        )
        self._ready.extend(ready)
        self._wake.set()  # a batch is ready, or the next deadline may have moved

    def _on_parked_done(self, future: asyncio.Future[str]) -> None:
        # Cancelled while still parked: withdraw it. (If it was admitted first,
        # _admit already released its room.)
        parked = self._parked.pop(future, None)
        if parked is not None:
            self._trace_failed(future, asyncio.CancelledError("cancelled while held"))
            self._admit(self._flow.cancel(future))
            self._check_drained()

    def _admit(self, admitted: Iterable[asyncio.Future[str]]) -> None:
        """Parked messages that flow control admitted: batch them (or drop/fail them)."""
        queue = deque(admitted)
        while queue:
            future = queue.popleft()
            parked = self._parked.pop(future, None)
            if parked is None:  # not ours to batch (cannot happen; be safe)
                continue
            key = (parked.topic, parked.ordering_key)
            error: BaseException | None = None
            if self._stopping or self._fatal is not None:
                error = ClosedError("the PublisherClient was closed before the message was sent")
            elif key in self._paused:
                error = OrderingKeyPausedError(*key)
            if future.done() or error is not None:
                if error is not None:
                    self._fail(future, error)
                else:
                    self._trace_failed(future, asyncio.CancelledError("cancelled while held"))
                queue.extend(self._flow.release(parked.size))
                continue
            self._enqueue(*key, parked.message, future, parked.size, parked.options)

    # ================================================================ sending

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        if self._group is None or self._stopping:
            coroutine.close()
            return
        task: asyncio.Task[None] = self._group.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_sender(self) -> None:
        """The one task that decides which batches leave, and when."""
        try:
            while True:
                self._wake.clear()
                self._dispatch()
                deadline = self._batcher.next_deadline()
                if deadline is None:
                    await self._wake.wait()
                    continue
                delay = deadline - self._clock.now()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._wake.wait()
        except asyncio.CancelledError:
            raise
        except Exception as bug:  # never raise into the TaskGroup (it would cancel the owner)
            self._crash(bug)

    def _crash(self, bug: Exception) -> None:
        """A bug in the client itself: fail what is waiting, refuse new publishes."""
        if self._fatal is None:
            self._fatal = bug
        self._fail_everything(
            ClosedError(f"the PublisherClient stopped after an internal error: {bug!r}")
        )

    def _dispatch(self) -> None:
        ready, self._ready = self._ready, []
        if self._state is PublisherState.OPEN:
            ready.extend(self._batcher.due(self._clock.now()))
        else:
            ready.extend(self._batcher.flush())
        for batch in ready:
            self._apply(self._sequencer.submit(batch.topic, batch.ordering_key, batch))

    def _apply(self, actions: SequencerActions[_Batch]) -> None:
        for batch in actions.fail:
            self._settle(batch, error=OrderingKeyPausedError(batch.topic, batch.ordering_key))
        for batch in actions.send:
            if batch.ordering_key:
                # The key's next batch cannot leave before this one is done: let it
                # fill instead of closing it half-full at max_latency.
                self._batcher.hold(batch.topic, batch.ordering_key)
            self._spawn(self._send(batch), f"eoclient-publish {batch.topic}")

    async def _send(self, batch: _Batch) -> None:
        rpc_span = None
        if self._tracing is not None:
            traces = [t for f in batch.handles if (t := self._traces.get(f)) is not None]
            rpc_span = self._tracing.start_publish_rpc(batch.topic, traces)
        try:
            try:
                ids = await self._publish_with_retry(batch)
                if len(ids) != len(batch):
                    raise Internal(
                        f"the server returned {len(ids)} message ids for {len(batch)} messages"
                    )
            except asyncio.CancelledError as cancelled:
                closed = ClosedError("the PublisherClient was closed before the server answered")
                if rpc_span is not None and self._tracing is not None:
                    self._tracing.end_publish_rpc(rpc_span, cancelled)
                self._settle(batch, error=closed)
                raise
            except Exception as error:  # RpcError, or a bug below: fail this batch only
                if rpc_span is not None and self._tracing is not None:
                    self._tracing.end_publish_rpc(rpc_span, error)
                _log.debug(
                    "Publish of %d messages to %s failed for good: %s",
                    len(batch),
                    batch.topic,
                    error,
                )
                self._finish(batch, error=error)
            else:
                if rpc_span is not None and self._tracing is not None:
                    self._tracing.end_publish_rpc(rpc_span)
                self._finish(batch, ids=ids)
        except asyncio.CancelledError:
            raise
        except Exception as bug:  # in _finish: never raise into the TaskGroup
            self._crash(bug)

    async def _publish_with_retry(self, batch: _Batch) -> list[str]:
        assert self._transport is not None
        assert isinstance(batch.options, _CallOptions)
        transport = self._transport
        options = batch.options
        # The cap of one attempt comes from the client's settings when retry=None.
        attempt_timeout = (options.retry or self.retry_settings).attempt_timeout

        def attempt(seconds: float | None) -> Awaitable[list[str]]:
            self._rpcs += 1
            return transport.publish(batch.topic, batch.messages, timeout=seconds)

        def on_retry(number: int, error: RpcError, delay: float) -> None:
            self._retries += 1
            _log.debug(
                "Publish of %d messages to %s failed (attempt %d): %s; retrying in %.3f s",
                len(batch),
                batch.topic,
                number,
                error,
                delay,
            )

        return await call_with_retry(
            attempt,
            backoff=options.retry,
            codes=RETRYABLE_PUBLISH_CODES,
            timeout=options.timeout,
            # Retry deadlines are real durations, whatever clock paces the batches.
            now=self._retry_clock.now,
            sleep=self._sleep,
            rng=self._rng,
            attempt_timeout=None if math.isinf(attempt_timeout) else attempt_timeout,
            on_retry=on_retry,
        )

    def _finish(
        self, batch: _Batch, *, ids: list[str] | None = None, error: BaseException | None = None
    ) -> None:
        """A sent batch is done for good: sequence, resolve, maybe pause its key."""
        actions = self._sequencer.on_batch_done(batch.topic, batch.ordering_key, error is None)
        if batch.ordering_key and not actions.send:
            # Nothing of the key in flight any more: its open batch is due as usual.
            self._batcher.release(batch.topic, batch.ordering_key)
            self._wake.set()
        paused: list[_Batch] = []
        if error is not None and batch.ordering_key:
            key = (batch.topic, batch.ordering_key)
            self._paused[key] = None
            _log.debug(
                "ordering key %r of %s paused by: %s", batch.ordering_key, batch.topic, error
            )
            # Everything of the key behind the failed batch fails too (sequencer docs):
            # queued batches come back in actions.fail; ready and open ones are here.
            keep: list[_Batch] = []
            for ready in self._ready:
                (paused if (ready.topic, ready.ordering_key) == key else keep).append(ready)
            self._ready = keep
            still_open = self._batcher.close(*key)
            if still_open is not None:
                paused.append(still_open)
        self._settle(batch, ids=ids, error=error)
        for blocked in paused:
            self._settle(blocked, error=OrderingKeyPausedError(blocked.topic, blocked.ordering_key))
        self._apply(actions)

    # ================================================================ results

    def _settle(
        self, batch: _Batch, *, ids: list[str] | None = None, error: BaseException | None = None
    ) -> None:
        """Resolve every future of ``batch`` and give its room back to flow control."""
        if ids is not None:
            for future, message_id in zip(batch.handles, ids, strict=True):
                if not future.done():
                    future.set_result(message_id)
                if self._traces:
                    trace = self._traces.pop(future, None)
                    if trace is not None:
                        trace.published(message_id)
            self._published += len(batch)
        else:
            assert error is not None
            for future in batch.handles:
                self._fail(future, error)
        for size in batch.sizes:
            admitted = self._flow.release(size)
            if admitted:
                self._admit(admitted)
        self._check_drained()

    def _fail(self, future: asyncio.Future[str], error: BaseException) -> None:
        self._failed += 1
        if not future.done():
            future.set_exception(error)
        self._trace_failed(future, error)

    def _trace_failed(self, future: asyncio.Future[str], error: BaseException) -> None:
        if self._traces:
            trace = self._traces.pop(future, None)
            if trace is not None:
                trace.failed(error)

    def _check_drained(self) -> None:
        if self._state is PublisherState.OPEN:
            return
        flow = self._flow.statistics()
        if flow.outstanding_messages == 0 and flow.waiting_messages == 0:
            self._drained.set()


def _load_tracing(provider: TracerProvider | None) -> PublisherTracing:
    """The tracing half of a client with ``enable_open_telemetry_tracing=True``."""
    try:
        from eoclient.tracing import PublisherTracing
    except ImportError as error:
        raise ImportError(
            "enable_open_telemetry_tracing=True needs OpenTelemetry: pip install "
            f"'eoclient[otel]' (or opentelemetry-api) ({error})"
        ) from error
    return PublisherTracing(provider)


def _copy_outcome(source: asyncio.Future[str], target: concurrent.futures.Future[str]) -> None:
    """Hand an accepted message's outcome to the thread that published it."""
    if source.cancelled():
        target.set_exception(ClosedError("the message was withdrawn before it was sent"))
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
