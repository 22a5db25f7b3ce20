"""Pull response → Arrow (``eoclient.spark._wire``) gives exactly the SDK's messages."""

from __future__ import annotations

import datetime

import pytest

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from eoclient._proto import pubsub_pb2  # noqa: E402
from eoclient.spark._schema import WIRE_SCHEMA  # noqa: E402
from eoclient.spark._wire import (  # noqa: E402
    Received,
    _columns,
    _varint_size,
    decode,
    decode_bytes,
)
from eoclient.subscriber.message import Message, message_from_wire  # noqa: E402


class _NoSink:
    def settle(self, message: Message, operation: str, seconds: int) -> None:
        raise AssertionError("not settled here")

    extend = settle


def _sdk_rows(response: pubsub_pb2.PullResponse) -> list[dict[str, object]]:
    """The SDK's view of each delivery (``SubscriberClient.pull``'s decoding), as rows."""
    rows = []
    for received in response.received_messages:
        message = message_from_wire(received, _NoSink(), 0.0)  # type: ignore[arg-type]
        rows.append(
            {
                "message_id": message.message_id,
                "data": bytes(message.data),
                "attributes": dict(message.attributes),
                "ordering_key": message.ordering_key,
                "publish_time": message.publish_time,
                # The SDK says None without a dead-letter policy; the source's column keeps
                # the wire's 0 (a DataFrame column of one type, as documented).
                "delivery_attempt": message.delivery_attempt or 0,
                "ack_id": message.ack_id,
            }
        )
    return rows


def _wire_rows(response: pubsub_pb2.PullResponse) -> list[dict[str, object]]:
    received = decode(response)
    # From the bytes (by columns, or by falling back to decode): the very same batch.
    from_bytes = decode_bytes(response.SerializeToString())
    _same(from_bytes, received)
    return _rows(received)


def _same(received: Received, reference: Received) -> None:
    # A map's entries in any order: protobuf's map has none (a parsed map iterates in its
    # own order, the wire keeps the sender's).
    assert _rows(received) == _rows(reference)
    assert received.message_ids == reference.message_ids
    assert received.ack_ids == reference.ack_ids
    assert received.publish_ns == reference.publish_ns


def _rows(received: Received) -> list[dict[str, object]]:
    assert received.rows.schema == WIRE_SCHEMA
    rows = received.rows.to_pylist()
    for row in rows:
        row["attributes"] = dict(row["attributes"])  # pyarrow gives a map as pairs
    # The lists the decisions read agree with the columns.
    assert received.message_ids == [row["message_id"] for row in rows]
    assert received.ack_ids == [row["ack_id"] for row in rows]
    return rows


def _response(*deliveries: dict[str, object]) -> pubsub_pb2.PullResponse:
    response = pubsub_pb2.PullResponse()
    for fields in deliveries:
        received = response.received_messages.add()
        received.ack_id = str(fields["ack_id"])
        received.delivery_attempt = int(fields.get("delivery_attempt", 0))  # type: ignore[call-overload]
        message = received.message
        message.message_id = str(fields["message_id"])
        message.data = bytes(fields.get("data", b""))  # type: ignore[arg-type]
        message.attributes.update(fields.get("attributes", {}))  # type: ignore[arg-type]
        message.ordering_key = str(fields.get("ordering_key", ""))
        message.publish_time.seconds = int(fields.get("seconds", 0))  # type: ignore[call-overload]
        message.publish_time.nanos = int(fields.get("nanos", 0))  # type: ignore[call-overload]
    return response


def test_awkward_values_decode_as_the_sdk_decodes_them() -> None:
    response = _response(
        {"ack_id": "a-1", "message_id": "1"},  # nothing set: empty data, no attributes
        {
            "ack_id": "a-2",
            "message_id": "2",
            "data": bytes(range(256)) * 40,
            "attributes": {"k": "v", "ünï": "cödé ✓", "empty": ""},
            "ordering_key": "key-7",
            "seconds": 1_700_000_000,
            "nanos": 999,  # below a microsecond: truncated, as the SDK does
            "delivery_attempt": 5,
        },
        {"ack_id": "a-3", "message_id": "3", "seconds": 1, "nanos": 999_999_999},
    )
    rows = _wire_rows(response)
    assert rows == _sdk_rows(response)
    assert rows[1]["publish_time"] == datetime.datetime(
        2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC
    )
    assert rows[2]["publish_time"].microsecond == 999_999


def test_an_empty_response_is_an_empty_batch() -> None:
    for received in (decode(pubsub_pb2.PullResponse()), decode_bytes(b"")):
        assert len(received) == 0
        assert received.rows.num_rows == 0
        assert received.rows.schema == WIRE_SCHEMA


