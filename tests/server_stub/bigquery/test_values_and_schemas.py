"""The JSON → BigQuery conversions (bigquery/values.py) and table schemas with their
DuckDB mapping (bigquery/table_schema.py), including tables made with plain SQL."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

import pytest

from eoclient.errors import AlreadyExists, InvalidArgument, NotFound
from eoclient.server_stub.bigquery import BigQueryStandIn, parse_schema, parse_table
from eoclient.server_stub.bigquery.table_schema import Field, duckdb_type
from eoclient.server_stub.bigquery.values import (
    ConversionError,
    convert,
    pack_datetime_micros,
    pack_time_micros,
)

from .conftest import make_table


def one(kind: str, value: Any, **extra: Any) -> Any:
    return convert(Field("f", kind, **extra), value, drop_unknown=False, json_source=True, path="f")


def encoder_bytes(unscaled: int) -> str:
    raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "little", signed=True)
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("NUMERIC", "123.124", decimal.Decimal("123.124000000")),
        ("NUMERIC", 0.1, decimal.Decimal("0.100000000")),
        ("NUMERIC", "1.0000000005", decimal.Decimal("1.000000001")),  # half away from zero
        ("NUMERIC", encoder_bytes(12_500_000_000), decimal.Decimal("12.500000000")),
        (
            "BIGNUMERIC",
            "123456789012345678901234567890.123456789",
            "123456789012345678901234567890.123456789",
        ),
        ("BIGNUMERIC", 2, "2"),
        ("DATE", "2024-05-01", dt.date(2024, 5, 1)),
        ("DATE", 19844, dt.date(2024, 5, 1)),
        ("TIME", "12:30:00.25", dt.time(12, 30, 0, 250000)),
        ("TIME", pack_time_micros(dt.time(1, 2, 3, 4)), dt.time(1, 2, 3, 4)),
        ("DATETIME", "2024-05-01T12:30:00", dt.datetime(2024, 5, 1, 12, 30)),
        (
            "DATETIME",
            pack_datetime_micros(dt.datetime(2024, 5, 1, 12, 30, 1, 7)),
            dt.datetime(2024, 5, 1, 12, 30, 1, 7),
        ),
        ("TIMESTAMP", "2024-05-01T14:00:00+02:00", dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)),
        ("TIMESTAMP", "2024-05-01 12:00:00", dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)),
        ("TIMESTAMP", 1_714_564_800_000_000, dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)),
        ("BYTES", "AQI=", b"\x01\x02"),
        ("INT64", "42", 42),
        ("INT64", 3.0, 3),
        ("FLOAT64", "2.5", 2.5),
        ("BOOL", "true", True),
        ("JSON", {"a": [1, None]}, '{"a":[1,null]}'),
        ("JSON", "text", '"text"'),
    ],
)
def test_json_values_convert(kind: str, value: Any, expected: Any) -> None:
    assert one(kind, value) == expected


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("INT64", True),
        ("INT64", 2**63),
        ("INT64", 1.5),
        ("STRING", 5),
        ("BOOL", "yes"),
        ("BYTES", "not base64!"),
        ("NUMERIC", "NaN"),
        ("NUMERIC", "1" * 30),
        ("NUMERIC", "%%%"),
        ("DATETIME", "2024-05-01T12:00:00Z"),
        ("DATE", "May 1st"),
        ("TIMESTAMP", True),
    ],
)
def test_values_that_do_not_convert(kind: str, value: Any) -> None:
    with pytest.raises(ConversionError):
        one(kind, value)


def test_a_declared_numeric_precision_is_kept() -> None:
    assert one("NUMERIC", "1.239", precision=5, scale=2) == decimal.Decimal("1.24")
    with pytest.raises(ConversionError):
        one("NUMERIC", "1000", precision=5, scale=2)


def test_schema_files_in_bq_format_and_as_a_table_resource() -> None:
    listed = parse_schema([{"name": "a", "type": "integer"}, {"name": "b", "type": "BOOLEAN"}])
    assert [(f.name, f.type) for f in listed.fields] == [("a", "INT64"), ("b", "BOOL")]
    resource = parse_schema(
        {
            "schema": {"fields": [{"name": "id", "type": "STRING", "mode": "REQUIRED"}]},
            "tableConstraints": {"primaryKey": {"columns": ["id"]}},
        }
    )
    assert resource.primary_key == ("id",)
    assert (
        parse_schema(
            {
                "fields": [
                    {"name": "x", "type": "STRUCT", "fields": [{"name": "y", "type": "DECIMAL"}]}
                ]
            }
        )
        .fields[0]
        .fields[0]
        .type
        == "NUMERIC"
    )


@pytest.mark.parametrize(
    ("document", "key", "why"),
    [
        ([], (), "non-empty JSON list"),
        ([{"name": "1a", "type": "STRING"}], (), "Invalid column name"),
        ([{"name": "_CHANGE_TYPE", "type": "STRING"}], (), "reserved"),
        ([{"name": "a", "type": "STRING"}, {"name": "A", "type": "STRING"}], (), "twice"),
        ([{"name": "a", "type": "INTERVAL"}], (), "not kept"),
        ([{"name": "a", "type": "VARCHAR"}], (), "Unknown BigQuery type"),
        ([{"name": "a", "type": "RECORD"}], (), "non-empty fields"),
        ([{"name": "a", "type": "STRING", "mode": "OPTIONAL"}], (), "mode"),
        ([{"name": "a", "type": "STRING"}], ("b",), "not a column"),
        ([{"name": "a", "type": "STRING", "mode": "REPEATED"}], ("a",), "key column"),
    ],
)
def test_schema_files_that_are_refused(document: Any, key: tuple[str, ...], why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        parse_schema(document, key)


def test_the_duckdb_types() -> None:
    schema = parse_schema(
        [
            {
                "name": "r",
                "type": "RECORD",
                "mode": "REPEATED",
                "fields": [
                    {"name": "when", "type": "DATETIME"},
                    {"name": "n", "type": "BIGNUMERIC"},
                ],
            },
            {"name": "t", "type": "TIMESTAMP"},
        ]
    )
    assert [duckdb_type(f) for f in schema.fields] == [
        'STRUCT("when" TIMESTAMP, "n" VARCHAR)[]',
        "TIMESTAMPTZ",
    ]


def test_the_catalog_keeps_what_duckdb_cannot_say(standin: BigQueryStandIn) -> None:
    make_table(
        standin,
        "kept",
        [
            {"name": "doc", "type": "JSON"},
            {"name": "big", "type": "BIGNUMERIC"},
            {"name": "geo", "type": "GEOGRAPHY"},
            {
                "name": "r",
                "type": "RECORD",
                "fields": [{"name": "x", "type": "STRING", "mode": "REQUIRED"}],
            },
            {"name": "id", "type": "STRING", "mode": "REQUIRED"},
        ],
        ("id",),
    )
    described = standin.describe("ds", "kept")
    assert described is not None
    assert [f.type for f in described.fields] == [
        "JSON",
        "BIGNUMERIC",
        "GEOGRAPHY",
        "RECORD",
        "STRING",
    ]
    assert described.fields[3].fields[0].mode == "REQUIRED"
    assert described.primary_key == ("id",)
    # A column added with plain SQL is read from DuckDB's own type.
    standin.query("ALTER TABLE ds.kept ADD COLUMN added TIMESTAMP")
    described = standin.describe("ds", "kept")
    assert described is not None
    assert described.column("added") == Field("added", "DATETIME")


def test_a_table_made_with_sql_is_read_from_duckdb(standin: BigQueryStandIn) -> None:
    standin.query(
        "CREATE TABLE ds.plain (id INTEGER PRIMARY KEY, tags VARCHAR[], seen TIMESTAMPTZ, "
        "n DECIMAL(10, 2))"
    )
    described = standin.describe("ds", "plain")
    assert described is not None
    assert [f.describe() for f in described.fields] == [
        "REQUIRED INT64",
        "REPEATED STRING",
        "TIMESTAMP",
        "NUMERIC",
    ]
    assert described.fields[3].precision == 10
    assert described.primary_key == ("id",)


def test_datasets_and_tables(standin: BigQueryStandIn) -> None:
    with pytest.raises(AlreadyExists):
        standin.create_dataset("ds")
    standin.create_dataset("ds", exists_ok=True)
    standin.create_dataset("other")
    assert standin.list_datasets() == ["ds", "other"]
    make_table(standin, "my table-1", [{"name": "data", "type": "STRING"}])
    assert standin.list_tables("ds") == ["my table-1"]
    with pytest.raises(NotFound):
        standin.create_table("nowhere", "t", parse_schema([{"name": "a", "type": "STRING"}]))
    with pytest.raises(InvalidArgument, match="reserved"):
        standin.create_dataset("_eoclient_bigquery")
    with pytest.raises(InvalidArgument, match="name of the database file"):
        standin.create_dataset("BigQuery")  # the file is bigquery.duckdb
    with pytest.raises(NotFound):
        standin.list_tables("absent")


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("p.ds.t", True),
        ("my-project.data_set.table with spaces-1", True),
        ("p:ds.t", False),
        ("ds.t", False),
        ("p.d-s.t", False),
        ("p.ds.t.x", False),
        ("p.ds.t/x", False),
    ],
)
def test_table_names(text: str, ok: bool) -> None:
    if ok:
        assert str(parse_table(text)) == text
    else:
        with pytest.raises(InvalidArgument):
            parse_table(text)
