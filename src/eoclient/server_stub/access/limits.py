"""How much one caller may hold: the limits on open StreamingPull streams.

Each stream costs the server two tasks and a lease budget for as long as it is open, so
a client opening streams in a loop (or many clients at once) could exhaust it. Beyond
the limits a new stream is refused with RESOURCE_EXHAUSTED, naming the limit
(``services/open_streams.py`` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass

# One subscriber opens one stream (the official Python client) or a few (Go's
# NumGoroutines, eoclient's sessions): 100 a connection is far beyond any of them, and is
# HTTP/2's customary SETTINGS_MAX_CONCURRENT_STREAMS. 1,000 in all is 2,000 tasks, well
# within one asyncio loop.
DEFAULT_MAX_STREAMS_PER_CONNECTION = 100
DEFAULT_MAX_STREAMS = 1000


@dataclass(frozen=True)
class StreamLimits:
    """``max_streams_per_connection``: open StreamingPulls one client connection may
    have; ``max_streams``: open StreamingPulls in all. ``0`` = unlimited."""

    max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION
    max_streams: int = DEFAULT_MAX_STREAMS

    def __post_init__(self) -> None:
        for name in ("max_streams_per_connection", "max_streams"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = unlimited)")
