"""The files of Cloud Storage exports, written as a batch fills
(docs/protocol.md#cloud-storage-file-formats).

* **Text** (``text_config``): each message's data followed by a newline; nothing else.
* **Avro** (``avro_config``): an Avro object container file (no codec) whose records are
  ``PubsubMessage`` (``data`` only) or, with ``write_metadata``, ``PubsubMessageWithMetadata``
  (``subscription_name``, ``message_id``, ``publish_time`` in microseconds, ``attributes``,
  ``data``; the ordering key joins the attributes as ``ordering_key``). With
  ``use_topic_schema`` the records are the messages decoded with the topic's Avro schema
  (the revision each message was published with), extended by the four metadata fields with
  ``write_metadata``.

A format encodes one message at a time (``encode``: ``Unwritable`` when it cannot, e.g. data
that is not a datum of the topic's schema), so the batch can weigh it before it is written;
a ``BatchFile`` appends encoded messages to a local file and finishes it (``close``). Avro
records go out in blocks of at most ``AVRO_BLOCK_BYTES``: memory stays bounded by one block.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import fastavro

from eoclient.server_stub.core import StoredMessage

TEXT_CONTENT_TYPE = "text/plain"
AVRO_CONTENT_TYPE = "application/avro"
AVRO_BLOCK_BYTES = 64 * 1024
# A text file is written through a buffer of this size (few write calls a batch).
FILE_BUFFER_BYTES = 1 << 20
ORDERING_KEY_ATTRIBUTE = "ordering_key"
METADATA_FIELDS = ("subscription_name", "message_id", "publish_time", "attributes")

# The two record schemas of the Cloud Storage subscription docs, field for field.
PUBSUB_MESSAGE_SCHEMA: Mapping[str, Any] = {
    "type": "record",
    "namespace": "com.google.pubsub",
    "name": "PubsubMessage",
    "fields": [{"name": "data", "type": "bytes"}],
}
_METADATA_FIELD_SCHEMAS: list[dict[str, Any]] = [
    {"name": "subscription_name", "type": "string"},
    {"name": "message_id", "type": "string"},
    {"name": "publish_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "attributes", "type": {"type": "map", "values": "string"}},
]
PUBSUB_MESSAGE_WITH_METADATA_SCHEMA: Mapping[str, Any] = {
    "type": "record",
    "namespace": "com.google.pubsub",
    "name": "PubsubMessageWithMetadata",
    "fields": [*_METADATA_FIELD_SCHEMAS, {"name": "data", "type": "bytes"}],
}


class Unwritable(ValueError):
    """This message cannot be written in this file format (the message says why)."""


class SchemaMismatch(ValueError):
    """The topic's schema cannot be used with the subscription's settings."""


class BatchFile(Protocol):
    path: Path

    def write(self, encoded: list[bytes]) -> None:
        """Append these encoded messages."""
        ...

    def close(self) -> None:
        """Finish the file (flushed; a closed file is complete)."""
        ...

    def discard(self) -> None:
        """Close and delete it."""
        ...


class FileFormat(Protocol):
    content_type: str

    def encode(self, message: StoredMessage) -> bytes: ...

    def open(self, path: Path) -> BatchFile: ...


# ------------------------------------------------------------------- text


class _PlainFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._out: BinaryIO = open(path, "wb", buffering=FILE_BUFFER_BYTES)  # noqa: SIM115

    def write(self, encoded: list[bytes]) -> None:
        self._out.write(b"".join(encoded))

    def close(self) -> None:
        self._out.close()

    def discard(self) -> None:
        self._out.close()
        with _suppress_missing():
            os.unlink(self.path)


class TextFormat:
    content_type = TEXT_CONTENT_TYPE

    def encode(self, message: StoredMessage) -> bytes:
        return message.data + b"\n"

    def open(self, path: Path) -> BatchFile:
        return _PlainFile(path)


# ------------------------------------------------------------------- Avro


def _long(value: int) -> bytes:
    """Avro's zig-zag varint."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _avro_bytes(value: bytes) -> bytes:
    return _long(len(value)) + value


