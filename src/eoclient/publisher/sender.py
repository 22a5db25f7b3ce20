"""The sender: the one task that decides which of a publisher's batches leave, and when.

It performs what the pipeline (``pipeline.py``) decides: it wakes when the pipeline has a
ready batch (``wake``) and at the batcher's next deadline, takes the batches that may leave
(:meth:`Pipeline.sendable`) and starts one **send task** per batch
(docs/architecture.md#one-task-owns-sending: nothing else decides what is sent). A send
task calls ``Publish`` with the retry and timeout its messages were published with —
retried with jittered exponential backoff, only for :data:`RETRYABLE_PUBLISH_CODES`, and no
new attempt that would start after ``retry.deadline`` or the call's ``timeout``
(:func:`eoclient._retrying.call_with_retry`) — and reports the outcome to
:meth:`Pipeline.finish`, sending what that releases.

Every task belongs to the sender's TaskGroup (a ``_tasks.TaskOwner``), the client's one
(docs/architecture.md#every-background-task-belongs-to-one-taskgroup), and none ever raises
into it: a bug in the client itself fails what is waiting and is kept in :attr:`fatal`, so
that the client refuses new publishes. A send task cancelled by :meth:`Sender.stop` fails
its own batch with ``ClosedError`` (the cancellation still propagates); one cancelled before
its first step never runs, so ``stop`` fails its batch itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Awaitable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from eoclient._clock import AsyncClock
from eoclient._retrying import call_with_retry
from eoclient._tasks import TaskOwner
from eoclient._transport import PubSubTransport
from eoclient.errors import ClosedError, Internal, RpcError
from eoclient.publisher.pipeline import Pipeline, PublishBatch
from eoclient.publisher.settings import (
    RETRYABLE_PUBLISH_CODES,
    CallOptions,
    PublishRetrySettings,
)

if TYPE_CHECKING:
    # Imported at run time only by a client with tracing on (they import opentelemetry).
    from opentelemetry.trace import Span

    from eoclient.publisher.spans import PublishSpans

__all__ = ["Sender"]

_log = logging.getLogger("eoclient.publisher")


class Sender:
    """Sends the batches of one :class:`Pipeline` (see the module docstring).

    Args:
        pipeline: what decides which batches may leave.
        wake: set when the pipeline has something for the sender (its ``notify_sender``).
        clock: monotonic seconds for batch latencies (the pipeline's), retry deadlines
            and timeouts; what retry backoff awaits.
        retry: the client's retry settings: the cap of one attempt
            (``attempt_timeout``) when a message was published with ``retry=None``.
        rng: the random source of the backoff jitter.
        spans: the client's OpenTelemetry spans, ``None`` with tracing off.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        wake: asyncio.Event,
        clock: AsyncClock,
        retry: PublishRetrySettings,
        rng: random.Random,
        spans: PublishSpans | None,
    ) -> None:
        self._pipeline = pipeline
        self._wake = wake
        self._clock = clock
        self._retry_settings = retry
        self._rng = rng
        self._spans = spans
        self._transport: PubSubTransport | None = None
        self._tasks = TaskOwner()
        # Batches whose send task has not run yet, by id: a task cancelled before its first
        # step never runs its body, so stop() fails these itself.
        self._unstarted: dict[int, PublishBatch] = {}
        self._stopping = False  # no task starts any more
        self.fatal: BaseException | None = None  # a bug in the client stopped it
        self.rpcs = 0  # Publish attempts, retries included
        self.retries = 0  # attempts that failed with a retryable status and were retried

    def __repr__(self) -> str:
        return f"<Sender tasks={len(self._tasks)} rpcs={self.rpcs} retries={self.retries}>"

    # ================================================================ lifecycle

    async def start(self, transport: PubSubTransport) -> None:
        """Open the task group and start the sender task, which sends on ``transport``."""
        self._transport = transport
        await self._tasks.open()
        self._spawn(self._run(), "eoclient-publish-sender")

    async def stop(self) -> None:
        """Stop sending: every task is cancelled (a send task fails its own batch) and
        awaited, then every message not in flight fails with ``ClosedError``; from the
        start, nothing joins a batch any more."""
        self._stopping = True
        self._pipeline.stop()
        try:
            # Waits for the cancelled tasks even if this caller is cancelled meanwhile
            # (TaskGroup absorbs it, then re-raises it after its tasks are done).
            await self._tasks.close()
        finally:
            self._transport = None
            unstarted, self._unstarted = self._unstarted, {}
            for batch in unstarted.values():
                self._pipeline.settle(batch, error=_closed_before_sent())
            self._pipeline.fail_everything(_closed_before_sent())

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> bool:
        """Start a task in the group; ``False`` (and the coroutine closed) once stopping."""
        if self._stopping:
            coroutine.close()
            return False
        return self._tasks.spawn(coroutine, name) is not None

    def _crash(self, bug: Exception) -> None:
        """A bug in the client itself: fail what is waiting, refuse new publishes."""
        if self.fatal is None:
            self.fatal = bug
        self._pipeline.stop()
        self._pipeline.fail_everything(
            ClosedError(f"the PublisherClient stopped after an internal error: {bug!r}")
        )

    # ================================================================ sending

    async def _run(self) -> None:
        """The sender task: sends what may leave whenever it is woken or a batch is due."""
        try:
            while True:
                self._wake.clear()
                self._send_all(self._pipeline.sendable())
                deadline = self._pipeline.next_deadline()
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

    def _send_all(self, batches: Iterable[PublishBatch]) -> None:
        for batch in batches:
            if self._spawn(self._send(batch), f"eoclient-publish {batch.topic}"):
                self._unstarted[id(batch)] = batch
            else:
                self._pipeline.settle(batch, error=_closed_before_sent())

    async def _send(self, batch: PublishBatch) -> None:
        """A send task: one batch's ``Publish``, retries included, and its outcome."""
        del self._unstarted[id(batch)]
        span = None
        if self._spans is not None:
            span = self._spans.publish_started(batch.topic, batch.handles)
        try:
            try:
                ids = await self._publish(batch)
                if len(ids) != len(batch):
                    raise Internal(
                        f"the server returned {len(ids)} message ids for {len(batch)} messages"
                    )
            except asyncio.CancelledError as cancelled:
                self._publish_ended(span, cancelled)
                closed = ClosedError("the PublisherClient was closed before the server answered")
                self._pipeline.settle(batch, error=closed)
                raise
            except Exception as error:  # RpcError, or a bug below: fail this batch only
                self._publish_ended(span, error)
                _log.debug(
                    "Publish of %d messages to %s failed for good: %s",
                    len(batch),
                    batch.topic,
                    error,
                )
                self._send_all(self._pipeline.finish(batch, error=error))
            else:
                self._publish_ended(span)
                self._send_all(self._pipeline.finish(batch, ids=ids))
        except asyncio.CancelledError:
            raise
        except Exception as bug:  # in finish: never raise into the TaskGroup
            self._crash(bug)

    def _publish_ended(self, span: Span | None, error: BaseException | None = None) -> None:
        if span is not None and self._spans is not None:
            self._spans.publish_ended(span, error)

    async def _publish(self, batch: PublishBatch) -> list[str]:
        assert self._transport is not None
        assert isinstance(batch.options, CallOptions)
        transport = self._transport
        options = batch.options
        # The cap of one attempt comes from the client's settings when retry=None.
        attempt_timeout = (options.retry or self._retry_settings).attempt_timeout

        def attempt(seconds: float | None) -> Awaitable[list[str]]:
            self.rpcs += 1
            return transport.publish(batch.topic, batch.messages, timeout=seconds)

        def on_retry(number: int, error: RpcError, delay: float) -> None:
            self.retries += 1
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
            now=self._clock.now,
            sleep=self._clock.sleep,
            rng=self._rng,
            attempt_timeout=None if math.isinf(attempt_timeout) else attempt_timeout,
            on_retry=on_retry,
        )


def _closed_before_sent() -> ClosedError:
    return ClosedError("the PublisherClient was closed before the message was sent")
