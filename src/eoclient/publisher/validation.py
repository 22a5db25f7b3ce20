"""Checks a message must pass before it is batched, and its exact encoded size.

Pure functions: no I/O, no protobuf objects. Messages are described by their three
publisher-set fields, ``data``, ``attributes`` and ``ordering_key``; ``message_id``
and ``publish_time`` are server-assigned and never set by a publisher
(docs/protocol.md#publish-limits).

Limits and their sources (the "Resource limits" table of
https://cloud.google.com/pubsub/quotas, quoted in google-cloud-python#2774 and
java-pubsub#2312, and confirmed by the real service's error texts quoted in
apache/beam#23022 and java-pubsub#2312, which count **bytes** of UTF-8):

===============================  ==============  =========================================
limit                            value           check here
===============================  ==============  =========================================
PublishRequest size              10,000,000 B    one message alone must fit (MessageTooLargeError)
messages per PublishRequest      1000            enforced by the batcher / BatchSettings
attributes per message           100             ValueError
attribute key                    256 B           ValueError
attribute value                  1024 B          ValueError
ordering key                     1024 B (1 KB)   ValueError (the field's documentation)
empty message                    —               ValueError ("Some messages are empty",
                                                 the service's text; PubsubMessage docs:
                                                 "must contain either a non-empty data
                                                 field or at least one attribute")
===============================  ==============  =========================================

Not checked, on purpose: attribute keys starting with ``goog``. That rule is
documented for resource *names* (docs/protocol.md#resource-names), not for attribute keys, and the
official Python client itself publishes ``googclient_``-prefixed attributes when
OpenTelemetry tracing is on (``open_telemetry/context_propagation.py``), so the real
service must accept them.

Encoded sizes (protobuf wire format, https://protobuf.dev/programming-guides/encoding/):
a length-delimited field with a field number below 16 costs one tag byte, then the
length as a varint, then the bytes. Proto3 omits empty scalar fields, but a map entry
is a nested message that always carries both its key (field 1) and value (field 2),
even when empty (the upb runtime in use does so; the tests pin it). So, with
``ld(n) = 1 + varint_size(n) + n``::

    encoded_message_size = (ld(len(data))          if data          else 0)   # field 1
                         + sum(ld(ld(len(k)) + ld(len(v))) for k, v in attributes)  # field 2
                         + (ld(len(ordering_key))  if ordering_key  else 0)   # field 5

    request_entry_size(m)  = ld(m)            # PublishRequest.messages, field 2
    request_overhead(topic) = ld(len(topic))  # PublishRequest.topic, field 1 (0 if empty)

and ``PublishRequest(topic, messages).ByteSize() == request_overhead(topic) +
sum(request_entry_size(encoded_message_size(m)) for m in messages)``; the tests check
this against the protobuf runtime. Lengths are UTF-8 byte counts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from eoclient.errors import MessageTooLargeError

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTE_KEY_BYTES",
    "MAX_ATTRIBUTE_VALUE_BYTES",
    "MAX_ORDERING_KEY_BYTES",
    "MAX_PUBLISH_REQUEST_BYTES",
    "MAX_PUBLISH_REQUEST_MESSAGES",
    "encoded_message_size",
    "max_message_size",
    "request_entry_size",
    "request_overhead",
    "validate_message",
    "varint_size",
]

# Server limits (module docstring). 10,000,000 is decimal: Python's
# _SERVER_PUBLISH_MAX_BYTES = 10 * 1000 * 1000 and Go's MaxPublishRequestBytes = 1e7
# (docs/protocol.md#publish-limits).
MAX_PUBLISH_REQUEST_BYTES = 10 * 1000 * 1000
MAX_PUBLISH_REQUEST_MESSAGES = 1000
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024

# One tag byte: (field_number << 3) | wire_type fits in 7 bits for field numbers < 16,
# which covers every field used here (PubsubMessage 1, 2, 5; map entry 1, 2;
# PublishRequest 1, 2).
_TAG_BYTES = 1


def varint_size(value: int) -> int:
    """Bytes taken by a non-negative integer encoded as a protobuf varint (7 bits a byte)."""
    if value < 0:
        raise ValueError(f"varint_size: value must be >= 0, got {value!r}")
    return max(1, (value.bit_length() + 6) // 7)


def _length_delimited(length: int) -> int:
    """Size of one length-delimited field (tag + length varint + payload)."""
    return _TAG_BYTES + varint_size(length) + length


def _utf8_len(owner: str, text: object) -> int:
    if not isinstance(text, str):
        raise TypeError(f"{owner} must be a str, got {type(text).__name__} {text!r:.60}")
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogates cannot go on the wire
        raise ValueError(f"{owner} {text!r:.60} is not valid UTF-8 text: {exc.reason}") from None


def encoded_message_size(data: bytes, attributes: Mapping[str, str], ordering_key: str) -> int:
    """``PubsubMessage(data=..., attributes=..., ordering_key=...).ByteSize()``, exactly.

    The formula is in the module docstring. This is the size flow control counts.

    Raises:
        TypeError: ``data`` is not ``bytes``, or a key, value or the ordering key
            is not a ``str``.
        ValueError: a string cannot be encoded as UTF-8.
    """
    # bytes only, as the official client ("Data being published to Pub/Sub must be sent
    # as a bytestring"): a str would otherwise be a silent choice of encoding.
    if not isinstance(data, bytes):
        raise TypeError(
            f"message data must be bytes, got {type(data).__name__}; encode text first, "
            "e.g. text.encode('utf-8')"
        )
    size = _length_delimited(len(data)) if data else 0
    for key, value in attributes.items():
        entry = _length_delimited(_utf8_len("attribute key", key)) + _length_delimited(
            _utf8_len(f"the value of attribute {key!r}", value)
        )
        size += _length_delimited(entry)
    key_len = _utf8_len("ordering_key", ordering_key)
    if key_len:
        size += _length_delimited(key_len)
    return size


def request_entry_size(message_size: int) -> int:
    """What a message of encoded size ``message_size`` adds to a ``PublishRequest``."""
    return _length_delimited(message_size)


def request_overhead(topic: str) -> int:
    """``PublishRequest(topic=topic).ByteSize()``: the request size before any message."""
    topic_len = _utf8_len("topic", topic)
    return _length_delimited(topic_len) if topic_len else 0


@functools.lru_cache(maxsize=1024)  # depends on the topic only; asked once per message
def max_message_size(topic: str) -> int:
    """The largest ``encoded_message_size`` that fits alone in a request to ``topic``.

    The largest ``m`` with ``request_overhead(topic) + request_entry_size(m)`` <=
    ``MAX_PUBLISH_REQUEST_BYTES``.
    """
    return _largest_payload(MAX_PUBLISH_REQUEST_BYTES - request_overhead(topic) - _TAG_BYTES)


def _largest_payload(room: int) -> int:
    """The largest ``m >= 0`` with ``varint_size(m) + m <= room`` (``room >= 1``)."""
    # m + varint_size(m) is strictly increasing in m. Start from room - varint_size(room),
    # which always fits (varint_size(m) <= varint_size(room)); one more fits exactly when
    # m + 1 needs one varint byte fewer than room (e.g. room 128 -> 127).
    m = room - varint_size(room)
    if m + 1 + varint_size(m + 1) <= room:
        m += 1
    return m


def validate_message(
    data: bytes, attributes: Mapping[str, str], ordering_key: str, *, topic: str
) -> int:
    """Check a message against the service's limits; return its encoded size.

    The common message (bytes of data, no attributes, an ASCII ordering key or none)
    takes a short path with the same result: this runs once per publish, and the full
    checks were the publisher's largest own cost per message (benchmarks/publisher.py
    profile). Anything else, and anything over a limit, goes the full way, which
    raises with the full explanation.
    """
    if attributes or type(data) is not bytes or not data or type(ordering_key) is not str:
        return _validate_in_full(data, attributes, ordering_key, topic=topic)
    length = len(data)
    # 1 tag byte + the length's varint (1 byte below 128) + the bytes (module docstring).
    size = 1 + (1 if length < 128 else varint_size(length)) + length
    if ordering_key:
        # For ASCII text the UTF-8 byte count is the character count.
        key_len = len(ordering_key)
        if key_len > MAX_ORDERING_KEY_BYTES or not ordering_key.isascii():
            return _validate_in_full(data, attributes, ordering_key, topic=topic)
        size += 1 + (1 if key_len < 128 else varint_size(key_len)) + key_len
    if size > max_message_size(topic):
        return _validate_in_full(data, attributes, ordering_key, topic=topic)
    return size


def _validate_in_full(
    data: bytes, attributes: Mapping[str, str], ordering_key: str, *, topic: str
) -> int:
    """:func:`validate_message`, every check spelled out (the short path's reference).

    Checks, in order: types, empty message, ordering key length, attribute count, each
    attribute key and value length, and that the message alone fits in one
    ``PublishRequest`` to ``topic``.

    Returns:
        ``encoded_message_size(data, attributes, ordering_key)``, for flow control
        and the batcher.

    Raises:
        TypeError: a field has the wrong type (see :func:`encoded_message_size`).
        ValueError: the message breaks one of the limits in the module docstring; the
            message names the field, its size and the limit.
        MessageTooLargeError: the message cannot fit in any ``PublishRequest``.
    """
    size = encoded_message_size(data, attributes, ordering_key)
    if not data and not attributes:
        raise ValueError(
            "a message must contain either non-empty data or at least one attribute "
            "(the service rejects empty messages)"
        )
    key_len = _utf8_len("ordering_key", ordering_key)
    if key_len > MAX_ORDERING_KEY_BYTES:
        raise ValueError(
            f"ordering_key is {key_len} bytes of UTF-8; the limit is {MAX_ORDERING_KEY_BYTES}"
        )
    if len(attributes) > MAX_ATTRIBUTES:
        raise ValueError(
            f"a message may have at most {MAX_ATTRIBUTES} attributes, got {len(attributes)}"
        )
    for key, value in attributes.items():
        length = _utf8_len("attribute key", key)
        if length > MAX_ATTRIBUTE_KEY_BYTES:
            raise ValueError(
                f"attribute key {key[:32]!r}... is {length} bytes of UTF-8; "
                f"the limit is {MAX_ATTRIBUTE_KEY_BYTES}"
            )
        length = _utf8_len("attribute value", value)
        if length > MAX_ATTRIBUTE_VALUE_BYTES:
            raise ValueError(
                f"the value of attribute {key!r} is {length} bytes of UTF-8; "
                f"the limit is {MAX_ATTRIBUTE_VALUE_BYTES}"
            )
    limit = max_message_size(topic)
    if size > limit:
        raise MessageTooLargeError(
            f"the message is {size} bytes encoded; with the topic name a PublishRequest "
            f"holding it would exceed the server's limit of {MAX_PUBLISH_REQUEST_BYTES} "
            f"bytes (at most {limit} bytes of message fit in a request to {topic})"
        )
    return size
