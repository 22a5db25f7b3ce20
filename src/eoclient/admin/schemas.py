"""Schemas in the admin API (google.pubsub.v1.SchemaService), typed: no protobuf in it.

::

    async with AdminClient() as admin:
        schema = await admin.create_schema(
            "my-project", "orders", SchemaType.AVRO, avro_definition
        )
        await admin.create_topic(
            topic_path("my-project", "orders"),
            schema_settings=SchemaSettings(schema.name, Encoding.JSON),
        )
        await admin.validate_message("my-project", b'{"id": 1}', Encoding.JSON, schema=schema.name)

A message that does not match raises :class:`~eoclient.errors.SchemaValidationError`
(from ``validate_message`` here, and from ``PublisherClient.publish`` for a topic bound
to the schema).
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from typing import Any

from google.protobuf import empty_pb2

from eoclient._proto import pubsub_pb2 as pb
from eoclient._proto import schema_pb2 as sp
from eoclient._retrying import DEFAULT
from eoclient.admin.calls import AdminCalls, AsyncPager, Request, Retry, Timeout
from eoclient.admin.paths import project_of, schema_path

SERVICE = "SchemaService"  # google.pubsub.v1.SchemaService


class SchemaType(enum.Enum):
    """``Schema.Type``: how the definition is written."""

    TYPE_UNSPECIFIED = 0
    PROTOCOL_BUFFER = 1
    AVRO = 2


class Encoding(enum.Enum):
    """How messages of a topic bound to a schema are encoded (``Encoding``)."""

    ENCODING_UNSPECIFIED = 0
    JSON = 1
    BINARY = 2


class SchemaView(enum.Enum):
    """How much of a schema to return: ``BASIC`` (no definition) or ``FULL``."""

    SCHEMA_VIEW_UNSPECIFIED = 0
    BASIC = 1
    FULL = 2


@dataclass(frozen=True, slots=True)
class Schema:
    """One revision of a schema (``google.pubsub.v1.Schema``).

    Attributes:
        name: ``projects/{project}/schemas/{schema}``.
        type: Avro or Protocol Buffer.
        definition: the Avro JSON or the ``.proto`` text; ``""`` in the BASIC view.
        revision_id: output only: this revision's id.
        revision_create_time: output only: when the revision was committed.
    """

    name: str
    type: SchemaType
    definition: str = ""
    revision_id: str = ""
    revision_create_time: datetime.datetime | None = None


@dataclass(frozen=True, slots=True)
class SchemaSettings:
    """A topic's schema binding (``SchemaSettings``).

    Attributes:
        schema: ``projects/{project}/schemas/{schema}``; ``_deleted-schema_`` once the
            schema is deleted.
        encoding: JSON or BINARY.
        first_revision_id / last_revision_id: the revisions messages may match
            (``""``: from the oldest / up to the newest).
    """

    schema: str
    encoding: Encoding = Encoding.JSON
    first_revision_id: str = ""
    last_revision_id: str = ""


# ================================================================ conversion


def schema_from_pb(message: sp.Schema) -> Schema:
    created = None
    if message.HasField("revision_create_time"):
        created = message.revision_create_time.ToDatetime(tzinfo=datetime.UTC)
    return Schema(
        name=message.name,
        type=SchemaType(message.type_),
        definition=message.definition,
        revision_id=message.revision_id,
        revision_create_time=created,
    )


def _schema_to_pb(kind: SchemaType, definition: str, name: str = "") -> sp.Schema:
    return sp.Schema(name=name, type_=kind.value, definition=definition)  # type: ignore[arg-type]


def settings_to_pb(settings: SchemaSettings, message: pb.SchemaSettings) -> None:
    message.schema = settings.schema
    message.encoding = settings.encoding.value  # type: ignore[assignment]
    message.first_revision_id = settings.first_revision_id
    message.last_revision_id = settings.last_revision_id


def settings_from_pb(message: pb.SchemaSettings) -> SchemaSettings:
    return SchemaSettings(
        schema=message.schema,
        encoding=Encoding(message.encoding),
        first_revision_id=message.first_revision_id,
        last_revision_id=message.last_revision_id,
    )


def _request(method: str, message: Any, response: Any, routing: tuple[str, str]) -> Request[Any]:
    return Request(SERVICE, method, message, response, routing)


def _page(response: Any) -> tuple[list[Schema], str]:
    return [schema_from_pb(s) for s in response.schemas], response.next_page_token


# ================================================================ the client's methods


class SchemaAdmin(AdminCalls):
    """AdminClient's SchemaService methods (one of its bases)."""

    schema_path = staticmethod(schema_path)

    async def create_schema(
        self,
        project: str,
        schema_id: str,
        type: SchemaType,
        definition: str,
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Schema:
        """Create a schema (its first revision); ``AlreadyExists`` if it does,
        ``InvalidArgument`` if the definition does not compile."""
        parent = project_of(project)
        request = sp.CreateSchemaRequest(
            parent=parent, schema=_schema_to_pb(type, definition), schema_id=schema_id
        )
        return schema_from_pb(
            await self._call(
                _request("CreateSchema", request, sp.Schema, ("parent", parent)), retry, timeout
            )
        )

    async def get_schema(
        self,
        name: str,
        *,
        view: SchemaView = SchemaView.FULL,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Schema:
        """The newest revision, or the one ``name@revision_id`` names."""
        request = sp.GetSchemaRequest(name=name, view=view.value)  # type: ignore[arg-type]
        return schema_from_pb(
            await self._call(
                _request("GetSchema", request, sp.Schema, ("name", name)), retry, timeout
            )
        )

    def list_schemas(
        self,
        project: str,
        *,
        view: SchemaView = SchemaView.BASIC,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[Schema]:
        """The project's schemas (newest revision of each; BASIC: no definitions)."""

        def build(parent: str, size: int, token: str) -> Request[Any]:
            request = sp.ListSchemasRequest(
                parent=parent,
                view=view.value,  # type: ignore[arg-type]
                page_size=size,
                page_token=token,
            )
            return _request("ListSchemas", request, sp.ListSchemasResponse, ("parent", parent))

        return self._pager(build, _page, project_of(project), page_size, retry, timeout)

    def list_schema_revisions(
        self,
        name: str,
        *,
        view: SchemaView = SchemaView.BASIC,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[Schema]:
        """Every revision of a schema, oldest first."""

        def build(schema: str, size: int, token: str) -> Request[Any]:
            request = sp.ListSchemaRevisionsRequest(
                name=schema,
                view=view.value,  # type: ignore[arg-type]
                page_size=size,
                page_token=token,
            )
            return _request(
                "ListSchemaRevisions", request, sp.ListSchemaRevisionsResponse, ("name", schema)
            )

        return self._pager(build, _page, name, page_size, retry, timeout)

    async def commit_schema(
        self,
        name: str,
        type: SchemaType,
        definition: str,
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Schema:
        """Add a revision (the newest from now on)."""
        request = sp.CommitSchemaRequest(name=name, schema=_schema_to_pb(type, definition, name))
        return schema_from_pb(
            await self._call(
                _request("CommitSchema", request, sp.Schema, ("name", name)), retry, timeout
            )
        )

    async def rollback_schema(
        self, name: str, revision_id: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Schema:
        """Add a revision with the definition of ``revision_id``."""
        request = sp.RollbackSchemaRequest(name=name, revision_id=revision_id)
        return schema_from_pb(
            await self._call(
                _request("RollbackSchema", request, sp.Schema, ("name", name)), retry, timeout
            )
        )

    async def delete_schema_revision(
        self, name: str, revision_id: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Schema:
        """Delete one revision (not the only one); returns it."""
        request = sp.DeleteSchemaRevisionRequest(name=f"{name}@{revision_id}")
        return schema_from_pb(
            await self._call(
                _request("DeleteSchemaRevision", request, sp.Schema, ("name", name)), retry, timeout
            )
        )

    async def delete_schema(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        """Delete a schema; topics bound to it then report ``_deleted-schema_``."""
        request = sp.DeleteSchemaRequest(name=name)
        await self._call(
            _request("DeleteSchema", request, empty_pb2.Empty, ("name", name)), retry, timeout
        )

    async def validate_schema(
        self,
        project: str,
        type: SchemaType,
        definition: str,
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """``InvalidArgument`` (naming the problem) unless ``definition`` compiles."""
        parent = project_of(project)
        request = sp.ValidateSchemaRequest(parent=parent, schema=_schema_to_pb(type, definition))
        await self._call(
            _request("ValidateSchema", request, sp.ValidateSchemaResponse, ("parent", parent)),
            retry,
            timeout,
        )

    async def validate_message(
        self,
        project: str,
        message: bytes,
        encoding: Encoding,
        *,
        schema: str | None = None,
        definition: tuple[SchemaType, str] | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """``SchemaValidationError`` unless ``message`` matches ``schema`` (a name, or
        ``name@revision``) or the inline ``definition`` (type, text) — exactly one."""
        if (schema is None) == (definition is None):
            raise ValueError("pass schema= (a schema name) or definition=, exactly one")
        parent = project_of(project)
        request = sp.ValidateMessageRequest(
            parent=parent,
            message=message,
            encoding=encoding.value,  # type: ignore[arg-type]
        )
        if schema is not None:
            request.name = schema
        else:
            assert definition is not None
            request.schema.CopyFrom(_schema_to_pb(*definition))
        await self._call(
            _request("ValidateMessage", request, sp.ValidateMessageResponse, ("parent", parent)),
            retry,
            timeout,
        )
