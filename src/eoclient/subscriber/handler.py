"""The handler form of subscribing: one coroutine per message (``SubscriberClient.run``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from eoclient.subscriber.message import Message

if TYPE_CHECKING:
    from eoclient.subscriber.spans import SessionSpans

logger = logging.getLogger("eoclient.subscriber")

Handler = Callable[[Message], Awaitable[Any]]


async def run_handler(
    messages: AsyncIterator[Message],
    handler: Handler,
    spans: SessionSpans | None = None,
) -> None:
    """Run ``handler`` once per message of ``messages``, concurrently (bounded by flow control).

    A handler that raises gets its message nacked (if it did not settle it). Returns
    when cancelled or when the session ends; a fatal session error is raised. With the
    session's ``spans`` (tracing on), each handler runs under its message's process span.
    """
    failure: Exception | None = None
    async with asyncio.TaskGroup() as handlers:
        try:
            async for message in messages:
                if spans is None:
                    handlers.create_task(_run_one(handler, message))
                else:
                    handlers.create_task(_run_one_traced(spans, handler, message))
        except Exception as error:  # the session's fatal error, from __anext__
            failure = error
    if failure is not None:
        # Raised as itself once the running handlers have finished, not wrapped in
        # the TaskGroup's ExceptionGroup.
        raise failure


async def _run_one_traced(spans: SessionSpans, handler: Handler, message: Message) -> None:
    # The handler's own spans are children of the process span, and its failure (recorded
    # there) comes before the nack that ends it, as in google-cloud-pubsub.
    with spans.processing(message) as process:
        await _run_one(handler, message, process.failed)


async def _run_one(
    handler: Handler,
    message: Message,
    on_failure: Callable[[Exception], None] | None = None,
) -> None:
    try:
        await handler(message)
    except asyncio.CancelledError:
        # run() was cancelled: give the message back now (nobody will settle it; the
        # session's shutdown would otherwise wait for it).
        if not message.settled:
            message.nack()
        raise
    except Exception as error:
        logger.exception("handler failed for message %s; nacking it", message.message_id)
        if on_failure is not None:
            on_failure(error)
        if not message.settled:
            message.nack()
