"""Clocks, passed in wherever time matters so tests can drive time by hand.

Pure cores never read a clock: they take ``now`` as an argument. Shells hold a
``Clock`` and pass ``clock.now()`` down. The server's clock is wall-clock seconds
since the epoch (publish times and seek targets are wall times); the client's
cores only compare durations, so the monotonic clock serves them.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current time in seconds."""
        ...


class SystemClock:
    """Wall-clock seconds since the Unix epoch (``time.time``)."""

    def now(self) -> float:
        return time.time()


class MonotonicClock:
    """Monotonic seconds (``time.monotonic``): for measuring durations."""

    def now(self) -> float:
        return time.monotonic()


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

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back (advance by {seconds})")
        self._now += seconds

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now})"
