"""The open StreamingPull streams: each one's wake-up and drop, counted against the limits
on how many one server holds (``access/limits.py``).

A stream's session (``streaming_pull.py``) waits on its handle's ``wake`` for anything to
send: the broker has news for its subscription (``notify``, called by the server's
listener), a request was applied, a commit its responses wait for is done, or the server
drops it (``drop_all``: fault injection, shutdown).

Each stream costs the server two tasks and a lease budget for as long as it is open, so
a client opening streams in a loop (or many clients at once) could exhaust it. Beyond
the limits a new stream is refused with RESOURCE_EXHAUSTED, naming the limit; clients
treat that status on StreamingPull as "retry later" (the official clients' and
eoclient's reconnect backoff).
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from eoclient.errors import ResourceExhausted
from eoclient.server_stub.access.limits import StreamLimits
from eoclient.server_stub.services.faults import InjectedStatus


@dataclass(eq=False)  # identity semantics: handles live in sets
class StreamHandle:
    """What the server knows of one open StreamingPull stream."""

    subscription: str
    connection: str = ""  # the peer (grpc's "ipv4:127.0.0.1:53122"): one per connection
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    drop: InjectedStatus | None = None


class StreamRegistry:
    """The open StreamingPull streams by subscription: woken when deliveries are ready,
    dropped all at once by fault injection or shutdown, counted against ``limits``."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self.limits = limits or StreamLimits()
        self._by_subscription: dict[str, set[StreamHandle]] = {}
        self._by_connection: collections.Counter[str] = collections.Counter()
        self._open = 0

    def open(self, subscription: str, connection: str) -> StreamHandle:
        """Register a new stream (RESOURCE_EXHAUSTED beyond the limits)."""
        limits = self.limits
        if limits.max_streams and self._open >= limits.max_streams:
            raise ResourceExhausted(
                f"The server has {self._open} StreamingPull streams open, its limit "
                "(eoclient serve --max-streams): retry later."
            )
        if (
            limits.max_streams_per_connection
            and self._by_connection[connection] >= limits.max_streams_per_connection
        ):
            raise ResourceExhausted(
                f"This connection has {self._by_connection[connection]} StreamingPull "
                "streams open, the limit of one connection (eoclient serve "
                "--max-streams-per-connection): close some, or retry later."
            )
        handle = StreamHandle(subscription, connection)
        self._by_subscription.setdefault(subscription, set()).add(handle)
        self._by_connection[connection] += 1
        self._open += 1
        return handle

    def close(self, handle: StreamHandle) -> None:
        handles = self._by_subscription.get(handle.subscription)
        if handles is None or handle not in handles:
            return
        handles.discard(handle)
        if not handles:
            del self._by_subscription[handle.subscription]
        self._by_connection[handle.connection] -= 1
        if self._by_connection[handle.connection] <= 0:
            del self._by_connection[handle.connection]
        self._open -= 1

    def notify(self, subscription: str) -> None:
        for handle in self._by_subscription.get(subscription, ()):
            handle.wake.set()

    def drop_all(self, status: InjectedStatus) -> int:
        count = 0
        for handles in self._by_subscription.values():
            for handle in handles:
                handle.drop = status
                handle.wake.set()
                count += 1
        return count

    def count(self) -> int:
        return self._open
