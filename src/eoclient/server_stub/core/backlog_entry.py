"""What ``delivery`` keeps per unacknowledged message, per ordering key and per subscription."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from eoclient.server_stub.core.model import StoredMessage


class State(enum.Enum):
    WAITING = "waiting"
    OUTSTANDING = "outstanding"


@dataclass(slots=True)
class Entry:
    seq: int
    message: StoredMessage
    state: State = State.WAITING
    ready_at: float = 0.0
    generation: int = 0  # number of deliveries so far; the ack id carries the latest
    failed_attempts: int = 0  # nacks + deadline expiries (delivery_attempt = this + 1)
    deadline: float = 0.0
    stream_id: int | None = None  # the stream whose flow control counts this lease
    key_position: int = -1  # absolute position in its ordering key's sequence


@dataclass(slots=True)
class KeySequence:
    """The unacknowledged messages of one ordering key, by absolute position."""

    seqs: deque[int] = field(default_factory=deque)
    base: int = 0  # absolute position of seqs[0]
    next_position: int = 0  # first position not delivered (or not since a rewind)

    def seq_at(self, position: int) -> int:
        return self.seqs[position - self.base]

    def end(self) -> int:
        return self.base + len(self.seqs)


@dataclass
class Counters:
    delivered: int = 0
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
