"""Cloud Storage objects into messages: the three input formats of an import topic.

Pure: bytes in, ``IngestedMessage``s out, or ``ObjectParseError`` for an object that is
not of its format (docs/protocol.md#cloud-storage-ingestion):

* **text** (the default): the object split by the delimiter (``\\n`` unless set), one
  message per piece, its bytes the message's data. Empty pieces (a trailing delimiter,
  blank lines) make no message: a message needs data or attributes.
* **Avro** (an Avro object container file): one message per record, its data the record
  in Avro's binary encoding under the file's own schema — what a topic with that Avro
  schema and BINARY encoding validates.
* **Pub/Sub Avro** (what a Cloud Storage subscription writes in Avro): one message per
  record, restoring the exported message: its ``data`` field, its ``attributes`` map (when
  the file has one, written with ``write_metadata``), and the ordering key the export put
  among the attributes (``ORDERING_KEY_ATTRIBUTE``), which becomes the message's ordering
  key again. The export's own fields (subscription name, message id, publish time) are
  not restored: the ingested message is a new message with its own.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro

TEXT = "text"
AVRO = "avro"
PUBSUB_AVRO = "pubsub_avro"
DEFAULT_DELIMITER = "\n"
# The attribute a Cloud Storage subscription with write_metadata stores a message's
# ordering key in (the export keeps every property but data among the attributes).
ORDERING_KEY_ATTRIBUTE = "ordering_key"


@dataclass(frozen=True)
class IngestedMessage:
    data: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)
    ordering_key: str = ""


class ObjectParseError(ValueError):
    """An object that is not of the topic's input format (``avro``: the failure reason
    the service's IngestionFailureEvent gives it, ``AvroFailureReason``)."""


def text_messages(data: bytes, delimiter: str = DEFAULT_DELIMITER) -> Iterator[IngestedMessage]:
    for piece in data.split(delimiter.encode()):
        if piece:
            yield IngestedMessage(piece)


def _records(data: bytes) -> tuple[Any, Iterator[Any]]:
    """The writer schema and the records of an Avro container file."""
    try:
        reader = fastavro.reader(io.BytesIO(data))
        return reader.writer_schema, iter(reader)
    except Exception as error:  # fastavro raises many types for a bad header
        raise ObjectParseError(f"not an Avro object container file: {error}") from None


def _each(records: Iterator[Any]) -> Iterator[Any]:
    """The records, a corrupt block (bad sync marker, truncated data) as ObjectParseError."""
    while True:
        try:
            record = next(records)
        except StopIteration:
            return
        except Exception as error:
            raise ObjectParseError(f"corrupt Avro data block: {error}") from None
        yield record


def avro_messages(data: bytes) -> Iterator[IngestedMessage]:
    schema, records = _records(data)
    parsed = fastavro.parse_schema(schema)
    for record in _each(records):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        yield IngestedMessage(out.getvalue())


def pubsub_avro_messages(data: bytes) -> Iterator[IngestedMessage]:
    schema, records = _records(data)
    fields = {f["name"]: f for f in schema.get("fields", ())} if isinstance(schema, dict) else {}
    if "data" not in fields:
        raise ObjectParseError(
            "not written by a Cloud Storage subscription: its records have no 'data' field"
        )
    for record in _each(records):
        payload = record.get("data")
        if isinstance(payload, str):  # a topic schema's string field exported as data
            payload = payload.encode()
        if not isinstance(payload, bytes):
            raise ObjectParseError("a record's 'data' is neither bytes nor a string")
        attributes = dict(record.get("attributes") or {})
        ordering_key = str(attributes.pop(ORDERING_KEY_ATTRIBUTE, ""))
        yield IngestedMessage(payload, attributes, ordering_key)


def messages(data: bytes, input_format: str, delimiter: str) -> list[IngestedMessage]:
    """Every message of one object (ObjectParseError if it is not of ``input_format``)."""
    if input_format == AVRO:
        return list(avro_messages(data))
    if input_format == PUBSUB_AVRO:
        return list(pubsub_avro_messages(data))
    return list(text_messages(data, delimiter))
