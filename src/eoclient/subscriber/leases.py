"""Lease bookkeeping for messages received and not yet acked or nacked.

For each ack id the table knows when the server's ack deadline for it ends: the
time it was received plus ``stream_ack_deadline_seconds``, then the time of each
modack sent for it plus that modack's ``ack_deadline_seconds`` (a modack sets the
deadline relative to when it arrives; docs/protocol.md#ack-id-state-machine). From that it says, at
a given ``now``, which ids to extend and which to give up on; the shell sends the
modacks. Go extends every leased id on one ticker and Python every id on each
jittered loop (docs/protocol.md#lease-extension-cadence); tracking per-id deadlines instead lets a
message received mid-period be extended when *it* needs it, not when the oldest does.

Complexity: ``due`` and ``next_wakeup`` scan the table, O(leased). They run once per
extension round (seconds apart), and the table is bounded by flow control plus what
the server sends past it, so a heap is not worth its invalidation bookkeeping.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from eoclient.subscriber.settings import MAX_ACK_DEADLINE

__all__ = [
    "MIN_RENEWAL_MARGIN",
    "RENEWAL_MARGIN_FRACTION",
    "Leasable",
    "LeaseActions",
    "LeaseStatistics",
    "LeaseTable",
    "ReleasedLease",
    "renewal_margin",
]

# How long before the server's deadline an extension is sent: the larger of
#   * 5 s, Go's gracePeriod (docs/protocol.md#lease-extension-cadence): the sender's batching tick
#     (100 ms), one ModifyAckDeadline round trip, and a retry or an event-loop stall on a busy
#     process; and
#   * 10 % of the lease, what Python's leaser leaves at least (it sleeps at most 90 % of the
#     deadline); it scales the slack for long leases, where a stall of a few seconds
#     (a handler blocking the loop, a GC pause) is likelier over the period.
# and never more than half the lease, so that an extension always buys time (only matters for
# leases under 10 s, which the server does not grant for deliveries anyway).
MIN_RENEWAL_MARGIN = 5.0
RENEWAL_MARGIN_FRACTION = 0.1


def renewal_margin(lease_seconds: float) -> float:
    """Seconds before the end of a ``lease_seconds`` long deadline to extend it: the larger
    of 5 s and a tenth of the lease, at most half of it (what a session and
    :class:`~eoclient.subscriber.LeaseGroups` leave; docs/protocol.md#lease-extension-cadence).
    Work that must reach a keeper of its leases in time has to hand them over earlier."""
    return min(max(MIN_RENEWAL_MARGIN, RENEWAL_MARGIN_FRACTION * lease_seconds), lease_seconds / 2)


class Leasable(Protocol):
    """What :meth:`LeaseTable.add_many` reads of each thing it leases (a received message)."""

    @property
    def ack_id(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def ordering_key(self) -> str: ...


L = TypeVar("L", bound=Leasable)


@dataclass(frozen=True, slots=True)
class ReleasedLease:
    """A message given up on after ``max_lease``: forget it; neither ack nor nack it.

    The server redelivers it once its last extension runs out. ``ordering_key`` and
    ``size`` let the shell release the ordering and flow-control gates.
    """

    ack_id: str
    size: int
    ordering_key: str
    received_at: float


@dataclass(frozen=True, slots=True)
class LeaseActions:
    """What :meth:`LeaseTable.due` asks the shell to do now.

    Attributes:
        extend: ack ids to modack, in the order they were added.
        deadline_seconds: the ``ack_deadline_seconds`` to send with them.
        released: messages held past ``max_lease``; no longer in the table.
    """

    extend: tuple[str, ...] = ()
    deadline_seconds: int = 0
    released: tuple[ReleasedLease, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.extend or self.released)


@dataclass(frozen=True, slots=True)
class LeaseStatistics:
    """A snapshot of a :class:`LeaseTable`.

    Attributes:
        leased_messages / leased_bytes: in the table now.
        released_for_max_lease: total given up on after ``max_lease``.
        extensions: total ack ids returned for extension by ``due`` (not RPCs).
        late_extensions: of those, how many were past their server deadline already
            (the shell woke late; under exactly-once their modack will likely fail).
    """

    leased_messages: int
    leased_bytes: int
    released_for_max_lease: int
    extensions: int
    late_extensions: int


@dataclass(slots=True)
class _Lease:
    size: int
    ordering_key: str
    received_at: float
    expires_at: float  # end of the server's ack deadline, as far as we know
    lease_seconds: float  # length of the deadline that ends at expires_at


class LeaseTable:
    """Per-ack-id server deadlines, extensions due, and the ``max_lease`` cut-off.

    Usage by the shell: :meth:`add` on receipt; :meth:`extended` after sending a
    receipt modack; at :meth:`next_wakeup`, :meth:`due` and send what it returns;
    :meth:`remove` on ack, nack, or an INVALID_ACK_ID modack result.

    Guarantee (tested as a property): if ``due`` is called no later than
    ``next_wakeup``, no id's server deadline passes while it is in the table.
    """

    __slots__ = (
        "_extensions",
        "_late_extensions",
        "_leased_bytes",
        "_leases",
        "_max_lease",
        "_released_for_max_lease",
    )

    def __init__(self, *, max_lease: float) -> None:
        """Args: max_lease: ``LeaseSettings.max_lease``, seconds from receipt (> 0)."""
        if not max_lease > 0:
            raise ValueError(f"LeaseTable: max_lease must be > 0 seconds, got {max_lease!r}")
        self._max_lease = max_lease
        self._leases: dict[str, _Lease] = {}
        self._leased_bytes = 0
        self._released_for_max_lease = 0
        self._extensions = 0
        self._late_extensions = 0

    def __repr__(self) -> str:
        return (
            f"<LeaseTable leased={len(self._leases)} bytes={self._leased_bytes} "
            f"max_lease={self._max_lease} released_for_max_lease={self._released_for_max_lease}>"
        )

    def __len__(self) -> int:
        return len(self._leases)

    def __contains__(self, ack_id: object) -> bool:
        return ack_id in self._leases

    def add(
        self, ack_id: str, size: int, now: float, *, deadline: float, ordering_key: str = ""
    ) -> None:
        """Start leasing a message received at ``now``.

        Args:
            deadline: seconds the server gave it on delivery: the stream's
                ``stream_ack_deadline_seconds`` (StreamingPull) or the subscription's
                ``ack_deadline_seconds`` (Pull).

        Raises:
            ValueError: ``ack_id`` is already leased (the server issues a new ack id
                per delivery, so this is a caller bug), or ``deadline`` not in (0, 600].
        """
        if ack_id in self._leases:
            raise ValueError(f"LeaseTable.add: ack id {ack_id!r} is already leased")
        _check_deadline("add", deadline)
        self._leases[ack_id] = _Lease(
            size=size,
            ordering_key=ordering_key,
            received_at=now,
            expires_at=now + deadline,
            lease_seconds=deadline,
        )
        self._leased_bytes += size

    def add_many(self, items: Iterable[L], now: float, *, deadline: float) -> list[L]:
        """:meth:`add` for each of ``items`` received together, each leased for ``deadline``
        seconds from ``now``; returns those that were not leased already (an ack id seen
        twice, in the table or among ``items``, is leased once: a duplicate delivery)."""
        _check_deadline("add_many", deadline)
        leases = self._leases
        expires_at = now + deadline
        added: list[L] = []
        size_total = 0
        for item in items:
            ack_id = item.ack_id
            if ack_id in leases:
                continue
            size = item.size
            leases[ack_id] = _Lease(size, item.ordering_key, now, expires_at, deadline)
            size_total += size
            added.append(item)
        self._leased_bytes += size_total
        return added

    def remove(self, ack_id: str) -> bool:
        """Stop leasing (acked, nacked, or found invalid). Unknown ids are ignored.

        Returns:
            Whether the id was leased.
        """
        lease = self._leases.pop(ack_id, None)
        if lease is None:
            return False
        self._leased_bytes -= lease.size
        return True

    def remove_many(self, ack_ids: Iterable[str]) -> None:
        """:meth:`remove` for each of ``ack_ids``."""
        leases = self._leases
        freed = 0
        for ack_id in ack_ids:
            lease = leases.pop(ack_id, None)
            if lease is not None:
                freed += lease.size
        self._leased_bytes -= freed

    def extended(self, ack_ids: Iterable[str], deadline_seconds: float, now: float) -> None:
        """Record a modack sent at ``now`` (e.g. the receipt modack). Unknown ids are ignored.

        Raises:
            ValueError: ``deadline_seconds`` not in (0, 600]; a 0 modack is a nack:
                call :meth:`remove` for it.
        """
        _check_deadline("extended", deadline_seconds)
        for ack_id in ack_ids:
            lease = self._leases.get(ack_id)
            if lease is not None:
                lease.expires_at = now + deadline_seconds
                lease.lease_seconds = deadline_seconds

    def due(self, now: float, deadline: float, margin: float | None = None) -> LeaseActions:
        """Extensions to send and leases to give up on, at ``now``; records both.

        The returned extensions are recorded as sent at ``now`` (the server applies
        them a little later, so the table errs early).

        Args:
            deadline: the extension to request (see ``histogram.bounded_deadline``),
                seconds in (0, 600]; sent rounded up to whole seconds.
            margin: seconds before its server deadline an id is extended; ``None``
                (the default) = :func:`renewal_margin` of the id's current lease. Must
                be below ``deadline``, or extensions would never get ahead.

        An id is due when its deadline minus the margin has come. When any id is due,
        every id that would be due within the next ``renewal_margin(deadline)`` seconds
        is extended with it: one modack instead of a trickle for messages received
        over a short spread. Extending those early costs each at most that window
        (about a tenth) of its new lease, and bounds the rounds to roughly ten per
        lease period however arrivals are spread.
        """
        deadline_seconds = math.ceil(_check_deadline("due", deadline))
        if margin is not None and not (0 <= margin < deadline_seconds):
            raise ValueError(
                f"LeaseTable.due: margin must be in [0, deadline={deadline_seconds}), "
                f"got {margin!r}"
            )
        released = self._release_expired(now)
        window = renewal_margin(deadline_seconds)
        renew_at = {ack_id: _renew_at(lease, margin) for ack_id, lease in self._leases.items()}
        extend: tuple[str, ...] = ()
        if any(when <= now for when in renew_at.values()):
            extend = tuple(ack_id for ack_id, when in renew_at.items() if when <= now + window)
            for ack_id in extend:
                lease = self._leases[ack_id]
                if lease.expires_at <= now:
                    self._late_extensions += 1
                lease.expires_at = now + deadline_seconds
                lease.lease_seconds = deadline_seconds
            self._extensions += len(extend)
        return LeaseActions(extend=extend, deadline_seconds=deadline_seconds, released=released)

    def next_wakeup(self, now: float, margin: float | None = None) -> float | None:
        """When :meth:`due` next has something to do (``now`` if already); ``None`` if empty.

        ``margin`` must be the one that will be passed to :meth:`due`.
        """
        if not self._leases:
            return None
        earliest = min(
            min(_renew_at(lease, margin), lease.received_at + self._max_lease)
            for lease in self._leases.values()
        )
        return max(now, earliest)

    def statistics(self) -> LeaseStatistics:
        return LeaseStatistics(
            leased_messages=len(self._leases),
            leased_bytes=self._leased_bytes,
            released_for_max_lease=self._released_for_max_lease,
            extensions=self._extensions,
            late_extensions=self._late_extensions,
        )

    def _release_expired(self, now: float) -> tuple[ReleasedLease, ...]:
        # The same expression as in next_wakeup, so that due() at next_wakeup() always
        # releases what next_wakeup() woke it for (now - max_lease could round differently).
        expired = tuple(
            ReleasedLease(ack_id, lease.size, lease.ordering_key, lease.received_at)
            for ack_id, lease in self._leases.items()
            if lease.received_at + self._max_lease <= now
        )
        for released in expired:
            self.remove(released.ack_id)
        self._released_for_max_lease += len(expired)
        return expired


def _renew_at(lease: _Lease, margin: float | None) -> float:
    """When ``lease`` is due for extension (one expression, shared by due and next_wakeup)."""
    return lease.expires_at - (renewal_margin(lease.lease_seconds) if margin is None else margin)


def _check_deadline(method: str, deadline: float) -> float:
    # ModifyAckDeadlineRequest.ack_deadline_seconds is 0..600 and 0 means nack
    # (docs/protocol.md#ack-id-state-machine).
    if not (0 < deadline <= MAX_ACK_DEADLINE):
        raise ValueError(
            f"LeaseTable.{method}: deadline must be in (0, {MAX_ACK_DEADLINE}] seconds, "
            f"got {deadline!r}"
        )
    return deadline
