"""The source's decisions, pure: what to emit, ack, release and extend, given ``now``.

The shells (``_runner.py`` in Spark's source runner; ``_reader.py``, ``_settle.py`` and
``_keeper.py`` on the executors) do the I/O and ask these what to do; nothing here reads a
clock, a file or the network.

* :class:`Admission`: for each delivery a pull brings, whether it is a new row of the batch
  (EMIT), a redelivery of a message Spark has committed (ACK_NOW: ack it, don't emit it), a
  redelivery of a message journaled in the batch being read, not yet committed
  (ACK_AFTER_COMMIT: keep its ack id with the batch, ack it after the commit), or published
  after an ``availableNow`` run began (RELEASE: modack 0, a later run takes it). A message
  delivered twice in one pull keeps its newest delivery (the older ack id is superseded).
  The first two are decided once the pull is over, for all its messages at once (the shell
  looks them up in Arrow: ``_journal.ids_among``).
* :func:`unconfirmed`: which messages of a settled part stay *pending* (no ack id of theirs
  succeeded: the next redelivery is acked, not emitted).
* journaled, unsettled deliveries are kept leased in groups (one group per journal part: its
  deliveries share their deadline) by the SDK's :class:`eoclient.subscriber.LeaseGroups`
  (``_keeper``), their ends counted ``CLOCK_SKEW_SECONDS`` early.
* :func:`may_claim_unverified`, :func:`give_back`, :func:`grace_until`,
  :func:`plan_partitions`, :func:`assign_settles`: when a read task may journal without
  re-checking its leases, what a dead puller held that must be given back, how long a
  restarted availableNow run looks for what a dead puller may hold unrecorded, how a batch is
  split, which task settles which committed part.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from eoclient.subscriber import renewal_margin

# Pending ids (committed, ack unconfirmed) are forgotten after this long: the default
# message retention (7 days), after which the service will not redeliver them either.
PENDING_TTL_SECONDS = 7 * 24 * 3600.0
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
        cutoff_ns: ``availableNow``: publish time (ns since the epoch) after which a message
            waits for a later run; ``None`` otherwise.
        dedupe: ``False`` only for the crash tests' negative control: every delivery is
            emitted, redeliveries too.
        committed: which of a Pull response's message ids Spark has committed, asked per
            response so that redeliveries do not count towards what the pull wants (the
            driver's probe: a probe of redeliveries alone must not look like an empty
            subscription). ``None``: decided once the pull is over (:meth:`Admission.
            ack_committed`: a read task, for which one lookup costs less than one a
            response).
    """

    cutoff_ns: int | None = None
    dedupe: bool = True
    committed: Callable[[Sequence[str]], Collection[str]] | None = None


# A chunk kept for later admission: its number, message ids, ack ids, publish times.
_Chunk = tuple[int, Sequence[str], Sequence[str], Sequence[int]]


