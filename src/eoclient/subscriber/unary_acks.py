"""Acks by unary call: Acknowledge / ModifyAckDeadline calls, their answers, and when to
retry or give up. No I/O, time passed in; the sender (``sender.py``) makes the calls.

The unary side of the ledger (``ledger.py`` decides what goes here): exactly-once acks on a
server that gives no stream confirmations (docs/protocol.md#streamingpull-confirmations),
everything while the ledger is still learning whether it does, what the stream lost or left
unconfirmed, and everything once a session stops. A call's INVALID_ARGUMENT + ErrorInfo
says which ids failed and how (docs/protocol.md#exactly-once-error-details), read by the
one classifier in ``ack_results``
(docs/architecture.md#exactly-once-results-are-classified-in-one-function).

Transient failures are retried with the SDK's one backoff (``_retrying.retry_delay``, which
the sender asks) until ``AckRetrySettings.deadline``, then reported OTHER
(docs/protocol.md#exactly-once-retries).
An ack whose first attempt may have been applied without us hearing back (the stream
broke, a confirmation never came, or a call failed with a retryable code) is *ambiguous*:
if a retry then finds the id invalid, that may be because the first attempt succeeded, so
it is reported OTHER (may be redelivered) rather than a wrong INVALID_ACK_ID — never
SUCCESS, which would promise no redelivery.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from operator import itemgetter

from eoclient.errors import RpcError
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
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult, classify_unary_error
from eoclient.subscriber.settings import AckRetrySettings

__all__ = ["UnaryAcks", "UnaryCall"]


# A run of one record's positions, ``start`` to ``stop``: what a call holds while it holds
# whole stretches of records (as planned from the ledger's records), so that a bulk call
# makes no Python object per id until an answer needs to tell its ids apart.
Run = tuple[AckRecord, int, int]


class UnaryCall:
    """One Acknowledge or ModifyAckDeadline call and its retries: the positions not yet
    answered, and why the last attempt failed for each (reported if the deadline passes)."""

    __slots__ = (
        "_positions",
        "_runs",
        "ambiguous",
        "attempt",
        "kind",
        "last_reason",
        "seconds",
        "started",
    )

    def __init__(
        self,
        kind: Operation,
        seconds: int,
        positions: list[Position] | None = None,
        *,
        runs: list[Run] | None = None,
        ambiguous: bool,
        started: float,
    ) -> None:
        self.kind = kind  # ACK (Acknowledge) or MODACK (ModifyAckDeadline)
        self.seconds = seconds
        self._positions = positions if runs is None else None
        self._runs = runs
        # An earlier attempt of these acks may have been applied (module docstring).
        self.ambiguous = ambiguous and kind is Operation.ACK
        self.attempt = 0
        self.started = started
        self.last_reason: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<UnaryCall {self.kind.value} {len(self)} ids, attempt {self.attempt}>"

    def __len__(self) -> int:
        """Positions not yet answered."""
        if self._runs is not None:
            return sum(stop - start for _, start, stop in self._runs)
        return len(self._positions or ())

    @property
    def positions(self) -> list[Position]:
        """The positions not yet answered, in order."""
        if self._positions is None:
            runs, self._runs = self._runs or [], None
            self._positions = [(r, i) for r, start, stop in runs for i in range(start, stop)]
        return self._positions

    @positions.setter
    def positions(self, positions: list[Position]) -> None:
        self._positions, self._runs = positions, None

    def ack_ids(self) -> list[str]:
        if self._runs is not None:
            ids: list[str] = []
            for record, start, stop in self._runs:
                ids += record.ack_ids[start:stop]
            return ids
        return [record.ack_ids[index] for record, index in self.positions]

    def whole_records(self) -> list[AckRecord] | None:
        """The records of the call if it holds every position of each and none of them has
        a result yet; else ``None``."""
        if self._runs is not None:
            for record, start, stop in self._runs:
                if start or stop != len(record.ack_ids) or record.results is not None:
                    return None
            return [record for record, _, _ in self._runs]
        counts = Counter(map(itemgetter(0), self.positions))
        for record, count in counts.items():
            if count != len(record.ack_ids) or record.results is not None:
                return None
        return list(counts)


class UnaryAcks:
    """The unary calls in flight (until every position of a call has its result).

    Args:
        retry: how transient failures are retried (the deadline :meth:`give_up` reports).
        stats: the ledger's counters (calls made, ids retried, final ack results).
    """

    __slots__ = ("calls", "retry", "stats")

    def __init__(self, retry: AckRetrySettings, stats: LedgerStatistics) -> None:
        self.retry = retry
        self.stats = stats
        self.calls: set[UnaryCall] = set()

    def __bool__(self) -> bool:
        return bool(self.calls)

    def __len__(self) -> int:
        return len(self.calls)

    def plan(
        self, positions: Iterable[Position], now: float, *, ambiguous: bool
    ) -> list[UnaryCall]:
        """One call per RPC, deadline and ``ACK_IDS_PER_REQUEST`` ids; the calls are
        independent of each other and may all be in flight together."""
        groups: dict[tuple[Operation, int], list[Position]] = {}
        last: AckRecord | None = None
        group: list[Position] = []
        for position in positions:
            record = position[0]
            if record is not last:  # positions come in runs of one record
                last = record
                group = groups.setdefault((record.confirmation_kind, record.wire_seconds), [])
            group.append(position)
        return self._calls(groups, now, ambiguous=ambiguous)

    def plan_records(self, records: Iterable[AckRecord], now: float) -> list[UnaryCall]:
        """:meth:`plan` for every position of ``records`` (what the ledger takes), their
        positions made without a Python step per id."""
        groups: dict[tuple[Operation, int], list[AckRecord]] = {}
        for record in records:
            groups.setdefault((record.confirmation_kind, record.wire_seconds), []).append(record)
        calls: list[UnaryCall] = []
        for (kind, seconds), members in groups.items():
            runs: list[Run] = []
            size = 0
            for record in members:
                start, length = 0, len(record.ack_ids)
                while start < length:
                    take = min(length - start, ACK_IDS_PER_REQUEST - size)
                    runs.append((record, start, start + take))
                    size += take
                    start += take
                    if size == ACK_IDS_PER_REQUEST:
                        calls.append(
                            UnaryCall(kind, seconds, runs=runs, ambiguous=False, started=now)
                        )
                        runs, size = [], 0
            if runs:
                calls.append(UnaryCall(kind, seconds, runs=runs, ambiguous=False, started=now))
        self.calls.update(calls)
        return calls

    def _calls(
        self, groups: dict[tuple[Operation, int], list[Position]], now: float, *, ambiguous: bool
    ) -> list[UnaryCall]:
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
        self.calls.update(calls)
        return calls

    def apply_answer(self, call: UnaryCall, error: RpcError | None) -> list[AckRecord]:
        """Resolve what one attempt of ``call`` settles; keep the rest in ``call.positions``.

        Returns the records that got results. An INVALID_ACK_ID for an ambiguous ack (an
        earlier attempt may have been applied) is reported OTHER, never a wrong
        INVALID_ACK_ID (module docstring). A retryable status for the whole call makes its
        acks ambiguous: it may have been applied before the failure (e.g.
        DEADLINE_EXCEEDED).
        """
        stats = self.stats
        stats.unary_calls += 1
        call.attempt += 1
        if error is None and (applied := call.whole_records()) is not None:
            # Every id applied, and the call holds whole records no result reached yet
            # (a bulk settlement, the common case): one shared result list per record.
            for record in applied:
                resolve_all(record, SUCCESS, stats)
            call.positions = []
            self.calls.discard(call)
            return applied
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
            if set_result(record, index, result, stats):
                resolved[record] = None
        if error is not None and not error.error_info and call.kind is Operation.ACK and remaining:
            call.ambiguous = True
        call.positions = remaining
        stats.retried += len(remaining)
        if not remaining:
            self.calls.discard(call)
        return list(resolved)

    def give_up(self, call: UnaryCall) -> list[AckRecord]:
        """The retry deadline has passed: what ``call`` still holds resolves OTHER."""
        resolved: dict[AckRecord, None] = {}
        for record, index in call.positions:
            reason = call.last_reason.get(record.ack_ids[index], "transient failure")
            result = AckResult(
                AcknowledgeStatus.OTHER,
                f"still failing after the {self.retry.deadline:g} s retry deadline: {reason}",
            )
            if set_result(record, index, result, self.stats):
                resolved[record] = None
        call.positions = []
        self.calls.discard(call)
        return list(resolved)

    def take_all(self) -> list[Position]:
        """Forget every call in flight (the session is over); what they still held."""
        positions: list[Position] = []
        for call in self.calls:
            positions += call.positions
            call.positions = []
        self.calls.clear()
        return positions
