"""The way out of a StreamingPull session: stop taking, settle what is left, flush, close.

The order is the rule (docs/protocol.md#subscriber-shutdown), and each step has a bound
(docs/architecture.md#lifecycle-is-explicit), so ``aclose()`` always finishes:

1. Nack what was never handed out and admit nothing more (``Dispatcher.stop``).
2. Unless the session waits for the application (below), nack what it holds too: those
   nacks then travel on the stream ahead of its half-close, so leaving costs one round
   trip.
3. Half-close the stream through the sender, its only writer
   (docs/architecture.md#one-task-owns-sending), and read it to its end within
   ``stream_close_timeout``: confirmations and the deliveries in flight (nacked) arrive
   before it ends. Else the server would keep delivering on it.
4. If it waits (``WAIT_FOR_PROCESSING``, left without an exception, messages out): say so
   in one WARNING line, wait up to ``timeout`` for the application to settle what it
   holds, then nack the rest; their later acks report OTHER.
5. Flush: wait up to ``flush_timeout`` until the ledger is idle (every ack answered).
   Settlements made from here on go by unary call: there is no stream any more.

Which behavior applies when ``ShutdownOptions.behavior`` is ``None``: ``run()`` resolves
it to ``WAIT_FOR_PROCESSING`` before the session starts (its handlers may still be
running); a session of ``subscribe()`` nacks (:data:`ITERATOR_BEHAVIOR`): once its
``async with`` is left, the code that could settle a message is gone
(docs/protocol.md#subscriber-shutdown).

Then, however the way out ended (a timeout, a failure, the caller cancelled): settle what
the application still holds if step 3 never ran, resolve every waiter still unanswered
OTHER, and cancel the stream call (:meth:`SessionShutdown.settle_the_rest`); the session
then cancels its tasks (its ``_tasks.TaskOwner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from eoclient._clock import AsyncClock
from eoclient.subscriber.dispatch import Dispatcher
from eoclient.subscriber.ledger import AckLedger
from eoclient.subscriber.sender import AckSender
from eoclient.subscriber.settings import ShutdownBehavior, ShutdownOptions

__all__ = ["FLUSH_POLL_INTERVAL", "ITERATOR_BEHAVIOR", "SessionShutdown"]

logger = logging.getLogger("eoclient.subscriber")

# What a session does with the messages it handed out when its options name no behavior
# (docs/protocol.md#subscriber-shutdown).
ITERATOR_BEHAVIOR = ShutdownBehavior.NACK_IMMEDIATELY

# While shutdown flushes, how often it checks whether the acks have all been answered.
FLUSH_POLL_INTERVAL = 0.005


class SessionShutdown:
    """The shutdown of one session, in order (module docstring).

    Args:
        subscription: the subscription's name, for the log line.
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
        subscription: str,
        failed: Callable[[], bool],
    ) -> None:
        self.subscription = subscription
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
        self,
        *,
        wait_for_processing: bool,
        receive_task: asyncio.Task[None] | None,
    ) -> None:
        """Steps 1 to 5; later settlements go by unary call."""
        dispatch = self.dispatch
        options = self.options
        dispatch.stop()
        self.sender.begin_shutdown()
        waits = (
            wait_for_processing
            and (options.behavior or ITERATOR_BEHAVIOR) is ShutdownBehavior.WAIT_FOR_PROCESSING
            and options.timeout != 0
            and bool(dispatch.out)
        )
        if not waits:
            self._nack_outstanding()
        await self._close_stream(receive_task)
        if waits:
            if dispatch.out and not self._failed():
                logger.warning(
                    "subscription %s: closing waits %s for %d message(s) handed out and "
                    "not settled (ShutdownOptions: WAIT_FOR_PROCESSING), then nacks them",
                    self.subscription,
                    "with no limit" if options.timeout is None else f"up to {options.timeout:g} s",
                    len(dispatch.out),
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(options.timeout):
                    while dispatch.out and not self._failed():
                        self.settled.clear()
                        await self.settled.wait()
            self._nack_outstanding()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(options.flush_timeout):
                while not self.ledger.idle() and not self._failed():
                    self.sender.wake.set()
                    await self.clock.sleep(FLUSH_POLL_INTERVAL)

    def _nack_outstanding(self) -> None:
        self.nacked_outstanding = True
        self.dispatch.nack_outstanding()

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
