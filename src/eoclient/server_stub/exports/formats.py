"""Which file format a Cloud Storage export writes a message in: text, Avro with or
without the metadata columns, or Avro of the topic's schema — one format per schema
revision a message names (a file holds one format: a message of another revision starts a
new file). Each format is made once and kept until the export's settings change
(docs/protocol.md#export-delivery)."""

from __future__ import annotations

from eoclient.errors import RpcError
from eoclient.server_stub.core import Broker, StoredMessage
from eoclient.server_stub.exports.context import topic_schema_settings
from eoclient.server_stub.exports.files import (
    FileFormat,
    SchemaMismatch,
    TextFormat,
    Unwritable,
    message_format,
    topic_schema_format,
)
from eoclient.server_stub.exports.settings import CloudStorageExport

# The schema attributes a message published on a topic with a schema carries.
SCHEMA_NAME_ATTRIBUTE = "googclient_schemaname"
SCHEMA_REVISION_ATTRIBUTE = "googclient_schemarevisionid"
SCHEMA_ENCODING_ATTRIBUTE = "googclient_schemaencoding"


class FileFormats:
    """The formats of one export subscription (``name``), made from the broker's schemas."""

    def __init__(self, name: str, broker: Broker) -> None:
        self._name = name
        self._broker = broker
        self._made: dict[object, FileFormat] = {}

    def clear(self) -> None:
        """The settings changed: formats are made again from the next file on."""
        self._made.clear()

    def of(self, message: StoredMessage, settings: CloudStorageExport) -> tuple[object, FileFormat]:
        """The format ``message`` is written in, and its key (a file holds one key's
        messages); ``Unwritable`` when it cannot be written in any."""
        if not settings.avro:
            key: object = "text"
        elif not settings.use_topic_schema:
            key = ("avro", settings.write_metadata)
        else:
            attributes = message.attributes
            revision_id = attributes.get(SCHEMA_REVISION_ATTRIBUTE, "")
            schema = attributes.get(SCHEMA_NAME_ATTRIBUTE, "")
            if not revision_id or not schema:
                raise Unwritable(
                    f"message {message.message_id} carries no schema revision (published "
                    "before the topic had its schema)"
                )
            key = (schema, revision_id, attributes.get(SCHEMA_ENCODING_ATTRIBUTE, "JSON"))
        found = self._made.get(key)
        if found is None:
            found = self._make(key, settings)
            self._made[key] = found
        return key, found

    def _make(self, key: object, settings: CloudStorageExport) -> FileFormat:
        if key == "text":
            return TextFormat()
        if isinstance(key, tuple) and key[0] == "avro":
            return message_format(self._name, settings.write_metadata)
        assert isinstance(key, tuple)
        schema, revision_id, encoding = key
        try:
            revision = self._broker.schemas.get(f"{schema}@{revision_id}")
        except RpcError as error:
            raise Unwritable(f"schema revision {schema}@{revision_id}: {error}") from None
        return topic_schema_format(
            self._name, revision.definition, encoding, settings.write_metadata
        )

    def topic_schema_problem(self, settings: CloudStorageExport, topic: str) -> str:
        """Why the topic's schema cannot be used (``use_topic_schema``), or ""."""
        if not settings.use_topic_schema:
            return ""
        schema = topic_schema_settings(self._broker, topic)
        if schema is None:
            return "use_topic_schema is set but the topic has no schema"
        try:
            revision = self._broker.schemas.get(schema.schema)
        except RpcError:
            return f"the topic's schema {schema.schema} does not exist"
        if revision.type != "AVRO":
            return f"the topic's schema {schema.schema} is {revision.type}, not AVRO"
        try:
            topic_schema_format(self._name, revision.definition, "JSON", settings.write_metadata)
        except SchemaMismatch as error:
            return str(error)
        return ""
