"""Ack records: what a settlement is in the ledger, and how results are set on it.

The room of the ledger's data. A settlement (an ack, a nack, a modack of one ack id)
becomes a position in an :class:`AckRecord`: every ack made between two sends shares one
record (so do the nacks, and the modacks of one deadline), a response's receipt modacks
are one record, and a batch settled together (``MessageBatch.ack``) is one record. A
record is one run of ids in one wire request, so the stream's confirmations can be
matched against whole records (``stream_acks.py``) and a waiter can wait for a whole
batch with one future (``waiters.py``).

Everything that sets results goes through :func:`set_result` and :func:`resolve_all`:
the first result of a position stands (a probe modack answered both on the stream and by
unary call keeps the first answer; docs/protocol.md#exactly-once-result-mapping), and
each final ack result is counted once in :class:`LedgerStatistics`. They are functions
over a record and the counters, not methods of the ledger, because the stream side and
the unary side both resolve records and neither should reach into the other.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "ACK_IDS_PER_REQUEST",
    "SUCCESS",
    "AckRecord",
    "LedgerStatistics",
    "Operation",
    "Position",
    "resolve_all",
    "set_result",
    "settled_record",
]

# Ids per request. Go's client derives 2500 from the service's 512 KiB limit per
# Acknowledge/ModifyAckDeadline request and ack ids of up to 164 bytes (2979 would
# fit; 2500 leaves room for the rest of the request) — docs/protocol.md#ack-request-batching.
# A record never holds more, so a record is at most one request's worth of ids.
ACK_IDS_PER_REQUEST = 2500

SUCCESS = AckResult(AcknowledgeStatus.SUCCESS)


class Operation(enum.StrEnum):
    """What a settlement asks of the server for one ack id.

    A nack is a modack to 0 seconds on the wire; it is its own operation because its
    result and its meaning to the session (the message goes back) differ.
    """

    ACK = "ack"
    NACK = "nack"
    MODACK = "modack"


class AckRecord:
    """One operation on a run of ack ids, and their results by position.

    A record is *open* while settlements are still appended to it (until the sender takes
    it). ``results`` stays ``None`` until the first result arrives, and a record whose ids
    all succeed at once gets one shared list (``[SUCCESS] * n``), not a result per id.

    Whoever waits for the results (``waiters.py``, the dispatch core's receipts) registers
    through :meth:`add_waiter`, :meth:`add_completion_waiter` and :meth:`when_resolved`,
    and is answered through :meth:`take_answered_waiters` and :meth:`take_completion`: the
    ledger never touches them; it only says which records got results.
    """

    __slots__ = (
        "ack_ids",
        "completion_waiters",
        "on_resolved",
        "operation",
        "results",
        "seconds",
        "sent_at",
        "stream_confirmed",
        "stream_pending",
        "unresolved",
        "waiters",
    )

    def __init__(self, operation: Operation, seconds: int, ack_ids: list[str]) -> None:
        self.operation = operation
        self.seconds = seconds  # the modack deadline; 0 for acks and nacks
        self.ack_ids = ack_ids
        self.results: list[AckResult | None] | None = None
        self.unresolved = len(ack_ids)
        # On the stream: when it was written, how many of its positions still await a
        # confirmation, and (only once confirmations arrive piecemeal) which do not.
        self.sent_at = 0.0
        self.stream_pending = 0
        self.stream_confirmed: set[int] | None = None
        # Per position (index, future) and whole-record futures; a callback run once every
        # position has its result.
        self.waiters: list[tuple[int, asyncio.Future[AckResult]]] | None = None
        self.completion_waiters: list[asyncio.Future[None]] | None = None
        self.on_resolved: Callable[[AckRecord], None] | None = None

    def __repr__(self) -> str:
        return (
            f"<AckRecord {self.operation.value} {len(self.ack_ids)} ids, "
            f"{self.unresolved} unresolved>"
        )

    def __len__(self) -> int:
        return len(self.ack_ids)

    def add_waiter(self, index: int, future: asyncio.Future[AckResult]) -> None:
        """``future`` waits for the result at ``index``."""
        if self.waiters is None:
            self.waiters = [(index, future)]
        else:
            self.waiters.append((index, future))

    def add_completion_waiter(self, future: asyncio.Future[None]) -> None:
        """``future`` waits until every position has its result."""
        if self.completion_waiters is None:
            self.completion_waiters = [future]
        else:
            self.completion_waiters.append(future)

    def when_resolved(self, callback: Callable[[AckRecord], None]) -> None:
        """Run ``callback(record)`` once every position has its result."""
        self.on_resolved = callback

    def take_answered_waiters(self) -> list[tuple[asyncio.Future[AckResult], AckResult]]:
        """The waiters whose position has its result now, with it; they wait no more."""
        waiters, results = self.waiters, self.results
        if not waiters or results is None:
            return []
        answered: list[tuple[asyncio.Future[AckResult], AckResult]] = []
        left: list[tuple[int, asyncio.Future[AckResult]]] = []
        for index, future in waiters:
            result = results[index]
            if result is None:
                left.append((index, future))
            else:
                answered.append((future, result))
        self.waiters = left or None
        return answered

    def take_completion(
        self,
    ) -> tuple[list[asyncio.Future[None]], Callable[[AckRecord], None] | None]:
        """Once resolved: the whole-record waiters and the ``when_resolved`` callback, each
        handed out once; before that, nothing."""
        if self.unresolved:
            return [], None
        waiters, callback = self.completion_waiters or [], self.on_resolved
        self.completion_waiters = None
        self.on_resolved = None
        return waiters, callback

    def result(self, position: int) -> AckResult | None:
        """The result at ``position``, or ``None`` while it is unknown."""
        results = self.results
        return None if results is None else results[position]

    @property
    def resolved(self) -> bool:
        return self.unresolved == 0

    @property
    def wire_seconds(self) -> int:
        return 0 if self.operation is Operation.NACK else self.seconds

    @property
    def confirmation_kind(self) -> Operation:
        """The RPC it goes in and the confirmation that answers it: ACK or MODACK."""
        return Operation.ACK if self.operation is Operation.ACK else Operation.MODACK


# A settlement's place in the ledger: its record and its index in the record.
Position = tuple[AckRecord, int]


def settled_record(ack_ids: list[str], operation: Operation, result: AckResult) -> AckRecord:
    """A record that will not be sent, already resolved with ``result`` at every position."""
    record = AckRecord(operation, 0, ack_ids)
    record.results = [result] * len(ack_ids)
    record.unresolved = 0
    return record


@dataclass
class LedgerStatistics:
    acks: int = 0
    nacks: int = 0
    modacks: int = 0
    retried: int = 0  # ack ids resent after a transient failure
    unary_calls: int = 0
    stream_requests: int = 0
    # Final results of acks, by AcknowledgeStatus name (each ack counted once).
    ack_results: dict[str, int] = field(default_factory=dict)

    def count_submitted(self, operation: Operation, count: int) -> None:
        if operation is Operation.ACK:
            self.acks += count
        elif operation is Operation.NACK:
            self.nacks += count
        else:
            self.modacks += count

    def count_ack_results(self, status: AcknowledgeStatus, count: int) -> None:
        self.ack_results[status.name] = self.ack_results.get(status.name, 0) + count


def set_result(record: AckRecord, index: int, result: AckResult, stats: LedgerStatistics) -> bool:
    """Record one result; the first result of a position stands. Whether it was new."""
    results = record.results
    if results is None:
        results = record.results = [None] * len(record.ack_ids)
    if results[index] is not None:
        return False
    results[index] = result
    record.unresolved -= 1
    if record.operation is Operation.ACK:
        stats.count_ack_results(result.status, 1)
    return True


def resolve_all(record: AckRecord, result: AckResult, stats: LedgerStatistics) -> bool:
    """``result`` for every position still unresolved; whether there was any."""
    if record.unresolved == 0:
        return False
    results = record.results
    if results is None:
        record.results = [result] * len(record.ack_ids)
        newly = len(record.ack_ids)
    else:
        newly = 0
        for index, known in enumerate(results):
            if known is None:
                results[index] = result
                newly += 1
    record.unresolved = 0
    if record.operation is Operation.ACK:
        stats.count_ack_results(result.status, newly)
    return True
