"""Publishing from another thread: a message handed to the client's loop, its outcome
handed back as a ``concurrent.futures.Future`` (:meth:`PublisherClient.publish_threadsafe`).

The client is not thread-safe, and need not be: the message crosses to the loop with
``call_soon_threadsafe`` and is accepted there by the same code as ``publish_nowait``,
so calls from one thread are accepted in the order they were made, in the calling
thread's context (its current OpenTelemetry span is the message's parent). Every error,
a refused message included, arrives through the future — except the three that make
the call itself wrong, which raise at once: the client not started, closed, or this
being its own loop (where blocking on the future would deadlock).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Callable

from eoclient.errors import ClosedError

__all__ = ["accept_from_thread"]


def accept_from_thread(
    loop: asyncio.AbstractEventLoop | None,
    closed: bool,
    accept: Callable[[], asyncio.Future[str]],
) -> concurrent.futures.Future[str]:
    """Run ``accept`` on ``loop`` (the client's; ``None``: not started) and return a
    future of the message id it leads to; ``closed``: the client is closed."""
    if loop is None:
        raise RuntimeError(
            "the PublisherClient is not started: publish_threadsafe needs it running "
            "on its event loop (`async with PublisherClient(...)` in that loop's thread)"
        )
    if closed or loop.is_closed():
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

    def on_loop() -> None:
        if not result.set_running_or_notify_cancel():
            return  # cancelled before the loop got to it
        try:
            accepted = accept()
        except BaseException as error:
            result.set_exception(error)
            return
        accepted.add_done_callback(lambda done: _copy_outcome(done, result))

    try:
        loop.call_soon_threadsafe(on_loop, context=contextvars.copy_context())
    except RuntimeError as error:  # the loop closed meanwhile
        raise ClosedError(f"the PublisherClient's event loop is closed: {error}") from error
    return result


def _copy_outcome(source: asyncio.Future[str], target: concurrent.futures.Future[str]) -> None:
    """Hand an accepted message's outcome to the thread that published it."""
    if source.cancelled():
        target.set_exception(ClosedError("the message was withdrawn before it was sent"))
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
