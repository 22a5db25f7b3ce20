"""Messages settled together: what ``StreamingSession.batches()`` yields.

A :class:`MessageBatch` is a list of messages whose acks, nacks and modacks go to the ack
ledger as one record: one request on the wire (up to 2,500 ids; more are split), and one
awaitable for all of their results. Each message keeps its own lease, flow-control slot and
ordering-key turn, released as its settlement is made, exactly as for ``message.ack()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from eoclient.subscriber.ack_records import AckRecord, Operation, Position
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.message import Message
from eoclient.subscriber.settings import MAX_ACK_DEADLINE
from eoclient.subscriber.waiters import completion

__all__ = ["BatchSink", "MessageBatch"]


class BatchSink(Protocol):
    """Where a batch's settlements go (the session it came from): one ledger record for
    all of ``messages``, and each message's position in it, in order."""

    def settle_batch(
        self, messages: list[Message], operation: Operation, seconds: int
    ) -> list[Position]: ...


class MessageBatch(list[Message]):
    """Messages received together, settled together (``async for batch in
    stream.batches(max_messages=100)``).

    ``batch.ack()`` settles every message of the batch in one request;
    ``await batch.ack_with_response()`` returns one :class:`AcknowledgeStatus` per message,
    in order, with the same guarantee as :meth:`Message.ack_with_response`: on an
    exactly-once subscription SUCCESS means that message will not be delivered again.

    A message of the batch settled on its own before (``message.nack()``) keeps its first
    settlement: the batch sends nothing for it and reports that settlement's result.
    """

    __slots__ = ("_sink",)

    def __init__(self, messages: Iterable[Message], sink: BatchSink) -> None:
        super().__init__(messages)
        self._sink = sink

    def __repr__(self) -> str:
        return f"<MessageBatch of {len(self)} messages>"

    # Fire-and-forget forms ------------------------------------------------------

    def ack(self) -> None:
        """Acknowledge every message; the results are not awaited."""
        self._settle(Operation.ACK, 0)

    def nack(self) -> None:
        """Ask for the redelivery of every message now."""
        self._settle(Operation.NACK, 0)

    def modify_ack_deadline(self, seconds: int) -> None:
        """Set the deadline of every message not yet settled to ``seconds`` from now
        (0..600; 0 is a nack)."""
        self._settle(*_modack(seconds))

    # Forms that report the server's answer --------------------------------------

    async def ack_with_response(self) -> list[AcknowledgeStatus]:
        """Acknowledge every message; one status per message, in order."""
        return [result.status for result in await self._results(Operation.ACK, 0)]

    async def nack_with_response(self) -> list[AcknowledgeStatus]:
        return [result.status for result in await self._results(Operation.NACK, 0)]

    async def modify_ack_deadline_with_response(self, seconds: int) -> list[AcknowledgeStatus]:
        return [result.status for result in await self._results(*_modack(seconds))]

    async def ack_results(self) -> list[AckResult]:
        """Like ``ack_with_response`` but with the server's reason for each failure."""
        return await self._results(Operation.ACK, 0)

    async def _results(self, operation: Operation, seconds: int) -> list[AckResult]:
        positions = self._settle(operation, seconds)
        record = positions[0][0] if positions else None
        if (
            record is not None
            and len(record) == len(positions)
            and all(at[0] is record and at[1] == index for index, at in enumerate(positions))
        ):
            # One record in the batch's order (settled together, the common case): its
            # result list is the batch's, and one future waits for all of it.
            if record.unresolved:
                await completion(record)
            results = record.results
            assert results is not None  # resolved
            return list(results)  # type: ignore[arg-type]  # resolved: no None left
        return await _wait(positions)

    def _settle(self, operation: Operation, seconds: int) -> list[Position]:
        if not any(message.settled for message in self):
            fresh = self._sink.settle_batch(self, operation, seconds)
            if operation is not Operation.MODACK:  # an extension settles nothing
                for message, position in zip(self, fresh, strict=True):
                    message._record_settlement(operation, position)
            return fresh
        before = [message._settlement_position() for message in self]
        unsettled = [message for message, at in zip(self, before, strict=True) if at is None]
        if not unsettled:
            return [at for at in before if at is not None]
        fresh = self._sink.settle_batch(unsettled, operation, seconds)
        if operation is not Operation.MODACK:
            for message, position in zip(unsettled, fresh, strict=True):
                message._record_settlement(operation, position)
        taken = iter(fresh)
        return [next(taken) if at is None else at for at in before]


def _modack(seconds: int) -> tuple[Operation, int]:
    if not 0 <= seconds <= MAX_ACK_DEADLINE:
        raise ValueError(
            f"modify_ack_deadline: seconds must be in 0..{MAX_ACK_DEADLINE}, got {seconds}"
        )
    return (Operation.NACK, 0) if seconds == 0 else (Operation.MODACK, seconds)


async def _wait(positions: list[Position]) -> list[AckResult]:
    """The results at ``positions``: one awaitable per record not yet resolved (one for a
    batch settled at once)."""
    records: dict[AckRecord, None] = dict.fromkeys(record for record, _ in positions)
    for record in records:
        if record.unresolved:
            await completion(record)
    results: list[AckResult] = []
    for record, index in positions:
        result = record.result(index)
        assert result is not None  # every record awaited is resolved
        results.append(result)
    return results
