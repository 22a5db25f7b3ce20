"""What a BigQuery subscription writes for each message (pure: no DuckDB here).

``plan`` checks a target's settings against a table once (the state SCHEMA_MISMATCH and its
reason when they do not fit) and ``Plan.row`` makes one message into a row, or says why it
cannot be written. The rules are docs/protocol.md#bigquery-subscription-rows:

* **Neither schema option**: the body goes to the column ``data`` (BYTES as is; STRING when it
  is UTF-8; JSON when it is valid JSON); the table must have it.
* **use_table_schema**: the body is a JSON object whose fields go to the columns of the same
  names (``values``' conversions); a field without a column makes the message unwritable
  unless ``drop_unknown_fields``.
* **use_topic_schema**: the body is decoded with the topic's schema (``topic_schema``) and its
  fields go to the columns of the same names, under the same rule.
* **write_metadata**: ``subscription_name`` (the subscription's full name), ``message_id``,
  ``publish_time`` (TIMESTAMP) and ``attributes`` (STRING or JSON: a JSON object of every
  attribute, plus ``ordering_key`` when the message has one) are filled too; without a
  schema option so is ``data``.
* **Change data capture**: with a schema option, a message with ``_CHANGE_TYPE`` is a change
  of the row its primary-key values name (``cdc``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eoclient.server_stub.bigquery import cdc
from eoclient.server_stub.bigquery.table_schema import (
    BYTES,
    JSON_TYPE,
    STRING,
    TIMESTAMP,
    Field,
    TableSchema,
)
from eoclient.server_stub.bigquery.target import BigQueryTarget
from eoclient.server_stub.bigquery.topic_schema import (
    CDC_FIELDS,
    CHANGE_SEQUENCE_NUMBER,
    CHANGE_TYPE,
    CompiledSchema,
    compiled,
    incompatibilities,
)
from eoclient.server_stub.bigquery.values import ConversionError, convert_record
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.schema_codecs import SchemaError

SUBSCRIPTION_NAME = "subscription_name"
MESSAGE_ID = "message_id"
PUBLISH_TIME = "publish_time"
DATA = "data"
ATTRIBUTES = "attributes"
# The attributes column's key for the message's ordering key (the service puts "other
# message fields such as the ordering key" into that JSON object).
ORDERING_KEY_ATTRIBUTE = "ordering_key"
# What each metadata column may be (the "Write metadata" table of BigQuery subscriptions).
METADATA_TYPES: dict[str, tuple[str, ...]] = {
    SUBSCRIPTION_NAME: (STRING,),
    MESSAGE_ID: (STRING,),
    PUBLISH_TIME: (TIMESTAMP,),
    DATA: (BYTES, STRING, JSON_TYPE),
    ATTRIBUTES: (STRING, JSON_TYPE),
}
# The names a topic schema must not use with write_metadata, camelCase ones included.
METADATA_NAMES = (
    SUBSCRIPTION_NAME,
    MESSAGE_ID,
    PUBLISH_TIME,
    ATTRIBUTES,
    "subscriptionName",
    "messageId",
    "publishTime",
)
# The encoding attribute Publish adds on a topic with a schema (the message says how its
# body is encoded, whatever the topic says now).
ENCODING_ATTRIBUTE = "googclient_schemaencoding"


class Mismatch(Exception):
    """The settings do not fit the table: the subscription's state is SCHEMA_MISMATCH."""


@dataclass(frozen=True)
class Row:
    """A message made into columns; ``change``: its CDC change, when it is one."""

    message_id: str
    values: dict[str, Any]
    change: cdc.Change | None = None


@dataclass(frozen=True)
class Unwritable:
    """A message that cannot be written, and why; ``unknown``: because of a field the table
    lacks (the subscription then shows SCHEMA_MISMATCH)."""

    message_id: str
    reason: str
    unknown: bool = False


