"""Acks on the stream: the requests written, and the confirmations matched against them.

The stream side of the ledger (``ledger.py`` decides what goes here). No I/O, time passed
in. Records are written whole, in the order the server confirms them (acks in order,
modacks grouped by deadline), and under exactly-once each written record waits here for
its confirmation (docs/protocol.md#streamingpull-confirmations).

Records, not ids: a confirmation is matched against the records in the order they were
sent. One that lists exactly the ids of the oldest records resolves them whole, with no
table of ids at all — the common case, one list comparison per record. Anything else
(failures listed, a server that confirms in another order or split differently) falls back
to an index of id → positions, built from what awaits and kept only while such
confirmations keep coming: once nothing awaits, the next confirmation starts on the fast
path again.

Whether a late or lost confirmation means "resend by unary call" or "this server does not
confirm" is the ledger's policy (its mode); this room only says what awaited since when,
and hands it over (:meth:`StreamAcks.take`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

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
from eoclient.subscriber.ack_results import classify_confirmation

__all__ = ["AwaitingConfirmation", "StreamAcks"]


class AwaitingConfirmation:
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
        self.collect()
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
        self.collect()
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
        self.collect()
        return taken

    def _unindex(self, ack_id: str, record: AckRecord) -> None:
        assert self.index is not None
        positions = self.index.get(ack_id)
        if positions is None:
            return
        positions[:] = [p for p in positions if p[0] is not record]
        if not positions:
            del self.index[ack_id]

    def collect(self) -> None:
        """Drop the confirmed records at the front (and the index once nothing awaits)."""
        records = self.records
        while records and records[0].stream_pending == 0:
            records.popleft()
        if self.index is not None and not self.index:
            # Nothing awaits any more: the next confirmations start on the fast path.
            self.index = None
            records.clear()


class StreamAcks:
    """The stream requests of the ledger's records and, under exactly-once, their
    confirmations: acks and modacks each await in an :class:`AwaitingConfirmation`.

    Args:
        stats: the ledger's counters (requests written, final ack results).
    """

    __slots__ = ("acks", "modacks", "stats")

    def __init__(self, stats: LedgerStatistics) -> None:
        self.stats = stats
        self.acks = AwaitingConfirmation()
        self.modacks = AwaitingConfirmation()

    def __bool__(self) -> bool:
        """Whether anything written awaits a confirmation."""
        return bool(self.acks) or bool(self.modacks)

    def requests(
        self, batch: list[AckRecord], now: float, *, await_confirmation: bool
    ) -> list[pubsub_pb2.StreamingPullRequest]:
        """The stream requests for ``batch``; with ``await_confirmation``, its records
        await their confirmations from ``now``.

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
        if await_confirmation:
            for record in acks:
                self.acks.add(record, now)
            for record in modacks:
                self.modacks.add(record, now)
        return requests

    def on_confirmation(
        self, response: pubsub_pb2.StreamingPullResponse
    ) -> tuple[list[AckRecord], list[Position], bool]:
        """What a response's confirmations settle: ``(records with new results, positions
        to retry by unary call, whether it confirmed anything that awaited)``."""
        resolved: dict[AckRecord, None] = {}
        retry: list[Position] = []
        confirmed = False
        if response.HasField("acknowledge_confirmation"):
            c = response.acknowledge_confirmation
            confirmed |= self._confirm(
                self.acks,
                c.ack_ids,
                c.invalid_ack_ids,
                c.unordered_ack_ids,
                c.temporary_failed_ack_ids,
                resolved,
                retry,
            )
        if response.HasField("modify_ack_deadline_confirmation"):
            m = response.modify_ack_deadline_confirmation
            confirmed |= self._confirm(
                self.modacks,
                m.ack_ids,
                m.invalid_ack_ids,
                (),
                m.temporary_failed_ack_ids,
                resolved,
                retry,
            )
        return list(resolved), retry, confirmed

    def _confirm(
        self,
        awaiting: AwaitingConfirmation,
        confirmed: Iterable[str],
        invalid: Sequence[str],
        unordered: Sequence[str],
        temporary_failed: Sequence[str],
        resolved: dict[AckRecord, None],
        retry: list[Position],
    ) -> bool:
        """Apply one confirmation; whether any of its ids awaited one."""
        stats = self.stats
        matched_any = False
        if not (invalid or unordered or temporary_failed):
            # Only successes: the common case, matched against the oldest records.
            ack_ids = list(confirmed)
            if awaiting.index is None:
                matched, taken = awaiting.match_oldest(ack_ids)
                matched_any = bool(matched)
                for record in matched:
                    if resolve_all(record, SUCCESS, stats):
                        resolved[record] = None
                if taken == len(ack_ids):
                    return matched_any
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
                matched_any = True
                if set_result(record, index, result, stats):
                    resolved[record] = None
        for ack_id in later:
            for record, index in awaiting.confirm(ack_id):
                matched_any = True
                if record.result(index) is None:
                    retry.append((record, index))
        awaiting.collect()
        return matched_any

    def oldest_sent_at(self) -> float | None:
        """When the oldest record still awaiting a confirmation was written."""
        sent = [
            at
            for at in (self.acks.oldest_sent_at(), self.modacks.oldest_sent_at())
            if at is not None
        ]
        return min(sent) if sent else None

    def take(self, sent_before: float | None = None) -> list[Position]:
        """Stop awaiting what was written before ``sent_before`` (everything if ``None``);
        its positions not yet confirmed, acks first."""
        return [*self.acks.take(sent_before), *self.modacks.take(sent_before)]


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
