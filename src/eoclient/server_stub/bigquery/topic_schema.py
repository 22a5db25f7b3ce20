"""A topic's Avro or protobuf schema as columns: its fields, their compatibility with a
table, and messages decoded into values (``use_topic_schema``).

The schema is compiled with the tools the schema registry uses (``core/schema_codecs``:
``fastavro``, and protoc for protobuf), once per definition (``compiled``, cached).

Compatibility (docs/protocol.md#bigquery-topic-schema-compatibility): a field maps to the
column of the same name (case-insensitive) when its type may go to the column's type by
the tables below; an optional field (an Avro union with null, a protobuf field with
presence) needs a NULLABLE column; a required one may go to either; a table column the
schema lacks must be NULLABLE; a schema field the table lacks needs
``drop_unknown_fields``. A union of other shapes and a protobuf ``oneof`` map to nothing.

| Avro | BigQuery |
|---|---|
| boolean | BOOL |
| int, long | INT64, NUMERIC, BIGNUMERIC |
| float, double | FLOAT64, NUMERIC, BIGNUMERIC |
| bytes | BYTES, NUMERIC, BIGNUMERIC |
| string | STRING, JSON, TIMESTAMP, DATETIME, DATE, TIME, NUMERIC, BIGNUMERIC |
| record | RECORD |
| array of T | REPEATED T |
| map of V | REPEATED RECORD<key STRING, value V> |
| union of null and T | NULLABLE T |
| fixed | BYTES |
| enum | INT64 (the symbol's position) |
| timestamp-micros / -millis, date, time-micros / -millis | TIMESTAMP, DATE, TIME |
| local-timestamp-micros / -millis | DATETIME |
| decimal | NUMERIC, BIGNUMERIC |
| uuid | STRING |

| protobuf | BigQuery |
|---|---|
| double, float | FLOAT64, NUMERIC, BIGNUMERIC |
| int32, uint32, fixed32, sfixed32 | INT64, NUMERIC, BIGNUMERIC, DATE |
| sint32 | INT64, NUMERIC, BIGNUMERIC |
| int64, sint64, sfixed64 | INT64, NUMERIC, BIGNUMERIC, DATE, DATETIME, TIMESTAMP |
| uint64, fixed64 | NUMERIC, BIGNUMERIC |
| bool | BOOL |
| string | STRING, JSON, TIMESTAMP, DATETIME, DATE, TIME, NUMERIC, BIGNUMERIC |
| bytes | BYTES, NUMERIC, BIGNUMERIC |
| enum | INT64 (the value's number) |
| message | RECORD |
| map<K, V> | REPEATED RECORD<key K, value V> |
| repeated T | REPEATED T |
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
from google.protobuf import descriptor, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message

from eoclient.server_stub.bigquery.table_schema import (
    BIGNUMERIC,
    BOOL,
    BYTES,
    DATE,
    DATETIME,
    FLOAT64,
    INT64,
    JSON_TYPE,
    NUMERIC,
    RECORD,
    STRING,
    TIME,
    TIMESTAMP,
    Field,
    find,
)
from eoclient.server_stub.core.schema_codecs import (
    AVRO,
    BINARY,
    PROTOCOL_BUFFER,
    SchemaError,
    compile_proto,
)

# The fields change data capture reads from a message: never columns of the table.
CHANGE_TYPE = "_CHANGE_TYPE"
CHANGE_SEQUENCE_NUMBER = "_CHANGE_SEQUENCE_NUMBER"
CDC_FIELDS = (CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER)

_NUMBERS = (NUMERIC, BIGNUMERIC)
_FROM_STRING = (STRING, JSON_TYPE, TIMESTAMP, DATETIME, DATE, TIME, *_NUMBERS)
_AVRO_TYPES: dict[str, tuple[str, ...]] = {
    "boolean": (BOOL,),
    "int": (INT64, *_NUMBERS),
    "long": (INT64, *_NUMBERS),
    "float": (FLOAT64, *_NUMBERS),
    "double": (FLOAT64, *_NUMBERS),
    "bytes": (BYTES, *_NUMBERS),
    "string": _FROM_STRING,
    "fixed": (BYTES,),
    "enum": (INT64,),
    "timestamp-micros": (TIMESTAMP,),
    "timestamp-millis": (TIMESTAMP,),
    "local-timestamp-micros": (DATETIME,),
    "local-timestamp-millis": (DATETIME,),
    "date": (DATE,),
    "time-micros": (TIME,),
    "time-millis": (TIME,),
    "decimal": _NUMBERS,
    "uuid": (STRING,),
}
_D = descriptor.FieldDescriptor
_PROTO_TYPES: dict[int, tuple[str, tuple[str, ...]]] = {
    _D.TYPE_DOUBLE: ("double", (FLOAT64, *_NUMBERS)),
    _D.TYPE_FLOAT: ("float", (FLOAT64, *_NUMBERS)),
    _D.TYPE_INT32: ("int32", (INT64, *_NUMBERS, DATE)),
    _D.TYPE_UINT32: ("uint32", (INT64, *_NUMBERS, DATE)),
    _D.TYPE_FIXED32: ("fixed32", (INT64, *_NUMBERS, DATE)),
    _D.TYPE_SFIXED32: ("sfixed32", (INT64, *_NUMBERS, DATE)),
    _D.TYPE_SINT32: ("sint32", (INT64, *_NUMBERS)),
    _D.TYPE_INT64: ("int64", (INT64, *_NUMBERS, DATE, DATETIME, TIMESTAMP)),
    _D.TYPE_SINT64: ("sint64", (INT64, *_NUMBERS, DATE, DATETIME, TIMESTAMP)),
    _D.TYPE_SFIXED64: ("sfixed64", (INT64, *_NUMBERS, DATE, DATETIME, TIMESTAMP)),
    _D.TYPE_UINT64: ("uint64", _NUMBERS),
    _D.TYPE_FIXED64: ("fixed64", _NUMBERS),
    _D.TYPE_BOOL: ("bool", (BOOL,)),
    _D.TYPE_STRING: ("string", _FROM_STRING),
    _D.TYPE_BYTES: ("bytes", (BYTES, *_NUMBERS)),
    _D.TYPE_ENUM: ("enum", (INT64,)),
}


@dataclass(frozen=True)
class SchemaField:
    """One field of a topic schema, as far as mapping it to a column goes."""

    name: str
    kind: str  # the schema's own type name ("long", "int64", "record", "map", ...)
    targets: tuple[str, ...]  # BigQuery types it may go to (RECORD for records and maps)
    optional: bool = False
    repeated: bool = False
    fields: tuple[SchemaField, ...] = ()  # a record's fields; a map's key and value
    unmappable: str = ""  # why it maps to nothing (a union of several types, a oneof)
    symbols: tuple[str, ...] = ()  # an Avro enum's symbols (it goes to INT64 by position)

    def describe(self) -> str:
        text = f"{'optional ' if self.optional else ''}{self.kind}"
        return f"array of {text}" if self.repeated else text


@dataclass(frozen=True)
class CompiledSchema:
    """A topic schema's root record: its fields and a decoder of messages into a dict."""

    kind: str  # AVRO or PROTOCOL_BUFFER
    fields: tuple[SchemaField, ...]
    decode: Callable[[bytes, str], dict[str, Any]]  # (data, JSON or BINARY) -> values


