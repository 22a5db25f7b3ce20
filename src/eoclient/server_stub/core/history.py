"""What happened to each message on each subscription: the server as a test instrument.

Enabled in ``run_server`` (tests inspect it), off by default in ``eoclient serve``
(it grows with every delivery).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eoclient.server_stub.core.model import Delivery

if TYPE_CHECKING:
    from eoclient.server_stub.core.delivery import AckTarget


@dataclass(frozen=True)
class DeliveryRecord:
    time: float
    ack_id: str
    via: str  # "pull" or "stream"
    delivery_attempt: int


@dataclass(frozen=True)
class AnswerRecord:
    """An ack or modack of one ack id and how the server answered it."""

    time: float
    ack_id: str
    operation: str  # "ack" or "modack"
    seconds: int  # modack deadline (0 = nack); 0 for acks
    failure: str  # "" when applied, else the ErrorInfo value it failed with


@dataclass(frozen=True)
class DeadLetterRecord:
    """The message was forwarded to the dead-letter topic (and settled on the source)."""

    time: float
    topic: str
    message_id: str  # the new message's id on the dead-letter topic
    delivery_count: int


@dataclass
class MessageHistory:
    deliveries: list[DeliveryRecord] = field(default_factory=list)
    acks: list[AnswerRecord] = field(default_factory=list)
    modacks: list[AnswerRecord] = field(default_factory=list)
    dead_lettered: list[DeadLetterRecord] = field(default_factory=list)

    @property
    def successful_acks(self) -> list[AnswerRecord]:
        return [a for a in self.acks if not a.failure]


class History:
    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._by_message: dict[tuple[str, str], MessageHistory] = defaultdict(MessageHistory)
        self._message_of_ack_id: dict[str, str] = {}

    def delivered(
        self, subscription: str, deliveries: Sequence[Delivery], now: float, *, via: str
    ) -> None:
        if not self.enabled:
            return
        for d in deliveries:
            self._message_of_ack_id[d.ack_id] = d.message.message_id
            self._by_message[(subscription, d.message.message_id)].deliveries.append(
                DeliveryRecord(now, d.ack_id, via, d.delivery_attempt)
            )

    def answered(
        self,
        subscription: str,
        entry: AckTarget | None,
        ack_id: str,
        operation: str,
        seconds: int,
        now: float,
        failure: str,
    ) -> None:
        if not self.enabled:
            return
        message_id = entry.message_id if entry else self._message_of_ack_id.get(ack_id)
        if message_id is None:
            return
        record = AnswerRecord(now, ack_id, operation, seconds, failure)
        history = self._by_message[(subscription, message_id)]
        (history.acks if operation == "ack" else history.modacks).append(record)

    def forwarded(
        self,
        subscription: str,
        message_id: str,
        now: float,
        topic: str,
        new_message_id: str,
        delivery_count: int,
    ) -> None:
        if not self.enabled:
            return
        self._by_message[(subscription, message_id)].dead_lettered.append(
            DeadLetterRecord(now, topic, new_message_id, delivery_count)
        )

    def of(self, subscription: str, message_id: str) -> MessageHistory:
        """The history of one message on one subscription (empty if nothing happened)."""
        return self._by_message.get((subscription, message_id)) or MessageHistory()

    def message_ids(self, subscription: str) -> list[str]:
        return [m for (s, m) in self._by_message if s == subscription]
