"""Objects into messages (ingestion/formats.py): text split by its delimiter, Avro files
one message per record (the record's binary encoding), Pub/Sub Avro files (what a Cloud
Storage subscription writes) restoring data, attributes and ordering key; objects that
are not of their format refused with ObjectParseError."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from eoclient.server_stub.ingestion import formats
from eoclient.server_stub.ingestion.formats import IngestedMessage, ObjectParseError

STATE = {
    "type": "record",
    "name": "State",
    "fields": [{"name": "name", "type": "string"}, {"name": "post_abbr", "type": "string"}],
}
# The two record schemas a Cloud Storage subscription writes in Avro.
PLAIN = {
    "type": "record",
    "namespace": "com.google.pubsub",
    "name": "PubsubMessage",
    "fields": [{"name": "data", "type": "bytes"}],
}
WITH_METADATA = {
    "type": "record",
    "namespace": "com.google.pubsub",
    "name": "PubsubMessageWithMetadata",
    "fields": [
        {"name": "subscription_name", "type": "string"},
        {"name": "message_id", "type": "string"},
        {"name": "publish_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {"name": "data", "type": "bytes"},
    ],
}


def avro_file(schema: dict[str, Any], records: list[dict[str, Any]], codec: str = "null") -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records, codec=codec)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "delimiter", "expected"),
    [
        (b"a\nb\nc\n", "\n", [b"a", b"b", b"c"]),
        (b"a\n\nb", "\n", [b"a", b"b"]),  # a blank line makes no message
        (b"x,y,,z", ",", [b"x", b"y", b"z"]),
        (b"", "\n", []),
        (b"one line, no end", "\n", [b"one line, no end"]),
        ("ünï\ncode".encode(), "\n", ["ünï".encode(), b"code"]),
    ],
)
def test_text_splits_on_the_delimiter(data: bytes, delimiter: str, expected: list[bytes]) -> None:
    assert formats.messages(data, formats.TEXT, delimiter) == [IngestedMessage(d) for d in expected]


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_avro_is_one_message_per_record_in_binary_encoding(codec: str) -> None:
    records = [{"name": "Alaska", "post_abbr": "AK"}, {"name": "Ohio", "post_abbr": "OH"}]
    got = formats.messages(avro_file(STATE, records, codec), formats.AVRO, "\n")
    assert len(got) == 2
    parsed = fastavro.parse_schema(STATE)
    decoded = [fastavro.schemaless_reader(io.BytesIO(m.data), parsed) for m in got]
    assert decoded == records
    assert all(not m.attributes and not m.ordering_key for m in got)


def test_pubsub_avro_restores_data_attributes_and_ordering_key() -> None:
    records = [
        {
            "subscription_name": "projects/p/subscriptions/s",
            "message_id": "1",
            "publish_time": 1_700_000_000_000_000,
            "attributes": {"k": "v", "ordering_key": "key-1"},
            "data": b"first",
        },
        {
            "subscription_name": "projects/p/subscriptions/s",
            "message_id": "2",
            "publish_time": 1_700_000_000_000_001,
            "attributes": {},
            "data": b"second",
        },
    ]
    got = formats.messages(avro_file(WITH_METADATA, records), formats.PUBSUB_AVRO, "\n")
    assert got == [
        IngestedMessage(b"first", {"k": "v"}, "key-1"),
        IngestedMessage(b"second", {}, ""),
    ]
    plain = formats.messages(avro_file(PLAIN, [{"data": b"x"}]), formats.PUBSUB_AVRO, "\n")
    assert plain == [IngestedMessage(b"x")]


@pytest.mark.parametrize("input_format", [formats.AVRO, formats.PUBSUB_AVRO])
def test_objects_that_are_not_avro_are_refused(input_format: str) -> None:
    with pytest.raises(ObjectParseError, match="not an Avro object container file"):
        formats.messages(b"just text\n", input_format, "\n")
    good = avro_file(STATE, [{"name": "Alaska", "post_abbr": "AK"}] * 50)
    with pytest.raises(ObjectParseError):
        formats.messages(good[: len(good) - 20], input_format, "\n")


def test_pubsub_avro_needs_the_exports_data_field() -> None:
    with pytest.raises(ObjectParseError, match="no 'data' field"):
        formats.messages(
            avro_file(STATE, [{"name": "a", "post_abbr": "b"}]), formats.PUBSUB_AVRO, ""
        )
