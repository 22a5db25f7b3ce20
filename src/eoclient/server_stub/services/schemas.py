"""google.pubsub.v1.SchemaService, and topics bound to a schema.

Thin, like every service here: requests become calls on the broker's schema registry
(``core/schemas.py``, definitions compiled by ``core/schema_codecs.py``), answers go back
as ``Schema`` protos. What a topic's ``schema_settings`` mean lives here too, because the
core keeps those settings opaque (the topic's ``extras``):

* CreateTopic / UpdateTopic refuse settings that name no schema, an unknown schema, no
  encoding, or revisions the schema does not have (nothing is stored then);
* Publish checks every message's data against the allowed revisions before the broker
  sees the request (one message that does not match refuses the whole request, with the
  service's text) and adds the ``googclient_schemaname``, ``googclient_schemaencoding``
  and ``googclient_schemarevisionid`` attributes subscribers receive;
* a topic whose schema was deleted reports ``_deleted-schema_`` as its schema, and
  Publish to it is refused (NOT_FOUND, as Google's emulator answers) rather than
  accepted unchecked.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import empty_pb2

from eoclient._proto import pubsub_pb2, schema_pb2
from eoclient.errors import InvalidArgument, NotFound
from eoclient.server_stub.core import Broker, names
from eoclient.server_stub.core.schema_codecs import SchemaError
from eoclient.server_stub.core.schemas import DELETED_SCHEMA, INVALID_MESSAGE, SchemaRevision
from eoclient.server_stub.services.rpc import RpcMethod, rpc_methods

SERVICE = "google.pubsub.v1.SchemaService"

SCHEMA_NAME_ATTRIBUTE = "googclient_schemaname"
SCHEMA_ENCODING_ATTRIBUTE = "googclient_schemaencoding"
SCHEMA_REVISION_ATTRIBUTE = "googclient_schemarevisionid"

_TYPE_NAMES: dict[int, str] = {
    schema_pb2.Schema.AVRO: "AVRO",
    schema_pb2.Schema.PROTOCOL_BUFFER: "PROTOCOL_BUFFER",
}
_TYPE_NUMBERS: dict[str, Any] = {name: number for number, name in _TYPE_NAMES.items()}
_ENCODING_NAMES: dict[int, str] = {schema_pb2.JSON: "JSON", schema_pb2.BINARY: "BINARY"}


def _type_name(number: int) -> str:
    return _TYPE_NAMES.get(number, "TYPE_UNSPECIFIED")


def _encoding_name(number: int) -> str:
    return _ENCODING_NAMES.get(number, "ENCODING_UNSPECIFIED")


def schema_to_pb(revision: SchemaRevision, full: bool = True) -> schema_pb2.Schema:
    schema = schema_pb2.Schema(
        name=revision.name,
        type_=_TYPE_NUMBERS[revision.type],
        revision_id=revision.revision_id,
    )
    if full:
        schema.definition = revision.definition
    whole = int(revision.revision_create_time)
    schema.revision_create_time.seconds = whole
    schema.revision_create_time.nanos = int((revision.revision_create_time - whole) * 1e9)
    return schema


def _full(view: int, default_full: bool) -> bool:
    if view == schema_pb2.SCHEMA_VIEW_UNSPECIFIED:
        return default_full
    return view == schema_pb2.FULL


class SchemaService:
    """The ten SchemaService methods over one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def methods(self) -> list[RpcMethod]:
        S = schema_pb2
        return rpc_methods(
            SERVICE,
            {
                "CreateSchema": (self.create_schema, S.CreateSchemaRequest, S.Schema),
                "GetSchema": (self.get_schema, S.GetSchemaRequest, S.Schema),
                "ListSchemas": (self.list_schemas, S.ListSchemasRequest, S.ListSchemasResponse),
                "ListSchemaRevisions": (
                    self.list_schema_revisions,
                    S.ListSchemaRevisionsRequest,
                    S.ListSchemaRevisionsResponse,
                ),
                "CommitSchema": (self.commit_schema, S.CommitSchemaRequest, S.Schema),
                "RollbackSchema": (self.rollback_schema, S.RollbackSchemaRequest, S.Schema),
                "DeleteSchemaRevision": (
                    self.delete_schema_revision,
                    S.DeleteSchemaRevisionRequest,
                    S.Schema,
                ),
                "DeleteSchema": (self.delete_schema, S.DeleteSchemaRequest, empty_pb2.Empty),
                "ValidateSchema": (
                    self.validate_schema,
                    S.ValidateSchemaRequest,
                    S.ValidateSchemaResponse,
                ),
                "ValidateMessage": (
                    self.validate_message,
                    S.ValidateMessageRequest,
                    S.ValidateMessageResponse,
                ),
            },
        )

    async def create_schema(self, request: schema_pb2.CreateSchemaRequest) -> schema_pb2.Schema:
        revision = self.broker.schemas.create(
            request.parent,
            request.schema_id,
            _type_name(request.schema.type_),
            request.schema.definition,
        )
        return schema_to_pb(revision)

    async def get_schema(self, request: schema_pb2.GetSchemaRequest) -> schema_pb2.Schema:
        return schema_to_pb(self.broker.schemas.get(request.name), _full(request.view, True))

    async def list_schemas(
        self, request: schema_pb2.ListSchemasRequest
    ) -> schema_pb2.ListSchemasResponse:
        page = self.broker.schemas.list_schemas(
            request.parent, request.page_size, request.page_token
        )
        full = _full(request.view, False)
        return schema_pb2.ListSchemasResponse(
            schemas=[schema_to_pb(s, full) for s in page.items],
            next_page_token=page.next_page_token,
        )

    async def list_schema_revisions(
        self, request: schema_pb2.ListSchemaRevisionsRequest
    ) -> schema_pb2.ListSchemaRevisionsResponse:
        page = self.broker.schemas.list_revisions(
            request.name, request.page_size, request.page_token
        )
        full = _full(request.view, False)
        return schema_pb2.ListSchemaRevisionsResponse(
            schemas=[schema_to_pb(s, full) for s in page.items],
            next_page_token=page.next_page_token,
        )

    async def commit_schema(self, request: schema_pb2.CommitSchemaRequest) -> schema_pb2.Schema:
        if request.schema.name and request.schema.name != request.name:
            raise InvalidArgument(
                f"The schema's name ({request.schema.name}) is not the request's ({request.name})."
            )
        revision = self.broker.schemas.commit(
            request.name, _type_name(request.schema.type_), request.schema.definition
        )
        return schema_to_pb(revision)

    async def rollback_schema(self, request: schema_pb2.RollbackSchemaRequest) -> schema_pb2.Schema:
        return schema_to_pb(self.broker.schemas.rollback(request.name, request.revision_id))

    async def delete_schema_revision(
        self, request: schema_pb2.DeleteSchemaRevisionRequest
    ) -> schema_pb2.Schema:
        revision = self.broker.schemas.delete_revision(request.name, request.revision_id)
        return schema_to_pb(revision)

    async def delete_schema(self, request: schema_pb2.DeleteSchemaRequest) -> empty_pb2.Empty:
        self.broker.schemas.delete(request.name)
        return empty_pb2.Empty()

    async def validate_schema(
        self, request: schema_pb2.ValidateSchemaRequest
    ) -> schema_pb2.ValidateSchemaResponse:
        _project(request.parent)
        self.broker.schemas.validate_definition(
            _type_name(request.schema.type_), request.schema.definition
        )
        return schema_pb2.ValidateSchemaResponse()

    async def validate_message(
        self, request: schema_pb2.ValidateMessageRequest
    ) -> schema_pb2.ValidateMessageResponse:
        _project(request.parent)
        encoding = _encoding_name(request.encoding)
        try:
            if request.WhichOneof("schema_spec") == "schema":
                self.broker.schemas.check_inline_message(
                    _type_name(request.schema.type_),
                    request.schema.definition,
                    request.message,
                    encoding,
                )
            elif request.name:
                base, _, revision = request.name.partition("@")
                self.broker.schemas.check_message(
                    base, request.message, encoding, revision, revision
                )
            else:
                raise InvalidArgument("Either name or schema is required.")
        except SchemaError as error:
            raise InvalidArgument(f"{INVALID_MESSAGE} ({error})") from None
        return schema_pb2.ValidateMessageResponse()


