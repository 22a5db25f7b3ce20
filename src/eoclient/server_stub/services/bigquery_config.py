"""A subscription's ``bigquery_config`` checked at CreateSubscription and UpdateSubscription.

What is refused, so that nothing is stored that could not write
(docs/protocol.md#bigquery-subscription-settings; the service's own texts are not
published, these say what to do):

* a table name that is not ``project.dataset.table`` — INVALID_ARGUMENT;
* both ``use_topic_schema`` and ``use_table_schema`` — INVALID_ARGUMENT (the proto: they
  "cannot be enabled at the same time");
* ``use_topic_schema`` on a topic without a schema — FAILED_PRECONDITION;
* a BigQuery subscription that is also push or Cloud Storage — INVALID_ARGUMENT (a
  subscription has one delivery type);
* a table (or its dataset) that does not exist — NOT_FOUND ("A BigQuery table exists" is a
  prerequisite of creating the subscription);
* a table that does not fit the settings (no ``data`` column, metadata columns missing or of
  the wrong type, a topic schema that does not map, a topic schema using a metadata name
  with ``write_metadata``) — FAILED_PRECONDITION, with the stand-in's reason.

An empty config (every field at its default) counts as unset, as elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from eoclient._proto import pubsub_pb2, schema_pb2
from eoclient.errors import FailedPrecondition, InvalidArgument, NotFound
from eoclient.server_stub.bigquery import (
    NOT_FOUND,
    BigQueryStandIn,
    BigQueryTarget,
    TopicSchemaSettings,
    parse_table,
)
from eoclient.server_stub.core import Broker
from eoclient.server_stub.core.schemas import DELETED_SCHEMA

FIELD = "bigquery_config"


def is_set(subscription: pubsub_pb2.Subscription) -> bool:
    return subscription.HasField(FIELD) and subscription.bigquery_config.ByteSize() > 0


def check_subscription(
    broker: Broker,
    subscription: pubsub_pb2.Subscription,
    standin: BigQueryStandIn | None,
    update_paths: Iterable[str] | None = None,
) -> None:
    """Refuse a ``bigquery_config`` the server could not write with (nothing is stored
    then). For an update, only when the mask names it (top-level names); the topic is the
    stored subscription's."""
    if update_paths is not None and FIELD not in set(update_paths):
        return
    if not is_set(subscription):
        return
    topic = subscription.topic
    if update_paths is not None:
        topic = broker.subscriptions.get(subscription.name).config.topic
    check_config(
        subscription.bigquery_config,
        subscription=subscription.name,
        topic_schema=topic_schema(broker, topic),
        standin=standin,
        push=bool(subscription.push_config.push_endpoint) and update_paths is None,
        cloud_storage=subscription.HasField("cloud_storage_config")
        and subscription.cloud_storage_config.ByteSize() > 0,
    )


def check_config(
    config: pubsub_pb2.BigQueryConfig,
    *,
    subscription: str,
    topic_schema: TopicSchemaSettings | None,
    standin: BigQueryStandIn | None,
    push: bool = False,
    cloud_storage: bool = False,
) -> None:
    """The checks above on one config (the topic's schema and the stand-in given)."""
    if push or cloud_storage:
        other = "push_config" if push else "cloud_storage_config"
        raise InvalidArgument(
            f"A subscription has one delivery type: it cannot have both bigquery_config and "
            f"{other} (use two subscriptions)."
        )
    if not config.table:
        raise InvalidArgument(
            "bigquery_config.table is required: the table to write to, "
            "{projectId}.{datasetId}.{tableId}."
        )
    parse_table(config.table)
    if config.use_topic_schema and config.use_table_schema:
        raise InvalidArgument(
            "use_topic_schema and use_table_schema cannot be enabled at the same time: choose "
            "the topic's schema or the table's."
        )
    if config.use_topic_schema and topic_schema is None:
        raise FailedPrecondition(
            "use_topic_schema is set but the topic has no schema: give the topic a schema, or "
            "use use_table_schema."
        )
    if standin is None:
        raise FailedPrecondition(
            "This server has no BigQuery stand-in to write to (eoclient serve --bigquery-db)."
        )
    status = standin.check(BigQueryTarget.from_config(subscription, config, topic_schema))
    if status.state == NOT_FOUND:
        raise NotFound(f"The BigQuery table {config.table} was not found: {status.reason}.")
    if not status.active:
        raise FailedPrecondition(
            f"The BigQuery table {config.table} does not fit the subscription: {status.reason}."
        )


def topic_schema(broker: Broker, topic: str) -> TopicSchemaSettings | None:
    """The schema a BigQuery subscription of ``topic`` writes with: the newest revision the
    topic allows, with the topic's encoding (None without a schema, or once it was
    deleted)."""
    try:
        extras = broker.topics.get(topic).config.extras
    except (NotFound, InvalidArgument):
        return None  # the broker answers for the topic itself
    if not extras:
        return None
    settings = pubsub_pb2.Topic.FromString(extras).schema_settings
    if not settings.schema or settings.schema == DELETED_SCHEMA:
        return None
    if not broker.schemas.exists(settings.schema):
        return None
    revisions = broker.schemas.revision_range(
        settings.schema, settings.first_revision_id, settings.last_revision_id
    )
    newest = revisions[-1]
    encoding = "BINARY" if settings.encoding == schema_pb2.BINARY else "JSON"
    return TopicSchemaSettings(newest.type, newest.definition, encoding)
