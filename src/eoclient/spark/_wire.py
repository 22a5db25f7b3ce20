"""A Pull response straight to an Arrow record batch: no ``Message`` object per row.

The SDK's ``SubscriberClient.pull`` turns every ``ReceivedMessage`` into a
:class:`~eoclient.subscriber.Message` (a dataclass with its own attribute dict and an ack
sink), and the source then copied each field out of those again into Arrow columns: about
8 µs a message here, the largest cost of the old driver-side reader. This module reads the
columns out of the parsed ``PullResponse`` (the generated ``eoclient._proto`` classes; the
bytes are parsed by protobuf's C implementation) into Arrow arrays in one pass per field.

The SDK's decoding stays the reference: ``tests/spark/test_wire.py`` checks, field by field
and for awkward values (no or many attributes, non-ASCII, empty data, nanoseconds below a
microsecond, delivery attempts), that this gives exactly the rows the SDK's ``Message``
objects give. Two ways, the same rows:

* :func:`decode_bytes`, the read tasks' and the probe's: the response's bytes parsed *as
  columns*. The wire format merges a singular sub-message that occurs more than once and
  appends to its repeated fields, so parsing a ``PullResponse`` as ``PullColumns`` (below:
  the same field numbers, each delivery's fields declared ``repeated`` inside one merged
  message) gives every delivery's ack id, message id, data, times and map entries as one
  list each, all in protobuf's C parser, with no Python object per delivery but the values
  themselves (touching each field through upb's wrappers was ~2 µs a message, the largest
  part of a read task's CPU); the Timestamps and the map entries are merged the same way
  (all seconds, all nanos, all keys, all values: no bytes object per delivery or entry,
  ~0.15 µs a message less than parsing each again). A field that is absent on the wire for
  some deliveries only (proto3 omits empty values: empty data, an empty ordering key, nanos
  of 0) would shift its column, and the map entries carry no delivery boundary; so the
  columns are used only when each has one value per delivery (or none at all; nanos of 0:
  placed by the Timestamps' sizes, from a second parse), and the entries are assigned to
  their deliveries by size: a delivery's message is exactly its fields' encodings, so its
  bytes minus its other fields' is its entries' (``_attribute_offsets``). Anything that does
  not add up (an omitted value, an unknown field, a non-minimal encoding) falls back to...
* :func:`decode`, the parsed ``PullResponse`` read field by field.

What it keeps from the SDK's rules: ``publish_time`` is the message's
``publish_time`` truncated to microseconds (Spark's timestamp precision), in UTC;
``delivery_attempt`` is the ``ReceivedMessage`` field (0 without a dead-letter policy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from eoclient._proto import pubsub_pb2
from eoclient.spark._schema import WIRE_SCHEMA


@dataclass(frozen=True, slots=True)
class Received:
    """One Pull response's deliveries as columns.

    ``rows`` has the journal's row columns plus ``ack_id`` (``WIRE_SCHEMA``), one row per
    delivery in the response's order; the Python lists repeat the three columns the
    source's decisions read (admission: ``eoclient.spark._decisions``), so those are not
    converted back out of Arrow.
    """

    rows: pa.RecordBatch
    message_ids: list[str]
    ack_ids: list[str]
    publish_ns: list[int]

    def __len__(self) -> int:
        return len(self.ack_ids)


def decode(response: pubsub_pb2.PullResponse) -> Received:
    """The deliveries of ``response`` as an Arrow record batch (``WIRE_SCHEMA``)."""
    received = response.received_messages
    messages = [delivery.message for delivery in received]
    message_ids = [message.message_id for message in messages]
    ack_ids = [delivery.ack_id for delivery in received]
    times = [message.publish_time for message in messages]
    publish_ns = [time.seconds * 1_000_000_000 + time.nanos for time in times]
    # map<string,string> from flat keys and values with offsets: building it from a dict
    # per row costs twice as much (most of this function's time is the attributes). A key
    # then a lookup, not items(): the protobuf map's items() is the generic Mapping mixin,
    # which walks it in Python (2.5x slower here).
    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    for message in messages:
        attributes = message.attributes
        if attributes:
            for key in attributes:
                keys.append(key)
                values.append(attributes[key])
        offsets.append(len(keys))
    attributes_array = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        type=WIRE_SCHEMA.field("attributes").type,
    )
    rows = pa.RecordBatch.from_arrays(
        [
            pa.array(message_ids, pa.string()),
            pa.array([message.data for message in messages], pa.binary()),
            attributes_array,
            pa.array([message.ordering_key for message in messages], pa.string()),
            # ns // 1000 == seconds * 10**6 + nanos // 1000: the SDK's microseconds.
            pa.array([ns // 1000 for ns in publish_ns], pa.int64()).cast(
                WIRE_SCHEMA.field("publish_time").type
            ),
            pa.array([delivery.delivery_attempt for delivery in received], pa.int32()),
            pa.array(ack_ids, pa.string()),
        ],
        schema=WIRE_SCHEMA,
    )
    return Received(rows, message_ids, ack_ids, publish_ns)


# ------------------------------------------------------------------- columnar parsing


def _column_classes() -> tuple[Any, Any, Any]:
    """``PullColumns``, ``PullMessages``, ``PullTimes``: views of
    google.pubsub.v1's ``PullResponse`` (``ReceivedMessage``, ``PubsubMessage``,
    ``Timestamp``, map entries) with the same field numbers and wire types, in a descriptor
    pool of their own."""
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="eoclient/spark/pull_columns.proto",
        package="eoclient.spark.columns",
        syntax="proto3",
    )
    many, one = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    views: dict[str, list[tuple[int, str, int, int, str]]] = {
        # PullResponse.received_messages (1), as ONE merged ReceivedMessage.
        "PullColumns": [(1, "received", field.TYPE_MESSAGE, one, "ReceivedColumns")],
        "ReceivedColumns": [
            (1, "ack_id", field.TYPE_STRING, many, ""),
            (2, "message", field.TYPE_MESSAGE, one, "MessageColumns"),
            (3, "delivery_attempt", field.TYPE_INT32, many, ""),
        ],
        "MessageColumns": [
            (1, "data", field.TYPE_BYTES, many, ""),
            # Every map entry merged into one: all keys, all values.
            (2, "attributes", field.TYPE_MESSAGE, one, "EntryColumns"),
            (3, "message_id", field.TYPE_STRING, many, ""),
            # Every delivery's Timestamp merged into one: all seconds, all nanos.
            (4, "publish_time", field.TYPE_MESSAGE, one, "TimeColumns"),
            (5, "ordering_key", field.TYPE_STRING, many, ""),
        ],
        # The Timestamps as one merged Timestamp.
        "TimeColumns": [
            (1, "seconds", field.TYPE_INT64, many, ""),
            (2, "nanos", field.TYPE_INT32, many, ""),
        ],
        # Each delivery's Timestamp as bytes, where some omit nanos (0): a Timestamp
        # longer than its seconds' field holds nanos.
        "PullTimes": [(1, "received", field.TYPE_MESSAGE, one, "ReceivedTimes")],
        "ReceivedTimes": [(2, "message", field.TYPE_MESSAGE, one, "MessageTimes")],
        "MessageTimes": [(4, "publish_time", field.TYPE_BYTES, many, "")],
        # Each delivery's PubsubMessage as bytes (their sizes place the map entries).
        "PullMessages": [(1, "received", field.TYPE_MESSAGE, one, "MessageBytes")],
        "MessageBytes": [(2, "message", field.TYPE_BYTES, many, "")],
        # The map entries as one merged entry.
        "EntryColumns": [
            (1, "key", field.TYPE_STRING, many, ""),
            (2, "value", field.TYPE_STRING, many, ""),
        ],
    }
    for name, fields in views.items():
        message = file.message_type.add(name=name)
        for number, field_name, kind, label, type_name in fields:
            added = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".eoclient.spark.columns.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(  # type: ignore[return-value]
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{file.package}.{name}"))
        for name in ("PullColumns", "PullMessages", "PullTimes")
    )


_PullColumns, _PullMessages, _PullTimes = _column_classes()
# Seconds whose nanoseconds since the epoch overflow an int64.
_MAX_SECONDS = (2**63 - 1) // 1_000_000_000


# The smallest value of each varint size beyond one byte: 2**7, 2**14, ..., 2**63.
_VARINT_STEPS = np.array([1 << bits for bits in range(7, 64, 7)], np.uint64)


def _varint_size(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Bytes of each value's varint encoding (negative int64s take ten): one search per
    array (a comparison per size was ~30 µs a response more)."""
    sizes: np.ndarray[Any, Any] = 1 + np.searchsorted(
        _VARINT_STEPS, values.astype(np.uint64), side="right"
    )
    return sizes