@dataclass(slots=True)
class Admission:
    """One pull's choices, delivery by delivery, in the order the deliveries arrived.

    ``emitted`` maps each new message id to where its (newest) delivery is: (chunk, row),
    a chunk being one Pull response. The three ack-id maps say what else to do; every ack id
    the pull received is in exactly one of ``emitted`` (through its position), ``ack_now``,
    ``after_commit``, ``release`` or ``superseded``. ``delivered`` counts them all.

    The usual pull of a read task is all new messages, each delivered once: nothing to
    decide per delivery. Such chunks (no per-response lookup of committed ids, none
    published after the cutoff) are *deferred*: kept as they came, every delivery counted
    as emitted, with no Python step or dict entry per delivery (building the two maps was
    ~0.4 µs a message, the largest part of admission). :meth:`confirm` checks them for a
    message delivered twice (one hash pass in C); only then, or when anything else needs a
    delivery-by-delivery answer (``emitted``, :meth:`ack_committed` with a hit,
    :meth:`withdraw` with a hit, :meth:`drop`, :meth:`leased`, a chunk that cannot be
    deferred), are they admitted the ordinary way, in order, which gives exactly the
    choices admitting them at once would have (``tests/spark/test_decisions.py``).
    """

    known: Known
    ack_now: dict[str, str] = field(default_factory=dict)  # ack id → message id
    after_commit: dict[str, str] = field(default_factory=dict)  # ack id → message id
    release: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    chunks: int = 0
    delivered: int = 0
    _emitted: dict[str, tuple[int, int]] = field(default_factory=dict, init=False)
    _emitted_ack_ids: dict[str, str] = field(default_factory=dict, init=False)
    # Deferred chunks (chunk number, message ids, ack ids, publish times), while every
    # chunk so far was deferred; then ``_emitted`` is empty.
    _deferred: list[_Chunk] | None = field(default_factory=list, init=False)
    _deferred_rows: int = field(default=0, init=False)
    _confirmed: bool = field(default=True, init=False)  # no message twice among them

    @property
    def emitted(self) -> dict[str, tuple[int, int]]:
        """New message id → (chunk, row) of its newest delivery, in first-arrival order."""
        self._admit_deferred()
        return self._emitted

    @property
    def emitted_ack_ids(self) -> dict[str, str]:
        """New message id → the ack id of its newest delivery."""
        self._admit_deferred()
        return self._emitted_ack_ids

    @property
    def emitted_count(self) -> int:
        """How many messages are emitted; while deferred chunks are not confirmed, how many
        at most (a message delivered twice counts twice until :meth:`confirm`)."""
        return len(self._emitted) + self._deferred_rows

    def confirm(self) -> int:
        """Check the deferred chunks for a message delivered twice (then they are admitted
        one by one); the exact ``emitted_count``."""
        deferred = self._deferred
        if deferred and not self._confirmed:
            distinct = len(set(itertools.chain.from_iterable(c[1] for c in deferred)))
            if distinct == self._deferred_rows:
                self._confirmed = True
            else:
                self._admit_deferred()
        return self.emitted_count

    def all_emitted(self) -> bool:
        """Whether every delivery so far is emitted, in arrival order (nothing superseded,
        acked, released or withdrawn): the pull's rows are all its chunks' rows."""
        self.confirm()
        return self._deferred is not None

    def admit(
        self, message_ids: Sequence[str], ack_ids: Sequence[str], publish_ns: Sequence[int]
    ) -> list[Verdict]:
        """Decide for one Pull response's deliveries (a new chunk); their verdicts."""
        chunk = self.chunks
        self.chunks += 1
        self.delivered += len(ack_ids)
        cutoff = self.known.cutoff_ns
        if (
            self._deferred is not None
            and self.known.committed is None
            and (cutoff is None or not publish_ns or max(publish_ns) <= cutoff)
        ):
            # Every verdict is EMIT (a message delivered twice too: its newest delivery).
            self._deferred.append((chunk, message_ids, ack_ids, publish_ns))
            self._deferred_rows += len(ack_ids)
            self._confirmed = self._confirmed and not ack_ids
            return [Verdict.EMIT] * len(ack_ids)
        self._admit_deferred()
        return self._admit(chunk, message_ids, ack_ids, publish_ns)

    def _admit_deferred(self) -> None:
        """Admit the deferred chunks the ordinary way; no chunk is deferred from now on."""
        deferred = self._deferred
        if deferred is None:
            return
        self._deferred = None
        self._deferred_rows = 0
        for chunk, message_ids, ack_ids, publish_ns in deferred:
            self._admit(chunk, message_ids, ack_ids, publish_ns)

    def _admit(
        self,
        chunk: int,
        message_ids: Sequence[str],
        ack_ids: Sequence[str],
        publish_ns: Sequence[int],
    ) -> list[Verdict]:
        lookup = self.known.committed
        committed = lookup(message_ids) if lookup is not None and self.known.dedupe else ()
        if not committed and self._emit_all(chunk, message_ids, ack_ids, publish_ns):
            return [Verdict.EMIT] * len(ack_ids)
        verdicts = []
        for row, (message_id, ack_id, published) in enumerate(
            zip(message_ids, ack_ids, publish_ns, strict=True)
        ):
            verdict = self._verdict(message_id, published, committed)
            if verdict is Verdict.EMIT:
                older = self._emitted_ack_ids.get(message_id)
                if older is not None:
                    self.superseded.append(older)  # redelivered within this pull
                self._emitted[message_id] = (chunk, row)
                self._emitted_ack_ids[message_id] = ack_id
            elif verdict is Verdict.ACK_NOW:
                self.ack_now[ack_id] = message_id
            else:
                self.release.append(ack_id)
            verdicts.append(verdict)
        return verdicts

    def _emit_all(
        self,
        chunk: int,
        message_ids: Sequence[str],
        ack_ids: Sequence[str],
        publish_ns: Sequence[int],
    ) -> bool:
        """Emit the whole chunk at once if every delivery in it is EMIT with no older
        delivery to supersede (the usual response: new messages, published before any
        cutoff, each once); whether it did. The same choices the loop below makes, built
        by dict and zip in C rather than a Python step per delivery (~0.5 µs a message)."""
        cutoff = self.known.cutoff_ns
        if cutoff is not None and publish_ns and max(publish_ns) > cutoff:
            return False
        ack_by_message = dict(zip(message_ids, ack_ids, strict=True))
        # Two key views: isdisjoint walks the smaller (the chunk), not all emitted so far.
        if len(ack_by_message) != len(ack_ids) or not ack_by_message.keys().isdisjoint(
            self._emitted_ack_ids.keys()
        ):
            return False  # a message twice: the loop keeps the newest delivery
        self._emitted_ack_ids.update(ack_by_message)
        rows = len(message_ids)
        positions = zip(itertools.repeat(chunk, rows), range(rows), strict=True)
        self._emitted.update(zip(message_ids, positions, strict=True))
        return True

    def _verdict(self, message_id: str, published_ns: int, committed: Collection[str]) -> Verdict:
        if message_id in committed:
            return Verdict.ACK_NOW
        if message_id in self._emitted:
            return Verdict.EMIT
        cutoff = self.known.cutoff_ns
        if cutoff is not None and published_ns > cutoff:
            return Verdict.RELEASE
        return Verdict.EMIT

    def ack_committed(self, committed: Collection[str]) -> list[str]:
        """Turn emitted messages that Spark has committed (in a batch being settled, or
        pending) into ACK_NOW, whatever their publish time; their ids."""
        if not self.known.dedupe or not committed:
            return []
        taken = [m for m in self.emitted if m in committed]
        for message_id in taken:
            del self.emitted[message_id]
            self.ack_now[self.emitted_ack_ids.pop(message_id)] = message_id
        return taken

    def withdraw(self, journaled_elsewhere: Collection[str]) -> list[str]:
        """Turn emitted messages that another part of the batch journaled meanwhile into
        ACK_AFTER_COMMIT (checked just before this part is journaled); their ids."""
        if not self.known.dedupe or not journaled_elsewhere:
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


