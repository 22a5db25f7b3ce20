"""The source's decisions, pure: what to emit, ack, release and extend, given ``now``.

The shells (``_driver.py`` in Spark's source runner, ``_reader.py`` in read tasks) do the I/O
and ask these classes what to do; nothing here reads a clock, a file or the network.

* :class:`Admission`: for each delivery a pull brings, whether it is a new row of the batch
  (EMIT), a redelivery of a message Spark has committed (ACK_NOW: ack it, don't emit it), a
  redelivery of a message journaled in the batch being read, not yet committed
  (ACK_AFTER_COMMIT: keep its ack id with the batch, ack it after the commit), or published
  after an ``availableNow`` run began (RELEASE: modack 0, a later run takes it). A message
  delivered twice in one pull keeps its newest delivery (the older ack id is superseded).
* :class:`Settlement`: acking a committed batch by ack id, in rounds: a message whose ack id
  failed (expired, superseded) is retried with a newer delivery's ack id if one arrived
  meanwhile; what stays unconfirmed is *pending* (its next redelivery is acked, not emitted).
* :class:`Leases`: journaled, unsettled deliveries are kept leased in groups (one group per
  journal part: its deliveries share their deadline), by the SDK's own lease rules
  (:class:`eoclient.subscriber.leases.LeaseTable`, keyed by group instead of by ack id).
* :func:`may_claim_unverified`, :func:`leftovers`, :func:`plan_partitions`,
  :func:`expire_pending`: when a read task may journal without re-checking its leases, what a
  restart must give back or wait for, how a batch is split, when a pending id is forgotten.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from eoclient.subscriber.ack_results import AcknowledgeStatus
from eoclient.subscriber.leases import LeaseTable, renewal_margin
from eoclient.subscriber.settings import MAX_ACK_DEADLINE

# Pending ids (committed, ack unconfirmed) are forgotten after this long: the default
# message retention (7 days), after which the service will not redeliver them either.
PENDING_TTL_SECONDS = 7 * 24 * 3600.0
# A journaled delivery stays leased until its batch is settled, however long Spark takes:
# LeaseTable's max_lease (it gives up on a lease after that) is set beyond any batch.
_NO_MAX_LEASE = PENDING_TTL_SECONDS
# Clocks of the driver and the executors (wall clock: they are different hosts) may differ
# by this much (NTP keeps hosts within milliseconds; one second is generous). A journaled
# lease's end, known from the executor's clock, counts this much earlier on the driver.
CLOCK_SKEW_SECONDS = 1.0


class Verdict(enum.Enum):
    EMIT = "emit"
    ACK_NOW = "ack now"
    ACK_AFTER_COMMIT = "ack after commit"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class Known:
    """What a pull knows before it starts.

    Attributes:
        committed: message ids Spark has committed (their ack may not be confirmed yet):
            the pending ids and those of committed batches not yet settled.
        uncommitted: message ids journaled in the batch being read (other parts of it,
            or earlier, unsettled batches' ids a restarted driver found).
        cutoff_ns: ``availableNow``: publish time (ns since the epoch) after which a message
            waits for a later run; ``None`` otherwise.
        dedupe: ``False`` only for the crash tests' negative control: every delivery is
            emitted, redeliveries too.
    """

    committed: Collection[str] = frozenset()
    uncommitted: Collection[str] = frozenset()
    cutoff_ns: int | None = None
    dedupe: bool = True


@dataclass(slots=True)
class Admission:
    """One pull's choices, delivery by delivery, in the order the deliveries arrived.

    ``emitted`` maps each new message id to where its (newest) delivery is: (chunk, row),
    a chunk being one Pull response. The three ack-id maps say what else to do; every ack id
    the pull received is in exactly one of ``emitted`` (through its position), ``ack_now``,
    ``after_commit``, ``release`` or ``superseded``.
    """

    known: Known
    emitted: dict[str, tuple[int, int]] = field(default_factory=dict)
    emitted_ack_ids: dict[str, str] = field(default_factory=dict)  # message id → ack id
    ack_now: dict[str, str] = field(default_factory=dict)  # ack id → message id
    after_commit: dict[str, str] = field(default_factory=dict)  # ack id → message id
    release: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    chunks: int = 0

    def admit(
        self, message_ids: Sequence[str], ack_ids: Sequence[str], publish_ns: Sequence[int]
    ) -> list[Verdict]:
        """Decide for one Pull response's deliveries (a new chunk); their verdicts."""
        chunk = self.chunks
        self.chunks += 1
        verdicts = []
        for row, (message_id, ack_id, published) in enumerate(
            zip(message_ids, ack_ids, publish_ns, strict=True)
        ):
            verdict = self._verdict(message_id, published)
            if verdict is Verdict.EMIT:
                older = self.emitted_ack_ids.get(message_id)
                if older is not None:
                    self.superseded.append(older)  # redelivered within this pull
                self.emitted[message_id] = (chunk, row)
                self.emitted_ack_ids[message_id] = ack_id
            elif verdict is Verdict.ACK_NOW:
                self.ack_now[ack_id] = message_id
            elif verdict is Verdict.ACK_AFTER_COMMIT:
                self.after_commit[ack_id] = message_id
            else:
                self.release.append(ack_id)
            verdicts.append(verdict)
        return verdicts

    def _verdict(self, message_id: str, published_ns: int) -> Verdict:
        known = self.known
        if known.dedupe:
            if message_id in known.committed:
                return Verdict.ACK_NOW
            if message_id in known.uncommitted:
                return Verdict.ACK_AFTER_COMMIT
        if message_id in self.emitted:
            return Verdict.EMIT
        if known.cutoff_ns is not None and published_ns > known.cutoff_ns:
            return Verdict.RELEASE
        return Verdict.EMIT

    def withdraw(self, journaled_elsewhere: Collection[str]) -> list[str]:
        """Turn emitted messages that another part of the batch journaled meanwhile into
        ACK_AFTER_COMMIT (checked just before this part is journaled); their ids."""
        if not self.known.dedupe:
            return []
        withdrawn = [m for m in self.emitted if m in journaled_elsewhere]
        for message_id in withdrawn:
            del self.emitted[message_id]
            self.after_commit[self.emitted_ack_ids.pop(message_id)] = message_id
        return withdrawn

    def drop(self, message_ids: Iterable[str]) -> list[str]:
        """Forget emitted messages whose lease was found lost before journaling (another
        puller may hold them now); their ack ids (dead: nothing to send)."""
        dropped = []
        for message_id in message_ids:
            if self.emitted.pop(message_id, None) is not None:
                dropped.append(self.emitted_ack_ids.pop(message_id))
        return dropped

    def leased(self) -> list[str]:
        """Every ack id this pull still holds a lease for (nothing superseded or sent)."""
        return [*self.emitted_ack_ids.values(), *self.after_commit, *self.ack_now, *self.release]


class Settlement:
    """Acking the messages of committed batches by ack id, in rounds.

    Each message may have several known ack ids (its journaled delivery, and redeliveries
    seen later); on an exactly-once subscription at most one is current, so all are sent
    and any SUCCESS confirms the message. A round sends only ids no round has sent: a
    redelivery recorded while a round was under way (:meth:`redelivered`) joins the next.
    """

    def __init__(self, ack_ids_of: Mapping[str, Iterable[str]]) -> None:
        self._ack_ids_of = {m: list(ids) for m, ids in ack_ids_of.items()}
        self._sent: set[str] = set()
        self.unconfirmed: set[str] = set(self._ack_ids_of)

    @classmethod
    def from_rows(cls, message_ids: Iterable[str], ack_ids: Iterable[str]) -> Settlement:
        """From journal rows: a message may have several (emitted and ack-only rows)."""
        ack_ids_of: dict[str, list[str]] = {}
        for message_id, ack_id in zip(message_ids, ack_ids, strict=True):
            ack_ids_of.setdefault(message_id, []).append(ack_id)
        return cls(ack_ids_of)

    def __len__(self) -> int:
        return len(self._ack_ids_of)

    def next_round(self) -> dict[str, str]:
        """Ack ids to send now (ack id → message id); empty once the settlement is over."""
        round_ = {
            ack_id: message_id
            for message_id in self.unconfirmed
            for ack_id in self._ack_ids_of[message_id]
            if ack_id not in self._sent
        }
        self._sent.update(round_)
        return round_

    def record(self, sent: Mapping[str, str], statuses: Mapping[str, AcknowledgeStatus]) -> None:
        """The answer to a round (an id missing from ``statuses`` is unconfirmed)."""
        for ack_id, message_id in sent.items():
            if statuses.get(ack_id) is AcknowledgeStatus.SUCCESS:
                self.unconfirmed.discard(message_id)

    def redelivered(self, message_id: str, ack_id: str) -> bool:
        """A newer delivery of a message being settled; whether it is one of them."""
        ids = self._ack_ids_of.get(message_id)
        if ids is None:
            return False
        if ack_id not in ids:
            ids.append(ack_id)
        return True

    def confirmed(self, message_id: str) -> None:
        """Acked elsewhere (a pull acked its redelivery with SUCCESS)."""
        self.unconfirmed.discard(message_id)


class Leases:
    """Journaled deliveries not yet settled, leased in groups by the SDK's lease rules.

    A group is one journal part: its deliveries were pulled together, so their deadlines
    end together. ``LeaseTable`` (keyed by group) decides when a group is due; the shell
    extends every live ack id of the group, and reports ids the server found invalid (the
    lease was lost: the message comes back as a redelivery, handled by admission).
    """

    def __init__(self, lease_seconds: int) -> None:
        self.lease_seconds = lease_seconds
        self._table = LeaseTable(max_lease=_NO_MAX_LEASE)
        self._live: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, group: object) -> bool:
        return group in self._live

    def add(self, group: str, ack_ids: Iterable[str], leased_until: float, now: float) -> None:
        """A journaled group whose deliveries are leased until ``leased_until`` (as far as
        the puller knew: its clock; ``now`` is this clock, both wall-clock seconds)."""
        remaining = leased_until - CLOCK_SKEW_SECONDS - now
        # LeaseTable takes deadlines in (0, 600]: an expired lease is due at once (and its
        # extension will report it lost).
        deadline = min(max(remaining, 1e-3), MAX_ACK_DEADLINE)
        self._table.add(group, 0, now, deadline=deadline)
        self._live[group] = set(ack_ids)

    def remove(self, group: str) -> None:
        self._table.remove(group)
        self._live.pop(group, None)

    def due(self, now: float) -> dict[str, list[str]]:
        """Groups to extend now (group → live ack ids), recorded as extended at ``now`` by
        ``lease_seconds``."""
        actions = self._table.due(now, self.lease_seconds)
        return {group: sorted(self._live[group]) for group in actions.extend}

    def lost(self, group: str, ack_ids: Iterable[str]) -> None:
        """Ack ids of ``group`` the server no longer knows (INVALID_ACK_ID)."""
        live = self._live.get(group)
        if live is not None:
            live.difference_update(ack_ids)

    def next_wakeup(self, now: float) -> float | None:
        return self._table.next_wakeup(now)


