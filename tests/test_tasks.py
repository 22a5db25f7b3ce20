"""``eoclient._tasks.cancel_and_wait``: stops a task, never swallows the caller's cancellation."""

from __future__ import annotations

import asyncio

import pytest

from eoclient._tasks import cancel_and_wait


async def _forever() -> None:
    await asyncio.Event().wait()


async def test_cancels_and_waits_for_the_task() -> None:
    task = asyncio.create_task(_forever())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()
    await cancel_and_wait(task)  # again: nothing to do
    await cancel_and_wait(None)


async def test_a_task_that_failed_reports_its_error() -> None:
    async def fail() -> None:
        raise ValueError("broken")

    task = asyncio.create_task(fail())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="broken"):
        await cancel_and_wait(task)


async def test_the_callers_cancellation_is_not_swallowed() -> None:
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()  # cleanup that takes a while

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    reached_after = False

    async def stopper() -> None:
        nonlocal reached_after
        await cancel_and_wait(task)
        reached_after = True

    outer = asyncio.create_task(stopper())
    await asyncio.sleep(0)
    outer.cancel()  # the caller is cancelled while it waits for the task
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert not reached_after
