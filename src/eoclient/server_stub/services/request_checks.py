"""Door-side checks of requests, before anything reaches the broker core.

The core validates what it models (names, ranges of deadlines, retention, backoffs, ...).
What it stores without modelling — and every value that must later be rendered back,
over gRPC and as proto3 JSON — is checked here, so that no request can make a later read
fail: a Timestamp, Duration or Struct anywhere in a request (including the opaque
``extras`` a resource keeps, e.g. ``cloud_storage_config.max_duration``) must be one
proto3 JSON can render. protobuf's own JSON printer is the oracle (``ToJsonString`` /
``MessageToDict`` raise ValueError exactly when a value cannot be rendered):

* Timestamp: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z, nanos 0..999999999;
* Duration: ±315,576,000,000 s (10,000 years), nanos ±999,999,999 with the seconds' sign;
* Struct / Value: no NaN or infinite ``number_value``.

Refused values are INVALID_ARGUMENT naming the field (proto field names, dotted, with
list indexes and map keys: ``subscription.expiration_policy.ttl``).

Ack ids are screened too (``plausible_ack_id``): the service issues printable-ASCII ids of
bounded length, so anything else cannot be one of its ids and is failed (exactly-once) or
ignored without reaching the core's parser.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from eoclient.errors import InvalidArgument

# Ack ids the reference server issues are "{uid}-{seq}-{generation}" (< 64 characters); the
# real service's are opaque printable ASCII of about 200 characters
# (docs/protocol.md#ack-ids-and-generations; google-cloud-go#20391 saw > 210). 512 leaves
# room for both, and keeps a digit run far below the 4,300 digits where int() refuses to
# parse (CPython's int_max_str_digits).
MAX_ACK_ID_LENGTH = 512
# The printable ASCII characters (str.isprintable's answer for ASCII): space to tilde.
_PRINTABLE_ASCII = bytes(range(0x20, 0x7F))
# Modack seconds on a stream are checked before any id of the request is applied, so a
# refused request applies nothing (the range of ModifyAckDeadline:
# docs/protocol.md#streamingpull-requests).
MAX_MODACK_SECONDS = 600

_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
_STRUCTS = frozenset(
    {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
)
_RENDERED_LEAVES = frozenset({_TIMESTAMP, _DURATION}) | _STRUCTS
# Fields the server ignores (neither stored nor rendered): not checked, and not walked,
# which keeps Publish (up to 1,000 messages per request) free of any walk at all.
_IGNORED_FIELDS = frozenset({"google.pubsub.v1.PubsubMessage.publish_time"})


def decode(message_type: type[Message], raw: bytes) -> Message:
    """Parse a request; undecodable bytes (corrupt wire format, invalid UTF-8 in a string
    field, nesting past protobuf's recursion limit) are INVALID_ARGUMENT."""
    try:
        return message_type.FromString(raw)
    except DecodeError as error:
        raise InvalidArgument(
            f"Invalid request: the bytes are not a valid {message_type.DESCRIPTOR.full_name} "
            f"({_decode_reason(error)})."
        ) from error


def _decode_reason(error: DecodeError) -> str:
    # protobuf says "Error parsing message with type 'X': Wire format was corrupt".
    return str(error).rpartition(": ")[2] or "corrupt"


def plausible_ack_id(ack_id: str) -> bool:
    """Could ``ack_id`` have been issued by the service (printable ASCII, bounded)?"""
    return 0 < len(ack_id) <= MAX_ACK_ID_LENGTH and ack_id.isascii() and ack_id.isprintable()


def all_plausible_ack_ids(ack_ids: Sequence[str]) -> bool:
    """``plausible_ack_id`` of every id, asked of the request at once: being ASCII and
    printable holds for a concatenation exactly when it holds for each part, so one
    joined string and the lengths' bounds answer for a thousand ids without a Python
    call for each. For ASCII, printable is 0x20-0x7E: deleting those bytes
    (``bytes.translate``, a table lookup a byte) leaves nothing exactly when every
    character is printable, several times faster than ``str.isprintable``'s Unicode
    lookups."""
    if not ack_ids:
        return True
    lengths = list(map(len, ack_ids))
    if min(lengths) == 0 or max(lengths) > MAX_ACK_ID_LENGTH:
        return False
    joined = "".join(ack_ids)
    return joined.isascii() and not joined.encode("ascii").translate(None, _PRINTABLE_ASCII)


def check_modack_seconds(field: str, seconds: int) -> None:
    if not 0 <= seconds <= MAX_MODACK_SECONDS:
        raise InvalidArgument(
            f"Invalid value at '{field}': {seconds}. Ack deadlines are between 0 (nack) and "
            f"{MAX_MODACK_SECONDS} seconds."
        )


@dataclass(frozen=True)
class _Walk:
    """The fields of one message type that can hold a value to check."""

    leaves: tuple[FieldDescriptor, ...]  # Timestamp, Duration, Struct, Value, ListValue
    nested: tuple[FieldDescriptor, ...]  # other messages with such fields inside


@functools.cache
def _walk_of(descriptor: Descriptor) -> _Walk:
    leaves: list[FieldDescriptor] = []
    nested: list[FieldDescriptor] = []
    for field in descriptor.fields:
        target = _value_type(field)
        if target is None or field.full_name in _IGNORED_FIELDS:
            continue
        if target.full_name in _RENDERED_LEAVES:
            leaves.append(field)
        elif _may_hold_leaves(target, frozenset({descriptor.full_name})):
            nested.append(field)
    return _Walk(tuple(leaves), tuple(nested))


def _value_type(field: FieldDescriptor) -> Descriptor | None:
    """The message type a field holds (a map's value type for maps), or None."""
    message = field.message_type
    if message is None:
        return None
    if message.GetOptions().map_entry:
        return message.fields_by_name["value"].message_type
    return message


def _may_hold_leaves(descriptor: Descriptor, seen: frozenset[str]) -> bool:
    if descriptor.full_name in _RENDERED_LEAVES:
        return True
    if descriptor.full_name in seen:
        return False
    for field in descriptor.fields:
        target = _value_type(field)
        if (
            target is not None
            and field.full_name not in _IGNORED_FIELDS
            and _may_hold_leaves(target, seen | {descriptor.full_name})
        ):
            return True
    return False


def _values(message: Message, field: FieldDescriptor, path: str) -> Iterator[tuple[str, Any]]:
    """(path, value) of each value a message field holds (one, a list, or a map's)."""
    where = f"{path}.{field.name}" if path else field.name
    value = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        for key in value:
            yield f"{where}[{key!r}]", value[key]
    elif field.is_repeated:
        for index, item in enumerate(value):
            yield f"{where}[{index}]", item
    elif message.HasField(field.name):
        yield where, value


def check_renderable(message: Message, path: str = "") -> None:
    """Refuse (INVALID_ARGUMENT, naming the field) any value proto3 JSON cannot render."""
    walk = _walk_of(message.DESCRIPTOR)
    for field in walk.leaves:
        for where, value in _values(message, field, path):
            _check_leaf(where, value)
    for field in walk.nested:
        for where, value in _values(message, field, path):
            check_renderable(value, where)


def _check_leaf(where: str, value: Message) -> None:
    kind = value.DESCRIPTOR.full_name
    try:
        if kind in _STRUCTS:
            json_format.MessageToDict(value)
        else:
            value.ToJsonString()  # type: ignore[attr-defined]
    except ValueError as error:
        raise InvalidArgument(f"Invalid value at '{where}' ({kind}): {_reason(error)}") from error


def _reason(error: ValueError) -> str:
    text = str(error)
    for prefix in ("Timestamp is not valid: ", "Duration is not valid: "):
        text = text.removeprefix(prefix)
    return text.rstrip(".") + "."
