"""Owning background tasks, and stopping one without swallowing the caller's cancellation.

Every background task of the SDK, the Spark connector and the command starts either in an
``asyncio.TaskGroup`` of the code that awaits it, or in a :class:`TaskOwner`: the group of a
client or a session that outlives any one call (a session's receiver and sender, a
publisher's send tasks, the unary settlements of pulled messages, a lease keeper's loop).
Nothing else calls ``create_task`` (``tests/test_structure.py`` checks it).

``task.cancel(); with suppress(CancelledError): await task`` also swallows a cancellation
aimed at the *caller* while it waits, and the caller then runs on as if nothing happened.
Here the task's own ``CancelledError`` is absorbed only when nobody asked to cancel the
caller (``Task.cancelling()``, Python 3.11).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


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


class TaskOwner:
    """The one owner of a client's or a session's background tasks: an ``asyncio.TaskGroup``
    open between :meth:`open` and :meth:`close`
    (docs/architecture.md#every-background-task-belongs-to-one-taskgroup).

    Its tasks never raise into the group: a failure is the owner's to store and report (a
    session's permanent error, a publisher's broken batch), so closing is "cancel every
    task, then wait for the group": the tasks' own cancellation ends quietly inside the
    group, and a ``CancelledError`` out of :meth:`close` is the caller's own, which
    propagates.
    """

    __slots__ = ("_closed", "_group", "_tasks")

    def __init__(self) -> None:
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def __len__(self) -> int:
        """Tasks not yet finished."""
        return len(self._tasks)

    async def open(self) -> None:
        """Open the group (in a task: a TaskGroup needs one). Idempotent; a closed owner
        stays closed."""
        if self._group is not None or self._closed:
            return
        group = asyncio.TaskGroup()
        await group.__aenter__()
        self._group = group

    def spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None] | None:
        """Start a task in the group. Before :meth:`open` and after :meth:`close` nothing
        starts: ``coroutine`` is closed and the answer is ``None``."""
        if self._group is None:
            coroutine.close()
            return None
        task = self._group.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self, *, grace: float = 0.0) -> None:
        """Let the tasks finish for up to ``grace`` seconds, then cancel the rest and wait
        for the group to end. Idempotent; nothing starts afterwards."""
        self._closed = True
        group, self._group = self._group, None
        if group is None:
            return
        if grace > 0 and self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        # Our own tasks' cancellation ends quietly inside the group; a CancelledError
        # here is the caller being cancelled, and propagates.
        await group.__aexit__(None, None, None)
