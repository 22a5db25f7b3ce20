"""Per-ordering-key delivery gate for the subscriber.

Rule: messages of one ordering key are handed to the application one at a time, in
arrival order; the next only after the previous one is acked or nacked. Messages
with an empty key are not ordered and pass straight through. Source: Python
``MessagesOnHold`` / ``activate_ordering_keys``, which release the next message of a
key from ``Dispatcher.drop``, i.e. after ack, nack or drop
(docs/protocol.md#ordering-on-the-subscriber). Go releases on callback return instead; ack/nack is
the safer point under exactly-once, where acks of an ordered key must arrive in order
(docs/protocol.md#exactly-once-semantics, rule 6), and with an async API "the handler returned" is
not a well-defined moment.

Like Python, the gate goes by the message's ``ordering_key`` alone and ignores
``SubscriptionProperties.message_ordering_enabled`` (docs/protocol.md#ordering-on-the-subscriber): a
key on a message of an unordered subscription costs some concurrency, never correctness.

Composition (the shell's job): put this gate *before* the flow gate, so a message
waiting for its key's predecessor takes no flow-control slot.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import count
from typing import Generic, TypeVar

__all__ = ["OrderingGate", "OrderingGateStatistics"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OrderingGateStatistics:
    """Attributes: ``active_keys`` with a message out; ``parked_messages`` waiting behind them."""

    active_keys: int
    parked_messages: int


class OrderingGate(Generic[T]):
    """One message out per ordering key at a time, in arrival order.

    A key is *active* while one of its messages is out (handed to the application
    and not yet acked or nacked); later messages of an active key are *parked* in
    arrival order.

    On a nack, the server redelivers the nacked message and every later one of its
    key, in order (docs/protocol.md#ordering-keys); the parked ones are then stale
    copies. The shell calls :meth:`discard_key` **first** (and nacks or forgets what it
    returns), **then** :meth:`done`, so that no stale copy is handed out; the
    redeliveries arrive and queue behind the key as usual.
    """

    __slots__ = ("_active", "_sequence")

    def __init__(self) -> None:
        # key -> parked (arrival number, item); a key is active iff it is in this dict.
        self._active: dict[str, deque[tuple[int, T]]] = {}
        self._sequence = count()  # arrival numbers, so drain() can restore arrival order

    def __repr__(self) -> str:
        stats = self.statistics()
        return (
            f"<OrderingGate active_keys={stats.active_keys} "
            f"parked_messages={stats.parked_messages}>"
        )

    def __len__(self) -> int:
        """Parked messages."""
        return sum(len(parked) for parked in self._active.values())

    def is_active(self, key: str) -> bool:
        return key in self._active

    def offer(self, key: str, item: T) -> bool:
        """A message arrived. Returns ``True`` to hand it out now, ``False`` if parked."""
        if not key:
            return True
        parked = self._active.get(key)
        if parked is None:
            self._active[key] = deque()
            return True
        parked.append((next(self._sequence), item))
        return False

    def done(self, key: str) -> T | None:
        """The key's message out was acked or nacked (or dropped).

        Returns:
            The key's next message, now out (hand it to the application), or ``None``
            (the key becomes inactive). Ignored for ``""`` and inactive keys.
        """
        parked = self._active.get(key)
        if parked is None:
            return None
        if parked:
            return parked.popleft()[1]
        del self._active[key]
        return None

    def discard_key(self, key: str) -> list[T]:
        """Remove and return the key's parked messages, oldest first (see class docstring).

        The message out, if any, stays out: the key is active until :meth:`done`.
        """
        parked = self._active.get(key)
        if not parked:
            return []
        items = [item for _, item in parked]
        parked.clear()
        return items

    def drain(self) -> list[T]:
        """Remove and return every parked message in arrival order (for shutdown).

        Messages out stay out; their keys stay active until :meth:`done`.
        """
        entries = sorted(
            (entry for parked in self._active.values() for entry in parked),
            key=lambda entry: entry[0],
        )
        for parked in self._active.values():
            parked.clear()
        return [item for _, item in entries]

    def statistics(self) -> OrderingGateStatistics:
        return OrderingGateStatistics(active_keys=len(self._active), parked_messages=len(self))
