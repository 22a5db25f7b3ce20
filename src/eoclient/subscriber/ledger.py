"""The ack ledger: acks, nacks and modacks from settlement to result. No I/O, time passed in.

The ledger decides; the sender (``sender.py``) performs. Settlements are entered here,
the sender asks :meth:`AckLedger.take` what to send and where, writes the stream requests
or makes the unary calls, and hands every answer back (:meth:`AckLedger.on_confirmation`,
:meth:`AckLedger.apply_unary_answer`, :meth:`AckLedger.overdue`,
:meth:`AckLedger.stream_lost`). Each of those returns what to send next and the records
that got results; the sender resolves their waiters (``waiters.deliver``).

Records, not ids. A settlement becomes a position in an :class:`AckRecord`: every ack made
between two sends shares one record (so do the nacks, and the modacks of one deadline), a
response's receipt modacks are one record, and a batch settled together
(``MessageBatch.ack``) is one record. A record is one run of ids in one wire request, and a
stream confirmation is matched against the records in the order they were sent: a
confirmation that lists exactly the ids of the oldest records resolves them whole, with no
table of ids at all. Anything else (failures listed, a server that confirms in another
order or split differently) falls back to an index of id → positions, kept only while
such confirmations keep coming.

Where results come from (one pure classifier in ``ack_results``:
docs/architecture.md#exactly-once-results-are-classified-in-one-function):

* Without exactly-once: requests go on the stream and resolve SUCCESS once written
  (acks are best effort; docs/protocol.md#exactly-once-result-mapping).
* With exactly-once, on a server that confirms on the stream (our reference server):
  requests go on the stream and resolve from ``acknowledge_confirmation`` /
  ``modify_ack_deadline_confirmation``.
* With exactly-once, on a server that does not (Google's emulator 0.8.20 sends no
  confirmations; docs/protocol.md#streamingpull-confirmations): unary Acknowledge /
  ModifyAckDeadline, whose INVALID_ARGUMENT + ErrorInfo says which ids failed.

The mode is learnt without holding anything back. While it is UNKNOWN, every request goes
by unary call (which gives exactly-once results on any server), and the modacks with a
deadline (receipts, lease extensions) also go on the stream as the probe: a modack is
idempotent, so applying it twice is harmless, and the first result of the two stands. The
first stream confirmation makes the mode STREAM; none within ``PROBE_TIMEOUT`` makes it
UNARY (Google's emulator, and the official clients' way with the service). Acks and nacks
are not doubled: the second copy of an applied ack would come back INVALID_ACK_ID, and
could be read first.

Transient failures are retried by unary call with jittered exponential backoff
(:meth:`AckLedger.retry_delay`) until ``AckRetrySettings.deadline``, then reported OTHER.
An ack whose first attempt may have been applied without us hearing back (the stream
broke, a confirmation never came, or a call failed with a retryable code) is *ambiguous*:
if a retry then finds the id invalid, that may be because the first attempt succeeded, so
it is reported OTHER (may be redelivered) rather than a wrong INVALID_ACK_ID — never
SUCCESS, which would promise no redelivery.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError
from eoclient.subscriber.ack_results import (
    AcknowledgeStatus,
    AckResult,
    classify_confirmation,
    classify_unary_error,
)
from eoclient.subscriber.settings import AckRetrySettings

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "ACK_IDS_PER_REQUEST",
    "CONFIRMATION_TIMEOUT",
    "PROBE_TIMEOUT",
    "AckLedger",
    "AckMode",
    "AckRecord",
    "LedgerStatistics",
    "Operation",
    "Outgoing",
    "Position",
    "UnaryCall",
    "settled_record",
]

# Ids per request. Go's client derives 2500 from the service's 512 KiB limit per
# Acknowledge/ModifyAckDeadline request and ack ids of up to 164 bytes (2979 would
# fit; 2500 leaves room for the rest of the request) — docs/protocol.md#ack-request-batching.
ACK_IDS_PER_REQUEST = 2500
# How long the probe modacks sent on the stream wait for a confirmation before the
# ledger concludes the server does not confirm on streams. Our server answers within
# milliseconds; 2 s leaves a loaded CI machine ample room. Nothing waits for it: the
# same modacks went by unary call too.
PROBE_TIMEOUT = 2.0
# Sent on the stream under exactly-once, a request that has had no confirmation for this
# long (the server may leave confirmations out: proto comment) is resent by unary call,
# as an ambiguous attempt.
CONFIRMATION_TIMEOUT = 30.0

SUCCESS = AckResult(AcknowledgeStatus.SUCCESS)


class Operation(enum.StrEnum):
    """What a settlement asks of the server for one ack id.

    A nack is a modack to 0 seconds on the wire; it is its own operation because its
    result and its meaning to the session (the message goes back) differ.
    """

    ACK = "ack"
    NACK = "nack"
    MODACK = "modack"


class AckMode(enum.Enum):
    UNKNOWN = "unknown"  # exactly-once, no confirmation seen yet
    STREAM = "stream"  # exactly-once results arrive as stream confirmations
    UNARY = "unary"  # exactly-once results come from unary calls


class AckRecord:
    """One operation on a run of ack ids, and their results by position.

    A record is *open* while settlements are still appended to it (until the sender takes
    it). ``results`` stays ``None`` until the first result arrives, and a record whose ids
    all succeed at once gets one shared list (``[SUCCESS] * n``), not a result per id.

    Whoever waits for the results (``waiters.py``, the dispatch core's receipts) registers
    through :meth:`add_waiter`, :meth:`add_completion_waiter` and :meth:`when_resolved`,
    and is answered through :meth:`take_answered_waiters` and :meth:`take_completion`: the
    ledger never touches them; it only says which records got results.
    """

    __slots__ = (
        "ack_ids",
        "completion_waiters",
        "on_resolved",
        "operation",
        "results",
        "seconds",
        "sent_at",
        "stream_confirmed",
        "stream_pending",
        "unresolved",
        "waiters",
    )

    def __init__(self, operation: Operation, seconds: int, ack_ids: list[str]) -> None:
        self.operation = operation
        self.seconds = seconds  # the modack deadline; 0 for acks and nacks
        self.ack_ids = ack_ids
        self.results: list[AckResult | None] | None = None
        self.unresolved = len(ack_ids)
        # On the stream: when it was written, how many of its positions still await a
        # confirmation, and (only once confirmations arrive piecemeal) which do not.
        self.sent_at = 0.0
        self.stream_pending = 0
        self.stream_confirmed: set[int] | None = None
        # Per position (index, future) and whole-record futures; a callback run once every
        # position has its result.
        self.waiters: list[tuple[int, asyncio.Future[AckResult]]] | None = None
        self.completion_waiters: list[asyncio.Future[None]] | None = None
        self.on_resolved: Callable[[AckRecord], None] | None = None

    def __repr__(self) -> str:
        return (
            f"<AckRecord {self.operation.value} {len(self.ack_ids)} ids, "
            f"{self.unresolved} unresolved>"
        )

    def __len__(self) -> int:
        return len(self.ack_ids)

    def add_waiter(self, index: int, future: asyncio.Future[AckResult]) -> None:
        """``future`` waits for the result at ``index``."""
        if self.waiters is None:
            self.waiters = [(index, future)]
        else:
            self.waiters.append((index, future))

    def add_completion_waiter(self, future: asyncio.Future[None]) -> None:
        """``future`` waits until every position has its result."""
        if self.completion_waiters is None:
            self.completion_waiters = [future]
        else:
            self.completion_waiters.append(future)

    def when_resolved(self, callback: Callable[[AckRecord], None]) -> None:
        """Run ``callback(record)`` once every position has its result."""
        self.on_resolved = callback

    def take_answered_waiters(self) -> list[tuple[asyncio.Future[AckResult], AckResult]]:
        """The waiters whose position has its result now, with it; they wait no more."""
        waiters, results = self.waiters, self.results
        if not waiters or results is None:
            return []
        answered: list[tuple[asyncio.Future[AckResult], AckResult]] = []
        left: list[tuple[int, asyncio.Future[AckResult]]] = []
        for index, future in waiters:
            result = results[index]
            if result is None:
                left.append((index, future))
            else:
                answered.append((future, result))
        self.waiters = left or None
        return answered

    def take_completion(
        self,
    ) -> tuple[list[asyncio.Future[None]], Callable[[AckRecord], None] | None]:
        """Once resolved: the whole-record waiters and the ``when_resolved`` callback, each
        handed out once; before that, nothing."""
        if self.unresolved:
            return [], None
        waiters, callback = self.completion_waiters or [], self.on_resolved
        self.completion_waiters = None
        self.on_resolved = None
        return waiters, callback

    def result(self, position: int) -> AckResult | None:
        """The result at ``position``, or ``None`` while it is unknown."""
        results = self.results
        return None if results is None else results[position]

    @property
    def resolved(self) -> bool:
        return self.unresolved == 0

    @property
    def wire_seconds(self) -> int:
        return 0 if self.operation is Operation.NACK else self.seconds

    @property
    def confirmation_kind(self) -> Operation:
        """The RPC it goes in and the confirmation that answers it: ACK or MODACK."""
        return Operation.ACK if self.operation is Operation.ACK else Operation.MODACK


# A settlement's place in the ledger: its record and its index in the record.
Position = tuple[AckRecord, int]


def settled_record(ack_ids: list[str], operation: Operation, result: AckResult) -> AckRecord:
    """A record that will not be sent, already resolved with ``result`` at every position."""
    record = AckRecord(operation, 0, ack_ids)
    record.results = [result] * len(ack_ids)
    record.unresolved = 0
    return record


@dataclass
class LedgerStatistics:
    acks: int = 0
    nacks: int = 0
    modacks: int = 0
    retried: int = 0  # ack ids resent after a transient failure
    unary_calls: int = 0
    stream_requests: int = 0
    # Final results of acks, by AcknowledgeStatus name (each ack counted once).
    ack_results: dict[str, int] = field(default_factory=dict)

    def count_submitted(self, operation: Operation, count: int) -> None:
        if operation is Operation.ACK:
            self.acks += count
        elif operation is Operation.NACK:
            self.nacks += count
        else:
            self.modacks += count

    def count_ack_results(self, status: AcknowledgeStatus, count: int) -> None:
        self.ack_results[status.name] = self.ack_results.get(status.name, 0) + count


class UnaryCall:
    """One Acknowledge or ModifyAckDeadline call and its retries: the positions not yet
    answered, and why the last attempt failed for each (reported if the deadline passes)."""

    __slots__ = ("ambiguous", "attempt", "kind", "last_reason", "positions", "seconds", "started")

    def __init__(
        self,
        kind: Operation,
        seconds: int,
        positions: list[Position],
        *,
        ambiguous: bool,
        started: float,
    ) -> None:
        self.kind = kind  # ACK (Acknowledge) or MODACK (ModifyAckDeadline)
        self.seconds = seconds
        self.positions = positions
        # An earlier attempt of these acks may have been applied (module docstring).
        self.ambiguous = ambiguous and kind is Operation.ACK
        self.attempt = 0
        self.started = started
        self.last_reason: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<UnaryCall {self.kind.value} {len(self.positions)} ids, attempt {self.attempt}>"

    def ack_ids(self) -> list[str]:
        return [record.ack_ids[index] for record, index in self.positions]


@dataclass(slots=True)
class Outgoing:
    """What :meth:`AckLedger.take` asks the sender to do now.

    Attributes:
        stream: requests to write on the stream, in order.
        unary: unary calls to make (each retried per :meth:`AckLedger.retry_delay`).
        resolved: records that got their results by being taken (without exactly-once,
            written is done); resolve their waiters once ``stream`` is written.
    """

    stream: list[pubsub_pb2.StreamingPullRequest] = field(default_factory=list)
    unary: list[UnaryCall] = field(default_factory=list)
    resolved: list[AckRecord] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.stream or self.unary or self.resolved)


class _Awaiting:
    """Records written on the stream that await one kind of confirmation, oldest first.

    Confirmations are matched against the oldest records' id lists (module docstring).
    ``index`` (ack id → positions still awaiting) exists only after a confirmation that
    did not match so, and is dropped once nothing awaits.
    """

    __slots__ = ("index", "records")

    def __init__(self) -> None:
        self.records: deque[AckRecord] = deque()
        self.index: dict[str, list[Position]] | None = None

    def __bool__(self) -> bool:
        self._collect()
        return bool(self.records)

    def add(self, record: AckRecord, now: float) -> None:
        record.sent_at = now
        record.stream_pending = len(record.ack_ids)
        record.stream_confirmed = None
        self.records.append(record)
        if self.index is not None:
            for position, ack_id in enumerate(record.ack_ids):
                self.index.setdefault(ack_id, []).append((record, position))

    def oldest_sent_at(self) -> float | None:
        self._collect()
        return self.records[0].sent_at if self.records else None

    def match_oldest(self, ack_ids: list[str]) -> tuple[list[AckRecord], int]:
        """Confirm the oldest records while ``ack_ids`` lists exactly their ids, in order.

        Returns the records confirmed whole and how many of ``ack_ids`` they took.
        """
        records = self.records
        matched: list[AckRecord] = []
        offset = 0
        total = len(ack_ids)
        while offset < total and records:
            head = records[0]
            if head.stream_pending == 0:
                records.popleft()
                continue
            size = len(head.ack_ids)
            if ack_ids[offset : offset + size] != head.ack_ids:
                break
            records.popleft()
            head.stream_pending = 0
            matched.append(head)
            offset += size
        return matched, offset

    def indexed(self) -> dict[str, list[Position]]:
        if self.index is None:
            index: dict[str, list[Position]] = {}
            for record in self.records:
                confirmed = record.stream_confirmed
                for position, ack_id in enumerate(record.ack_ids):
                    if confirmed is None or position not in confirmed:
                        index.setdefault(ack_id, []).append((record, position))
            self.index = index
        return self.index

    def confirm(self, ack_id: str) -> list[Position]:
        """The positions of ``ack_id`` awaiting a confirmation, now confirmed (index path)."""
        positions = self.indexed().pop(ack_id, None)
        if positions is None:
            return []
        for record, position in positions:
            if record.stream_confirmed is None:
                record.stream_confirmed = set()
            record.stream_confirmed.add(position)
            record.stream_pending -= 1
        return positions

    def take(self, sent_before: float | None = None) -> list[Position]:
        """Stop awaiting the records written before ``sent_before`` (all if ``None``);
        returns their positions not yet confirmed."""
        taken: list[Position] = []
        records = self.records
        while records and (sent_before is None or records[0].sent_at <= sent_before):
            record = records.popleft()
            if record.stream_pending == 0:
                continue
            confirmed = record.stream_confirmed
            for position, ack_id in enumerate(record.ack_ids):
                if confirmed is None or position not in confirmed:
                    taken.append((record, position))
                    if self.index is not None:
                        self._unindex(ack_id, record)
            record.stream_pending = 0
        self._collect()
        return taken

    def _unindex(self, ack_id: str, record: AckRecord) -> None:
        assert self.index is not None
        positions = self.index.get(ack_id)
        if positions is None:
            return
        positions[:] = [p for p in positions if p[0] is not record]
        if not positions:
            del self.index[ack_id]

    def _collect(self) -> None:
        records = self.records
        while records and records[0].stream_pending == 0:
            records.popleft()
        if self.index is not None and not self.index:
            # Nothing awaits any more: the next confirmations start on the fast path.
            self.index = None
            records.clear()


_ACK = (Operation.ACK, 0)
_NACK = (Operation.NACK, 0)


class AckLedger:
    """The acks, nacks and modacks of one subscription, from settlement to result.

    Args:
        retry: how transient failures are retried (:meth:`retry_delay`).
        exactly_once: whether results come from the server (else written is SUCCESS);
            a stream learns it from ``SubscriptionProperties``.
        stream_capable: ``False`` for a ledger with no stream (``pull()``): everything
            goes by unary call.
        on_pending: called when the ledger goes from nothing to send to something (the
            sender's wake-up), not once per settlement.
    """

    def __init__(
        self,
        retry: AckRetrySettings,
        *,
        exactly_once: bool = False,
        stream_capable: bool = True,
        on_pending: Callable[[], None] = lambda: None,
    ) -> None:
        self.retry = retry
        self.exactly_once = exactly_once
        self.mode = AckMode.UNKNOWN if stream_capable else AckMode.UNARY
        self.stats = LedgerStatistics()
        self._on_pending = on_pending
        self._pending: list[AckRecord] = []
        # The record each kind of single settlement is appended to until the next take.
        self._open: dict[tuple[Operation, int], AckRecord] = {}
        self._awaiting_acks = _Awaiting()
        self._awaiting_modacks = _Awaiting()
        self._unary: set[UnaryCall] = set()

    def __repr__(self) -> str:
        return (
            f"<AckLedger {self.mode.value if self.exactly_once else 'plain'} "
            f"pending={len(self._pending)} records, unary calls={len(self._unary)}>"
        )

    # ------------------------------------------------------------------ intake

    def submit(self, ack_id: str, operation: Operation, seconds: int = 0) -> Position:
        """One settlement; joins the open record of its kind (one wire request's worth)."""
        key = (
            _ACK if operation is Operation.ACK else _NACK if seconds == 0 else (operation, seconds)
        )
        record = self._open.get(key)
        if record is None or len(record.ack_ids) >= ACK_IDS_PER_REQUEST:
            record = self._open[key] = AckRecord(operation, seconds, [])
            self._queue(record)
        ack_ids = record.ack_ids
        ack_ids.append(ack_id)
        record.unresolved += 1
        if operation is Operation.ACK:  # count_submitted, written out: once per message
            self.stats.acks += 1
        else:
            self.stats.count_submitted(operation, 1)
        return record, len(ack_ids) - 1

    def submit_many(
        self, ack_ids: Sequence[str], operation: Operation, seconds: int = 0
    ) -> list[AckRecord]:
        """Settlements made together (a response's receipts, a batch): records of their own,
        of at most ``ACK_IDS_PER_REQUEST`` ids each, so their results arrive together."""
        records = [
            AckRecord(operation, seconds, list(ack_ids[start : start + ACK_IDS_PER_REQUEST]))
            for start in range(0, len(ack_ids), ACK_IDS_PER_REQUEST)
        ]
        for record in records:
            self._queue(record)
        self.stats.count_submitted(operation, len(ack_ids))
        return records

    def _queue(self, record: AckRecord) -> None:
        if not self._pending:
            self._on_pending()
        self._pending.append(record)

    def set_exactly_once(self, enabled: bool) -> None:
        """The subscription's exactly-once setting, as the stream reports it
        (``SubscriptionProperties``): results come from the server from now on, or not."""
        self.exactly_once = enabled

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    @property
    def uses_stream(self) -> bool:
        """Whether requests go on the stream (else by unary call; module docstring)."""
        return not self.exactly_once or self.mode is AckMode.STREAM

    @property
    def probing(self) -> bool:
        return self.exactly_once and self.mode is AckMode.UNKNOWN

    # ------------------------------------------------------------------ sending

    def take(self, now: float, *, stream_open: bool, stopping: bool) -> Outgoing:
        """What to send of the pending records, and where.

        Requests for the stream while none is open wait for the next one (ack ids stay
        valid across streams), unless the ledger is ``stopping``: no stream will come, and
        ack ids are not tied to one, so a unary call does. While the mode is unknown, the
        modacks with a deadline also go on the stream (module docstring).
        """
        outgoing = Outgoing()
        if not self._pending:
            return outgoing
        if self.uses_stream and not stream_open and not stopping:
            return outgoing  # wait for the next stream
        batch, self._pending = self._pending, []
        self._open.clear()
        if self.uses_stream and stream_open:
            outgoing.stream = self._stream_requests(batch, now)
            if not self.exactly_once:
                for record in batch:
                    if self._resolve_all(record, SUCCESS):
                        outgoing.resolved.append(record)
            return outgoing
        if self.probing and stream_open:
            probe = [r for r in batch if r.operation is Operation.MODACK]
            if probe:
                outgoing.stream = self._stream_requests(probe, now)
        outgoing.unary = self.plan_unary(
            [(record, index) for record in batch for index in range(len(record.ack_ids))],
            now,
            ambiguous=False,
        )
        return outgoing

    def _stream_requests(
        self, batch: list[AckRecord], now: float
    ) -> list[pubsub_pb2.StreamingPullRequest]:
        """The stream requests for ``batch``, recording what awaits a confirmation.

        Whole records go in a request as long as they fit (a record bigger than a request
        is split), in the order the confirmations will list them: acks in order, modacks
        grouped by deadline (the reference server confirms each deadline's group in turn).
        """
        acks = [r for r in batch if r.operation is Operation.ACK]
        groups: dict[int, list[AckRecord]] = {}
        for record in batch:
            if record.operation is not Operation.ACK:
                groups.setdefault(record.wire_seconds, []).append(record)
        modacks = [record for group in groups.values() for record in group]
        ack_chunks = _pack(acks)
        modack_chunks = _pack(modacks)
        requests = []
        for index in range(max(len(ack_chunks), len(modack_chunks))):
            request = pubsub_pb2.StreamingPullRequest()
            if index < len(ack_chunks):
                request.ack_ids.extend(ack_chunks[index][0])
            if index < len(modack_chunks):
                ids, seconds = modack_chunks[index]
                request.modify_deadline_ack_ids.extend(ids)
                request.modify_deadline_seconds.extend(seconds)
            requests.append(request)
        self.stats.stream_requests += len(requests)
        if self.exactly_once:
            for record in acks:
                self._awaiting_acks.add(record, now)
            for record in modacks:
                self._awaiting_modacks.add(record, now)
        return requests

    # ----------------------------------------------------------- stream answers

    def awaiting_confirmation(self) -> bool:
        return bool(self._awaiting_acks) or bool(self._awaiting_modacks)

    def on_confirmation(
        self, response: pubsub_pb2.StreamingPullResponse
    ) -> tuple[list[AckRecord], list[Position]]:
        """What a response's confirmations settle: ``(records with new results, positions
        to retry by unary call)``."""
        resolved: dict[AckRecord, None] = {}
        retry: list[Position] = []
        if response.HasField("acknowledge_confirmation"):
            c = response.acknowledge_confirmation
            self._confirm(
                self._awaiting_acks,
                c.ack_ids,
                c.invalid_ack_ids,
                c.unordered_ack_ids,
                c.temporary_failed_ack_ids,
                resolved,
                retry,
            )
        if response.HasField("modify_ack_deadline_confirmation"):
            m = response.modify_ack_deadline_confirmation
            self._confirm(
                self._awaiting_modacks,
                m.ack_ids,
                m.invalid_ack_ids,
                (),
                m.temporary_failed_ack_ids,
                resolved,
                retry,
            )
        return list(resolved), retry

    def _confirm(
        self,
        awaiting: _Awaiting,
        confirmed: Iterable[str],
        invalid: Sequence[str],
        unordered: Sequence[str],
        temporary_failed: Sequence[str],
        resolved: dict[AckRecord, None],
        retry: list[Position],
    ) -> None:
        if not (invalid or unordered or temporary_failed):
            # Only successes: the common case, matched against the oldest records.
            ack_ids = list(confirmed)
            if awaiting.index is None:
                matched, taken = awaiting.match_oldest(ack_ids)
                if matched:
                    self.mode = AckMode.STREAM
                for record in matched:
                    if self._resolve_all(record, SUCCESS):
                        resolved[record] = None
                if taken == len(ack_ids):
                    return
                ack_ids = ack_ids[taken:]
            final = dict.fromkeys(ack_ids, SUCCESS)
            later: dict[str, str] = {}
        else:
            outcome = classify_confirmation(
                [*confirmed, *invalid, *unordered, *temporary_failed],
                confirmed=confirmed,
                invalid=invalid,
                unordered=unordered,
                temporary_failed=temporary_failed,
            )
            final, later = dict(outcome.final), dict(outcome.retry)
        for ack_id, result in final.items():
            for record, index in awaiting.confirm(ack_id):
                self.mode = AckMode.STREAM
                if self._set(record, index, result):
                    resolved[record] = None
        for ack_id in later:
            for record, index in awaiting.confirm(ack_id):
                self.mode = AckMode.STREAM
                if record.result(index) is None:
                    retry.append((record, index))
        awaiting._collect()

    def overdue(self, now: float) -> list[Position]:
        """Positions written on the stream whose confirmation is late: resend them by unary
        call, as ambiguous.

        While the mode is UNKNOWN, a late confirmation means the server does not confirm
        on streams: the mode becomes UNARY, and everything awaiting is given up at once,
        not each after its own timeout.
        """
        sent = [
            at
            for at in (
                self._awaiting_acks.oldest_sent_at(),
                self._awaiting_modacks.oldest_sent_at(),
            )
            if at is not None
        ]
        limit = PROBE_TIMEOUT if self.mode is AckMode.UNKNOWN else CONFIRMATION_TIMEOUT
        if not sent or now - min(sent) < limit:
            return []
        if self.mode is AckMode.UNKNOWN:
            self.mode = AckMode.UNARY
            late = [*self._awaiting_acks.take(), *self._awaiting_modacks.take()]
        else:
            late = [
                *self._awaiting_acks.take(now - limit),
                *self._awaiting_modacks.take(now - limit),
            ]
        # Probe modacks already answered by their unary copy need nothing more.
        return [(record, index) for record, index in late if record.result(index) is None]

    def stream_lost(self) -> list[Position]:
        """The stream broke: what awaited a confirmation goes by unary call, as ambiguous."""
        lost = [*self._awaiting_acks.take(), *self._awaiting_modacks.take()]
        return [(record, index) for record, index in lost if record.result(index) is None]

    # ------------------------------------------------------------ unary answers

    def plan_unary(
        self, positions: Iterable[Position], now: float, *, ambiguous: bool
    ) -> list[UnaryCall]:
        """One call per RPC, deadline and ``ACK_IDS_PER_REQUEST`` ids; the calls are
        independent of each other and may all be in flight together."""
        groups: dict[tuple[Operation, int], list[Position]] = {}
        for position in positions:
            record = position[0]
            groups.setdefault((record.confirmation_kind, record.wire_seconds), []).append(position)
        calls = [
            UnaryCall(
                kind,
                seconds,
                group[start : start + ACK_IDS_PER_REQUEST],
                ambiguous=ambiguous,
                started=now,
            )
            for (kind, seconds), group in groups.items()
            for start in range(0, len(group), ACK_IDS_PER_REQUEST)
        ]
        self._unary.update(calls)
        return calls

    def apply_unary_answer(self, call: UnaryCall, error: RpcError | None) -> list[AckRecord]:
        """Resolve what one attempt of ``call`` settles; keep the rest in ``call.positions``.

        Returns the records that got results. An INVALID_ACK_ID for an ambiguous ack (an
        earlier attempt may have been applied) is reported OTHER, never a wrong
        INVALID_ACK_ID (module docstring). A retryable status for the whole call makes its
        acks ambiguous: it may have been applied before the failure (e.g.
        DEADLINE_EXCEEDED).
        """
        self.stats.unary_calls += 1
        call.attempt += 1
        outcome = classify_unary_error(call.ack_ids(), error, exactly_once=True)
        resolved: dict[AckRecord, None] = {}
        remaining: list[Position] = []
        for position in call.positions:
            record, index = position
            ack_id = record.ack_ids[index]
            result = outcome.final.get(ack_id)
            if result is None:
                if record.result(index) is None:  # not answered meanwhile (a probe's stream copy)
                    remaining.append(position)
                    call.last_reason[ack_id] = outcome.retry.get(ack_id, "transient failure")
                continue
            if result.status is AcknowledgeStatus.INVALID_ACK_ID and call.ambiguous:
                result = AckResult(
                    AcknowledgeStatus.OTHER,
                    "an earlier attempt may have been applied but its answer was "
                    f"lost; a retry found the id settled ({result.info})",
                )
            if self._set(record, index, result):
                resolved[record] = None
        if error is not None and not error.error_info and call.kind is Operation.ACK and remaining:
            call.ambiguous = True
        call.positions = remaining
        self.stats.retried += len(remaining)
        if not remaining:
            self._unary.discard(call)
        return list(resolved)

    def retry_delay(self, attempt: int, elapsed: float, rng: random.Random) -> float | None:
        """Seconds to wait before retry number ``attempt`` (1, 2, ...), or ``None``: give up.

        ``initial × multiplier^(attempt-1)``, capped at ``max_backoff``, plus up to one
        ``initial_backoff`` of jitter; none once ``deadline`` has passed since the first
        attempt (``AckRetrySettings``).
        """
        retry = self.retry
        if elapsed >= retry.deadline:
            return None
        backoff = min(retry.max_backoff, retry.initial_backoff * retry.multiplier ** (attempt - 1))
        return backoff + rng.uniform(0, retry.initial_backoff)

    def give_up(self, call: UnaryCall) -> list[AckRecord]:
        """The retry deadline has passed: what ``call`` still holds resolves OTHER."""
        resolved: dict[AckRecord, None] = {}
        for record, index in call.positions:
            reason = call.last_reason.get(record.ack_ids[index], "transient failure")
            result = AckResult(
                AcknowledgeStatus.OTHER,
                f"still failing after the {self.retry.deadline:g} s retry deadline: {reason}",
            )
            if self._set(record, index, result):
                resolved[record] = None
        call.positions = []
        self._unary.discard(call)
        return list(resolved)

    # ---------------------------------------------------------------- closing

    def fail_all(self, info: str) -> list[AckRecord]:
        """Resolve everything unresolved as OTHER (shutdown after the flush deadline, or a
        failed session); returns the records that got results."""
        result = AckResult(AcknowledgeStatus.OTHER, info)
        resolved: dict[AckRecord, None] = {}
        pending, self._pending = self._pending, []
        self._open.clear()
        for record in pending:
            if self._resolve_all(record, result):
                resolved[record] = None
        positions = [*self.stream_lost()]
        for call in self._unary:
            positions += call.positions
            call.positions = []
        self._unary.clear()
        for record, index in positions:
            if self._set(record, index, result):
                resolved[record] = None
        return list(resolved)

    def idle(self) -> bool:
        return not self._pending and not self.awaiting_confirmation() and not self._unary

    # ---------------------------------------------------------------- results

    def _set(self, record: AckRecord, index: int, result: AckResult) -> bool:
        """Record one result; the first result of a position stands."""
        results = record.results
        if results is None:
            results = record.results = [None] * len(record.ack_ids)
        if results[index] is not None:
            return False
        results[index] = result
        record.unresolved -= 1
        if record.operation is Operation.ACK:
            self.stats.count_ack_results(result.status, 1)
        return True

    def _resolve_all(self, record: AckRecord, result: AckResult) -> bool:
        """``result`` for every position still unresolved; whether there was any."""
        if record.unresolved == 0:
            return False
        results = record.results
        if results is None:
            record.results = [result] * len(record.ack_ids)
            newly = len(record.ack_ids)
        else:
            newly = 0
            for index, known in enumerate(results):
                if known is None:
                    results[index] = result
                    newly += 1
        record.unresolved = 0
        if record.operation is Operation.ACK:
            self.stats.count_ack_results(result.status, newly)
        return True


def _pack(records: list[AckRecord]) -> list[tuple[list[str], list[int]]]:
    """Ids (and their deadlines) per request: whole records while they fit in
    ``ACK_IDS_PER_REQUEST``; a record larger than that alone, split."""
    chunks: list[tuple[list[str], list[int]]] = []
    ids: list[str] = []
    seconds: list[int] = []
    for record in records:
        size = len(record.ack_ids)
        if ids and len(ids) + size > ACK_IDS_PER_REQUEST:
            chunks.append((ids, seconds))
            ids, seconds = [], []
        if size > ACK_IDS_PER_REQUEST:
            for start in range(0, size, ACK_IDS_PER_REQUEST):
                part = record.ack_ids[start : start + ACK_IDS_PER_REQUEST]
                chunks.append((part, [record.wire_seconds] * len(part)))
            continue
        ids += record.ack_ids
        seconds += [record.wire_seconds] * size
    if ids:
        chunks.append((ids, seconds))
    return chunks
