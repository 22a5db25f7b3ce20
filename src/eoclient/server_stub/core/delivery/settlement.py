"""How a message leaves one subscription for good, and what stays of it: the store's
side of an ack.

The waiting messages (``waiting.Waiting``) and the leases (``leases.Leases``) each let a
message go from their own data; what left is handed here, and the store forgets its
backlog row (``SubscriptionStorage.settle``) — or keeps the message as a retained
acknowledged message, for seek to replay, if it was acknowledged (by a client, the
message TTL, a dead letter or a policy), the subscription retains acknowledged messages
and it is within the retention (``DeliveryRules``). Dropped past the retention it is not
retained. A store that does not bound the window (``MemoryStore``) keeps no backlog rows:
it is handed only what it retains.

This room owns the retained acknowledged messages: what they are, the oldest of them,
pruning them by the retention, dropping them when the subscription stops retaining.

Costs: one store call a message.
"""

from __future__ import annotations

from collections.abc import Sequence

from eoclient.server_stub.core.delivery.entries import Entry, Left
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.store import Acked, BacklogRow, SeqMessage, SubscriptionStorage


class Settlement:
    def __init__(self, rules: DeliveryRules, storage: SubscriptionStorage) -> None:
        self._rules = rules
        self._storage = storage
        # A store that bounds the window keeps every backlog row; one that does not
        # (``MemoryStore``) is handed only what it keeps: retained acknowledged messages.
        self._durable = storage.window is not None

    def settled(self, left: Left, *, acked: bool, now: float) -> None:
        """``left`` is gone from the backlog: ``acked`` (by a client or a policy), so
        retained if the subscription retains acknowledged messages, or dropped."""
        seq, published, message = left
        if acked and self._retains(published, now):
            self._storage.settle((seq,), (Acked(seq, published, message),))
        elif self._durable:
            self._storage.settle((seq,))

    def settled_many(
        self,
        seqs: Sequence[int],
        publish_times: Sequence[float],
        held: Sequence[Entry | None],
        now: float,
    ) -> None:
        """``settled(..., acked=True)`` of many acknowledged messages (the leases of one
        Acknowledge request; ``held``: the entries the core kept of them, None where the
        store keeps the body), in one store call."""
        retain: list[Acked] = []
        if self._rules.retain_acked:
            retain = [
                Acked(seq, published, entry.message if entry is not None else None)
                for seq, published, entry in zip(seqs, publish_times, held, strict=True)
                if self._retains(published, now)
            ]
        if self._durable:
            self._storage.settle(seqs, retain)
        elif retain:
            self._storage.settle([acked.seq for acked in retain], retain)

    def settled_cold(self, row: BacklogRow, now: float) -> None:
        """Cold row ``row`` (only the store held it) is acknowledged."""
        published = row.message.publish_time
        retain = self._retains(published, now)
        self._storage.settle(
            (row.seq,), (Acked(row.seq, published, row.message),) if retain else ()
        )

    def _retains(self, published: float, now: float) -> bool:
        rules = self._rules
        return rules.retain_acked and not rules.past_retention(published, now)

    # ------------------------------------------------------------ retained messages

    def set_retain_acked(self, retain: bool) -> None:
        self._rules.retain_acked = retain
        if not retain:
            self._storage.drop_retained()

    def retained(self) -> list[SeqMessage]:
        """Retained acknowledged messages, in seq order."""
        return self._storage.retained() if self._rules.retain_acked else []

    def oldest_retained(self) -> float | None:
        """Publish time of the oldest retained acknowledged message (None: none)."""
        return self._storage.oldest_retained() if self._rules.retain_acked else None

    def prune_retained(self, cutoff: float) -> None:
        """Forget the retained messages published at or before ``cutoff``."""
        if self._rules.retain_acked:
            self._storage.prune_retained(cutoff)
