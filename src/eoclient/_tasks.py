"""Stopping a background task without swallowing the caller's own cancellation.

``task.cancel(); with suppress(CancelledError): await task`` also swallows a cancellation
aimed at the *caller* while it waits, and the caller then runs on as if nothing happened.
Here the task's own ``CancelledError`` is absorbed only when nobody asked to cancel the
caller (``Task.cancelling()``, Python 3.11).
"""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task[object] | None) -> None:
    """Cancel ``task`` and wait until it has finished; None and finished tasks are fine.

    The task's own exception (other than its cancellation) propagates: a background task
    that failed should not fail silently at shutdown.
    """
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
