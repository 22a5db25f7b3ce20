"""The BigQuery subscription writer against a real DuckDB file (server_stub/bigquery/):
use_table_schema, write_metadata, the plain data column, NOT_FOUND and SCHEMA_MISMATCH,
one transaction per batch; rows checked with SQL."""

from __future__ import annotations

import base64
import json
import threading

import pytest

from eoclient.server_stub.bigquery import (
    ACTIVE,
    NOT_FOUND,
    SCHEMA_MISMATCH,
    BigQueryStandIn,
    BigQueryTarget,
)
from eoclient.server_stub.bigquery.rows import ORDERING_KEY_ATTRIBUTE

from .conftest import make_table, message, rows

SUB = "projects/p/subscriptions/orders-to-bq"
ORDERS = [
    {"name": "id", "type": "INT64", "mode": "REQUIRED"},
    {"name": "customer", "type": "STRING"},
    {"name": "amount", "type": "NUMERIC"},
    {"name": "tags", "type": "STRING", "mode": "REPEATED"},
    {
        "name": "address",
        "type": "RECORD",
        "fields": [{"name": "city", "type": "STRING"}, {"name": "zip", "type": "INTEGER"}],
    },
    {"name": "details", "type": "JSON"},
    {"name": "placed", "type": "TIMESTAMP"},
]


def order(i: int) -> dict[str, object]:
    return {
        "id": i,
        "customer": f"c{i % 7}",
        "amount": f"{i}.25",
        "tags": ["new", "web"] if i % 2 else [],
        "address": {"city": "Lyon", "zip": 69000 + i % 10},
        "details": {"lines": i % 3},
        "placed": "2024-05-01T10:00:00Z",
    }


def test_2000_json_messages_become_2000_rows_and_one_with_an_unknown_field_does_not(
    standin: BigQueryStandIn,
) -> None:
    make_table(standin, "orders", ORDERS)
    target = BigQueryTarget(SUB, "p.ds.orders", use_table_schema=True)
    assert standin.check(target).state == ACTIVE
    batch = [message(str(i), order(i)) for i in range(2000)]
    batch.insert(1000, message("extra", {**order(5000), "coupon": "X"}))
    result = standin.write(target, batch)
    assert len(result.written) == 2000
    assert "extra" not in result.written
    assert "coupon" in result.unwritable["extra"]
    assert result.state == SCHEMA_MISMATCH  # a message stays in the backlog
    assert "drop_unknown_fields" in result.reason
    assert rows(standin, "SELECT count(*), count(DISTINCT id), max(id) FROM ds.orders") == [
        (2000, 2000, 1999)
    ]
    assert rows(
        standin,
        "SELECT customer, amount, tags, address, details, placed FROM ds.orders WHERE id = 7",
    ) == [
        (
            "c0",
            "7.250000000",
            ["new", "web"],
            {"city": "Lyon", "zip": 69007},
            '{"lines":1}',
            "2024-05-01T10:00:00+00:00",
        )
    ]
    assert rows(standin, "SELECT count(*) FROM ds.orders WHERE len(tags) = 0") == [(1000,)]


def test_drop_unknown_fields_writes_the_known_ones(standin: BigQueryStandIn) -> None:
    make_table(standin, "orders", ORDERS)
    target = BigQueryTarget(SUB, "p.ds.orders", use_table_schema=True, drop_unknown_fields=True)
    result = standin.write(
        target,
        [
            message(
                "1",
                {**order(1), "coupon": "X", "address": {"city": "Paris", "zip": 75001, "floor": 3}},
            )
        ],
    )
    assert (result.state, result.written, result.unwritable) == (ACTIVE, ("1",), {})
    assert rows(standin, "SELECT address.city FROM ds.orders") == [("Paris",)]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"customer": "no id"}, "id is REQUIRED"),
        ({"id": "seven"}, "does not convert to INT64"),
        ({"id": 1, "amount": "1e40"}, "outside NUMERIC"),
        ({"id": 1, "tags": "one"}, "expected an array"),
        ({"id": 1, "tags": ["a", None]}, "cannot be NULL"),
        ({"id": 1, "address": {"zip": "x"}}, "address.zip"),
        ({"id": 1, "placed": "yesterday"}, "placed"),
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
    ],
)
def test_a_value_that_does_not_convert_leaves_its_message_unwritten(
    standin: BigQueryStandIn, body: object, why: str
) -> None:
    make_table(standin, "orders", ORDERS)
    target = BigQueryTarget(SUB, "p.ds.orders", use_table_schema=True)
    bad = message("bad", body if isinstance(body, bytes) else dict(body))  # type: ignore[call-overload]
    result = standin.write(target, [message("ok", order(1)), bad])
    assert result.written == ("ok",)
    assert why in result.unwritable["bad"]
    assert result.state == ACTIVE  # a bad value is the message's problem, not the table's
    assert rows(standin, "SELECT id FROM ds.orders") == [(1,)]


