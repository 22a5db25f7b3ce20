"""Leases kept by ack id: when to extend groups of deliveries a consumer holds itself.

A streaming session extends its messages' leases by itself. A consumer that pulls with
``SubscriberClient.pull`` or ``pull_raw`` and works on the messages longer than their ack
deadline (a batch written to a file, a journal another process reads) must extend them
itself: with :class:`LeaseGroups` it asks *when*, by the same rules as the session
(docs/protocol.md#lease-extension-cadence), and extends with
``SubscriberClient.modify_ack_deadline``. Deliveries pulled together share their deadline,
so they are kept in groups (one per pull, batch or file): one extension call per group, not
one timer per id. No I/O, time passed in.

::

    leases = LeaseGroups(lease_seconds=60)
    leases.add("batch-7", ack_ids, leased_until=pulled_at + ack_deadline, now=clock.now())
    ...
    for group, due in leases.due(clock.now()).items():
        results = await client.modify_ack_deadline(subscription, due, leases.lease_seconds)
        failed = results.failed.items()
        gone = [a for a, r in failed if r.status is AcknowledgeStatus.INVALID_ACK_ID]
        leases.lost(group, gone)  # their messages come again, under new ack ids
    ...
    leases.remove("batch-7")  # acked (or given back)
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from eoclient.subscriber.leases import LeaseTable
from eoclient.subscriber.settings import MAX_ACK_DEADLINE, MIN_ACK_DEADLINE

__all__ = ["LeaseGroups"]

# A group stays leased until it is removed, however long that takes: the lease table gives
# up on a lease after its max_lease, which is set beyond any sensible hold (a year).
_NO_MAX_LEASE = 365 * 24 * 3600.0


class LeaseGroups:
    """Groups of ack ids kept leased until they are removed.

    Args:
        lease_seconds: what each extension asks for (``modify_ack_deadline``'s seconds,
            10..600).

    A group is extended when its deadline nears, by the SDK's renewal margin (the larger
    of 5 s and a tenth of the lease, at most half of it: :func:`renewal_margin`), and
    :meth:`due` takes it as extended by ``lease_seconds`` from then. Ids the server
    reported lost (:meth:`lost`) are left out of later extensions.
    """

    def __init__(self, lease_seconds: int = 60) -> None:
        if not MIN_ACK_DEADLINE <= lease_seconds <= MAX_ACK_DEADLINE:
            raise ValueError(
                f"LeaseGroups.lease_seconds must be in {MIN_ACK_DEADLINE:g}.."
                f"{MAX_ACK_DEADLINE:g}, got {lease_seconds!r}"
            )
        self.lease_seconds = lease_seconds
        self._table = LeaseTable(max_lease=_NO_MAX_LEASE)
        # A group's ack ids as given (any collection: turned into strings only when the
        # group is extended), and those found lost.
        self._ack_ids: dict[str, Collection[str]] = {}
        self._lost: dict[str, set[str]] = {}

    def __repr__(self) -> str:
        return f"<LeaseGroups {len(self)} groups, {self.lease_seconds} s leases>"

    def __len__(self) -> int:
        return len(self._ack_ids)

    def __contains__(self, group: object) -> bool:
        return group in self._ack_ids

    def add(self, group: str, ack_ids: Collection[str], *, leased_until: float, now: float) -> None:
        """Keep ``ack_ids`` leased as ``group``; their leases end at ``leased_until`` now
        (the Pull's send time plus the subscription's ack deadline, or later), on the same
        clock as ``now``. A group already held is replaced."""
        remaining = leased_until - now
        # The lease table takes deadlines in (0, 600]: a lease already over is due at once
        # (its extension will report the ids lost).
        deadline = min(max(remaining, 1e-3), MAX_ACK_DEADLINE)
        self._table.remove(group)
        self._table.add(group, 0, now, deadline=deadline)
        self._ack_ids[group] = ack_ids
        self._lost[group] = set()

    def remove(self, group: str) -> None:
        """Stop keeping ``group`` (settled, given back, or no longer wanted)."""
        self._table.remove(group)
        self._ack_ids.pop(group, None)
        self._lost.pop(group, None)

    def due(self, now: float) -> dict[str, list[str]]:
        """The groups to extend now, each with its ids not yet lost; recorded as extended
        at ``now`` by ``lease_seconds``."""
        actions = self._table.due(now, self.lease_seconds)
        return {group: self._live(group) for group in actions.extend}

    def _live(self, group: str) -> list[str]:
        lost = self._lost[group]
        return sorted(a for a in self._ack_ids[group] if a not in lost)

    def lost(self, group: str, ack_ids: Iterable[str]) -> None:
        """Ack ids of ``group`` whose lease the server no longer knows (an extension's
        INVALID_ACK_ID): their messages come again, under new ack ids."""
        lost = self._lost.get(group)
        if lost is not None:
            lost.update(ack_ids)

    def next_wakeup(self, now: float) -> float | None:
        """When :meth:`due` next has something (``None``: no group held)."""
        return self._table.next_wakeup(now)