@functools.lru_cache(maxsize=64)
def compiled(kind: str, definition: str) -> CompiledSchema:
    """The compiled topic schema (SchemaError if it does not compile or has no root
    record); cached, since protoc runs in a child process."""
    if kind == AVRO:
        return _compile_avro(definition)
    if kind == PROTOCOL_BUFFER:
        return _compile_proto(definition)
    raise SchemaError(f"Unsupported schema type {kind!r}: expected AVRO or PROTOCOL_BUFFER.")


# ----------------------------------------------------------- compatibility


def incompatibilities(
    schema: tuple[SchemaField, ...],
    columns: tuple[Field, ...],
    *,
    drop_unknown: bool,
    filled_elsewhere: tuple[str, ...] = (),
    path: str = "",
) -> list[str]:
    """Why the schema's fields cannot go to ``columns`` (empty: they can).
    ``filled_elsewhere``: columns the writer fills itself (the metadata)."""
    problems: list[str] = []
    for f in schema:
        if not path and f.name in CDC_FIELDS:
            continue
        column = find(columns, f.name)
        if column is None:
            if not drop_unknown:
                problems.append(
                    f"the topic schema's field {path}{f.name} has no column in the table "
                    "(add the column, or set drop_unknown_fields)"
                )
            continue
        problems.extend(_field_problems(f, column, drop_unknown, path))
    for column in columns:
        if find(schema, column.name) is None and column.required:
            if not path and column.name in filled_elsewhere:
                continue
            problems.append(
                f"the table's column {path}{column.name} is REQUIRED but the topic schema has "
                "no such field (make the column NULLABLE)"
            )
    return problems