METADATA_TABLE = [
    {"name": "subscription_name", "type": "STRING"},
    {"name": "message_id", "type": "STRING"},
    {"name": "publish_time", "type": "TIMESTAMP"},
    {"name": "data", "type": "BYTES"},
    {"name": "attributes", "type": "JSON"},
]


def test_write_metadata_holds_every_message_once_with_its_metadata(
    standin: BigQueryStandIn,
) -> None:
    make_table(standin, "raw", METADATA_TABLE)
    target = BigQueryTarget(SUB, "p.ds.raw", write_metadata=True)
    batch = [
        message(f"m{i}", f"payload {i}".encode(), {"n": str(i)}, "k1" if i % 2 else "")
        for i in range(300)
    ]
    result = standin.write(target, batch)
    assert len(result.written) == 300
    assert result.state == ACTIVE
    assert rows(
        standin, "SELECT count(*), count(DISTINCT message_id), min(subscription_name) FROM ds.raw"
    ) == [(300, 300, SUB)]
    (row,) = rows(
        standin, "SELECT data, attributes, publish_time FROM ds.raw WHERE message_id = 'm3'"
    )
    assert base64.b64decode(row[0]) == b"payload 3"
    assert json.loads(row[1]) == {"n": "3", ORDERING_KEY_ATTRIBUTE: "k1"}
    assert row[2] == "2024-05-01T12:00:00.250000+00:00"
    (row,) = rows(standin, "SELECT attributes FROM ds.raw WHERE message_id = 'm4'")
    assert json.loads(row[0]) == {"n": "4"}  # no ordering key, no entry


def test_write_metadata_with_string_columns_and_a_table_schema(
    standin: BigQueryStandIn,
) -> None:
    make_table(
        standin,
        "events",
        [
            {"name": "kind", "type": "STRING", "mode": "REQUIRED"},
            {"name": "subscription_name", "type": "STRING"},
            {"name": "message_id", "type": "STRING"},
            {"name": "publish_time", "type": "TIMESTAMP"},
            {"name": "attributes", "type": "STRING"},
        ],
    )
    target = BigQueryTarget(SUB, "p.ds.events", use_table_schema=True, write_metadata=True)
    result = standin.write(target, [message("e1", {"kind": "click"}, {"a": "b"})])
    assert result.written == ("e1",)
    assert rows(standin, "SELECT kind, message_id, attributes FROM ds.events") == [
        ("click", "e1", '{"a":"b"}')
    ]


@pytest.mark.parametrize(
    ("column", "body", "stored", "refused"),
    [
        ("BYTES", b"\xff\x00raw", base64.b64encode(b"\xff\x00raw").decode(), None),
        ("STRING", "héllo".encode(), "héllo", b"\xff\xfe"),
        ("JSON", b'{"a": [1, 2]}', '{"a": [1, 2]}', b"{broken"),
    ],
)
def test_the_plain_data_column(
    standin: BigQueryStandIn, column: str, body: bytes, stored: str, refused: bytes | None
) -> None:
    make_table(standin, "plain", [{"name": "data", "type": column}])
    target = BigQueryTarget(SUB, "p.ds.plain")
    batch = [message("good", body)]
    if refused is not None:
        batch.append(message("bad", refused))
    result = standin.write(target, batch)
    assert result.written == ("good",)
    assert rows(standin, "SELECT data FROM ds.plain") == [(stored,)]
    if refused is not None:
        assert column in result.unwritable["bad"] or "JSON" in result.unwritable["bad"]


def test_a_missing_table_or_dataset_is_not_found_and_nothing_is_tried(
    standin: BigQueryStandIn,
) -> None:
    for table in ("p.ds.absent", "p.nowhere.absent"):
        target = BigQueryTarget(SUB, table)
        status = standin.check(target)
        assert status.state == NOT_FOUND
        assert "does not exist" in status.reason
        result = standin.write(target, [message("1", b"x")])
        assert (result.state, result.written, result.unwritable) == (NOT_FOUND, (), {})
    make_table(standin, "absent", [{"name": "data", "type": "STRING"}])
    assert standin.check(BigQueryTarget(SUB, "p.ds.absent")).state == ACTIVE
    standin.delete_table("ds", "absent")
    assert standin.check(BigQueryTarget(SUB, "p.ds.absent")).state == NOT_FOUND