@dataclass(frozen=True)
class Plan:
    """How one target writes to one table (settings checked)."""

    target: BigQueryTarget
    table: TableSchema
    schema: CompiledSchema | None  # the topic's, with use_topic_schema
    metadata: tuple[str, ...]  # the metadata columns this plan fills
    body_fields: tuple[Field, ...]  # the columns a message's own fields fill

    def row(self, message: StoredMessage) -> Row | Unwritable:
        try:
            return self._row(message)
        except (ConversionError, SchemaError, cdc.ChangeError) as error:
            unknown = isinstance(error, ConversionError) and error.unknown
            return Unwritable(message.message_id, str(error), unknown)

    def _row(self, message: StoredMessage) -> Row:
        t = self.target
        values: dict[str, Any] = {}
        change_fields: dict[str, Any] = {}
        if t.use_table_schema or t.use_topic_schema:
            body = self._decoded(message)
            for name in CDC_FIELDS:
                if name in body:
                    change_fields[name] = body.pop(name)
            for name in self.metadata:
                body.pop(name, None)  # the metadata wins over a field of the same name
            values.update(
                convert_record(
                    self.body_fields,
                    body,
                    drop_unknown=t.drop_unknown_fields,
                    json_source=t.use_table_schema,
                )
            )
        for name in self.metadata:
            values[name] = self._metadata(name, message)
        change = None
        if change_fields.get(CHANGE_TYPE) is not None:
            change = self._change(message.message_id, change_fields, values)
        elif change_fields.get(CHANGE_SEQUENCE_NUMBER) is not None:
            raise cdc.ChangeError(
                "the message has _CHANGE_SEQUENCE_NUMBER but no _CHANGE_TYPE (UPSERT or DELETE)"
            )
        return Row(message.message_id, values, change)

    def _decoded(self, message: StoredMessage) -> dict[str, Any]:
        if self.schema is not None:
            encoding = message.attributes.get(ENCODING_ATTRIBUTE) or (
                self.target.topic_schema.encoding if self.target.topic_schema else "JSON"
            )
            return dict(self.schema.decode(message.data, encoding.upper()))
        try:
            body = json.loads(message.data)
        except (ValueError, UnicodeDecodeError) as error:
            raise ConversionError(
                f"the message body is not JSON (use_table_schema reads a JSON object): {error}"
            ) from None
        if not isinstance(body, dict):
            raise ConversionError(
                "the message body is not a JSON object (use_table_schema maps an object's "
                "fields to columns)"
            )
        return body

    def _metadata(self, name: str, message: StoredMessage) -> Any:
        column = self.table.column(name)
        assert column is not None  # plan() kept only the columns the table has
        name = name.lower()
        if name == SUBSCRIPTION_NAME:
            return self.target.subscription
        if name == MESSAGE_ID:
            return message.message_id
        if name == PUBLISH_TIME:
            return dt.datetime.fromtimestamp(message.publish_time, dt.UTC)
        if name == ATTRIBUTES:
            attributes = dict(message.attributes)
            if message.ordering_key:
                attributes[ORDERING_KEY_ATTRIBUTE] = message.ordering_key
            return json.dumps(attributes, separators=(",", ":"), ensure_ascii=False)
        return _body(column, message.data)

    def _change(
        self, message_id: str, fields: Mapping[str, Any], values: dict[str, Any]
    ) -> cdc.Change:
        kind = cdc.change_type(fields.get(CHANGE_TYPE))
        number = cdc.sequence(fields.get(CHANGE_SEQUENCE_NUMBER))
        if not self.table.primary_key:
            raise cdc.ChangeError(
                "the message has _CHANGE_TYPE but the table has no primary key (change data "
                "capture applies changes by the table's primary key)"
            )
        key = []
        for column in self.table.primary_key:
            value = values.get(column)
            if value is None:
                raise cdc.ChangeError(
                    f"the change has no value for the primary-key column {column}"
                )
            key.append(value)
        return cdc.Change(message_id, kind, tuple(key), number, values)


def _body(column: Field, data: bytes) -> Any:
    if column.type == BYTES:
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConversionError(
            f"the message body is not UTF-8 text, which the {column.type} column data needs"
        ) from None
    if column.type == JSON_TYPE:
        try:
            json.loads(text)
        except ValueError:
            raise ConversionError(
                "the message body is not valid JSON, which the JSON column data needs"
            ) from None
    return text


def plan(target: BigQueryTarget, table: TableSchema) -> Plan:
    """How ``target`` writes to ``table``; ``Mismatch`` (SCHEMA_MISMATCH) with a reason a
    user can act on when the settings do not fit it."""
    schema_mode = target.use_table_schema or target.use_topic_schema
    metadata: list[str] = []
    if target.write_metadata:
        wanted = [SUBSCRIPTION_NAME, MESSAGE_ID, PUBLISH_TIME, ATTRIBUTES]
        if not schema_mode:
            wanted.append(DATA)
        for name in wanted:
            column = table.column(name)
            if column is None:
                raise Mismatch(
                    f"write_metadata needs a column {name} "
                    f"({' or '.join(METADATA_TYPES[name])}) in the table {target.table}"
                )
            metadata.append(column.name)
    elif not schema_mode:
        column = table.column(DATA)
        if column is not None:
            metadata.append(column.name)
    for name in metadata:
        column = table.column(name)
        assert column is not None
        allowed = METADATA_TYPES[name.lower()]
        if column.type not in allowed or column.repeated:
            raise Mismatch(
                f"the column {column.name} of {target.table} is {column.describe()}; it must "
                f"be {' or '.join(allowed)}"
            )
    if not schema_mode:
        if not any(name.lower() == DATA for name in metadata):
            raise Mismatch(
                f"the table {target.table} has no column data (BYTES, STRING or JSON): without "
                "use_topic_schema or use_table_schema the message body is written there"
            )
        for column in table.fields:
            if column.required and column.name not in metadata:
                raise Mismatch(
                    f"the table's column {column.name} is REQUIRED but nothing fills it "
                    "(without a schema option only data and the metadata are written)"
                )
        return Plan(target, table, None, tuple(metadata), ())
    body_fields = tuple(f for f in table.fields if f.name not in metadata)
    schema = None
    if target.use_topic_schema:
        settings = target.topic_schema
        if settings is None:
            raise Mismatch(
                "use_topic_schema is set but the topic has no schema (give the topic a schema, "
                "or use use_table_schema)"
            )
        try:
            schema = compiled(settings.type, settings.definition)
        except SchemaError as error:
            raise Mismatch(f"the topic's schema cannot be used: {error}") from None
        if target.write_metadata:
            clashes = [f.name for f in schema.fields if f.name in METADATA_NAMES]
            if clashes:
                raise Mismatch(
                    f"the topic schema has the field {clashes[0]}, a name write_metadata "
                    "uses: rename the field or turn write_metadata off"
                )
        problems = incompatibilities(
            schema.fields,
            table.fields,
            drop_unknown=target.drop_unknown_fields,
            filled_elsewhere=tuple(metadata),
        )
        if problems:
            raise Mismatch(f"the topic schema does not fit the table {target.table}: {problems[0]}")
    elif target.topic_schema is not None and target.topic_schema.encoding.upper() != "JSON":
        raise Mismatch(
            "use_table_schema reads JSON messages, but the topic's schema encoding is BINARY "
            "(use use_topic_schema, or JSON encoding)"
        )
    return Plan(target, table, schema, tuple(metadata), body_fields)
