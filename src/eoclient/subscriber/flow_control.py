"""Client-side flow control: how many messages (and bytes) the application holds at once.

A message is *outstanding* from the moment it is handed to the application until the
shell releases it (acked, nacked, or dropped). Messages that arrive while the limits
are reached are *held* in arrival order and handed out, first in first out, as
outstanding ones are released; none is ever dropped (``FlowControl`` docstring).

This replaces Python's load-based pause/resume (docs/protocol.md#subscriber-flow-control): the
stream keeps being read, so pings and confirmations still arrive, and the server-side limits
(``max_outstanding_messages`` / ``max_outstanding_bytes``) keep the held set small.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from eoclient.subscriber.settings import FlowControl

__all__ = ["FlowGate", "FlowGateStatistics", "FlowItem"]


class FlowItem(Protocol):
    """What :meth:`FlowGate.offer_many` reads of each item (a received message)."""

    @property
    def ack_id(self) -> str: ...

    @property
    def size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class FlowGateStatistics:
    """A snapshot of a :class:`FlowGate`.

    Attributes:
        outstanding_messages / outstanding_bytes: handed to the application, not released.
        held_messages / held_bytes: waiting for room, in arrival order.
    """

    outstanding_messages: int
    outstanding_bytes: int
    held_messages: int
    held_bytes: int


class FlowGate:
    """Admits messages up to ``FlowControl.max_messages`` / ``max_bytes``; holds the rest FIFO.

    Keys are the shell's handles for messages (ack ids). Every offered key is, at
    any moment, in exactly one of: outstanding, held, or gone (released or drained).

    Limits are exceeded in one case only: a message is always admitted when nothing
    is outstanding, even if it alone is larger than ``max_bytes``; otherwise it could
    never be delivered and everything behind it would wait forever.

    Holding is strictly FIFO: while anything is held, a new message is held too, even
    if it would fit, so a stream of small messages cannot starve a large one.
    """

    __slots__ = ("_held", "_held_bytes", "_limits", "_outstanding", "_outstanding_bytes")

    def __init__(self, limits: FlowControl) -> None:
        self._limits = limits
        self._outstanding: dict[str, int] = {}  # key -> size
        self._outstanding_bytes = 0
        self._held: OrderedDict[str, int] = OrderedDict()  # key -> size, arrival order
        self._held_bytes = 0

    def __repr__(self) -> str:
        return (
            f"<FlowGate outstanding={len(self._outstanding)}/"
            f"{self._limits.max_messages or 'unlimited'} messages, "
            f"{self._outstanding_bytes}/{self._limits.max_bytes or 'unlimited'} bytes; "
            f"held={len(self._held)} messages, {self._held_bytes} bytes>"
        )

    def __contains__(self, key: object) -> bool:
        return key in self._outstanding or key in self._held

    @property
    def limits(self) -> FlowControl:
        return self._limits

    def is_outstanding(self, key: str) -> bool:
        return key in self._outstanding

    def offer(self, key: str, size: int) -> bool:
        """Admit a newly received message, or hold it.

        Args:
            key: the message's handle; must not already be in the gate.
            size: its size in bytes (>= 0), as counted against ``max_bytes``.

        Returns:
            ``True`` if it is outstanding now (hand it to the application); ``False``
            if it is held (a later :meth:`release` will return it).

        Raises:
            ValueError: ``key`` is already outstanding or held, or ``size`` < 0.
        """
        if key in self._outstanding or key in self._held:
            raise ValueError(f"FlowGate.offer: key {key!r} is already in the gate")
        if size < 0:
            raise ValueError(f"FlowGate.offer: size must be >= 0, got {size!r}")
        if not self._held and self._fits(size):
            self._outstanding[key] = size
            self._outstanding_bytes += size
            return True
        self._held[key] = size
        self._held_bytes += size
        return False

    def offer_many(self, items: Sequence[FlowItem]) -> int:
        """:meth:`offer` for each of ``items`` (keyed by ``ack_id``), in order.

        Returns:
            How many of them, from the first, are outstanding now; the rest are held
            (holding is FIFO, so the admitted ones are always a prefix).

        Raises:
            ValueError: as :meth:`offer`, before anything is admitted or held.
        """
        outstanding, held = self._outstanding, self._held
        for item in items:
            if item.ack_id in outstanding or item.ack_id in held:
                raise ValueError(f"FlowGate.offer: key {item.ack_id!r} is already in the gate")
            if item.size < 0:
                raise ValueError(f"FlowGate.offer: size must be >= 0, got {item.size!r}")
        admitted = 0
        if not held:
            max_messages, max_bytes = self._limits.max_messages, self._limits.max_bytes
            count, total = len(outstanding), self._outstanding_bytes
            for item in items:
                size = item.size
                # _fits, written out: this runs once per received message.
                if count and (
                    (max_messages and count >= max_messages)
                    or (max_bytes and total + size > max_bytes)
                ):
                    break
                outstanding[item.ack_id] = size
                count += 1
                total += size
                admitted += 1
            self._outstanding_bytes = total
        for item in items[admitted:]:
            held[item.ack_id] = item.size
            self._held_bytes += item.size
        return admitted

    def release(self, key: str) -> list[str]:
        """Forget a message (acked, nacked or dropped) and admit what now fits.

        Releasing a held message is allowed too (e.g. it was discarded before being
        handed out). An unknown or already released key is ignored.

        Returns:
            The held keys that are now outstanding, in arrival order; hand them to
            the application.
        """
        size = self._outstanding.pop(key, None)
        if size is not None:
            self._outstanding_bytes -= size
        else:
            size = self._held.pop(key, None)
            if size is None:
                return []
            self._held_bytes -= size
        return self._admit_held() if self._held else []

    def release_many(self, keys: Iterable[str]) -> list[str]:
        """:meth:`release` for each of ``keys``; returns the held keys now outstanding."""
        outstanding, held = self._outstanding, self._held
        freed = 0
        for key in keys:
            size = outstanding.pop(key, None)
            if size is not None:
                freed += size
            elif held:
                size = held.pop(key, None)
                if size is not None:
                    self._held_bytes -= size
        self._outstanding_bytes -= freed
        return self._admit_held() if held else []

    def drain_held(self) -> list[str]:
        """Remove and return every held key, in arrival order (for shutdown: nack them).

        Outstanding messages stay counted until released.
        """
        keys = list(self._held)
        self._held.clear()
        self._held_bytes = 0
        return keys

    def statistics(self) -> FlowGateStatistics:
        return FlowGateStatistics(
            outstanding_messages=len(self._outstanding),
            outstanding_bytes=self._outstanding_bytes,
            held_messages=len(self._held),
            held_bytes=self._held_bytes,
        )

    def _fits(self, size: int) -> bool:
        if not self._outstanding:
            return True  # the single-oversized-message rule (class docstring)
        max_messages, max_bytes = self._limits.max_messages, self._limits.max_bytes
        if max_messages and len(self._outstanding) + 1 > max_messages:
            return False
        return not (max_bytes and self._outstanding_bytes + size > max_bytes)

    def _admit_held(self) -> list[str]:
        admitted: list[str] = []
        while self._held:
            key, size = next(iter(self._held.items()))
            if not self._fits(size):
                break
            del self._held[key]
            self._held_bytes -= size
            self._outstanding[key] = size
            self._outstanding_bytes += size
            admitted.append(key)
        return admitted
