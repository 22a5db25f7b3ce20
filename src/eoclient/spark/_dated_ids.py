"""Which of a pull's message ids the journal already holds, compared in Arrow.

A read task checks what it pulled against the parts of the batches it settles, the pending
ids and the other parts of its own batch (``_reader._claim``): ~100,000 journaled ids
against a part's ~50,000. As Python sets that would cost more than pulling the messages,
so the ids stay Arrow arrays and only the ids found become Python strings.

A message keeps its publish time on every delivery (the service sets it once, at publish),
so a journaled id can equal a pulled one only where their publish times are equal too
(docs/protocol.md#spark-redeliveries-by-message-id). A part's rows carry their publish
times; where both sides have them, only the rows inside the other side's range of times are
compared. When messages come in publish order, consecutive batches overlap in a few rows
at most, and the check of a part against the previous batch compares next to nothing
instead of building a hash table over the whole part (11 to 34 ms of CPU a 50,000-message
part, measured under a running Spark query on two cores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class DatedIds:
    """Message ids (``string``) and, where known, each one's publish time.

    ``publish_times`` (``timestamp[us, UTC]``, the journal's precision) is row for row with
    ``ids``; a null time is a row whose time is not known (a part's ack-only rows), and
    ``None`` means no time is known (a pending file keeps ids only, a probe's lookup has
    none at hand).
    """

    ids: pa.Array
    publish_times: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.ids)


def ids_among(journaled: Sequence[DatedIds], candidates: DatedIds) -> set[str]:
    """The ids of ``candidates`` found in any of ``journaled``.

    The hash table is built over the candidates (a pull's ids) and the journaled ids only
    scanned: the other way round costs ten times more.
    """
    if not len(candidates) or not journaled:
        return set()
    times = candidates.publish_times
    undated_candidates = None
    candidate_range = None
    if times is not None:
        if times.null_count:
            undated_candidates = candidates.ids.filter(pc.is_null(times))
        candidate_range = pc.min_max(times)  # nulls skipped
    found: set[str] = set()
    for entry in journaled:
        if not len(entry):
            continue
        if entry.publish_times is None or candidate_range is None:
            found.update(_found(entry.ids, candidates.ids))
            continue
        # A row of either side without a time is compared with all of the other side; a
        # dated row only with the dated rows of the other side's range, and only if it
        # lies in theirs.
        if entry.publish_times.null_count:
            undated = pc.is_null(entry.publish_times)
            found.update(_found(entry.ids.filter(undated), candidates.ids))
        if undated_candidates is not None:
            found.update(_found(entry.ids, undated_candidates))
        found.update(_found_dated(entry, candidates, candidate_range))
    return found


def _found_dated(
    entry: DatedIds, candidates: DatedIds, candidate_range: pa.StructScalar
) -> list[str]:
    assert entry.publish_times is not None
    assert candidates.publish_times is not None
    entry_range = pc.min_max(entry.publish_times)  # nulls skipped
    if not entry_range["min"].is_valid or not candidate_range["min"].is_valid:
        return []
    rows = entry.ids.filter(_within(entry.publish_times, candidate_range))
    if not len(rows):
        return []
    return _found(rows, candidates.ids.filter(_within(candidates.publish_times, entry_range)))


def _within(times: pa.Array, bounds: pa.StructScalar) -> pa.Array:
    """Which ``times`` lie within ``bounds`` (a ``min_max`` result), ends included; a null
    time does not."""
    inside = pc.and_(pc.greater_equal(times, bounds["min"]), pc.less_equal(times, bounds["max"]))
    return pc.fill_null(inside, False)


def _found(rows: pa.Array, wanted: pa.Array) -> list[str]:
    if not len(rows) or not len(wanted):
        return []
    found: list[str] = rows.filter(pc.is_in(rows, value_set=wanted)).to_pylist()
    return found
