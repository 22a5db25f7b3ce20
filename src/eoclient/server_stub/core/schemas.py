"""The schema registry of SchemaService: schemas, their revisions, and message checks.

Pure apart from compiling definitions (``schema_codecs``): the clock and the random
source are passed in. Each schema is kept whole through the store's documents
(kind ``"schema"``, this module's JSON) and compiled again at start-up.

Rules (google.pubsub.v1 schema.proto comments; Pub/Sub "Create and manage schemas" and
"Commit a schema revision" pages):

* Schema ids follow the resource-name rule of topics (``names``); the type is AVRO or
  PROTOCOL_BUFFER and the definition must compile; a schema has at most 20 revisions.
* Every commit and rollback adds a revision (an 8-character id) that becomes the
  newest; a rollback copies an older revision's definition. A revision is named by
  ``revision_id`` or by ``name@revision``; deleting the only revision is refused.
* ListSchemas and ListSchemaRevisions default to the BASIC view (no definition, as the
  proto documents; Google's emulator answers FULL), GetSchema to FULL; revisions are
  listed oldest first (as the emulator does).
* ``check_message`` is what Publish and ValidateMessage do: the data must match one
  revision of the allowed range (newest first); the revision that matched is returned,
  as the service reports it in ``googclient_schemarevisionid``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from eoclient._clock import Clock
from eoclient.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from eoclient.server_stub.core import names
from eoclient.server_stub.core.model import Page
from eoclient.server_stub.core.schema_codecs import (
    AVRO,
    BINARY,
    JSON,
    PROTOCOL_BUFFER,
    Codec,
    SchemaError,
    compile_definition,
)
from eoclient.server_stub.core.store import Store

DOCUMENT_KIND = "schema"
MAX_REVISIONS = 20  # "A schema can have up to 20 revisions" (Pub/Sub quotas)
REVISION_ID_LENGTH = 8
DELETED_SCHEMA = "_deleted-schema_"  # what a topic's schema_settings.schema becomes
TYPES = (AVRO, PROTOCOL_BUFFER)
ENCODINGS = (JSON, BINARY)
# The service's text for a message that matches no allowed revision.
INVALID_MESSAGE = "Invalid data in message: Message failed schema validation."


@dataclass(frozen=True)
class SchemaRevision:
    """One revision of a schema, as GetSchema reports it (FULL view)."""

    name: str
    type: str  # AVRO or PROTOCOL_BUFFER
    definition: str
    revision_id: str
    revision_create_time: float

    def basic(self) -> SchemaRevision:
        """The BASIC view: name and type (and revision), no definition."""
        return replace(self, definition="")


@dataclass
class _Schema:
    revisions: list[SchemaRevision]  # oldest first
    codecs: dict[str, Codec] = field(default_factory=dict)


def schema_name(project: str, schema_id: str) -> str:
    return f"projects/{project}/schemas/{schema_id}"


def parse_schema_name(name: str) -> tuple[str, str]:
    """Split ``projects/p/schemas/s[@revision]`` into (schema name, revision or "")."""
    base, _, revision = name.partition("@")
    parts = base.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "schemas" or not parts[1]:
        raise names.invalid_name(name, "A schema's name is projects/{project}/schemas/{id}.")
    return base, revision


class SchemaRegistry:
    """Every schema of the service."""

    def __init__(
        self,
        store: Store,
        rng: random.Random,
        clock: Clock,
        deleted: Callable[[str], None],
    ) -> None:
        self.store = store
        self.rng = rng
        self._clock = clock
        self._deleted = deleted  # a deleted resource's name (its IAM policy goes with it)
        self.schemas: dict[str, _Schema] = {}

    def restore(self, documents: Mapping[tuple[str, str], bytes]) -> None:
        for (kind, name), body in documents.items():
            if kind == DOCUMENT_KIND:
                self.schemas[name] = _Schema(_decode(body))

    # ------------------------------------------------------------- writes

    def create(self, parent: str, schema_id: str, kind: str, definition: str) -> SchemaRevision:
        """A new schema (``kind``: AVRO or PROTOCOL_BUFFER) with its first revision."""
        project = names.parse_project(parent)
        if not schema_id:
            raise InvalidArgument("schema_id is required (the last part of the schema's name).")
        name = schema_name(project, schema_id)
        problem = names.id_problem(schema_id)  # schema ids follow the same rule as topic ids
        if problem or "/" in schema_id:
            raise names.invalid_name(name, problem or "An id holds no '/'.")
        if name in self.schemas:
            raise AlreadyExists(f"Schema already exists (resource={schema_id}).")
        codec = self.compiled(kind, definition)
        now = self._clock.now()
        revision = SchemaRevision(name, kind, definition, self._revision_id(()), now)
        schema = _Schema([revision], {revision.revision_id: codec})
        self.schemas[name] = schema
        self._save(name, schema)
        return revision

    def commit(self, name: str, kind: str, definition: str) -> SchemaRevision:
        schema = self._schema(name)
        current = schema.revisions[-1]
        if kind != current.type:
            raise InvalidArgument(
                f"The schema {name} is of type {current.type}; a new revision must be too "
                f"(the request has {kind})."
            )
        codec = self.compiled(kind, definition)
        return self._add(name, schema, definition, codec, self._clock.now())

    def rollback(self, name: str, revision_id: str) -> SchemaRevision:
        if not revision_id:
            raise InvalidArgument("revision_id is required: the revision to roll back to.")
        schema = self._schema(name)
        old = self._revision(schema, name, revision_id)
        codec = schema.codecs.get(old.revision_id) or self.compiled(old.type, old.definition)
        return self._add(name, schema, old.definition, codec, self._clock.now())

    def delete_revision(self, name: str, revision_id: str = "") -> SchemaRevision:
        base, at_revision = parse_schema_name(name)
        revision_id = at_revision or revision_id
        if not revision_id:
            raise InvalidArgument(
                "The revision to delete is required: name it projects/p/schemas/s@revision."
            )
        schema = self._schema(base)
        revision = self._revision(schema, base, revision_id)
        if len(schema.revisions) == 1:  # the emulator's text and code
            raise InvalidArgument("Cannot delete last revision. Please use DeleteSchema.")
        schema.revisions.remove(revision)
        schema.codecs.pop(revision_id, None)
        self._save(base, schema)
        return revision

    def delete(self, name: str) -> None:
        base, _ = parse_schema_name(name)
        self._schema(base)
        del self.schemas[base]
        self.store.resources.delete_document(DOCUMENT_KIND, base)
        self._deleted(base)

    # -------------------------------------------------------------- reads

    def get(self, name: str) -> SchemaRevision:
        """The newest revision, or the one ``name@revision`` names."""
        base, revision_id = parse_schema_name(name)
        schema = self._schema(base)
        if revision_id:
            return self._revision(schema, base, revision_id)
        return schema.revisions[-1]

    def exists(self, name: str) -> bool:
        return name in self.schemas

    def list_schemas(self, parent: str, page_size: int, page_token: str) -> Page[SchemaRevision]:
        project = names.parse_project(parent)
        prefix = f"projects/{project}/schemas/"
        matching = sorted(n for n in self.schemas if n.startswith(prefix))
        page, token = names.paginate(matching, page_size, page_token)
        return Page(tuple(self.schemas[n].revisions[-1] for n in page), token)

    def list_revisions(self, name: str, page_size: int, page_token: str) -> Page[SchemaRevision]:
        """Oldest first, as Google's emulator lists them (the proto does not say)."""
        base, _ = parse_schema_name(name)
        schema = self._schema(base)
        # Page tokens sort: key each revision by its position.
        keys = [f"{i:04d}" for i in range(len(schema.revisions))]
        page, token = names.paginate(keys, page_size, page_token)
        return Page(tuple(schema.revisions[int(k)] for k in page), token)

    def revision_range(self, name: str, first: str, last: str) -> list[SchemaRevision]:
        """The revisions from ``first`` to ``last`` (ids; "" = the oldest / the newest),
        oldest first; InvalidArgument if either is unknown or they are out of order."""
        schema = self._schema(name)
        ids = [r.revision_id for r in schema.revisions]
        for label, value in (("First", first), ("Last", last)):
            if value and value not in ids:
                # NOT_FOUND, as Google's emulator answers ("First revision could not be found").
                raise NotFound(
                    f"{label} revision could not be found ({value} is not a revision of {name})."
                )
        start = ids.index(first) if first else 0
        end = ids.index(last) if last else len(ids) - 1
        if start > end:
            raise InvalidArgument(
                f"The first_revision_id {first} is newer than the last_revision_id {last}."
            )
        return schema.revisions[start : end + 1]

    def check_message(
        self, name: str, data: bytes, encoding: str, first: str = "", last: str = ""
    ) -> SchemaRevision:
        """The newest revision in [first, last] that ``data`` matches; SchemaError if none."""
        if encoding not in ENCODINGS:
            raise InvalidArgument("No encoding provided (JSON or BINARY).")
        schema = self._schema(name)
        problems: list[str] = []
        for revision in reversed(self.revision_range(name, first, last)):
            codec = schema.codecs.get(revision.revision_id)
            if codec is None:
                codec = compile_definition(revision.type, revision.definition)
                schema.codecs[revision.revision_id] = codec
            try:
                codec.check(data, encoding)
            except SchemaError as error:
                problems.append(f"revision {revision.revision_id}: {error}")
                continue
            return revision
        raise SchemaError("; ".join(problems))

    # ------------------------------------------------------------ helpers

    def _schema(self, name: str) -> _Schema:
        schema = self.schemas.get(name)
        if schema is None:
            parse_schema_name(name)
            raise NotFound(f"Schema does not exist (resource={name.rsplit('/', 1)[-1]}).")
        return schema

    @staticmethod
    def _revision(schema: _Schema, name: str, revision_id: str) -> SchemaRevision:
        for revision in schema.revisions:
            if revision.revision_id == revision_id:
                return revision
        raise NotFound(f"Revision {revision_id} of the schema {name} does not exist.")

    @staticmethod
    def validate_definition(kind: str, definition: str) -> None:
        """ValidateSchema: InvalidArgument unless ``definition`` compiles."""
        SchemaRegistry.compiled(kind, definition)

    @staticmethod
    def check_inline_message(kind: str, definition: str, data: bytes, encoding: str) -> None:
        """ValidateMessage with an inline schema: SchemaError if ``data`` does not match."""
        codec = SchemaRegistry.compiled(kind, definition)
        if encoding not in ENCODINGS:
            raise InvalidArgument("No encoding provided (JSON or BINARY).")
        codec.check(data, encoding)

    @staticmethod
    def compiled(kind: str, definition: str) -> Codec:
        if kind not in TYPES:
            raise InvalidArgument(
                "The schema type must be AVRO or PROTOCOL_BUFFER (TYPE_UNSPECIFIED given)."
            )
        try:
            return compile_definition(kind, definition)
        except SchemaError as error:
            raise InvalidArgument(f"Invalid schema definition: {error}") from None

    def _add(
        self, name: str, schema: _Schema, definition: str, codec: Codec, now: float
    ) -> SchemaRevision:
        if len(schema.revisions) >= MAX_REVISIONS:
            raise FailedPrecondition(
                f"The schema {name} has {MAX_REVISIONS} revisions, the most a schema may "
                "have: delete one first (DeleteSchemaRevision)."
            )
        kind = schema.revisions[-1].type
        ids = [r.revision_id for r in schema.revisions]
        revision = SchemaRevision(name, kind, definition, self._revision_id(ids), now)
        schema.revisions.append(revision)
        schema.codecs[revision.revision_id] = codec
        self._save(name, schema)
        return revision

    def _revision_id(self, taken: Sequence[str]) -> str:
        while True:
            candidate = f"{self.rng.getrandbits(4 * REVISION_ID_LENGTH):0{REVISION_ID_LENGTH}x}"
            if candidate not in taken:
                return candidate

    def _save(self, name: str, schema: _Schema) -> None:
        self.store.resources.put_document(DOCUMENT_KIND, name, _encode(schema.revisions))


def _encode(revisions: Sequence[SchemaRevision]) -> bytes:
    return json.dumps(
        [[r.name, r.type, r.definition, r.revision_id, r.revision_create_time] for r in revisions]
    ).encode()


def _decode(body: bytes) -> list[SchemaRevision]:
    return [
        SchemaRevision(name, kind, definition, revision_id, float(created))
        for name, kind, definition, revision_id, created in json.loads(body)
    ]