def unconfirmed(
    message_ids: Sequence[str], ack_ids: Sequence[str], failed: Collection[str]
) -> list[str]:
    """The messages of a settled part none of whose ack ids was acked: a message may have
    several rows (a redelivery kept as an ack-only row), and one success confirms it. On an
    exactly-once subscription at most one of its ack ids is current, so all are sent."""
    if not failed:
        return []
    confirmed = {m for m, a in zip(message_ids, ack_ids, strict=True) if a not in failed}
    return sorted({m for m in message_ids if m not in confirmed})


def may_claim_unverified(now: float, first_pull_sent: float, ack_deadline: float) -> bool:
    """Whether a read task may journal what it pulled without first extending its leases.

    The server's deadline for a delivery runs from when it answered, so no earlier than
    when the Pull call was sent: until ``first_pull_sent + ack_deadline`` every lease this
    task holds is current, and no other puller can have been given those messages. The
    part must be journaled that long *before* that end that its lease keeper (``_keeper``,
    which takes it over once it is journaled) can extend the leases in time: the SDK's
    renewal margin (at least 5 s: a lease tick, a round trip and a stall;
    docs/protocol.md#lease-extension-cadence). Later, the task
    extends its leases first (a lost one is dropped: its redelivery belongs to whoever got
    it).
    """
    return now + renewal_margin(ack_deadline) < first_pull_sent + ack_deadline


def give_back(answered: Iterable[str], journaled: Collection[str]) -> list[str]:
    """From a dead puller's lease log: the ack ids its Pull calls returned that are not in
    the journal (those are kept: their part is leased and acked), to release at once."""
    return sorted({ack_id for ack_id in answered if ack_id not in journaled})


def grace_until(
    unanswered_since: Iterable[float], call_timeout: float, ack_deadline: float
) -> float:
    """Until when (wall clock) a restarted ``availableNow`` run keeps looking for messages:
    a dead puller's Pull call sent at ``t`` and never answered in its log may have leased
    messages nobody recorded, which come back when their deadline passes. The server's
    deadline runs from its answer: up to the call's own timeout after the send, plus the
    deadline; 2 s margin. 0 without such calls."""
    return max((sent + call_timeout + ack_deadline + 2.0 for sent in unanswered_since), default=0.0)


def plan_partitions(probed: int, drained: bool, max_rows: int, partitions: int) -> tuple[int, ...]:
    """How many messages each read task of a batch pulls at most, after the driver's probe
    pull emitted ``probed`` rows.

    A probe that stopped before it had what it asked for (``drained``) found the
    subscription (nearly) empty: the batch is the probe alone (no read task pulls).
    Otherwise the rest of ``max_rows`` is split over ``partitions`` tasks as evenly as whole
    numbers go: the batch never holds more than ``max_rows``.
    """
    rest = max_rows - probed
    if drained or rest <= 0:
        return ()
    share, extra = divmod(rest, partitions)
    return tuple(
        share + (1 if part < extra else 0) for part in range(partitions) if share or part < extra
    )


def assign_settles(
    units: Sequence[tuple[int, int]], tasks: int
) -> list[tuple[tuple[int, int], ...]]:
    """Committed parts ``(batch, part)`` to settle, dealt round-robin to ``tasks`` tasks:
    each acks about the same number of parts (parts are about the same size)."""
    return [tuple(units[task::tasks]) for task in range(tasks)]