class _AvroContainer:
    """An Avro object container file written block by block."""

    def __init__(self, path: Path, schema_json: str, sync: bytes) -> None:
        self.path = path
        self._sync = sync
        self._out: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close()
        metadata = {"avro.schema": schema_json.encode(), "avro.codec": b"null"}
        header = bytearray(b"Obj\x01")
        header += _long(len(metadata))
        for key, value in metadata.items():
            header += _avro_bytes(key.encode()) + _avro_bytes(value)
        header += _long(0) + sync
        self._out.write(header)
        self._block = bytearray()
        self._count = 0

    def write(self, encoded: list[bytes]) -> None:
        for record in encoded:
            self._block += record
            self._count += 1
            if len(self._block) >= AVRO_BLOCK_BYTES:
                self._flush()

    def _flush(self) -> None:
        if self._count:
            self._out.write(_long(self._count) + _long(len(self._block)))
            self._out.write(self._block)
            self._out.write(self._sync)
            self._block = bytearray()
            self._count = 0

    def close(self) -> None:
        if not self._out.closed:
            self._flush()
            self._out.close()

    def discard(self) -> None:
        self._out.close()
        with _suppress_missing():
            os.unlink(self.path)


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


def metadata_values(subscription: str, message: StoredMessage) -> dict[str, Any]:
    attributes = dict(message.attributes)
    if message.ordering_key:
        attributes[ORDERING_KEY_ATTRIBUTE] = message.ordering_key
    return {
        "subscription_name": subscription,
        "message_id": message.message_id,
        "publish_time": _micros(message.publish_time),
        "attributes": attributes,
    }


class AvroFormat:
    """Avro files of ``schema`` (a record schema document); ``record(message)`` gives a
    message's record (``Unwritable`` if it has none)."""

    content_type = AVRO_CONTENT_TYPE

    def __init__(
        self, schema: Mapping[str, Any], record: Any, *, sync: bytes | None = None
    ) -> None:
        self.schema = schema
        self.schema_json = json.dumps(schema, separators=(",", ":"))
        self._parsed = fastavro.parse_schema(json.loads(self.schema_json))
        self._record = record
        self._sync = sync
        self._buffer = io.BytesIO()

    def encode(self, message: StoredMessage) -> bytes:
        record = self._record(message)
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        try:
            fastavro.schemaless_writer(buffer, self._parsed, record)
        except Exception as error:  # fastavro raises several types for a bad value
            raise Unwritable(f"the record does not fit the file's Avro schema: {error}") from None
        return buffer.getvalue()

    def open(self, path: Path) -> BatchFile:
        return _AvroContainer(path, self.schema_json, self._sync or os.urandom(16))


def message_format(subscription: str, write_metadata: bool) -> AvroFormat:
    """The Avro format of the two fixed schemas."""
    if not write_metadata:
        return AvroFormat(PUBSUB_MESSAGE_SCHEMA, lambda message: {"data": message.data})

    def record(message: StoredMessage) -> dict[str, Any]:
        values = metadata_values(subscription, message)
        values["data"] = message.data
        return values

    return AvroFormat(PUBSUB_MESSAGE_WITH_METADATA_SCHEMA, record)


def topic_schema_format(
    subscription: str, definition: str, encoding: str, write_metadata: bool
) -> AvroFormat:
    """The Avro format of a topic's Avro schema revision (``SchemaMismatch`` when it cannot
    be one: not a record with ``write_metadata``, or a record with a metadata field's name).
    ``encoding`` is how messages carry their datum, ``JSON`` or ``BINARY``."""
    try:
        document = json.loads(definition)
        parsed = fastavro.parse_schema(json.loads(definition))
    except Exception as error:
        raise SchemaMismatch(f"the topic's schema is not a valid Avro schema: {error}") from None
    schema = document
    if write_metadata:
        if not isinstance(document, dict) or document.get("type") != "record":
            raise SchemaMismatch(
                "with write_metadata, the topic's Avro schema must be a record, to which the "
                "metadata fields are added"
            )
        names = {field.get("name") for field in document.get("fields", [])}
        clash = sorted(names & set(METADATA_FIELDS))
        if clash:
            raise SchemaMismatch(
                f"the topic's Avro schema already has field(s) {', '.join(clash)}, which "
                "write_metadata adds"
            )
        schema = {**document, "fields": [*document.get("fields", []), *_METADATA_FIELD_SCHEMAS]}

    def record(message: StoredMessage) -> Any:
        value: Any
        try:
            if encoding == "BINARY":
                stream = io.BytesIO(message.data)
                value = fastavro.schemaless_reader(stream, parsed, None)
                if stream.tell() != len(message.data):
                    raise ValueError("bytes follow the datum")
            else:
                [value] = list(fastavro.json_reader(io.StringIO(message.data.decode()), parsed))
        except Exception as error:
            raise Unwritable(
                f"message {message.message_id} is not a datum of the topic's Avro schema "
                f"({encoding}): {error}"
            ) from None
        if write_metadata:
            value = {**value, **metadata_values(subscription, message)}
        return value

    return AvroFormat(schema, record)


class _suppress_missing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, FileNotFoundError)