_text = st.text(max_size=12)
_delivery = st.fixed_dictionaries(
    {
        "ack_id": st.text(min_size=1, max_size=40),
        "message_id": st.text(min_size=1, max_size=20),
        "data": st.binary(max_size=64),
        "attributes": st.dictionaries(_text, _text, max_size=4),
        "ordering_key": _text,
        "seconds": st.integers(0, 2**35),
        "nanos": st.integers(0, 999_999_999),
        "delivery_attempt": st.integers(0, 100),
    }
)


@settings(deadline=None)
@given(st.lists(_delivery, max_size=20))
def test_any_response_decodes_as_the_sdk_decodes_it(deliveries: list[dict[str, object]]) -> None:
    response = _response(*deliveries)
    assert _wire_rows(response) == _sdk_rows(response)


# What the servers send: every delivery with data and a message id, a publish time with or
# without nanos (a whole second), an ordering key on all or none, attributes or not (a
# dead-letter policy: delivery attempts on all).
_columnar_delivery = st.fixed_dictionaries(
    {
        "ack_id": st.text(min_size=1, max_size=40),
        "message_id": st.text(min_size=1, max_size=20),
        "data": st.binary(min_size=1, max_size=300),
        "attributes": st.dictionaries(
            st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=140), max_size=4
        ),
        "seconds": st.integers(1, 2**33),  # to the year 2242
        "nanos": st.one_of(st.just(0), st.integers(0, 999_999_999)),
    }
)


@settings(deadline=None)
@given(
    st.lists(_columnar_delivery, max_size=20),
    st.one_of(st.just(""), st.text(min_size=1, max_size=200)),
    st.integers(0, 300),
)
def test_what_servers_send_decodes_by_columns(
    deliveries: list[dict[str, object]], ordering_key: str, attempt: int
) -> None:
    response = _response(
        *({**d, "ordering_key": ordering_key, "delivery_attempt": attempt} for d in deliveries)
    )
    by_columns = _columns(response.SerializeToString())
    assert by_columns is not None  # not the fallback
    _same(by_columns, decode(response))
    assert _rows(by_columns) == _sdk_rows(response)


def test_columns_that_do_not_line_up_fall_back_to_the_fields() -> None:
    """Values proto3 leaves off the wire for some deliveries only, an unknown field: the
    columns would not line up (or the sizes not add up), and the fields decide."""
    plain = {"ack_id": "a", "message_id": "1", "data": b"x", "seconds": 5, "nanos": 1}
    awkward = [
        {**plain, "data": b"", "attributes": {"k": "v"}},  # no data: attributes only
        {**plain, "ordering_key": "key"},  # an ordering key on some deliveries only
        {**plain, "delivery_attempt": 2},  # attempts on some deliveries only
        {**plain, "seconds": 0},  # the epoch's first second
    ]
    for odd in awkward:
        response = _response(plain, odd, plain)
        raw = response.SerializeToString()
        assert _columns(raw) is None, odd
        assert _rows(decode_bytes(raw)) == _sdk_rows(response)
    # A map entry is written with both its fields, empty or not: by columns too.
    for attributes in ({"k": ""}, {"": "v"}):
        response = _response(plain, {**plain, "attributes": attributes}, plain)
        by_columns = _columns(response.SerializeToString())
        assert by_columns is not None
        assert _rows(by_columns) == _sdk_rows(response)
    # A map entry without its (empty) value, as an encoder may leave it off: values would
    # not line up with keys.
    message = b"\x0a\x01x" + b"\x12\x03\x0a\x01k" + b"\x1a\x011" + b"\x22\x04\x08\x05\x10\x01"
    delivery = b"\x0a\x01a\x12" + bytes([len(message)]) + message
    raw = b"\x0a" + bytes([len(delivery)]) + delivery
    assert _columns(raw) is None
    assert _rows(decode_bytes(raw)) == _sdk_rows(pubsub_pb2.PullResponse.FromString(raw))
    # A field this version does not know, inside a message: its bytes are not attributes.
    response = _response(plain, {**plain, "attributes": {"k": "v"}})
    raw = response.SerializeToString()
    unknown = b"\x32\x03abc"  # field 6 (length-delimited): not in PubsubMessage here
    patched = pubsub_pb2.PullResponse.FromString(raw)
    message = patched.received_messages[0].message
    message.MergeFromString(unknown)
    raw = patched.SerializeToString()
    assert _columns(raw) is None
    assert _rows(decode_bytes(raw)) == _sdk_rows(patched)


def test_varint_sizes_are_protobufs() -> None:
    """The sizes the columns are checked by, against protobuf's own encoding (an int64
    field: tag byte + varint; negative values take ten bytes)."""
    import numpy as np
    from google.protobuf import wrappers_pb2

    values = [0, 1, 127, 128, 16_383, 16_384, 2**35, 2**56 - 1, 2**56, 2**63 - 1, -1, -(2**63)]
    expected = [len(wrappers_pb2.Int64Value(value=v).SerializeToString()) - 1 for v in values]
    expected[0] = 1  # proto3 writes no field for 0; its varint is one byte
    assert _varint_size(np.array(values, np.int64)).tolist() == expected
