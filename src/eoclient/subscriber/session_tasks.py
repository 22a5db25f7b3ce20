"""A session's background tasks: one TaskGroup, and every task in it cancellable at close.

The receiver, the sender and the unary ack calls of one session all run here
(docs/architecture.md#every-background-task-belongs-to-one-taskgroup). None of them raises
into the group: a permanent failure is stored by the session and reaches the user on their
next ``await``. So closing is "cancel every task, then wait for the group": our own tasks'
cancellation ends quietly inside the group, and a ``CancelledError`` out of :meth:`close`
is the caller's own, which propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["SessionTasks"]


class SessionTasks:
    """The TaskGroup of one session, open between :meth:`open` and :meth:`close`."""

    __slots__ = ("_group", "_tasks")

    def __init__(self) -> None:
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()

    def spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None] | None:
        """Start a background task in the group (and remember it to cancel). Once the group
        is closed (or before it opens) nothing starts: ``coroutine`` is closed, ``None``."""
        if self._group is None:
            coroutine.close()
            return None
        task = self._group.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Cancel every task and wait for the group to end. Idempotent."""
        group, self._group = self._group, None
        if group is None:
            return
        for task in list(self._tasks):
            task.cancel()
        # Our own tasks' cancellation ends quietly inside the group; a CancelledError
        # here is the caller being cancelled, and propagates.
        await group.__aexit__(None, None, None)
