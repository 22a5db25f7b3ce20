"""The clocks' ``sleep``: the fake one moves time itself, the real ones wait."""

from __future__ import annotations

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
