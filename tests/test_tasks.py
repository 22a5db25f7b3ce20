"""``eoclient._tasks``: ``cancel_and_wait`` never swallows the caller's cancellation; a
``TaskOwner`` owns tasks between open and close."""

from __future__ import annotations

import asyncio

import pytest

from eoclient._tasks import TaskOwner, cancel_and_wait


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


async def test_a_task_owner_starts_tasks_only_while_open() -> None:
    owner = TaskOwner()
    ran: list[str] = []

    async def work(name: str) -> None:
        ran.append(name)

    assert owner.spawn(work("before"), "early") is None  # closed, never run: no warning
    await owner.open()
    task = owner.spawn(work("during"), "on time")
    assert task is not None
    await task
    await owner.close()
    assert owner.spawn(work("after"), "late") is None
    assert ran == ["during"]
    await owner.close()  # idempotent
    await owner.open()  # a closed owner stays closed
    assert owner.spawn(work("reopened"), "late") is None


async def test_closing_lets_tasks_finish_within_the_grace_then_cancels_the_rest() -> None:
    owner = TaskOwner()
    await owner.open()
    quick_done, slow_cancelled = asyncio.Event(), asyncio.Event()

    async def quick() -> None:
        await asyncio.sleep(0.01)
        quick_done.set()

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            slow_cancelled.set()
            raise

    owner.spawn(quick(), "quick")
    owner.spawn(slow(), "slow")
    assert len(owner) == 2
    await owner.close(grace=0.5)
    assert quick_done.is_set()
    assert slow_cancelled.is_set()
    assert len(owner) == 0
