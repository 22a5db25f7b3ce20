"""What the delivery engine keeps per waiting message, per ordering key and per
subscription (the leases are ``lease_table.py``'s), and what it hands on of a message
that left."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from eoclient.server_stub.core.model import Delivery, StoredMessage
from eoclient.server_stub.core.store import BacklogRow

# A waiting message the window holds, with its body: a backlog row, the object the store
# reads (``store.BacklogRow``: seq, message, failed attempts, generation, and the
# window's ``ready_at`` and ``key_position``). A refill keeps the rows it loads as they
# are — thousands at a time, on every message a durable server delivers: a second
# object a row would cost as much as the store's own. Build one by keywords past
# ``seq`` and ``message`` (the store's field order is not the window's).
Entry = BacklogRow

# Columns of a run of entries (or of their messages) for the batch paths — the refill,
# a Pull's lease run — which read thousands at a time: with ``map`` the reads run in C,
# not in a Python loop.
seq_of = attrgetter("seq")
message_of = attrgetter("message")
generation_of = attrgetter("generation")
failed_attempts_of = attrgetter("failed_attempts")
ready_at_of = attrgetter("ready_at")
size_of = attrgetter("size")  # of a message
publish_time_of = attrgetter("publish_time")  # of a message
ordering_key_of = attrgetter("ordering_key")  # of a message
deliver_at_of = attrgetter("deliver_at")  # of a message


@dataclass(slots=True)
class Returned:
    """A message back from a lease whose body only the store keeps: what the window needs
    to take it again (the store's row gives the body)."""

    ready_at: float
    generation: int
    failed_attempts: int
    size: int
    publish_time: float


class Left(NamedTuple):
    """A message that left the backlog for good, as settling it needs it."""

    seq: int
    publish_time: float
    message: StoredMessage | None  # None: only the store holds its body


@dataclass(slots=True)
class KeySequence:
    """The unacknowledged messages of one ordering key the core holds (waiting in the
    window, leased, or back from a lease), by absolute position.

    ``seqs[start:]`` are their seqs in order (a list, not a deque: ``position_of`` bisects
    it); ``base`` is the absolute position of ``seqs[start]``.
    """

    seqs: list[int] = field(default_factory=list)
    start: int = 0
    base: int = 0
    next_position: int = 0  # first position not delivered (or not since a rewind)

    def seq_at(self, position: int) -> int:
        return self.seqs[self.start + position - self.base]

    def end(self) -> int:
        return self.base + len(self.seqs) - self.start

    def position_of(self, seq: int) -> int:
        """The position of ``seq``, which must be in the sequence."""
        return self.base + bisect_left(self.seqs, seq, self.start) - self.start

    def first(self) -> int | None:
        return self.seqs[self.start] if self.start < len(self.seqs) else None

    def pop_first(self) -> None:
        self.start += 1
        self.base += 1
        if self.start > 64 and self.start * 2 > len(self.seqs):
            del self.seqs[: self.start]  # amortised O(1) a pop
            self.start = 0

    def __len__(self) -> int:
        return len(self.seqs) - self.start


@dataclass
class Counters:
    delivered: int = 0
    redelivered: int = 0  # deliveries of a message delivered before (a nack, a lease ran out)
    acked: int = 0
    nacked: int = 0
    modacked: int = 0  # deadlines extended by ModifyAckDeadline (seconds > 0)
    expired: int = 0  # leases that ran out
    dead_lettered: int = 0  # forwarded to the dead-letter topic (and settled here)
    filtered: int = 0  # did not match the filter: settled at publish, never delivered
    discarded: int = 0  # older than the retention: dropped undelivered
    skipped: int = 0  # acknowledged by an operator's skip (PIP-423)
    evicted: int = 0  # acknowledged by a backlog quota's eviction
    expired_by_ttl: int = 0  # acknowledged by the message TTL
    # Per-ack-id failures of Acknowledge / ModifyAckDeadline (exactly-once errors and
    # injected faults), by (operation "ack" | "modack", ErrorInfo reason): what Cloud
    # Monitoring's subscription/exactly_once_warning_count counts.
    ack_failures: dict[tuple[str, str], int] = field(default_factory=dict)

    def ack_failed(self, operation: str, reason: str) -> None:
        key = (operation, reason)
        self.ack_failures[key] = self.ack_failures.get(key, 0) + 1


def fitting_in(sizes: list[int], room: int, first: bool) -> int:
    """How many messages of ``sizes`` fit in ``room`` bytes, in order (``first``: the
    first goes whatever its size, as ``deliver`` says)."""
    for i, size in enumerate(sizes):
        room -= size
        if room < 0 and (i or not first):
            return i
    return len(sizes)


def run_deliveries(
    taken: list[Entry], generations: list[int], prefix: str, count_attempts: bool
) -> list[Delivery]:
    """The deliveries of a run leased as ``generations``: ack ids of this uid's
    ``prefix`` (docs/protocol.md#ack-ids-and-generations), and each one's attempt when
    the subscription counts them."""
    return [
        Delivery(
            f"{prefix}{entry.seq}-{generation}",
            entry.message,
            entry.failed_attempts + 1 if count_attempts else 0,
        )
        for entry, generation in zip(taken, generations, strict=True)
    ]
