"""Schema definitions compiled, and messages checked against them (SchemaService).

Two kinds, each with the tooling of its own project — no hand-written parser:

* **Avro** (``fastavro``): the definition is Avro JSON (``fastavro.parse_schema``). A
  BINARY message is one datum in Avro's binary encoding, every byte used
  (``schemaless_reader``); a JSON message is one datum in Avro's JSON encoding (unions
  as ``{"type": value}``), read by ``json_reader`` and then type-checked by
  ``fastavro.validation`` (the reader alone fills in what it cannot read).
* **Protocol Buffer** (protobuf's compiler, ``grpc_tools.protoc``): the definition is one
  ``.proto`` file with exactly one top-level message type, which may use the
  well-known types; it is compiled to descriptors and loaded into a descriptor pool of
  its own. A BINARY message is parsed as that type; a JSON message is proto3 JSON
  (``json_format``, unknown fields refused).

Both raise ``SchemaError`` with a reason a person can act on; the caller decides the
status (INVALID_ARGUMENT for a bad definition, the service's publish text for a message).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro
import fastavro.validation
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message

AVRO = "AVRO"
PROTOCOL_BUFFER = "PROTOCOL_BUFFER"
JSON = "JSON"
BINARY = "BINARY"
# The service's limit on a definition's size (Pub/Sub quotas: "Schema definition size").
MAX_DEFINITION_BYTES = 300 * 1024
# protoc compiles a schema-sized file in well under a second; this bounds a pathological one.
PROTOC_TIMEOUT_SECONDS = 30


class SchemaError(ValueError):
    """A definition that does not compile, or a message that does not match."""


@dataclass(frozen=True)
class Codec:
    """A compiled definition: ``check(data, encoding)`` raises ``SchemaError`` on mismatch."""

    kind: str
    check: Callable[[bytes, str], None]


def compile_definition(kind: str, definition: str) -> Codec:
    """Compile ``definition`` of ``kind`` (AVRO or PROTOCOL_BUFFER), or raise SchemaError."""
    if not definition.strip():
        raise SchemaError("The schema definition is empty.")
    if len(definition.encode()) > MAX_DEFINITION_BYTES:
        raise SchemaError(f"The schema definition is larger than {MAX_DEFINITION_BYTES} bytes.")
    if kind == AVRO:
        return _avro(definition)
    if kind == PROTOCOL_BUFFER:
        return _protobuf(definition)
    raise SchemaError(f"Unsupported schema type {kind!r}: expected AVRO or PROTOCOL_BUFFER.")


# ------------------------------------------------------------------- Avro


def _avro(definition: str) -> Codec:
    try:
        document = json.loads(definition)
        parsed = fastavro.parse_schema(document)
    except json.JSONDecodeError as error:
        raise SchemaError(f"The Avro definition is not JSON: {error}.") from None
    except Exception as error:  # fastavro raises several types (SchemaParseException, ...)
        raise SchemaError(f"The Avro definition is not valid: {_reason(error)}.") from None

    def check(data: bytes, encoding: str) -> None:
        if encoding == BINARY:
            stream = io.BytesIO(data)
            try:
                fastavro.schemaless_reader(stream, parsed, None)
            except Exception as error:
                reason = _reason(error)
                raise SchemaError(f"not an Avro binary datum of the schema: {reason}") from None
            if stream.tell() != len(data):
                raise SchemaError(f"{len(data) - stream.tell()} bytes follow the Avro datum")
            return
        try:
            value = json.loads(data)
        except (ValueError, UnicodeDecodeError) as error:
            raise SchemaError(f"the data is not JSON: {error}") from None
        try:
            records = list(fastavro.json_reader(io.StringIO(json.dumps(value)), parsed))
            for record in records:
                fastavro.validation.validate(record, parsed, raise_errors=True)
        except Exception as error:
            raise SchemaError(f"not an Avro JSON datum of the schema: {_reason(error)}") from None

    return Codec(AVRO, check)


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# --------------------------------------------------------------- protobuf


def compile_proto(definition: str) -> tuple[descriptor_pb2.FileDescriptorSet, str]:
    """Compile one .proto file with protoc; the descriptor set (imports included) and the
    full name of its one top-level message type."""
    with tempfile.TemporaryDirectory(prefix="eoclient-schema-") as tmp:
        source = os.path.join(tmp, "schema.proto")
        output = os.path.join(tmp, "schema.pb")
        with open(source, "w", encoding="utf-8") as out:
            out.write(definition)
        # A child process: protoc reports on stderr (fd 2), which a library cannot borrow
        # from a server whose threads log there. grpc_tools brings the well-known types.
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{tmp}",
                "--include_imports",
                f"--descriptor_set_out={output}",
                source,
            ],
            capture_output=True,
            timeout=PROTOC_TIMEOUT_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            text = result.stderr.decode(errors="replace").replace(tmp + os.sep, "")
            raise SchemaError(
                f"The Protocol Buffer definition does not compile: {' '.join(text.split())}"
            )
        with open(output, "rb") as compiled:
            files = descriptor_pb2.FileDescriptorSet.FromString(compiled.read())
    own = files.file[-1]  # protoc lists imports first
    if len(own.message_type) != 1:
        raise SchemaError(
            "The Protocol Buffer definition must contain exactly one top-level message type "
            f"(it has {len(own.message_type)})."
        )
    package = f"{own.package}." if own.package else ""
    return files, package + own.message_type[0].name


def _protobuf(definition: str) -> Codec:
    files, root = compile_proto(definition)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    message_class: Any = message_factory.GetMessageClass(pool.FindMessageTypeByName(root))

    def check(data: bytes, encoding: str) -> None:
        message: Message = message_class()
        if encoding == BINARY:
            try:
                message.ParseFromString(data)
            except DecodeError as error:
                raise SchemaError(f"not a binary {root} message: {error}") from None
            return
        try:
            json_format.Parse(data, message)
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as error:
            raise SchemaError(f"not a JSON {root} message: {_reason(error)}") from None

    return Codec(PROTOCOL_BUFFER, check)
