"""The message an application receives, and its ack / nack / modack methods."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from eoclient.subscriber.ack_records import Operation, Position
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.settings import MAX_ACK_DEADLINE
from eoclient.subscriber.waiters import result_of

if TYPE_CHECKING:
    from eoclient._proto.pubsub_pb2 import PubsubMessage, ReceivedMessage

__all__ = ["AckSink", "Message", "message_from_wire"]


class AckSink(Protocol):
    """Where a message's settlements go (the streaming session, or ``pull()``'s unary
    settler): each returns the settlement's position in the ack ledger."""

    def settle(self, message: Message, operation: Operation, seconds: int) -> Position: ...

    def extend(self, message: Message, seconds: int) -> Position: ...


class Message:
    """One delivery of a Pub/Sub message.

    ``ack()`` / ``nack()`` settle it once: the first call wins, later ones send nothing
    and report the first outcome. On an exactly-once subscription,
    ``await message.ack_with_response()`` returning ``AcknowledgeStatus.SUCCESS``
    guarantees the message will NOT be delivered again; any other status means it may be
    (docs/protocol.md#exactly-once-semantics). Without exactly-once, every result is SUCCESS once
    the request is sent (acks are best effort there).

    Attributes:
        ack_id: this delivery's ack id (a redelivery has another).
        ordering_key: the message's ordering key, ``""`` for none.
        size: the message's encoded size in bytes (what flow control counts).
        received_at: when the subscriber received it (its clock's seconds).

    ``data``, ``attributes``, ``message_id``, ``publish_time``, ``delivery_attempt`` are
    read from the received protobuf when first asked for: a consumer that reads only the
    data pays for nothing else. The message keeps the received protobuf, and with it the
    response it came in, until the message itself is gone.
    """

    __slots__ = (
        "_attributes",
        "_data",
        "_pb",
        "_received",
        "_settled_as",
        "_settlement",
        "_sink",
        "ack_id",
        "ordering_key",
        "received_at",
        "size",
    )

    def __init__(self, received: ReceivedMessage, sink: AckSink | None, received_at: float) -> None:
        # Each protobuf field read once: this runs once per delivery.
        pb = received.message
        self._received = received
        self._pb: PubsubMessage = pb
        self.ack_id: str = received.ack_id
        self.ordering_key: str = pb.ordering_key
        self.size: int = pb.ByteSize()
        self.received_at = received_at
        self._sink = sink
        self._settlement: Position | None = None
        self._settled_as = ""
        self._data: bytes | None = None
        self._attributes: Mapping[str, str] | None = None

    def __repr__(self) -> str:
        return (
            f"Message(message_id={self.message_id!r}, data={self.data[:32]!r}, "
            f"ordering_key={self.ordering_key!r}, delivery_attempt={self.delivery_attempt})"
        )

    # Contents ----------------------------------------------------------------------

    @property
    def data(self) -> bytes:
        data = self._data
        if data is None:
            data = self._data = self._pb.data
        return data

    @property
    def attributes(self) -> Mapping[str, str]:
        attributes = self._attributes
        if attributes is None:
            attributes = self._attributes = dict(self._pb.attributes)
        return attributes

    @property
    def message_id(self) -> str:
        return self._pb.message_id

    @property
    def publish_seconds(self) -> int:
        """Publish time: whole seconds since the epoch, as on the wire."""
        return self._pb.publish_time.seconds

    @property
    def publish_nanos(self) -> int:
        return self._pb.publish_time.nanos

    @property
    def publish_time(self) -> datetime.datetime:
        """When the server accepted the message (UTC, microsecond precision)."""
        publish_time = self._pb.publish_time
        return datetime.datetime.fromtimestamp(
            publish_time.seconds, datetime.UTC
        ) + datetime.timedelta(microseconds=publish_time.nanos // 1000)

    @property
    def delivery_attempt(self) -> int | None:
        """How many times the message has been delivered, this delivery included (1, 2, ...)
        when the subscription has a dead-letter policy; ``None`` without one.

        The server counts attempts only for a dead-letter policy and otherwise sends 0;
        ``None`` says "not counted", as google-cloud-pubsub's ``Message.delivery_attempt``
        does.
        """
        attempt = self._received.delivery_attempt
        return attempt if attempt > 0 else None

    # Settlement ----------------------------------------------------------------------

    @property
    def settled(self) -> str:
        """``"ack"``, ``"nack"`` (an :class:`Operation`, a ``str``) or ``""`` (not yet)."""
        return self._settled_as

    def _settlement_position(self) -> Position | None:
        """Where this message's settlement is in the ack ledger (``None``: not settled)."""
        return self._settlement

    def _record_settlement(self, operation: Operation, position: Position) -> None:
        """Settled on this message's behalf (its batch, or the session's shutdown): later
        calls report this settlement. Only for a message not yet settled."""
        if self._settlement is not None:
            raise RuntimeError(f"message {self.ack_id!r} is already settled ({self._settled_as})")
        self._settled_as = operation
        self._settlement = position

    def _settle(self, operation: Operation) -> Position:
        settlement = self._settlement
        if settlement is None:
            sink = self._sink
            if sink is None:
                raise RuntimeError("this message was not received through eoclient")
            self._settled_as = operation
            settlement = self._settlement = sink.settle(self, operation, 0)
        return settlement

    # Fire-and-forget forms ------------------------------------------------------

    def ack(self) -> None:
        """Acknowledge; the result is not awaited (see ``ack_with_response``)."""
        self._settle(Operation.ACK)

    def nack(self) -> None:
        """Ask for redelivery now (a modack to 0 seconds)."""
        self._settle(Operation.NACK)

    def modify_ack_deadline(self, seconds: int) -> None:
        """Set the server's deadline for this delivery to ``seconds`` from now (0..600)."""
        self._extend(seconds)

    # Forms that report the server's answer --------------------------------------

    async def ack_with_response(self) -> AcknowledgeStatus:
        """Acknowledge and return the outcome (SUCCESS guarantees no redelivery on EOD)."""
        # Written out rather than through _wait: this is the exactly-once hot path, and a
        # second coroutine costs more than the lines.
        record, index = self._settle(Operation.ACK)
        results = record.results
        result = None if results is None else results[index]
        if result is None:
            result = await result_of(record, index)
        return result.status

    async def nack_with_response(self) -> AcknowledgeStatus:
        return (await _wait(self._settle(Operation.NACK))).status

    async def modify_ack_deadline_with_response(self, seconds: int) -> AcknowledgeStatus:
        return (await _wait(self._extend(seconds))).status

    async def ack_result(self) -> AckResult:
        """Like ``ack_with_response`` but with the server's reason for a failure."""
        return await _wait(self._settle(Operation.ACK))

    def _extend(self, seconds: int) -> Position:
        if not 0 <= seconds <= MAX_ACK_DEADLINE:
            raise ValueError(
                f"modify_ack_deadline: seconds must be in 0..{MAX_ACK_DEADLINE}, got {seconds}"
            )
        if seconds == 0:
            return self._settle(Operation.NACK)
        if self._settlement is not None:
            # Already acked or nacked: nothing to extend; report the settlement.
            return self._settlement
        if self._sink is None:
            raise RuntimeError("this message was not received through eoclient")
        return self._sink.extend(self, seconds)


async def _wait(position: Position) -> AckResult:
    """The result at ``position`` of the ack ledger, once known."""
    record, index = position
    return record.result(index) or await result_of(record, index)


def message_from_wire(
    received: ReceivedMessage, sink: AckSink | None, received_at: float
) -> Message:
    """The application's view of one ``google.pubsub.v1.ReceivedMessage``."""
    return Message(received, sink, received_at)
