"""CreateSubscription and UpdateSubscription of BigQuery subscriptions through Google's own
client (google-cloud-pubsub) on ``run_server(bigquery_db=...)``: what is refused, with which
status, and that a valid config is kept as given."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.protobuf import field_mask_pb2
from google.pubsub_v1 import types
from support.official_clients import OfficialClients, in_thread

from eoclient.server_stub.server import ReferenceServer, run_server

PROJECT = "p"
TOPIC = f"projects/{PROJECT}/topics/orders"
AVRO = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ReferenceServer]:
    async with run_server(bigquery_db=tmp_path / "bq.duckdb") as srv:
        assert srv.bigquery is not None
        srv.bigquery.make_table("ds.raw", [{"name": "data", "type": "STRING"}])
        srv.bigquery.make_table(
            "ds.typed",
            [{"name": "id", "type": "STRING"}, {"name": "message_id", "type": "STRING"}],
        )
        yield srv


@pytest.fixture
async def clients(server: ReferenceServer) -> AsyncIterator[OfficialClients]:
    official = OfficialClients(server, "grpc")
    await in_thread(lambda: official.publisher.create_topic(name=TOPIC))
    yield official
    official.close()


async def create(clients: OfficialClients, name: str, **config: object) -> types.Subscription:
    subscription = types.Subscription(
        name=f"projects/{PROJECT}/subscriptions/{name}",
        topic=TOPIC,
        bigquery_config=types.BigQueryConfig(**config),
    )
    return await in_thread(lambda: clients.subscriber.create_subscription(request=subscription))


async def test_a_valid_config_is_kept(clients: OfficialClients) -> None:
    created = await create(
        clients, "kept", table="p.ds.raw", drop_unknown_fields=True, service_account_email="a@b.c"
    )
    assert created.bigquery_config.table == "p.ds.raw"
    assert created.bigquery_config.service_account_email == "a@b.c"
    got = await in_thread(lambda: clients.subscriber.get_subscription(subscription=created.name))
    assert got.bigquery_config.drop_unknown_fields


@pytest.mark.parametrize(
    ("config", "error", "text"),
    [
        ({"table": "p:ds.raw"}, exceptions.InvalidArgument, "project.dataset.table"),
        ({"table": "ds.raw"}, exceptions.InvalidArgument, "{projectId}.{datasetId}.{tableId}"),
        ({"use_table_schema": True}, exceptions.InvalidArgument, "table is required"),
        (
            {"table": "p.ds.typed", "use_table_schema": True, "use_topic_schema": True},
            exceptions.InvalidArgument,
            "cannot be enabled at the same time",
        ),
        (
            {"table": "p.ds.typed", "use_topic_schema": True},
            exceptions.FailedPrecondition,
            "the topic has no schema",
        ),
        ({"table": "p.ds.absent"}, exceptions.NotFound, "does not exist"),
        ({"table": "p.nowhere.raw"}, exceptions.NotFound, "dataset nowhere"),
        ({"table": "p.ds.typed"}, exceptions.FailedPrecondition, "no column data"),
        (
            {"table": "p.ds.raw", "write_metadata": True},
            exceptions.FailedPrecondition,
            "subscription_name",
        ),
    ],
)
async def test_configs_that_are_refused(
    clients: OfficialClients,
    config: dict[str, object],
    error: type[exceptions.GoogleAPICallError],
    text: str,
) -> None:
    with pytest.raises(error, match=text.replace("{", r"\{").replace("}", r"\}")):
        await create(clients, "refused", **config)
    with pytest.raises(exceptions.NotFound):  # nothing was stored
        await in_thread(
            lambda: clients.subscriber.get_subscription(
                subscription=f"projects/{PROJECT}/subscriptions/refused"
            )
        )


async def test_the_topic_schema_is_checked_against_the_table(
    server: ReferenceServer, clients: OfficialClients
) -> None:
    schema = await in_thread(
        lambda: clients.schemas.create_schema(
            parent=f"projects/{PROJECT}",
            schema=types.Schema(type_=types.Schema.Type.AVRO, definition=AVRO),
            schema_id="order",
        )
    )
    topic = f"projects/{PROJECT}/topics/typed"
    await in_thread(
        lambda: clients.publisher.create_topic(
            request=types.Topic(
                name=topic,
                schema_settings=types.SchemaSettings(
                    schema=schema.name, encoding=types.Encoding.JSON
                ),
            )
        )
    )
    subscription = types.Subscription(
        name=f"projects/{PROJECT}/subscriptions/typed",
        topic=topic,
        bigquery_config=types.BigQueryConfig(table="p.ds.typed", use_topic_schema=True),
    )
    created = await in_thread(lambda: clients.subscriber.create_subscription(request=subscription))
    assert created.bigquery_config.use_topic_schema
    assert server.bigquery is not None
    server.bigquery.make_table(
        "ds.meta",
        [
            {"name": "id", "type": "STRING"},
            {"name": "subscription_name", "type": "STRING"},
            {"name": "message_id", "type": "STRING"},
            {"name": "publish_time", "type": "TIMESTAMP"},
            {"name": "attributes", "type": "JSON"},
        ],
    )
    # An update naming bigquery_config is checked too, against the stored topic's schema.
    update = types.Subscription(
        name=created.name,
        bigquery_config=types.BigQueryConfig(table="p.ds.raw", use_topic_schema=True),
    )
    with pytest.raises(exceptions.FailedPrecondition, match="field id has no column"):
        await in_thread(
            lambda: clients.subscriber.update_subscription(
                subscription=update,
                update_mask=field_mask_pb2.FieldMask(paths=["bigquery_config"]),
            )
        )
    update.bigquery_config = types.BigQueryConfig(
        table="p.ds.meta", use_topic_schema=True, write_metadata=True
    )
    updated = await in_thread(
        lambda: clients.subscriber.update_subscription(
            subscription=update, update_mask=field_mask_pb2.FieldMask(paths=["bigquery_config"])
        )
    )
    assert updated.bigquery_config.table == "p.ds.meta"


async def test_push_and_bigquery_at_once_is_refused(clients: OfficialClients) -> None:
    subscription = types.Subscription(
        name=f"projects/{PROJECT}/subscriptions/both",
        topic=TOPIC,
        push_config=types.PushConfig(push_endpoint="http://127.0.0.1:9/push"),
        bigquery_config=types.BigQueryConfig(table="p.ds.raw"),
    )
    with pytest.raises(exceptions.InvalidArgument, match="one delivery type"):
        await in_thread(lambda: clients.subscriber.create_subscription(request=subscription))


async def test_a_server_without_a_stand_in_refuses_bigquery_subscriptions() -> None:
    async with run_server() as srv:
        official = OfficialClients(srv, "grpc")
        try:
            await in_thread(lambda: official.publisher.create_topic(name=TOPIC))
            with pytest.raises(exceptions.FailedPrecondition, match="--bigquery-db"):
                await create(official, "none", table="p.ds.raw")
        finally:
            official.close()