@pytest.mark.parametrize(
    ("fields", "target", "why"),
    [
        ([{"name": "body", "type": "STRING"}], {}, "has no column data"),
        ([{"name": "data", "type": "INT64"}], {}, "must be BYTES or STRING or JSON"),
        (
            [
                {"name": "data", "type": "STRING"},
                {"name": "x", "type": "STRING", "mode": "REQUIRED"},
            ],
            {},
            "x is REQUIRED",
        ),
        ([{"name": "data", "type": "STRING"}], {"write_metadata": True}, "subscription_name"),
        (
            [
                {"name": "subscription_name", "type": "STRING"},
                {"name": "message_id", "type": "STRING"},
                {"name": "publish_time", "type": "STRING"},
                {"name": "attributes", "type": "JSON"},
                {"name": "data", "type": "BYTES"},
            ],
            {"write_metadata": True},
            "publish_time",
        ),
    ],
)
def test_a_table_that_does_not_fit_is_a_schema_mismatch(
    standin: BigQueryStandIn, fields: list[dict[str, str]], target: dict[str, bool], why: str
) -> None:
    make_table(standin, "t", fields)
    settings = BigQueryTarget(SUB, "p.ds.t", **target)
    status = standin.check(settings)
    assert status.state == SCHEMA_MISMATCH
    assert why in status.reason
    assert standin.write(settings, [message("1", b"x")]).written == ()
    assert rows(standin, "SELECT count(*) FROM ds.t") == [(0,)]


def test_a_row_duckdb_refuses_costs_only_itself_and_nothing_is_half_written(
    standin: BigQueryStandIn,
) -> None:
    # A constraint only DuckDB knows (made with plain SQL): the batch fails as a whole,
    # then each row is tried alone in a transaction of its own.
    standin.query("CREATE TABLE ds.short (data VARCHAR CHECK (length(data) < 5))")
    target = BigQueryTarget(SUB, "p.ds.short")
    result = standin.write(
        target, [message("a", b"ok"), message("b", b"far too long"), message("c", b"fine")]
    )
    assert result.written == ("a", "c")
    assert "refused" in result.unwritable["b"]
    assert rows(standin, "SELECT data FROM ds.short ORDER BY data") == [("fine",), ("ok",)]


def test_reading_while_writing_from_another_thread(standin: BigQueryStandIn) -> None:
    make_table(standin, "orders", ORDERS)
    target = BigQueryTarget(SUB, "p.ds.orders", use_table_schema=True)
    seen: list[int] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(20):
                (count,) = standin.query("SELECT count(*) FROM ds.orders").rows[0]
                seen.append(count)
        except BaseException as error:  # reported below
            errors.append(error)

    thread = threading.Thread(target=reader)
    thread.start()
    for start in range(0, 1000, 100):
        standin.write(target, [message(str(i), order(i)) for i in range(start, start + 100)])
    thread.join()
    assert errors == []
    assert all(count % 100 == 0 for count in seen)  # whole batches or nothing
    assert standin.row_count("ds", "orders") == 1000


def test_closing_waits_for_the_reads_under_way(standin: BigQueryStandIn) -> None:
    """A read runs on its own cursor without the write lock; DuckDB refuses to close the
    file under it ("connection is busy"), so close() waits for it, and a read after the
    close is told the stand-in is closed."""
    errors: list[BaseException] = []
    first_reads = threading.Semaphore(0)

    def reader() -> None:
        try:
            while True:
                standin.query("SELECT count(DISTINCT i % 1000003) FROM range(2000000) t(i)")
                first_reads.release()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in threads:  # each reader has read once and is reading again
        first_reads.acquire()
    standin.close()
    for thread in threads:
        thread.join()
    assert [type(e).__name__ for e in errors] == ["FailedPrecondition"] * 3, errors
    assert all("closed" in str(e) for e in errors)


def test_activity_is_what_a_dashboard_shows(standin: BigQueryStandIn) -> None:
    make_table(standin, "plain", [{"name": "data", "type": "STRING"}])
    standin.write(BigQueryTarget(SUB, "p.ds.plain"), [message("1", b"a"), message("2", b"\xff")])
    (activity,) = standin.activity()
    assert (activity.table, activity.messages_written, activity.unwritable) == ("ds.plain", 1, 1)
    assert activity.subscriptions == {SUB}
    assert activity.last_write is not None
    assert standin.last_state(SUB) is not None


def test_the_file_survives_a_reopen(tmp_path: object, standin: BigQueryStandIn) -> None:
    make_table(standin, "plain", [{"name": "data", "type": "JSON", "mode": "REQUIRED"}])
    standin.write(BigQueryTarget(SUB, "p.ds.plain"), [message("1", b"[1]")])
    path = standin.path
    standin.close()
    again = BigQueryStandIn(path)
    try:
        described = again.describe("ds", "plain")
        assert described is not None
        assert [(f.name, f.type, f.mode) for f in described.fields] == [
            ("data", "JSON", "REQUIRED")
        ]
        assert rows(again, "SELECT data FROM ds.plain") == [("[1]",)]
    finally:
        again.close()
