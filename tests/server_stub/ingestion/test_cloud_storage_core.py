"""One topic's Cloud Storage ingestion, pure (ingestion/cloud_storage.py): which objects it
takes (glob, minimum creation time, not yet ingested; by creation order, a bounded number a
look), when it looks next, and its state; and the ledger that remembers what was ingested
(ingestion/ledger.py), across a reopening and a torn last line."""

from __future__ import annotations

from pathlib import Path

from eoclient.server_stub.ingestion.cloud_storage import (
    BUCKET_NOT_FOUND,
    MAX_OBJECTS_PER_POLL,
    CloudStorageIngestion,
    ListedObject,
    listing_prefix,
)
from eoclient.server_stub.ingestion.ledger import FILE_NAME, IngestedObjects
from eoclient.server_stub.ingestion.sources import ACTIVE, CloudStorageSource

TOPIC = "projects/p/topics/t"


def core(**settings: object) -> CloudStorageIngestion:
    source = CloudStorageSource(bucket="b", **settings)  # type: ignore[arg-type]
    return CloudStorageIngestion(TOPIC, source, now=100.0, poll_interval=1.0)


def names(objects: list[ListedObject]) -> list[str]:
    return [o.name for o in objects]


def test_selects_matching_objects_not_ingested_in_creation_order() -> None:
    ingestion = core(match_glob="**.txt", minimum_object_create_time=50.0)
    listed = [
        ListedObject("late.txt", 1, created=80.0),
        ListedObject("early.txt", 1, created=60.0),
        ListedObject("too-old.txt", 1, created=49.9),
        ListedObject("exactly.txt", 1, created=50.0),
        ListedObject("dir/nested.txt", 1, created=70.0),
        ListedObject("image.png", 1, created=65.0),
        ListedObject("done.txt", 7, created=55.0),
    ]
    done = {("b", "done.txt", 7)}
    batch, changed = ingestion.select(listed, done, now=100.0)
    assert names(batch) == ["exactly.txt", "early.txt", "dir/nested.txt", "late.txt"]
    assert not changed
    assert ingestion.state == ACTIVE
    assert ingestion.next_poll == 101.0
    # A new generation of an ingested object is a new object.
    again, _ = ingestion.select([ListedObject("done.txt", 8, created=90.0)], done, now=101.0)
    assert names(again) == ["done.txt"]


def test_a_bucket_of_many_objects_is_taken_a_batch_a_look() -> None:
    ingestion = core()
    listed = [ListedObject(f"o{i:04d}", 1, created=float(i)) for i in range(250)]
    batch, _ = ingestion.select(listed, set(), now=100.0)
    assert len(batch) == MAX_OBJECTS_PER_POLL
    assert ingestion.due(100.0)  # more remain: look again at once
    done = {o.key("b") for o in batch}
    second, _ = ingestion.select(listed, done, now=100.0)
    assert names(second)[0] == "o0100"


def test_state_follows_the_bucket() -> None:
    ingestion = core()
    assert ingestion.state == ACTIVE
    assert ingestion.due(100.0)
    assert ingestion.bucket_missing(100.0)
    assert ingestion.state == BUCKET_NOT_FOUND
    assert not ingestion.bucket_missing(101.0)  # no news the second time
    assert not ingestion.due(101.5)
    assert ingestion.due(102.0)
    _, changed = ingestion.select([], set(), now=102.0)
    assert changed
    assert ingestion.state == ACTIVE
    ingestion.wake(102.5)
    assert ingestion.due(102.5)


def test_counters() -> None:
    ingestion = core()
    listed = ListedObject("a.txt", 3, created=1.0, size=12)
    ingestion.ingested(listed, messages=4, size=12, now=5.0)
    ingestion.failed("schema_violation")
    counters = ingestion.counters
    assert (counters.objects, counters.messages, counters.bytes) == (1, 4, 12)
    assert counters.failures == {"schema_violation": 1}
    assert (counters.last_object, counters.last_ingest_time) == ("a.txt", 5.0)


def test_listing_prefix_is_the_literal_start_of_the_glob() -> None:
    assert listing_prefix("") == ""
    assert listing_prefix("logs/2024/*.txt") == "logs/2024/"
    assert listing_prefix("**.txt") == ""
    assert listing_prefix("a{b,c}") == "a"
    assert listing_prefix("exact.txt") == "exact.txt"


def test_ledger_remembers_across_reopening(tmp_path: Path) -> None:
    ledger = IngestedObjects.in_directory(tmp_path)
    ledger.add(TOPIC, ("b", "a.txt", 1))
    ledger.add(TOPIC, ("b", 'with\ttab and "quotes"', 2))
    ledger.add("projects/p/topics/other", ("b", "x", 1))
    ledger.forget("projects/p/topics/other")
    again = IngestedObjects.in_directory(tmp_path)
    assert again.of(TOPIC) == {("b", "a.txt", 1), ("b", 'with\ttab and "quotes"', 2)}
    assert again.of("projects/p/topics/other") == set()
    # A line cut short by a crash is ignored, the lines before it kept.
    with (tmp_path / FILE_NAME).open("ab") as out:
        out.write(b'{"topic":"projects/p/topics/t","bucket":"b","obj')
    assert IngestedObjects.in_directory(tmp_path).of(TOPIC) == again.of(TOPIC)


def test_ledger_without_a_directory_is_memory_only(tmp_path: Path) -> None:
    ledger = IngestedObjects.in_directory(None)
    ledger.add(TOPIC, ("b", "a", 1))
    assert ledger.of(TOPIC) == {("b", "a", 1)}
    assert list(tmp_path.iterdir()) == []
