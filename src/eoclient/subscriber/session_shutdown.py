"""The way out of a StreamingPull session: stop taking, settle what is left, flush, close.

The order is the rule (docs/protocol.md#subscriber-shutdown), and each step has a bound
(docs/architecture.md#lifecycle-is-explicit), so ``aclose()`` always finishes:

1. Nack what was never handed out and admit nothing more (``Dispatcher.stop``).
2. Half-close the stream through the sender, its only writer
   (docs/architecture.md#one-task-owns-sending), and read it to its end within
   ``stream_close_timeout``: confirmations and the deliveries in flight (nacked) arrive
   before it ends. Else the server would keep delivering on it.
3. Per ``ShutdownOptions``: wait up to ``timeout`` for the application to settle what it
   holds, then nack the rest; its later acks report OTHER.
4. Flush: wait up to ``flush_timeout`` until the ledger is idle (every ack answered).
   Settlements made from here on go by unary call: there is no stream any more.

Then, however the way out ended (a timeout, a failure, the caller cancelled): settle what
the application still holds if step 3 never ran, resolve every waiter still unanswered
OTHER, and cancel the stream call (:meth:`SessionShutdown.settle_the_rest`); the session
then cancels its tasks (its ``_tasks.TaskOwner``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from eoclient._clock import AsyncClock
from eoclient.subscriber.dispatch import Dispatcher
from eoclient.subscriber.ledger import AckLedger
from eoclient.subscriber.sender import AckSender
from eoclient.subscriber.settings import ShutdownBehavior, ShutdownOptions

__all__ = ["FLUSH_POLL_INTERVAL", "SessionShutdown"]

# While shutdown flushes, how often it checks whether the acks have all been answered.
FLUSH_POLL_INTERVAL = 0.005


class SessionShutdown:
    """The shutdown of one session, in order (module docstring).

    Args:
        failed: whether the session has failed (nothing will be sent: stop waiting).
    """

    def __init__(
        self,
        dispatch: Dispatcher,
        ledger: AckLedger,
        sender: AckSender,
        options: ShutdownOptions,
        clock: AsyncClock,
        *,
        failed: Callable[[], bool],
    ) -> None:
        self.dispatch = dispatch
        self.ledger = ledger
        self.sender = sender
        self.options = options
        self.clock = clock
        self._failed = failed
        # Set by every settlement made while closing (and by a failure): step 3 waits on it.
        self.settled = asyncio.Event()
        self.nacked_outstanding = False

    async def graceful(
        self, *, wait_for_processing: bool, receive_task: asyncio.Task[None] | None
    ) -> None:
        """Steps 1 to 4; later settlements go by unary call."""
        dispatch = self.dispatch
        dispatch.stop()
        self.sender.begin_shutdown()
        await self._close_stream(receive_task)
        options = self.options
        if wait_for_processing and options.behavior is ShutdownBehavior.WAIT_FOR_PROCESSING:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(options.timeout):
                    while dispatch.out and not self._failed():
                        self.settled.clear()
                        await self.settled.wait()
        self.nacked_outstanding = True
        dispatch.nack_outstanding()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(options.flush_timeout):
                while not self.ledger.idle() and not self._failed():
                    self.sender.wake.set()
                    await self.clock.sleep(FLUSH_POLL_INTERVAL)

    async def _close_stream(self, receive_task: asyncio.Task[None] | None) -> None:
        """Half-close the stream (through the sender, its only writer) and read it to its
        end: confirmations and the deliveries in flight (nacked) arrive before it ends."""
        if receive_task is None or receive_task.done() or self.sender.call is None:
            return  # between streams: nothing to half-close; the tasks' close cancels the receiver
        self.sender.half_close()
        await asyncio.wait({receive_task}, timeout=self.options.stream_close_timeout)

    def settle_the_rest(self) -> None:
        """However the way out ended: nothing the application holds or awaits is left
        without an answer, and the stream call is cancelled."""
        if not self.nacked_outstanding:
            # Cancelled before the graceful path got there: settle what the application
            # holds, or an ack of it arriving while the tasks wind down would wait for a
            # result nobody sends.
            self.dispatch.nack_outstanding()
        self.sender.fail_all("the subscriber was closed before the server answered")
        call = self.sender.call
        if call is not None:
            call.cancel()
