"""Message checks before publishing, and the exact encoded-size formulas."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient._proto import pubsub_pb2
from eoclient.errors import MessageTooLargeError
from eoclient.publisher.validation import (
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
    MAX_ORDERING_KEY_BYTES,
    MAX_PUBLISH_REQUEST_BYTES,
    _validate_in_full,
    encoded_message_size,
    max_message_size,
    request_entry_size,
    request_overhead,
    validate_message,
    varint_size,
)

TOPIC = "projects/p/topics/t"

# Text that includes multi-byte UTF-8 (limits are in bytes, not characters).
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
attribute_maps = st.dictionaries(texts, texts, max_size=5)


@pytest.mark.parametrize(
    ("value", "size"),
    [(0, 1), (1, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (10_000_000, 4)],
)
def test_varint_size(value: int, size: int) -> None:
    assert varint_size(value) == size


def test_varint_size_rejects_negative() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        varint_size(-1)


@given(data=st.binary(max_size=300), attributes=attribute_maps, ordering_key=texts, topic=texts)
def test_sizes_equal_the_protobuf_runtime(
    data: bytes, attributes: Mapping[str, str], ordering_key: str, topic: str
) -> None:
    message = pubsub_pb2.PubsubMessage(data=data, attributes=attributes, ordering_key=ordering_key)
    size = encoded_message_size(data, attributes, ordering_key)
    assert size == message.ByteSize()
    assert request_overhead(topic) == pubsub_pb2.PublishRequest(topic=topic).ByteSize()
    request = pubsub_pb2.PublishRequest(topic=topic, messages=[message, message])
    assert request_overhead(topic) + 2 * request_entry_size(size) == request.ByteSize()


def test_a_long_message_crosses_varint_boundaries_exactly() -> None:
    data = b"x" * 20_000  # length needs a 3-byte varint
    attributes = {"k" * 200: "v" * 1000}
    message = pubsub_pb2.PubsubMessage(data=data, attributes=attributes, ordering_key="o" * 1024)
    assert encoded_message_size(data, attributes, "o" * 1024) == message.ByteSize()


def test_max_message_size_is_the_exact_fit() -> None:
    limit = max_message_size(TOPIC)
    assert request_overhead(TOPIC) + request_entry_size(limit) <= MAX_PUBLISH_REQUEST_BYTES
    assert request_overhead(TOPIC) + request_entry_size(limit + 1) > MAX_PUBLISH_REQUEST_BYTES
    # The boundary as the protobuf runtime sees it: data of (limit - 1 - 4) bytes has
    # a 4-byte length varint and makes a message of exactly `limit` bytes.
    data = b"\0" * (limit - 1 - varint_size(limit))
    assert encoded_message_size(data, {}, "") == limit
    request = pubsub_pb2.PublishRequest(topic=TOPIC, messages=[pubsub_pb2.PubsubMessage(data=data)])
    assert request.ByteSize() == MAX_PUBLISH_REQUEST_BYTES


def test_validate_accepts_the_largest_message_and_rejects_one_byte_more() -> None:
    limit = max_message_size(TOPIC)
    data = b"\0" * (limit - 1 - varint_size(limit))
    assert validate_message(data, {}, "", topic=TOPIC) == limit
    with pytest.raises(MessageTooLargeError, match=r"limit of 10000000 bytes"):
        validate_message(data + b"\0", {}, "", topic=TOPIC)


def test_validate_returns_the_encoded_size() -> None:
    assert validate_message(b"hi", {"a": "b"}, "k", topic=TOPIC) == encoded_message_size(
        b"hi", {"a": "b"}, "k"
    )


# Exactly at each limit is accepted; one byte over is rejected. "é" is 2 bytes of UTF-8,
# so a value of 512 "é" is at the 1024-byte limit and 513 is over it although only 513
# characters long.
ACCEPTED: list[tuple[str, bytes, dict[str, str], str]] = [
    ("data only", b"x", {}, ""),
    ("attribute only", b"", {"a": ""}, ""),
    ("empty attribute value", b"", {"a": ""}, "key"),
    ("max attributes", b"", {f"k{i}": "v" for i in range(MAX_ATTRIBUTES)}, ""),
    ("max key", b"x", {"k" * MAX_ATTRIBUTE_KEY_BYTES: "v"}, ""),
    ("max value", b"x", {"k": "v" * MAX_ATTRIBUTE_VALUE_BYTES}, ""),
    ("max value multibyte", b"x", {"k": "é" * (MAX_ATTRIBUTE_VALUE_BYTES // 2)}, ""),
    ("max ordering key", b"x", {}, "o" * MAX_ORDERING_KEY_BYTES),
    ("goog-prefixed key", b"x", {"googclient_traceparent": "00-ab"}, ""),
]


@pytest.mark.parametrize(
    ("data", "attributes", "ordering_key"),
    [case[1:] for case in ACCEPTED],
    ids=[case[0] for case in ACCEPTED],
)
def test_accepted(data: bytes, attributes: dict[str, str], ordering_key: str) -> None:
    assert validate_message(data, attributes, ordering_key, topic=TOPIC) > 0


REJECTED: list[tuple[str, bytes, dict[str, str], str, str]] = [
    ("empty", b"", {}, "", r"either non-empty data or at least one attribute"),
    ("empty with key", b"", {}, "k", r"either non-empty data or at least one attribute"),
    (
        "too many attributes",
        b"x",
        {f"k{i}": "v" for i in range(MAX_ATTRIBUTES + 1)},
        "",
        r"at most 100 attributes, got 101",
    ),
    (
        "key too long",
        b"x",
        {"k" * (MAX_ATTRIBUTE_KEY_BYTES + 1): "v"},
        "",
        r"is 257 bytes of UTF-8; the limit is 256",
    ),
    (
        "key too long multibyte",
        b"x",
        {"é" * 129: "v"},
        "",
        r"is 258 bytes of UTF-8; the limit is 256",
    ),
    (
        "value too long",
        b"x",
        {"k": "v" * (MAX_ATTRIBUTE_VALUE_BYTES + 1)},
        "",
        r"value of attribute 'k' is 1025 bytes of UTF-8; the limit is 1024",
    ),
    (
        "value too long multibyte",
        b"x",
        {"k": "é" * 513},
        "",
        r"value of attribute 'k' is 1026 bytes",
    ),
    (
        "ordering key too long",
        b"x",
        {},
        "o" * (MAX_ORDERING_KEY_BYTES + 1),
        r"ordering_key is 1025 bytes of UTF-8; the limit is 1024",
    ),
    ("lone surrogate", b"x", {"k": "\ud800"}, "", r"is not valid UTF-8 text"),
]


@pytest.mark.parametrize(
    ("data", "attributes", "ordering_key", "match"),
    [case[1:] for case in REJECTED],
    ids=[case[0] for case in REJECTED],
)
def test_rejected(data: bytes, attributes: dict[str, str], ordering_key: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        validate_message(data, attributes, ordering_key, topic=TOPIC)


@pytest.mark.parametrize(
    ("data", "attributes", "ordering_key", "match"),
    [
        ("text", {}, "", r"message data must be bytes, got str"),
        (b"x", {"k": 1}, "", r"must be a str, got int"),
        (b"x", {1: "v"}, "", r"attribute key must be a str, got int"),
        (b"x", {}, None, r"ordering_key must be a str, got NoneType"),
    ],
)
def test_wrong_types_raise_type_error(
    data: object, attributes: object, ordering_key: object, match: str
) -> None:
    with pytest.raises(TypeError, match=match):
        validate_message(data, attributes, ordering_key, topic=TOPIC)  # type: ignore[arg-type]


def test_only_bytes_are_data() -> None:
    assert validate_message(b"ab", {}, "", topic=TOPIC) == 4
    with pytest.raises(TypeError, match="got bytearray"):
        validate_message(bytearray(b"ab"), {}, "", topic=TOPIC)  # type: ignore[arg-type]


@given(
    data=st.binary(max_size=300),
    ordering_key=st.one_of(st.text(max_size=1100), st.text(alphabet="ab", max_size=1100)),
)
def test_the_short_path_agrees_with_the_full_checks(data: bytes, ordering_key: str) -> None:
    # validate_message's short path (bytes, no attributes, ASCII key) must return what the
    # full checks return, and raise what they raise.
    topic = "projects/p/topics/t"
    try:
        expected: int | type[Exception] = _validate_in_full(data, {}, ordering_key, topic=topic)
    except (ValueError, TypeError, MessageTooLargeError) as error:
        expected = type(error)
    try:
        got: int | type[Exception] = validate_message(data, {}, ordering_key, topic=topic)
    except (ValueError, TypeError, MessageTooLargeError) as error:
        got = type(error)
    assert got == expected
    if isinstance(got, int):
        assert got == pubsub_pb2.PubsubMessage(data=data, ordering_key=ordering_key).ByteSize()
