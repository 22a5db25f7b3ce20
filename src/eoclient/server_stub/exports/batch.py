"""One export file's batch and the leases of its messages: pure, the time passed in
(docs/protocol.md#export-batching).

A batch closes at the first of its limits: ``max_duration`` after it opened, ``max_bytes``
written, ``max_messages`` written. A message that would take a non-empty batch past
``max_bytes`` starts the next file instead; one larger than ``max_bytes`` alone makes a file
of its own (the docs: "may exceed max_bytes when a single message is larger").

Its messages stay leased until the object holding them is complete: ``Leases`` knows when
each pulled chunk's lease ends and which to extend, and by how much, so that a lease never
runs out while its batch is open or being written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# The most a modack may extend a lease (the service's limit;
# docs/protocol.md#validation-and-error-texts).
MAX_LEASE_SECONDS = 600
# Time allowed for writing a closed batch beyond its close (an upload of 10 GiB to a local
# emulator takes well under this); a write that takes longer has its leases extended again.
WRITE_ALLOWANCE_SECONDS = 60.0
# A lease is extended when it would end within this many seconds (several idle wake-ups of
# the worker, which looks at least every fraction of a second).
EXTEND_AHEAD_SECONDS = 5.0


@dataclass(frozen=True)
class BatchLimits:
    """When a batch closes; 0 bytes or messages: no such limit."""

    max_duration: float
    max_bytes: int = 0
    max_messages: int = 0


@dataclass
class Batch:
    limits: BatchLimits
    opened_at: float
    messages: int = 0
    bytes: int = 0

    @property
    def closes_at(self) -> float:
        return self.opened_at + self.limits.max_duration

    def fits(self, size: int) -> bool:
        """Whether a message of ``size`` bytes belongs in this batch (else: the next)."""
        if self.messages == 0:
            return True
        return not self.limits.max_bytes or self.bytes + size <= self.limits.max_bytes

    def add(self, size: int) -> None:
        self.messages += 1
        self.bytes += size

    def full(self) -> bool:
        limits = self.limits
        return bool(
            (limits.max_messages and self.messages >= limits.max_messages)
            or (limits.max_bytes and self.bytes >= limits.max_bytes)
        )

    def due(self, now: float) -> bool:
        return now >= self.closes_at

    def room(self) -> int | None:
        """Messages it may still take (None: no message limit)."""
        if not self.limits.max_messages:
            return None
        return max(self.limits.max_messages - self.messages, 0)


@dataclass
class _Chunk:
    ack_ids: list[str]
    lease_until: float


@dataclass
class Leases:
    """The ack ids of one batch's messages, by the chunk they were pulled in."""

    chunks: list[_Chunk] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(chunk.ack_ids) for chunk in self.chunks)

    def add(self, ack_ids: Sequence[str], lease_until: float) -> None:
        if ack_ids:
            self.chunks.append(_Chunk(list(ack_ids), lease_until))

    def ack_ids(self) -> list[str]:
        return [ack_id for chunk in self.chunks for ack_id in chunk.ack_ids]

    def next_extension(self) -> float | None:
        """When the earliest lease must be extended (None: no leases)."""
        if not self.chunks:
            return None
        return min(chunk.lease_until for chunk in self.chunks) - EXTEND_AHEAD_SECONDS

    def to_extend(self, now: float, needed_until: float) -> list[tuple[list[str], int]]:
        """The chunks whose lease ends within ``EXTEND_AHEAD_SECONDS``, each with the
        seconds to extend it by: until ``needed_until`` (capped at ``MAX_LEASE_SECONDS``; a
        later call extends again). The leases are counted as extended."""
        seconds = int(min(max(needed_until - now, EXTEND_AHEAD_SECONDS * 2), MAX_LEASE_SECONDS))
        extend: list[tuple[list[str], int]] = []
        for chunk in self.chunks:
            if chunk.lease_until - now <= EXTEND_AHEAD_SECONDS:
                chunk.lease_until = now + seconds
                extend.append((chunk.ack_ids, seconds))
        return extend