def _project(parent: str) -> None:
    names.parse_project(parent)


# ------------------------------------------------------------ topics with schemas


def check_schema_settings(broker: Broker, settings: pubsub_pb2.SchemaSettings) -> None:
    """Refuse schema settings a topic cannot be bound by (nothing is stored then)."""
    if not settings.schema:
        raise InvalidArgument("schema_settings.schema is required when schema_settings is set.")
    if settings.schema == DELETED_SCHEMA:
        raise InvalidArgument(f"A topic cannot be bound to {DELETED_SCHEMA}.")
    if not broker.schemas.exists(settings.schema):
        raise NotFound(f"Schema does not exist (resource={settings.schema.rsplit('/', 1)[-1]}).")
    if settings.encoding not in _ENCODING_NAMES:
        raise InvalidArgument("Invalid schema encoding provided (JSON or BINARY).")
    broker.schemas.revision_range(
        settings.schema, settings.first_revision_id, settings.last_revision_id
    )


def show_deleted_schema(broker: Broker, topic: pubsub_pb2.Topic) -> pubsub_pb2.Topic:
    """A topic whose schema was deleted reports ``_deleted-schema_`` (as the service does)."""
    schema = topic.schema_settings.schema
    if schema and schema != DELETED_SCHEMA and not broker.schemas.exists(schema):
        topic.schema_settings.schema = DELETED_SCHEMA
    return topic


def check_publish(broker: Broker, request: pubsub_pb2.PublishRequest) -> None:
    """Validate ``request``'s messages against the topic's schema and add the schema
    attributes; InvalidArgument (nothing published) if one does not match."""
    try:
        extras = broker.topics.get(request.topic).config.extras
    except (NotFound, InvalidArgument):
        return  # the broker answers for the topic itself
    if not extras:
        return
    settings = pubsub_pb2.Topic.FromString(extras).schema_settings
    if not settings.schema:
        return
    if settings.schema == DELETED_SCHEMA or not broker.schemas.exists(settings.schema):
        # NOT_FOUND with the emulator's text; nothing is published unchecked.
        raise NotFound("Schema associated with topic deleted.")
    encoding = _encoding_name(settings.encoding)
    for message in request.messages:
        try:
            revision = broker.schemas.check_message(
                settings.schema,
                message.data,
                encoding,
                settings.first_revision_id,
                settings.last_revision_id,
            )
        except SchemaError:
            raise InvalidArgument(INVALID_MESSAGE) from None
        message.attributes[SCHEMA_NAME_ATTRIBUTE] = settings.schema
        message.attributes[SCHEMA_ENCODING_ATTRIBUTE] = encoding
        message.attributes[SCHEMA_REVISION_ATTRIBUTE] = revision.revision_id