def may_claim_unverified(now: float, first_pull_sent: float, ack_deadline: float) -> bool:
    """Whether a read task may journal what it pulled without first extending its leases.

    The server's deadline for a delivery runs from when it answered, so no earlier than
    when the Pull call was sent: until ``first_pull_sent + ack_deadline`` every lease this
    task holds is current, and no other puller can have been given those messages. The
    journal must exist that long *before* that end that the driver can find it and extend
    the leases: the SDK's renewal margin (at least 5 s: a lease tick, a round trip and a
    stall; client-anchors §3.3). Later, the task extends its leases first (a lost one is
    dropped: its redelivery belongs to whoever got it).
    """
    return now + renewal_margin(ack_deadline) < first_pull_sent + ack_deadline


@dataclass(frozen=True, slots=True)
class Leftovers:
    """What a restarted driver does about deliveries a dead run pulled but never journaled:
    give ``release`` back (modack 0) now, and in ``availableNow`` keep looking for messages
    until ``wait_until`` (a Pull call that was in flight may have leased messages nobody
    recorded: they come back when their deadline passes)."""

    release: list[str]
    wait_until: float


def leftovers(
    answered: Iterable[str],
    unanswered_since: Iterable[float],
    journaled: Collection[str],
    ack_deadline: float,
) -> Leftovers:
    """From dead pullers' lease logs: the ack ids their Pull calls returned and the send
    times of calls that never recorded an answer; ``journaled``: ack ids in journals (kept:
    the restarted run leases and acks them)."""
    release = sorted({ack_id for ack_id in answered if ack_id not in journaled})
    # The server's deadline runs from its answer: up to the call's own timeout after the
    # send (PULL_CALL_TIMEOUT bounds it in the shell) plus the deadline; 2 s margin.
    wait_until = max((sent + ack_deadline + 2.0 for sent in unanswered_since), default=0.0)
    return Leftovers(release, wait_until)


def plan_partitions(
    probed: int, probe_asked: int, max_rows: int, partitions: int
) -> tuple[int, ...]:
    """How many messages each read task of a batch pulls at most, after the driver's probe
    pull asked for ``probe_asked`` and got ``probed``.

    A probe that got fewer than it asked for found the subscription (nearly) drained: the
    batch is the probe alone (no read task pulls). Otherwise the rest of ``max_rows`` is
    split over ``partitions`` tasks as evenly as whole numbers go: the batch never holds
    more than ``max_rows``.
    """
    rest = max_rows - probed
    if probed < probe_asked or rest <= 0:
        return ()
    share, extra = divmod(rest, partitions)
    return tuple(
        share + (1 if part < extra else 0) for part in range(partitions) if share or part < extra
    )


def expire_pending(pending: Mapping[str, float], now: float) -> dict[str, float]:
    """Pending ids (message id → when its ack went unconfirmed) still worth remembering."""
    horizon = now - PENDING_TTL_SECONDS
    return {message_id: since for message_id, since in pending.items() if since >= horizon}
