"""The clocks' ``sleep``: the fake one moves time itself, the real ones wait until the time
has passed, on both event loops."""

from __future__ import annotations

import asyncio
import time

from eoclient._clock import FakeClock, MonotonicClock


async def test_a_fake_sleep_jumps_time_forward_without_waiting() -> None:
    clock = FakeClock()
    start, wall = clock.now(), time.monotonic()
    await clock.sleep(3600)
    await clock.sleep(-1)  # never backwards
    assert clock.now() == start + 3600
    assert time.monotonic() - wall < 1.0


async def test_a_monotonic_sleep_waits() -> None:
    clock = MonotonicClock()
    start = clock.now()
    await clock.sleep(0.02)
    assert clock.now() - start >= 0.02


async def test_a_monotonic_sleep_never_returns_before_its_time() -> None:
    # uvloop fires a timer up to 1 ms early (it keeps them in whole milliseconds): sleeps
    # of a few milliseconds, off the millisecond grid, returned early about half the time
    # before MonotonicClock slept the rest. This module runs on both loops (conftest).
    clock = MonotonicClock()
    for step in range(60):
        seconds = 0.0005 + (step % 7) * 0.0003
        start = clock.now()
        await clock.sleep(seconds)
        assert clock.now() - start >= seconds, f"returned early from a sleep of {seconds} s"


async def test_a_monotonic_sleep_of_nothing_still_yields_once() -> None:
    clock = MonotonicClock()
    ran: list[bool] = []

    async def other() -> None:
        ran.append(True)

    task = asyncio.get_running_loop().create_task(other())
    await clock.sleep(0)
    assert ran == [True]
    await task
