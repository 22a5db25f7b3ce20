"""The ack ledger: acks, nacks and modacks from settlement to result. No I/O, time passed in.

The ledger decides; the sender (``sender.py``) performs. Settlements are entered here,
the sender asks :meth:`AckLedger.take` what to send and where, writes the stream requests
or makes the unary calls, and hands every answer back (:meth:`AckLedger.on_confirmation`,
``AckLedger.unary.apply_answer``, :meth:`AckLedger.overdue`,
:meth:`AckLedger.stream_lost`). Each of those returns what to send next and the records
that got results; the sender resolves their waiters (``waiters.deliver``).

This room is the intake (settlements joining records, ``ack_records.py``) and the routing:
which records go on the stream and which by unary call, and when a server's silence means
it does not confirm on streams. The two routes are rooms of their own, each over the same
records and counters: ``stream_acks.py`` (requests written, confirmations matched against
whole records) and ``unary_acks.py`` (calls, their answers, retries and giving up).

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

What the stream lost or left unconfirmed past ``CONFIRMATION_TIMEOUT`` is resent by unary
call as *ambiguous*: it may have been applied without us hearing back, so a retry that
finds it invalid reports OTHER, never a wrong INVALID_ACK_ID (``unary_acks.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from eoclient._proto import pubsub_pb2
from eoclient.subscriber.ack_records import (
    ACK_IDS_PER_REQUEST,
    SUCCESS,
    AckRecord,
    LedgerStatistics,
    Operation,
    Position,
    resolve_all,
    set_result,
)
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.settings import AckRetrySettings
from eoclient.subscriber.stream_acks import StreamAcks
from eoclient.subscriber.unary_acks import UnaryAcks, UnaryCall

__all__ = ["CONFIRMATION_TIMEOUT", "PROBE_TIMEOUT", "AckLedger", "AckMode", "Outgoing"]

# How long the probe modacks sent on the stream wait for a confirmation before the
# ledger concludes the server does not confirm on streams. Our server answers within
# milliseconds; 2 s leaves a loaded CI machine ample room. Nothing waits for it: the
# same modacks went by unary call too.
PROBE_TIMEOUT = 2.0
# Sent on the stream under exactly-once, a request that has had no confirmation for this
# long (the server may leave confirmations out: proto comment) is resent by unary call,
# as an ambiguous attempt.
CONFIRMATION_TIMEOUT = 30.0


class AckMode(enum.Enum):
    UNKNOWN = "unknown"  # exactly-once, no confirmation seen yet
    STREAM = "stream"  # exactly-once results arrive as stream confirmations
    UNARY = "unary"  # exactly-once results come from unary calls


@dataclass(slots=True)
class Outgoing:
    """What :meth:`AckLedger.take` asks the sender to do now.

    Attributes:
        stream: requests to write on the stream, in order.
        unary: unary calls to make (each retried per ``AckLedger.retry``).
        resolved: records that got their results by being taken (without exactly-once,
            written is done); resolve their waiters once ``stream`` is written.
    """

    stream: list[pubsub_pb2.StreamingPullRequest] = field(default_factory=list)
    unary: list[UnaryCall] = field(default_factory=list)
    resolved: list[AckRecord] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.stream or self.unary or self.resolved)


_ACK = (Operation.ACK, 0)
_NACK = (Operation.NACK, 0)


class AckLedger:
    """The acks, nacks and modacks of one subscription, from settlement to result.

    Args:
        retry: how transient failures are retried (``_retrying.retry_delay``).
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
        # The two routes, over the same records and counters (module docstring). The unary
        # route is the sender's to drive: it plans, answers and gives up its calls.
        self._stream = StreamAcks(self.stats)
        self.unary = UnaryAcks(retry, self.stats)

    def __repr__(self) -> str:
        return (
            f"<AckLedger {self.mode.value if self.exactly_once else 'plain'} "
            f"pending={len(self._pending)} records, unary calls={len(self.unary)}>"
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
            exactly_once = self.exactly_once
            outgoing.stream = self._stream.requests(batch, now, await_confirmation=exactly_once)
            if not exactly_once:
                stats = self.stats
                for record in batch:
                    if resolve_all(record, SUCCESS, stats):
                        outgoing.resolved.append(record)
            return outgoing
        if self.probing and stream_open:
            probe = [r for r in batch if r.operation is Operation.MODACK]
            if probe:
                outgoing.stream = self._stream.requests(probe, now, await_confirmation=True)
        outgoing.unary = self.unary.plan_records(batch, now)
        return outgoing

    # ----------------------------------------------------------- stream answers

    def awaiting_confirmation(self) -> bool:
        return bool(self._stream)

    def on_confirmation(
        self, response: pubsub_pb2.StreamingPullResponse
    ) -> tuple[list[AckRecord], list[Position]]:
        """What a response's confirmations settle: ``(records with new results, positions
        to retry by unary call)``. The first confirmation of anything makes the mode
        STREAM."""
        resolved, retry, confirmed = self._stream.on_confirmation(response)
        if confirmed:
            self.mode = AckMode.STREAM
        return resolved, retry

    def overdue(self, now: float) -> list[Position]:
        """Positions written on the stream whose confirmation is late: resend them by unary
        call, as ambiguous.

        While the mode is UNKNOWN, a late confirmation means the server does not confirm
        on streams: the mode becomes UNARY, and everything awaiting is given up at once,
        not each after its own timeout.
        """
        oldest = self._stream.oldest_sent_at()
        limit = PROBE_TIMEOUT if self.mode is AckMode.UNKNOWN else CONFIRMATION_TIMEOUT
        if oldest is None or now - oldest < limit:
            return []
        if self.mode is AckMode.UNKNOWN:
            self.mode = AckMode.UNARY
            late = self._stream.take()
        else:
            late = self._stream.take(now - limit)
        # Probe modacks already answered by their unary copy need nothing more.
        return [(record, index) for record, index in late if record.result(index) is None]

    def stream_lost(self) -> list[Position]:
        """The stream broke: what awaited a confirmation goes by unary call, as ambiguous."""
        lost = self._stream.take()
        return [(record, index) for record, index in lost if record.result(index) is None]

    # ------------------------------------------------------------ unary answers

    # ---------------------------------------------------------------- closing

    def fail_all(self, info: str) -> list[AckRecord]:
        """Resolve everything unresolved as OTHER (shutdown after the flush deadline, or a
        failed session); returns the records that got results."""
        result = AckResult(AcknowledgeStatus.OTHER, info)
        stats = self.stats
        resolved: dict[AckRecord, None] = {}
        pending, self._pending = self._pending, []
        self._open.clear()
        for record in pending:
            if resolve_all(record, result, stats):
                resolved[record] = None
        positions = [*self.stream_lost(), *self.unary.take_all()]
        for record, index in positions:
            if set_result(record, index, result, stats):
                resolved[record] = None
        return list(resolved)

    def idle(self) -> bool:
        return not self._pending and not self._stream and not self.unary
