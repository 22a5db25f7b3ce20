"""The handler form of subscribing: one coroutine per message (``SubscriberClient.run``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from eoclient.subscriber.message import Message

logger = logging.getLogger("eoclient.subscriber")


async def run_handler(
    messages: AsyncIterator[Message],
    handler: Callable[[Message], Awaitable[Any]],
) -> None:
    """Run ``handler`` once per message of ``messages``, concurrently (bounded by flow control).

    A handler that raises gets its message nacked (if it did not settle it). Returns
    when cancelled or when the session ends; a fatal session error is raised.
    """
    failure: Exception | None = None
    async with asyncio.TaskGroup() as handlers:
        try:
            async for message in messages:
                handlers.create_task(_run_one(handler, message))
        except Exception as error:  # the session's fatal error, from __anext__
            failure = error
    if failure is not None:
        # Raised as itself once the running handlers have finished, not wrapped in
        # the TaskGroup's ExceptionGroup.
        raise failure


async def _run_one(handler: Callable[[Message], Awaitable[Any]], message: Message) -> None:
    try:
        await handler(message)
    except asyncio.CancelledError:
        # run() was cancelled: give the message back now (nobody will settle it; the
        # session's shutdown would otherwise wait for it).
        if not message.settled:
            message.nack()
        raise
    except Exception:
        logger.exception("handler failed for message %s; nacking it", message.message_id)
        if not message.settled:
            message.nack()
