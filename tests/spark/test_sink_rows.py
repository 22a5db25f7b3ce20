"""The sink's checks on a DataFrame's schema and its row → message attributes (no Spark session:
``pyspark.sql.types`` is plain Python)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from eoclient.spark.sink import check_sink_schema, message_attributes


def _rows(**columns: DataType) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])


TEXT, BYTES, INT = StringType(), BinaryType(), IntegerType()


@pytest.mark.parametrize(
    "schema",
    [
        _rows(data=TEXT),
        _rows(data=BYTES),
        _rows(data=BYTES, attributes=MapType(TEXT, TEXT), ordering_key=TEXT),
        _rows(data=TEXT, sensor=TEXT, window_start=TimestampType()),  # extras are ignored
    ],
)
def test_a_publishable_schema_passes(schema: StructType) -> None:
    check_sink_schema(schema)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (_rows(value=TEXT), r"needs a 'data' column .* the rows have \['value'\]"),
        (_rows(data=INT), r"'data' column must be string or binary, not int"),
        (
            _rows(data=TEXT, attributes=MapType(TEXT, INT)),
            r"map<string,string>, not map<string,int>",
        ),
        (_rows(data=TEXT, attributes=TEXT), r"map<string,string>, not string"),
        (_rows(data=TEXT, ordering_key=INT), r"'ordering_key' column must be string, not int"),
    ],
)
def test_an_unpublishable_schema_is_refused_naming_the_column(
    schema: StructType, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_sink_schema(schema)


def test_a_null_attribute_value_drops_that_attribute() -> None:
    assert message_attributes({"a": "1", "b": None}) == {"a": "1"}
    assert message_attributes(None) == {}


def test_an_attribute_named_like_the_ordering_key_parameter_is_refused() -> None:
    with pytest.raises(ValueError, match="attribute named 'ordering_key'"):
        message_attributes({"ordering_key": "k"})
