"""Clocks, passed in wherever time matters so tests can drive time by hand.

Pure cores never read a clock: they take ``now`` as an argument. Shells hold a
``Clock`` and pass ``clock.now()`` down, and wait with ``await clock.sleep(s)`` (an
``AsyncClock``), never ``asyncio.sleep`` for a timed wait, so a test on a ``FakeClock``
moves through backoffs without waiting them out. The server's clock is wall-clock seconds
since the epoch (publish times and seek targets are wall times); the client's
cores only compare durations, so the monotonic clock serves them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current time in seconds."""
        ...


class AsyncClock(Clock, Protocol):
    """A clock the async shells also wait on."""

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock (at least one loop turn)."""
        ...


class SystemClock:
    """Wall-clock seconds since the Unix epoch (``time.time``)."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class MonotonicClock:
    """Monotonic seconds (``time.monotonic``): for measuring durations."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed by ``time.monotonic`` (at least one turn).

        The event loop's timer alone does not promise that: uvloop keeps timers in whole
        milliseconds and fires one up to 1 ms before its time (measured: 146 of 300 sleeps
        of 0.5-2.3 ms returned early, by up to 1.09 ms), so a caller that compares
        ``now()`` with the deadline it slept until would find it not yet reached. What
        is left is slept again until it has passed.
        """
        if seconds <= 0:
            await asyncio.sleep(0)  # the sender's turn to batch acks: no clock reads
            return
        deadline = time.monotonic() + seconds
        await asyncio.sleep(seconds)
        # Not a poll for a condition another task sets (what ASYNC110 is about): the
        # condition is time itself, and this runs at most once or twice.
        while (remaining := deadline - time.monotonic()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(remaining)


class FakeClock:
    """A clock that moves only when told to.

    Starts at 2026-01-01T00:00:00Z by default, so wall-time conversions in tests
    give readable timestamps.
    """

    DEFAULT_START = 1_767_225_600.0

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Jump forward by ``seconds`` at once, then let other tasks run one turn.

        A sleeper on a fake clock is the only thing moving time forward, so it moves it
        itself: a backoff of minutes takes one loop turn in a test.
        """
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back (advance by {seconds})")
        self._now += seconds

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now})"
