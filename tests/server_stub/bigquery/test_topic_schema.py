"""use_topic_schema: Avro and protobuf topic schemas mapped to columns (JSON and BINARY
encodings), and the compatibility rules that make a table SCHEMA_MISMATCH."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory

from eoclient.server_stub.bigquery import (
    ACTIVE,
    SCHEMA_MISMATCH,
    BigQueryStandIn,
    BigQueryTarget,
    TopicSchemaSettings,
)
from eoclient.server_stub.core.schema_codecs import compile_proto

from .conftest import make_table, message, rows

SUB = "projects/p/subscriptions/typed"
AVRO = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}},
        {"name": "labels", "type": {"type": "map", "values": "long"}},
        {"name": "samples", "type": {"type": "array", "items": "int"}},
        {
            "name": "where",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [{"name": "room", "type": "string"}, {"name": "floor", "type": "int"}],
            },
        },
        {"name": "raw", "type": "bytes"},
        {"name": "cost", "type": "string"},
    ],
}
READINGS = [
    {"name": "sensor", "type": "STRING", "mode": "REQUIRED"},
    {"name": "value", "type": "FLOAT64"},
    {"name": "note", "type": "STRING"},
    {"name": "at", "type": "TIMESTAMP"},
    {"name": "day", "type": "DATE"},
    {"name": "level", "type": "INT64"},
    {
        "name": "labels",
        "type": "RECORD",
        "mode": "REPEATED",
        "fields": [{"name": "key", "type": "STRING"}, {"name": "value", "type": "INT64"}],
    },
    {"name": "samples", "type": "INT64", "mode": "REPEATED"},
    {
        "name": "where",
        "type": "RECORD",
        "fields": [{"name": "room", "type": "STRING"}, {"name": "floor", "type": "INT64"}],
    },
    {"name": "raw", "type": "BYTES"},
    {"name": "cost", "type": "NUMERIC"},
]
DATUM = {
    "sensor": "t1",
    "value": 21.5,
    "note": None,
    "at": 1_714_564_800_000_000,
    "day": 19844,
    "level": "HIGH",
    "labels": {"b": 2},
    "samples": [1, 2],
    "where": {"room": "lab", "floor": 3},
    "raw": b"\x01\x02",
    "cost": "12.5",
}
EXPECTED = (
    "t1",
    21.5,
    None,
    "2024-05-01T12:00:00+00:00",
    "2024-05-01",
    1,
    [{"key": "b", "value": 2}],
    [1, 2],
    {"room": "lab", "floor": 3},
    "AQI=",
    "12.500000000",
)


def avro_binary(schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def avro_json(datum: dict[str, Any]) -> bytes:
    encoded = dict(datum, raw=datum["raw"].decode("latin-1"))
    encoded["note"] = None if datum["note"] is None else {"string": datum["note"]}
    return json.dumps(encoded).encode()


@pytest.mark.parametrize("encoding", ["BINARY", "JSON"])
def test_avro_fields_go_to_their_columns(standin: BigQueryStandIn, encoding: str) -> None:
    make_table(standin, "readings", READINGS)
    target = BigQueryTarget(
        SUB,
        "p.ds.readings",
        use_topic_schema=True,
        topic_schema=TopicSchemaSettings("AVRO", json.dumps(AVRO), encoding),
    )
    assert standin.check(target).state == ACTIVE
    body = avro_binary(AVRO, DATUM) if encoding == "BINARY" else avro_json(DATUM)
    result = standin.write(target, [message("1", body), message("2", b"\x00garbage")])
    assert result.written == ("1",)
    assert "Avro" in result.unwritable["2"]
    assert rows(standin, "SELECT * FROM ds.readings") == [EXPECTED]


PROTO = """
syntax = "proto3";
package shop;
message Order {
  string id = 1;
  int64 quantity = 2;
  optional string note = 3;
  repeated string tags = 4;
  map<string, int32> stock = 5;
  Line line = 6;
  Status status = 7;
  bytes blob = 8;
  int64 placed_micros = 9;
  int32 ship_day = 10;
  message Line { string sku = 1; double price = 2; }
  enum Status { NEW = 0; PAID = 1; }
}
"""
ORDERS = [
    {"name": "id", "type": "STRING"},
    {"name": "quantity", "type": "INT64", "mode": "REQUIRED"},
    {"name": "note", "type": "STRING"},
    {"name": "tags", "type": "STRING", "mode": "REPEATED"},
    {
        "name": "stock",
        "type": "RECORD",
        "mode": "REPEATED",
        "fields": [{"name": "key", "type": "STRING"}, {"name": "value", "type": "INT64"}],
    },
    {
        "name": "line",
        "type": "RECORD",
        "fields": [{"name": "sku", "type": "STRING"}, {"name": "price", "type": "NUMERIC"}],
    },
    {"name": "status", "type": "INT64"},
    {"name": "blob", "type": "BYTES"},
    {"name": "placed_micros", "type": "TIMESTAMP"},
    {"name": "ship_day", "type": "DATE"},
]


def order_class() -> Any:
    files, root = compile_proto(PROTO)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(root))


@pytest.mark.parametrize("encoding", ["BINARY", "JSON"])
def test_protobuf_fields_go_to_their_columns(standin: BigQueryStandIn, encoding: str) -> None:
    make_table(standin, "orders", ORDERS)
    target = BigQueryTarget(
        SUB,
        "p.ds.orders",
        use_topic_schema=True,
        topic_schema=TopicSchemaSettings("PROTOCOL_BUFFER", PROTO, encoding),
    )
    assert standin.check(target).state == ACTIVE
    order = order_class()(
        id="o1",
        quantity=3,
        tags=["a", "b"],
        stock={"x": 1, "w": 2},
        line={"sku": "s", "price": 2.5},
        status=1,
        blob=b"\xff",
        placed_micros=1_714_564_800_000_000,
        ship_day=19844,
    )
    body = (
        order.SerializeToString()
        if encoding == "BINARY"
        else json_format.MessageToJson(order).encode()
    )
    result = standin.write(target, [message("1", body)])
    assert result.written == ("1",), result.unwritable
    assert rows(standin, "SELECT * FROM ds.orders") == [
        (
            "o1",
            3,
            None,  # optional and unset: NULL
            ["a", "b"],
            [{"key": "w", "value": 2}, {"key": "x", "value": 1}],
            {"sku": "s", "price": "2.500000000"},
            1,
            "/w==",
            "2024-05-01T12:00:00+00:00",
            "2024-05-01",
        )
    ]


def test_the_message_encoding_attribute_wins_over_the_topic_setting(
    standin: BigQueryStandIn,
) -> None:
    make_table(standin, "readings", READINGS)
    target = BigQueryTarget(
        SUB,
        "p.ds.readings",
        use_topic_schema=True,
        topic_schema=TopicSchemaSettings("AVRO", json.dumps(AVRO), "JSON"),
    )
    binary = message("1", avro_binary(AVRO, DATUM), {"googclient_schemaencoding": "BINARY"})
    assert standin.write(target, [binary]).written == ("1",)


def _avro(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": list(fields)})


@pytest.mark.parametrize(
    ("definition", "table", "options", "why"),
    [
        (
            _avro({"name": "a", "type": "string"}),
            [{"name": "a", "type": "INT64"}],
            {},
            "cannot be written to the column's type INT64",
        ),
        (
            _avro({"name": "a", "type": ["null", "string"]}),
            [{"name": "a", "type": "STRING", "mode": "REQUIRED"}],
            {},
            "optional but the column is REQUIRED",
        ),
        (
            _avro({"name": "a", "type": "string"}, {"name": "b", "type": "long"}),
            [{"name": "a", "type": "STRING"}],
            {},
            "field b has no column",
        ),
        (
            _avro({"name": "a", "type": "string"}),
            [{"name": "a", "type": "STRING"}, {"name": "z", "type": "STRING", "mode": "REQUIRED"}],
            {},
            "column z is REQUIRED",
        ),
        (
            _avro({"name": "a", "type": {"type": "array", "items": "string"}}),
            [{"name": "a", "type": "STRING"}],
            {},
            "is an array",
        ),
        (
            _avro({"name": "a", "type": ["int", "string"]}),
            [{"name": "a", "type": "STRING"}],
            {},
            "a union of several types",
        ),
        (
            _avro({"name": "message_id", "type": "string"}),
            [
                {"name": "message_id", "type": "STRING"},
                {"name": "subscription_name", "type": "STRING"},
                {"name": "publish_time", "type": "TIMESTAMP"},
                {"name": "attributes", "type": "STRING"},
            ],
            {"write_metadata": True},
            "a name write_metadata uses",
        ),
    ],
)
def test_incompatible_topic_schemas_are_a_schema_mismatch(
    standin: BigQueryStandIn,
    definition: str,
    table: list[dict[str, str]],
    options: dict[str, bool],
    why: str,
) -> None:
    make_table(standin, "t", table)
    target = BigQueryTarget(
        SUB,
        "p.ds.t",
        use_topic_schema=True,
        topic_schema=TopicSchemaSettings("AVRO", definition, "JSON"),
        **options,
    )
    status = standin.check(target)
    assert status.state == SCHEMA_MISMATCH
    assert why in status.reason


def test_drop_unknown_fields_and_a_required_field_into_a_nullable_column(
    standin: BigQueryStandIn,
) -> None:
    make_table(standin, "t", [{"name": "a", "type": "STRING"}])
    definition = _avro({"name": "a", "type": "string"}, {"name": "b", "type": "long"})
    target = BigQueryTarget(
        SUB,
        "p.ds.t",
        use_topic_schema=True,
        drop_unknown_fields=True,
        topic_schema=TopicSchemaSettings("AVRO", definition, "JSON"),
    )
    assert standin.check(target).state == ACTIVE
    assert standin.write(target, [message("1", {"a": "x", "b": 2})]).written == ("1",)
    assert rows(standin, "SELECT a FROM ds.t") == [("x",)]


def test_protobuf_oneof_and_uint64_rules(standin: BigQueryStandIn) -> None:
    definition = 'syntax = "proto3"; message M { oneof v { string s = 1; int64 i = 2; } }'
    make_table(standin, "t", [{"name": "s", "type": "STRING"}, {"name": "i", "type": "INT64"}])
    target = BigQueryTarget(
        SUB,
        "p.ds.t",
        use_topic_schema=True,
        topic_schema=TopicSchemaSettings("PROTOCOL_BUFFER", definition, "JSON"),
    )
    assert "oneof" in standin.check(target).reason
    definition = 'syntax = "proto3"; message N { uint64 n = 1; }'
    make_table(standin, "u", [{"name": "n", "type": "INT64"}])
    target = BigQueryTarget(
        SUB,
        "p.ds.u",
        use_topic_schema=True,
        topic_schema=TopicSchemaSettings("PROTOCOL_BUFFER", definition, "JSON"),
    )
    assert "NUMERIC, BIGNUMERIC" in standin.check(target).reason


def test_use_topic_schema_without_a_topic_schema(standin: BigQueryStandIn) -> None:
    make_table(standin, "t", [{"name": "a", "type": "STRING"}])
    status = standin.check(BigQueryTarget(SUB, "p.ds.t", use_topic_schema=True))
    assert status.state == SCHEMA_MISMATCH
    assert "no schema" in status.reason
