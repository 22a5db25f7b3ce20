"""Which of a pull's message ids the journal holds: by id, narrowed by publish time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from eoclient.spark._dated_ids import DatedIds, ids_among  # noqa: E402

TIME = pa.timestamp("us", tz="UTC")


def _dated(rows: list[tuple[str, int | None]]) -> DatedIds:
    return DatedIds(
        pa.array([message_id for message_id, _ in rows], pa.string()),
        pa.array([published for _, published in rows], TIME),
    )


def test_ids_among_finds_candidates_in_any_entry() -> None:
    journaled = [
        DatedIds(pa.array(["a", "b"])),
        DatedIds(pa.array([], pa.string())),
        DatedIds(pa.array(["c", "d", "b"])),
    ]
    assert ids_among(journaled, DatedIds(pa.array(["b", "d", "x"]))) == {"b", "d"}
    assert ids_among(journaled, DatedIds(pa.array([], pa.string()))) == set()
    assert ids_among([], DatedIds(pa.array(["a"]))) == set()


def test_dated_rows_are_compared_where_the_times_overlap() -> None:
    earlier = _dated([("a", 10), ("b", 20), ("c", 30)])
    # "c" again, at its own time: found; the others are later than all of ``earlier``.
    assert ids_among([earlier], _dated([("c", 30), ("d", 40), ("e", 50)])) == {"c"}
    assert ids_among([earlier], _dated([("d", 40), ("e", 50)])) == set()


def test_rows_without_a_time_are_compared_with_everything() -> None:
    # A part's ack-only rows carry no time; a pending file carries none at all.
    part = _dated([("a", 10), ("late", None)])
    pending = DatedIds(pa.array(["p"]))
    pulled = _dated([("late", 99), ("p", 98), ("q", 97)])
    assert ids_among([part, pending], pulled) == {"late", "p"}
    # A candidate without a time (none comes from a pull; still compared).
    assert ids_among([part], _dated([("a", None), ("z", 5)])) == {"a"}


# One message id, one publish time (a redelivery keeps it), or none where a row has none.
_MESSAGES = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3), st.integers(0, 40), min_size=0, max_size=30
)


@given(
    _MESSAGES,
    st.lists(st.tuples(st.integers(0, 29), st.booleans()), max_size=40),
    st.lists(st.lists(st.tuples(st.integers(0, 29), st.booleans()), max_size=20), max_size=4),
    st.booleans(),
)
def test_narrowing_by_time_finds_what_comparing_every_id_finds(
    messages: dict[str, int],
    pulled: list[tuple[int, bool]],
    parts: list[list[tuple[int, bool]]],
    pending: bool,
) -> None:
    names = sorted(messages)
    if not names:
        return

    def rows(picks: list[tuple[int, bool]]) -> list[tuple[str, int | None]]:
        chosen = [names[pick % len(names)] for pick, _ in picks]
        return [
            (name, messages[name] if dated else None)
            for name, (_, dated) in zip(chosen, picks, strict=True)
        ]

    journaled = [_dated(rows(part)) for part in parts]
    if pending:
        journaled.append(DatedIds(pa.array(names[::2], pa.string())))
    candidates = _dated(rows(pulled))
    undated = [DatedIds(entry.ids) for entry in journaled]
    expected = set(candidates.ids.to_pylist()) & {
        message_id for entry in journaled for message_id in entry.ids.to_pylist()
    }
    assert ids_among(undated, DatedIds(candidates.ids)) == expected
    assert ids_among(journaled, candidates) == expected