def _field_problems(f: SchemaField, column: Field, drop_unknown: bool, path: str) -> list[str]:
    where = f"{path}{f.name}"
    if f.unmappable:
        return [f"the topic schema's field {where} ({f.unmappable}) maps to no BigQuery column"]
    if f.repeated != column.repeated:
        shape = "an array" if f.repeated else "a single value"
        return [
            f"the topic schema's field {where} is {shape} but the column is {column.describe()}"
        ]
    if f.optional and column.required:
        return [
            f"the topic schema's field {where} is optional but the column is REQUIRED "
            "(make it NULLABLE)"
        ]
    if column.type not in f.targets:
        return [
            f"the topic schema's field {where} ({f.describe()}) cannot be written to the "
            f"column's type {column.type} (it may go to {', '.join(f.targets)})"
        ]
    if column.type == RECORD:
        return incompatibilities(
            f.fields, column.fields, drop_unknown=drop_unknown, path=f"{where}."
        )
    return []


# -------------------------------------------------------------------- Avro


def _compile_avro(definition: str) -> CompiledSchema:
    try:
        document = json.loads(definition)
        parsed = fastavro.parse_schema(document)
    except Exception as error:
        raise SchemaError(f"The Avro definition does not compile: {error}") from None
    if not isinstance(document, dict) or document.get("type") != "record":
        raise SchemaError("The topic's Avro schema is not a record: it has no fields to map.")
    named: dict[str, Any] = {}
    root = _avro_record(document, named)

    def decode(data: bytes, encoding: str) -> dict[str, Any]:
        try:
            if encoding == BINARY:
                stream = io.BytesIO(data)
                value = fastavro.schemaless_reader(stream, parsed, None)
                if stream.tell() != len(data):
                    raise SchemaError(f"{len(data) - stream.tell()} bytes follow the Avro datum")
            else:
                text = json.dumps(json.loads(data))
                value = next(iter(fastavro.json_reader(io.StringIO(text), parsed)))
        except SchemaError:
            raise
        except Exception as error:
            raise SchemaError(
                f"the message does not match the topic's Avro schema: {error}"
            ) from None
        if not isinstance(value, dict):
            raise SchemaError("the message is not an Avro record")
        return _avro_values(root, value)

    return CompiledSchema(AVRO, root, decode)


def _avro_record(document: Mapping[str, Any], named: dict[str, Any]) -> tuple[SchemaField, ...]:
    name = document.get("name")
    if name:
        named[str(name)] = document
        namespace = document.get("namespace")
        if namespace:
            named[f"{namespace}.{name}"] = document
    return tuple(_avro_field(str(f["name"]), f["type"], named) for f in document["fields"])


def _avro_field(name: str, schema: Any, named: dict[str, Any]) -> SchemaField:
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1 and len(schema) == 2:
            inner = _avro_field(name, branches[0], named)
            if inner.repeated:  # a nullable array is written as the array (or empty)
                return inner
            return SchemaField(
                inner.name,
                inner.kind,
                inner.targets,
                True,
                False,
                inner.fields,
                inner.unmappable,
                inner.symbols,
            )
        return SchemaField(name, "union", (), unmappable="a union of several types")
    if isinstance(schema, str):
        if schema in named:
            return _avro_field(name, named[schema], named)
        if "." in schema and schema.rsplit(".", 1)[-1] in named:
            return _avro_field(name, named[schema.rsplit(".", 1)[-1]], named)
        return SchemaField(name, schema, _AVRO_TYPES.get(schema, ()))
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical in _AVRO_TYPES:
        return SchemaField(name, f"{kind} ({logical})", _AVRO_TYPES[logical])
    if kind == "record":
        return SchemaField(name, "record", (RECORD,), fields=_avro_record(schema, named))
    if kind == "array":
        item = _avro_field(name, schema["items"], named)
        if item.repeated:
            return SchemaField(name, "array of arrays", (), unmappable="an array of arrays")
        return SchemaField(
            name, item.kind, item.targets, False, True, item.fields, item.unmappable, item.symbols
        )
    if kind == "map":
        value = _avro_field("value", schema["values"], named)
        key = SchemaField("key", "string", (STRING,))
        return SchemaField(name, "map", (RECORD,), False, True, (key, value), value.unmappable)
    if kind in ("enum", "fixed"):
        named[str(schema.get("name"))] = schema
        symbols = tuple(str(s) for s in schema.get("symbols", ()))
        return SchemaField(name, str(kind), _AVRO_TYPES[str(kind)], symbols=symbols)
    return _avro_field(name, kind, named)


