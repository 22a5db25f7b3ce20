"""The source's loop thread: ``close`` leaves no task pending, whether the loop still runs or
was halted (a killed process's loop, in tests)."""

from __future__ import annotations

import asyncio

import pytest

from eoclient.spark._loop import LoopThread


async def _start_forever_task() -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(asyncio.sleep(3600))


@pytest.mark.parametrize("halted", [False, True])
def test_close_cancels_what_is_pending(halted: bool) -> None:
    thread = LoopThread("test-loop")
    task = thread.run(_start_forever_task())
    if halted:
        thread.halt()
        assert not task.done()  # as a killed process leaves it
    thread.close()
    assert task.cancelled()
    assert thread.loop.is_closed()
    thread.close()  # again: nothing to do