def _field_size(lengths: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Bytes of length-delimited fields (numbers below 16: one tag byte) of ``lengths``."""
    sizes: np.ndarray[Any, Any] = 1 + _varint_size(lengths) + lengths
    return sizes


def _lengths(array: pa.Array) -> np.ndarray[Any, Any]:
    offsets = np.frombuffer(array.buffers()[1], np.int32, len(array) + 1, array.offset * 4)
    return np.diff(offsets).astype(np.int64)


def _attribute_offsets(
    message_sizes: np.ndarray[Any, Any],
    other_fields: np.ndarray[Any, Any],
    entry_sizes: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any] | None:
    """The map's offsets (where each delivery's entries start and end in the concatenated
    entries), or ``None`` if the sizes do not add up.

    A delivery's message is its fields' encodings and nothing else, so its entries take
    ``message_sizes - other_fields`` bytes; those must end exactly where entries end.
    """
    attribute_bytes = message_sizes - other_fields
    if len(attribute_bytes) and attribute_bytes.min() < 0:
        return None
    ends = np.concatenate(([0], np.cumsum(attribute_bytes)))
    entry_ends = np.concatenate(([0], np.cumsum(entry_sizes)))
    if ends[-1] != entry_ends[-1]:
        return None
    offsets = np.searchsorted(entry_ends, ends)
    if offsets[-1] >= len(entry_ends) or not np.array_equal(entry_ends[offsets], ends):
        return None
    return offsets.astype(np.int32)


def _columns(raw: bytes) -> Received | None:
    """``raw`` (a serialized ``PullResponse``) as columns, or ``None`` where a column
    does not have exactly one value per delivery."""
    received = _PullColumns.FromString(raw).received
    message = received.message
    ack_ids: list[str] = list(received.ack_id)
    count = len(ack_ids)
    message_ids: list[str] = list(message.message_id)
    data = pa.array(list(message.data), pa.binary())
    time = message.publish_time
    seconds = np.fromiter(time.seconds, np.int64, len(time.seconds))
    ordering_keys = list(message.ordering_key)
    attempts = np.fromiter(received.delivery_attempt, np.int32, len(received.delivery_attempt))
    if not (
        len(message_ids) == len(data) == len(seconds) == count
        and len(ordering_keys) in (0, count)
        and len(attempts) in (0, count)
    ):
        return None
    # Nanoseconds since the epoch as int64 (decisions compare them): up to the year 2262.
    if count and seconds.max() >= _MAX_SECONDS:
        return None
    if len(time.nanos) == count:  # every Timestamp has both fields
        nanos = np.fromiter(time.nanos, np.int64, count)
        time_sizes = 2 + _varint_size(seconds) + _varint_size(nanos)
    else:
        # nanos is omitted when 0 (a whole second: 1 in 1,000 with millisecond publish
        # times): which Timestamps hold it, from their sizes (a second parse).
        times = list(_PullTimes.FromString(raw).received.message.publish_time)
        if len(times) != count:
            return None
        time_sizes = np.fromiter(map(len, times), np.int64, count)
        with_nanos = time_sizes > 1 + _varint_size(seconds)
        if int(with_nanos.sum()) != len(time.nanos):
            return None
        nanos = np.zeros(count, np.int64)
        nanos[with_nanos] = np.fromiter(time.nanos, np.int64, len(time.nanos))
    entries = message.attributes
    keys = pa.array(list(entries.key), pa.string())
    values = pa.array(list(entries.value), pa.string())
    # Every entry holds its key and its value, empty ones too (protobuf's encoders write
    # both for a map entry); one that did not would shift a column.
    if len(keys) != len(values):
        return None
    message_id_array = pa.array(message_ids, pa.string())
    ordering_key_array = pa.array(ordering_keys or [""] * count, pa.string())
    messages = _PullMessages.FromString(raw).received.message
    other_fields = (
        _field_size(_lengths(data))
        + _field_size(_lengths(message_id_array))
        + _field_size(time_sizes)
        + (_field_size(_lengths(ordering_key_array)) if ordering_keys else 0)
    )
    entry_sizes = _field_size(_field_size(_lengths(keys)) + _field_size(_lengths(values)))
    message_sizes = np.fromiter(map(len, messages), np.int64, len(messages))
    if len(message_sizes) != count:
        return None
    offsets = _attribute_offsets(message_sizes, other_fields, entry_sizes)
    if offsets is None:
        return None
    publish_ns = seconds * 1_000_000_000 + nanos
    rows = pa.RecordBatch.from_arrays(
        [
            message_id_array,
            data,
            pa.MapArray.from_arrays(
                pa.array(offsets, pa.int32()),
                keys,
                values,
                type=WIRE_SCHEMA.field("attributes").type,
            ),
            ordering_key_array,
            # ns // 1000 == seconds * 10**6 + nanos // 1000: the SDK's microseconds.
            pa.array(publish_ns // 1000, pa.int64()).cast(WIRE_SCHEMA.field("publish_time").type),
            pa.array(attempts if len(attempts) else np.zeros(count, np.int32), pa.int32()),
            pa.array(ack_ids, pa.string()),
        ],
        schema=WIRE_SCHEMA,
    )
    return Received(rows, message_ids, ack_ids, publish_ns.tolist())


def decode_bytes(raw: bytes) -> Received:
    """The deliveries of the serialized ``PullResponse`` ``raw``, as :func:`decode` gives
    them: by columns when they add up, else by :func:`decode`."""
    received = _columns(raw)
    if received is None:
        received = decode(pubsub_pb2.PullResponse.FromString(raw))
    return received
