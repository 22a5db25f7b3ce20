"""What an ack id names in one subscription (docs/protocol.md#ack-ids-and-generations).

Ack ids are ``{subscription uid}-{seq}-{generation}`` (``ack_ids.py``): a new generation
per delivery, so only the latest delivery's id resolves to the message. The uid differs
for every subscription ever created and every seek, so an id from another subscription
(or from a deleted and recreated one) never resolves here; an id under a uid this
subscription had before a seek is still well formed (ignored, or
PERMANENT_FAILURE_INVALID_ACK_ID with exactly-once), never a malformed request.

* ``resolve`` (exactly-once): the message's live lease, only under the latest delivery's
  generation and before its deadline;
* ``lookup`` (without exactly-once, where an ack of an older delivery still settles the
  message): any generation issued so far of a message held here, leased or waiting.

A store that keeps state across restarts keeps the uid and each lease (generation,
deadline) until its deadline, so an id issued before a restart resolves as it did, and
an exactly-once ack of a lease whose message has gone since — the ack was committed, its
answer lost with the process — answers SUCCESS again when retried
(``AckTarget.acked``). Within one run a repeated ack is INVALID_ACK_ID, as Google's
emulator answers (docs/protocol.md#ack-ids-across-a-restart).

Costs: a lookup in the lease table (O(log n); O(1) for ids in seq order), else dict
lookups; nothing is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from eoclient.server_stub.core.ack_ids import AckIdParts
from eoclient.server_stub.core.delivery.lease_table import LeaseTable
from eoclient.server_stub.core.store import StoredAck


class AckTarget:
    """The message an ack id names here (``resolve``, ``lookup``). A slots class, not a
    NamedTuple: one is made for every id of every ack, and its constructor is the
    cheaper."""

    __slots__ = ("acked", "generation", "seq")

    def __init__(self, seq: int, generation: int, acked: bool = False) -> None:
        self.seq = seq
        self.generation = generation
        # Its lease was stored and its message left the backlog before a restart (acked,
        # the answer maybe lost with the process): a retried ack answers SUCCESS and
        # changes nothing.
        self.acked = acked

    def __repr__(self) -> str:
        return f"AckTarget({self.seq}, {self.generation}, acked={self.acked})"

    @property
    def message_id(self) -> str:
        return str(self.seq)  # the server numbers its messages by seq (dispatch.py)


class AckIds:
    """The ack ids of one subscription: the uid of those issued from now on, the uids it
    had before each seek, and the acks a durable store kept across a restart. What an id
    names is read from the leases (``LeaseTable``) and, without exactly-once, from the
    waiting message's last generation: both are the caller's to hand over."""

    def __init__(self, uid: str) -> None:
        self.uid = uid  # of the ids issued from now on
        self._former_uids: set[str] = set()  # before each seek: ids still well formed
        # Leases whose messages left the backlog before a restart (acked, the answer
        # maybe lost with the process): seq -> (generation, deadline); kept until the
        # latest of those deadlines.
        self._acked_before: dict[int, tuple[int, float]] = {}
        self._acked_before_until = -math.inf

    def resolve(self, parts: AckIdParts | None, now: float, leases: LeaseTable) -> AckTarget | None:
        """The lease an exactly-once ack id names while it is live (acks parse each id
        once), or an ack this id made before a restart."""
        if parts is None or parts.uid != self.uid:
            return None
        current = leases.current(parts.seq)
        if current is not None:
            generation, deadline = current
            if generation == parts.generation and deadline > now:
                return AckTarget(parts.seq, generation)
            return None
        acked = self._acked_before.get(parts.seq)
        if acked is not None and acked[0] == parts.generation and acked[1] > now:
            return AckTarget(parts.seq, parts.generation, acked=True)
        return None

    def lookup(self, parts: AckIdParts | None, latest: int | None) -> AckTarget | None:
        """The unacknowledged message an id of any of its deliveries names; ``latest``:
        the generation of its last delivery (None: the message is not held)."""
        if parts is None or parts.uid != self.uid:
            return None
        # Only ids actually issued (generations 1..latest) name the message: a forged
        # "{uid}-{seq}-0" must not settle a message that was never delivered.
        if latest is None or not 1 <= parts.generation <= latest:
            return None
        return AckTarget(parts.seq, parts.generation)

    def wellformed(self, parts: AckIdParts | None) -> bool:
        """Issued by this subscription, now or before a seek."""
        return parts is not None and (parts.uid == self.uid or parts.uid in self._former_uids)

    def restore(self, uid: str, acks: Sequence[StoredAck]) -> None:
        """After a restart: the stored uid (empty: keep the new one) and the acks whose
        leases the store kept."""
        if uid:
            self.uid = uid
        self._acked_before = {ack.seq: (ack.generation, ack.deadline) for ack in acks}
        self._acked_before_until = max((ack.deadline for ack in acks), default=-math.inf)

    def renew(self, uid: str) -> None:
        """A seek: every id issued so far stops resolving (still well formed)."""
        self._former_uids.add(self.uid)
        self.uid = uid
        self._acked_before.clear()

    def forget(self, now: float) -> None:
        """The acks restored after a restart, once every one of their deadlines passed."""
        if self._acked_before and now >= self._acked_before_until:
            self._acked_before.clear()
