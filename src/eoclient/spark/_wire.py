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
objects give. What it keeps from the SDK's rules: ``publish_time`` is the message's
``publish_time`` truncated to microseconds (Spark's timestamp precision), in UTC;
``delivery_attempt`` is the ``ReceivedMessage`` field (0 without a dead-letter policy).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

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