def _avro_values(fields: tuple[SchemaField, ...], record: Mapping[str, Any]) -> dict[str, Any]:
    return {f.name: _avro_value(f, record.get(f.name)) for f in fields}


def _avro_value(f: SchemaField, value: Any) -> Any:
    if value is None:
        return None
    if f.kind == "map":
        return [{"key": k, "value": _avro_value(f.fields[1], v)} for k, v in value.items()]
    if f.repeated:
        item = SchemaField(f.name, f.kind, f.targets, False, False, f.fields, symbols=f.symbols)
        return [_avro_value(item, v) for v in value]
    if f.kind == "record" and isinstance(value, Mapping):
        return _avro_values(f.fields, value)
    if f.kind == "enum" and isinstance(value, str) and value in f.symbols:
        return f.symbols.index(value)
    return value


# ---------------------------------------------------------------- protobuf


def _compile_proto(definition: str) -> CompiledSchema:
    files, root_name = compile_proto(definition)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    root = pool.FindMessageTypeByName(root_name)
    message_class: Any = message_factory.GetMessageClass(root)
    fields = _proto_fields(root, ())

    def decode(data: bytes, encoding: str) -> dict[str, Any]:
        message: Message = message_class()
        try:
            if encoding == BINARY:
                message.ParseFromString(data)
            else:
                json_format.Parse(data, message)
        except (DecodeError, json_format.ParseError, UnicodeDecodeError, ValueError) as error:
            raise SchemaError(
                f"the message does not match the topic's protobuf schema {root_name}: {error}"
            ) from None
        return _proto_values(message)

    return CompiledSchema(PROTOCOL_BUFFER, fields, decode)


def _proto_fields(message: Any, seen: tuple[str, ...]) -> tuple[SchemaField, ...]:
    return tuple(_proto_field(f, (*seen, message.full_name)) for f in message.fields)


def _is_map(f: Any) -> bool:
    return bool(
        f.type == _D.TYPE_MESSAGE
        and f.message_type is not None
        and f.message_type.GetOptions().map_entry
    )


def _is_repeated(f: Any) -> bool:
    return bool(f.is_repeated)


def _proto_field(f: Any, seen: tuple[str, ...]) -> SchemaField:
    oneof = f.containing_oneof
    if oneof is not None and not (len(oneof.fields) == 1 and oneof.name.startswith("_")):
        # A real oneof (proto3 "optional" makes a synthetic one named _field, which is not).
        return SchemaField(f.name, "oneof", (), unmappable=f"a member of oneof {oneof.name}")
    repeated = _is_repeated(f)
    if _is_map(f):
        entry = f.message_type
        key = _proto_field(entry.fields_by_name["key"], seen)
        value = _proto_field(entry.fields_by_name["value"], seen)
        return SchemaField(f.name, "map", (RECORD,), False, True, (key, value), value.unmappable)
    optional = bool(f.has_presence) and not repeated
    if f.type in (_D.TYPE_MESSAGE, _D.TYPE_GROUP):
        if f.message_type.full_name in seen:
            return SchemaField(f.name, "message", (), unmappable="a recursive message")
        children = _proto_fields(f.message_type, seen)
        return SchemaField(f.name, "message", (RECORD,), optional, repeated, children)
    kind, targets = _PROTO_TYPES[f.type]
    return SchemaField(f.name, kind, targets, optional, repeated)


def _proto_values(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        out[f.name] = _proto_value(message, f)
    return out


def _proto_value(message: Message, f: Any) -> Any:
    value = getattr(message, f.name)
    if _is_map(f):
        value_field = f.message_type.fields_by_name["value"]
        entries = []
        for k in sorted(value):
            v = value[k]
            if value_field.type == _D.TYPE_MESSAGE:
                v = _proto_values(v)
            entries.append({"key": k, "value": v})
        return entries
    if _is_repeated(f):
        if f.type in (_D.TYPE_MESSAGE, _D.TYPE_GROUP):
            return [_proto_values(v) for v in value]
        return list(value)
    if f.has_presence and not message.HasField(f.name):
        return None
    if f.type in (_D.TYPE_MESSAGE, _D.TYPE_GROUP):
        return _proto_values(value)
    return value
