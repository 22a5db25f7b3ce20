"""The source's journal files (no Spark needed: pyarrow only)."""

from __future__ import annotations

from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from eoclient.spark._journal import JOURNAL_SCHEMA, Journal, read_table  # noqa: E402


def _rows(start: int, count: int) -> object:
    return pa.Table.from_pydict(
        {
            "message_id": [str(1000 + i) for i in range(start, start + count)],
            "data": [b"x"] * count,
            "attributes": [[("k", "v")]] * count,
            "ordering_key": [""] * count,
            "publish_time": [1_700_000_000_000_000] * count,
            "delivery_attempt": [1] * count,
            "seq": list(range(start, start + count)),
            "ack_id": [f"ack-{i}" for i in range(start, start + count)],
        },
        schema=JOURNAL_SCHEMA,
    )


def test_batches_are_written_whole_and_found_by_offset(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    first = journal.write(0, _rows(0, 3))
    second = journal.write(3, _rows(3, 2))
    assert (first.start, first.end, second.start, second.end) == (0, 3, 3, 5)
    assert journal.starting_at(3) == second
    assert journal.starting_at(4) is None
    assert read_table(str(second.path)).column("message_id").to_pylist() == ["1003", "1004"]
    assert journal.covering(1, 5) == [first, second]
    assert not list((tmp_path / "j").glob(".*tmp"))  # no temporary file left behind


def test_a_missing_range_is_an_error_and_pruning_keeps_uncommitted(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.write(0, _rows(0, 3))
    later = journal.write(3, _rows(3, 2))
    journal.prune(3)
    assert journal.files() == [later]
    with pytest.raises(RuntimeError, match=r"does not hold seq 0\.\.5"):
        journal.covering(0, 5)


def test_epoch_and_state_persist(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    assert not journal.has_history()
    epoch = journal.epoch()
    journal.save_state({"pending": {"7": 1.0}})
    again = Journal(tmp_path / "j")
    assert again.epoch() == epoch
    assert again.load_state() == {"pending": {"7": 1.0}}
    assert again.has_history()
