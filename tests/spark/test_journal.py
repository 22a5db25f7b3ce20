"""The source's journal and lease logs (no Spark needed: pyarrow only)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from eoclient.spark._journal import (  # noqa: E402
    Journal,
    PartFile,
    Plan,
    emitted_rows,
    encode_part,
    local_path,
)
from eoclient.spark._lease_log import LeaseLog, read_logs  # noqa: E402
from eoclient.spark._schema import ROW_SCHEMA, WIRE_SCHEMA  # noqa: E402


def _rows(start: int, count: int) -> object:
    return pa.Table.from_pydict(
        {
            "message_id": [str(1000 + i) for i in range(start, start + count)],
            "data": [b"x"] * count,
            "attributes": [[("k", "v")]] * count,
            "ordering_key": [""] * count,
            "publish_time": [1_700_000_000_000_000] * count,
            "delivery_attempt": [1] * count,
            "ack_id": [f"ack-{i}" for i in range(start, start + count)],
        },
        schema=WIRE_SCHEMA,
    )


def _journal(tmp_path: Path) -> Journal:
    journal = Journal(tmp_path / "j")
    journal.create()
    journal.write_plan(0, Plan((5, 5), probe=True, settles=(), cutoff_ns=None, ack_deadline=10.0))
    return journal


def test_a_part_holds_its_emitted_rows_then_ack_only_ones(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    ack_only = (
        _rows(10, 2)
        .drop_columns(["data"])
        .append_column("data", pa.nulls(2, pa.binary()))
        .select(WIRE_SCHEMA.names)
    )
    assert journal.claim(0, 1, encode_part(_rows(0, 3), ack_only, 123.5))
    part = journal.read_part(0, 1)
    assert (part.emitted, part.leased_until, part.table.num_rows) == (3, 123.5, 5)
    assert part.table.column("ack_id").to_pylist()[3:] == ["ack-10", "ack-11"]
    rows = emitted_rows(part)
    assert rows.schema == ROW_SCHEMA
    assert rows.column("message_id").to_pylist() == ["1000", "1001", "1002"]
    [journaled] = journal.message_ids(0)
    assert journaled.ids.to_pylist() == ["1000", "1001", "1002", "1010", "1011"]
    assert journaled.publish_times is not None
    assert journaled.publish_times.equals(part.table.column("publish_time").combine_chunks())
    assert journal.message_ids(0, except_part=1) == []
    assert not list(journal.batch_dir(0).glob(".*tmp"))  # no temporary file left behind


def test_a_part_written_straight_to_its_file_has_the_bytes_encode_part_builds(
    tmp_path: Path,
) -> None:
    journal = _journal(tmp_path)
    rows, ack_only = _rows(0, 3), _rows(10, 2)
    assert journal.claim(0, 1, PartFile(rows, ack_only, 123.5))
    assert journal.part_path(0, 1).read_bytes() == encode_part(rows, ack_only, 123.5)
    assert not journal.claim(0, 1, PartFile(_rows(20, 1), ack_only, 1.0))  # link: first wins
    assert journal.part_path(0, 1).read_bytes() == encode_part(rows, ack_only, 123.5)
    assert not list(journal.batch_dir(0).glob(".*tmp"))


def test_only_one_of_racing_claims_wins(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def attempt(n: int) -> None:
        data = encode_part(_rows(n * 10, 3), WIRE_SCHEMA.empty_table(), 0.0)
        barrier.wait()
        if journal.claim(0, 1, data):
            wins.append(n)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (winner,) = wins
    assert journal.read_part(0, 1).table.column("ack_id").to_pylist()[0] == f"ack-{winner * 10}"


def test_plans_state_and_pruning(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    assert journal.plan(0) == Plan((5, 5), True, (), None, 10.0)
    assert journal.plan(0).reads
    assert not Plan((), False, (0,), None, 10.0).reads  # a batch that only settles
    assert journal.plan(1) is None
    assert journal.batches() == [0]
    epoch = journal.epoch()
    journal.save_state({"settled": 1})
    again = Journal(tmp_path / "j")
    assert again.epoch() == epoch
    assert again.load_state() == {"settled": 1}
    journal.prune(0)
    assert journal.batches() == []
    assert journal.part_indexes(0) == []
    assert journal.message_ids(0) == []


def test_a_plan_of_the_version_whose_driver_acked_reads_as_probe_and_no_settles(
    tmp_path: Path,
) -> None:
    old = (
        b'{"quotas": [3], "cutoff_ns": null, "ack_deadline": 10.0, "pending": ["p"], '
        b'"unsettled": [4]}'
    )
    assert Plan.from_json(old) == Plan((3,), True, (), None, 10.0)


def test_pending_ids_settled_marks_and_logs_per_part(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    assert journal.pending_ids() == []
    journal.write_pending(0, 1, ["m1", "m2"])
    journal.write_pending(0, 2, ["m3"])
    pending = journal.pending_ids()
    assert sorted(m for c in pending for m in c.ids.to_pylist()) == ["m1", "m2", "m3"]
    assert all(c.publish_times is None for c in pending)
    journal.expire_pending(older_than=0.0)
    assert len(journal.pending_files()) == 2
    journal.expire_pending(older_than=time.time() + 1)
    assert journal.pending_files() == []

    assert journal.claim(0, 1, encode_part(_rows(0, 3), WIRE_SCHEMA.empty_table(), 0.0))
    journal.mark_settled(0, 1)
    assert journal.settled_path(0, 1).exists()
    assert journal.part_indexes(0) == [1]  # a mark is not a part
    logs = [journal.attempt_log(0, 1), journal.attempt_log(0, 2), journal.attempt_log(0, 1)]
    for log in logs:
        log.write_text("")
    assert journal.attempt_logs(0, 1) == sorted([logs[0], logs[2]])
    assert journal.attempt_logs(0) == sorted(logs)
    journal.prune(0)
    journal.mark_settled(0, 1)  # pruned meanwhile: nothing to mark
    assert not journal.batch_dir(0).exists()


def test_a_file_url_is_a_local_path() -> None:
    assert local_path("file:///data/j") == Path("/data/j")
    assert local_path("/data/j") == Path("/data/j")


def test_lease_logs_say_what_was_answered_and_what_was_in_flight(tmp_path: Path) -> None:
    done = LeaseLog(tmp_path / "a.log")
    call = done.sent()
    done.answered(call, ["a1", "a2"])
    done.sent()  # never answered
    done.close(delete=False)
    torn = tmp_path / "b.log"
    torn.write_text('["sent",1,5.0]\n["answered",1,["b1"]]\n["answ')  # killed mid-write
    record = read_logs([tmp_path / "a.log", torn, tmp_path / "missing.log"])
    assert sorted(record.answered) == ["a1", "a2", "b1"]
    assert len(record.unanswered_since) == 1
    assert len(record.paths) == 2
    # Only the calls in flight, not the ack ids (the driver's view of read tasks' logs).
    calls = read_logs([tmp_path / "a.log", torn], ack_ids=False)
    assert calls.answered == []
    assert calls.unanswered_since == record.unanswered_since
    torn_answer = tmp_path / "d.log"
    torn_answer.write_text('["sent",1,5.0]\n["answered",1,["d1","d')  # killed mid-write
    assert read_logs([torn_answer], ack_ids=False).unanswered_since == [5.0]
    # Ack ids a joined line cannot hold go as JSON; a log of the earlier version (every
    # answer in JSON) reads the same.
    mixed = LeaseLog(tmp_path / "e.log")
    odd = ["e 1", "é2", "e\n3", ""]
    for ack_ids in (["e0", ""], odd, []):
        mixed.answered(mixed.sent(), ack_ids)
    mixed.close(delete=False)
    lines = (tmp_path / "e.log").read_text().split("\n")
    assert lines[1] == "answered 1 3 e0 "
    assert lines[3].startswith('["answered",2,')
    assert read_logs([tmp_path / "e.log"]).answered == ["e0", "", *odd]
    assert read_logs([tmp_path / "e.log"], ack_ids=False).unanswered_since == []
    torn_joined = tmp_path / "f.log"
    torn_joined.write_text('["sent",1,5.0]\n["sent",2,6.0]\nanswered 1 5 f1 f2\nanswered 2 5 f3 f')
    assert read_logs([torn_joined]).answered == ["f1", "f2"]
    assert read_logs([torn_joined], ack_ids=False).unanswered_since == [6.0]
    finished = LeaseLog(tmp_path / "c.log")
    finished.sent()
    finished.close(delete=True)
    assert not (tmp_path / "c.log").exists()
