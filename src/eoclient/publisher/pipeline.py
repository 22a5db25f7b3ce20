"""The way of a publisher client's messages from accepted to resolved: synchronous.

Every step here is synchronous (nothing awaits), so the order of calls is the order of
messages:

1. :meth:`Pipeline.accept` checks the message
   (:func:`~eoclient.publisher.validation.validate_message`) and whether its key is paused
   (:meth:`Sequencer.check_publish`), raising at once; then flow control
   (:class:`PublishFlowController`) admits it, raises (``ERROR``), or *parks* it
   (``BLOCK``): a parked message waits, first in first out, until earlier messages
   resolve, and then joins a batch exactly as if it had just been published; cancelling
   its future while it is parked withdraws it;
2. the :class:`Batcher` puts it in the open batch of its (topic, ordering key); batches
   it closes go to a ready list, and the sender is notified;
3. :meth:`Pipeline.sendable` (the sender asks when notified and at
   :meth:`Pipeline.next_deadline`) hands ready and due batches — every open one once the
   client is closing — to the :class:`Sequencer`, and returns those that may leave now
   (at most one batch per ordering key in flight, in order);
4. the sender reports each sent batch's final outcome to :meth:`Pipeline.finish`: its
   futures resolve with the message ids or the error, flow control gets its room back
   (parked messages move on), and the sequencer may release the key's next batch (which
   ``finish`` returns, to be sent) or, on a failure, pause the key: its queued, ready and
   open batches then fail with :class:`~eoclient.errors.OrderingKeyPausedError`, and so
   does every publish to it until :meth:`Pipeline.resume`.

The shell (``client.py``, ``sender.py``) does the I/O: it sends what ``sendable`` and
``finish`` return, reports every batch it sent to ``finish`` (or, when its send was
cancelled, to ``settle``), and learns through two callbacks that the sender has something
to look at (``notify_sender``) and that a closing client has nothing left
(``notify_drained``). The clock only paces batch latencies.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from eoclient._clock import Clock
from eoclient._proto import pubsub_pb2
from eoclient.errors import ClosedError, FlowControlLimitError, OrderingKeyPausedError
from eoclient.publisher.batcher import Batch, Batcher
from eoclient.publisher.flow_control import FlowControlStatistics, PublishFlowController
from eoclient.publisher.sequencer import Sequencer, SequencerActions
from eoclient.publisher.settings import BatchSettings, CallOptions, PublishFlowControl
from eoclient.publisher.validation import validate_message

if TYPE_CHECKING:
    # Imported at run time only by a client with tracing on (it imports opentelemetry).
    from eoclient.publisher.spans import PublishSpans

__all__ = ["Pipeline", "PublishBatch"]

PublishBatch: TypeAlias = Batch[pubsub_pb2.PubsubMessage, "asyncio.Future[str]"]

_log = logging.getLogger("eoclient.publisher")


@dataclass(frozen=True, slots=True)
class _Parked:
    """A message BLOCK flow control holds until there is room."""

    topic: str
    ordering_key: str
    message: pubsub_pb2.PubsubMessage
    size: int
    options: CallOptions


class Pipeline:
    """The messages of one client between ``publish`` and their results (module docstring).

    Args:
        batch: how messages are grouped into requests.
        flow_control: how many messages may be outstanding.
        clock: monotonic seconds for batch latencies.
        spans: the client's OpenTelemetry spans, ``None`` with tracing off.
        notify_sender: called whenever a batch is ready, or the next deadline may have
            moved.
        notify_drained: called once the pipeline is closing and every accepted message
            has its result (possibly more than once).
    """

    def __init__(
        self,
        batch: BatchSettings,
        flow_control: PublishFlowControl,
        *,
        clock: Clock,
        spans: PublishSpans | None,
        notify_sender: Callable[[], None],
        notify_drained: Callable[[], None],
    ) -> None:
        self._clock = clock
        self._spans = spans
        self._notify_sender = notify_sender
        self._notify_drained = notify_drained
        self._batcher: Batcher[pubsub_pb2.PubsubMessage, asyncio.Future[str]] = Batcher(batch)
        self._sequencer: Sequencer[PublishBatch] = Sequencer()
        self._flow: PublishFlowController[asyncio.Future[str]] = PublishFlowController(flow_control)
        self._parked: dict[asyncio.Future[str], _Parked] = {}
        self._ready: list[PublishBatch] = []  # closed by the batcher, not yet sequenced
        self._paused: dict[tuple[str, str], None] = {}  # an ordered set
        self._closing = False  # every open batch is due; drained is reported
        self._stopped = False  # nothing joins a batch any more
        self.published = 0  # futures resolved with a message id
        self.failed = 0  # futures failed

    def __repr__(self) -> str:
        flow = self._flow.statistics()
        return (
            f"<Pipeline outstanding={flow.outstanding_messages} "
            f"waiting={flow.waiting_messages} in_flight={self._sequencer.in_flight} "
            f"paused_keys={len(self._paused)}>"
        )

    # ================================================================ what it holds

    def flow_statistics(self) -> FlowControlStatistics:
        return self._flow.statistics()

    @property
    def batching_messages(self) -> int:
        """Messages in batches not yet handed to the sequencer."""
        return self._batcher.pending_messages + sum(len(b) for b in self._ready)

    @property
    def batches_in_flight(self) -> int:
        return self._sequencer.in_flight

    @property
    def paused_keys(self) -> tuple[tuple[str, str], ...]:
        """(topic, ordering key) pairs paused by a failure, in pause order."""
        return tuple(self._paused)

    # ================================================================ accepting

    def accept(
        self,
        topic: str,
        ordering_key: str,
        data: bytes,
        attributes: dict[str, str],
        options: CallOptions,
    ) -> asyncio.Future[str]:
        """Check one message and take it in: the future of its id, or raise at once."""
        spans = self._spans
        trace = None
        if spans is not None:
            # Before the size is computed: the trace context travels as an attribute.
            trace = spans.start(topic, ordering_key, data, attributes)
        try:
            size = validate_message(data, attributes, ordering_key, topic=topic)
            self._sequencer.check_publish(topic, ordering_key)
        except BaseException as error:
            if spans is not None and trace is not None:
                spans.refused(trace, error)
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
        if spans is not None and trace is not None:
            spans.accepted(future, trace)
        try:
            admitted = self._flow.acquire(size, future)
        except FlowControlLimitError as error:  # behaviour ERROR
            if spans is not None:
                spans.failed(future, error)
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

    def _enqueue(
        self,
        topic: str,
        ordering_key: str,
        message: pubsub_pb2.PubsubMessage,
        future: asyncio.Future[str],
        size: int,
        options: CallOptions,
    ) -> None:
        if self._spans is not None:
            self._spans.batched(future)
        ready = self._batcher.add(
            topic, ordering_key, message, future, size, self._clock.now(), options
        )
        self._ready.extend(ready)
        self._notify_sender()  # a batch is ready, or the next deadline may have moved

    def _on_parked_done(self, future: asyncio.Future[str]) -> None:
        # Cancelled while still parked: withdraw it. (If it was admitted first,
        # _admit already released its room.)
        parked = self._parked.pop(future, None)
        if parked is not None:
            if self._spans is not None:
                self._spans.failed(future, asyncio.CancelledError("cancelled while held"))
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
            if self._stopped:
                error = ClosedError("the PublisherClient was closed before the message was sent")
            elif key in self._paused:
                error = OrderingKeyPausedError(*key)
            if future.done() or error is not None:
                if error is not None:
                    self._fail(future, error)
                elif self._spans is not None:
                    self._spans.failed(future, asyncio.CancelledError("cancelled while held"))
                queue.extend(self._flow.release(parked.size))
                continue
            self._enqueue(*key, parked.message, future, parked.size, parked.options)

    # ================================================================ sending

    def next_deadline(self) -> float | None:
        """When the oldest open batch is due (``None``: no open batch)."""
        return self._batcher.next_deadline()

    def sendable(self) -> list[PublishBatch]:
        """The batches to send now: ready and due ones (all open ones once closing) that
        the sequencer lets go, in order; those of a paused key fail here."""
        ready, self._ready = self._ready, []
        if self._closing:
            ready.extend(self._batcher.flush())
        else:
            ready.extend(self._batcher.due(self._clock.now()))
        send: list[PublishBatch] = []
        for batch in ready:
            send.extend(self._apply(self._sequencer.submit(batch.topic, batch.ordering_key, batch)))
        return send

    def _apply(self, actions: SequencerActions[PublishBatch]) -> Sequence[PublishBatch]:
        for batch in actions.fail:
            self.settle(batch, error=OrderingKeyPausedError(batch.topic, batch.ordering_key))
        for batch in actions.send:
            if batch.ordering_key:
                # The key's next batch cannot leave before this one is done: let it
                # fill instead of closing it half-full at max_latency.
                self._batcher.hold(batch.topic, batch.ordering_key)
        return actions.send

    def finish(
        self,
        batch: PublishBatch,
        *,
        ids: list[str] | None = None,
        error: BaseException | None = None,
    ) -> Sequence[PublishBatch]:
        """A sent batch is done for good (``ids``, or the final ``error``): sequence it,
        resolve it, maybe pause its key. Returns the batches to send next."""
        actions = self._sequencer.on_batch_done(batch.topic, batch.ordering_key, error is None)
        if batch.ordering_key and not actions.send:
            # Nothing of the key in flight any more: its open batch is due as usual.
            self._batcher.release(batch.topic, batch.ordering_key)
            self._notify_sender()
        paused: list[PublishBatch] = []
        if error is not None and batch.ordering_key:
            key = (batch.topic, batch.ordering_key)
            self._paused[key] = None
            _log.debug(
                "ordering key %r of %s paused by: %s", batch.ordering_key, batch.topic, error
            )
            # Everything of the key behind the failed batch fails too (sequencer docs):
            # queued batches come back in actions.fail; ready and open ones are here.
            keep: list[PublishBatch] = []
            for ready in self._ready:
                (paused if (ready.topic, ready.ordering_key) == key else keep).append(ready)
            self._ready = keep
            still_open = self._batcher.close(*key)
            if still_open is not None:
                paused.append(still_open)
        self.settle(batch, ids=ids, error=error)
        for blocked in paused:
            self.settle(blocked, error=OrderingKeyPausedError(blocked.topic, blocked.ordering_key))
        return self._apply(actions)

    def resume(self, topic: str, ordering_key: str) -> None:
        """Accept publishes to a key paused by a failure again (no-op if not paused)."""
        self._sequencer.resume(topic, ordering_key)
        if (topic, ordering_key) in self._paused:
            del self._paused[topic, ordering_key]
            _log.debug("ordering key %r of %s resumed", ordering_key, topic)

    # ================================================================ results

    def settle(
        self,
        batch: PublishBatch,
        *,
        ids: list[str] | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Resolve every future of ``batch`` and give its room back to flow control."""
        spans = self._spans
        if ids is not None:
            for future, message_id in zip(batch.handles, ids, strict=True):
                if not future.done():
                    future.set_result(message_id)
                if spans is not None:
                    spans.published(future, message_id)
            self.published += len(batch)
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
        self.failed += 1
        if not future.done():
            future.set_exception(error)
        if self._spans is not None:
            self._spans.failed(future, error)

    def _check_drained(self) -> None:
        if not self._closing:
            return
        flow = self._flow.statistics()
        if flow.outstanding_messages == 0 and flow.waiting_messages == 0:
            self._notify_drained()

    # ================================================================ the end

    def close(self) -> None:
        """The client is closing: every open batch is due, and drained is reported."""
        self._closing = True
        self._notify_sender()
        self._check_drained()

    def stop(self) -> None:
        """Nothing joins a batch any more: parked messages that flow control admits from
        now on fail with ``ClosedError`` (the client is stopping, or broke)."""
        self._stopped = True

    def fail_everything(self, error: BaseException) -> None:
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
            self.settle(batch, error=error)
