"""BigQuery subscriptions end to end on the DuckDB stand-in, driven by Google's Python
client: 2,000 JSON messages to a use_table_schema subscription become 2,000 rows and one
with an unknown field does not (it goes to the dead-letter topic); a write_metadata table
holds every message once with its metadata; a missing table shows NOT_FOUND and its
messages wait until it exists again."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from google.cloud import pubsub_v1
from support.official_clients import OfficialClients, in_thread

from eoclient.server_stub.bigquery import parse_schema
from eoclient.server_stub.server import run_server

BQ = pubsub_v1.types.BigQueryConfig
PROJECT = "bq-exports"
WAIT = 30.0


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def test_json_rows_metadata_and_not_found(tmp_path: Path) -> None:
    async with run_server(bigquery_db=tmp_path / "bq.duckdb") as server:
        standin = server.bigquery
        assert standin is not None
        standin.create_dataset("shop")
        standin.create_table(
            "shop",
            "orders",
            parse_schema(
                [
                    {"name": "id", "type": "INT64", "mode": "REQUIRED"},
                    {"name": "customer", "type": "STRING"},
                ]
            ),
        )
        standin.create_table(
            "shop",
            "raw",
            parse_schema(
                [
                    {"name": "subscription_name", "type": "STRING"},
                    {"name": "message_id", "type": "STRING"},
                    {"name": "publish_time", "type": "TIMESTAMP"},
                    {"name": "data", "type": "STRING"},
                    {"name": "attributes", "type": "STRING"},
                ]
            ),
        )
        clients = OfficialClients(server, "grpc")
        try:
            topic = f"projects/{PROJECT}/topics/orders"
            dead = f"projects/{PROJECT}/topics/orders-dead"
            table_sub = f"projects/{PROJECT}/subscriptions/orders-to-table"
            raw_sub = f"projects/{PROJECT}/subscriptions/orders-raw"
            missing_sub = f"projects/{PROJECT}/subscriptions/orders-later"
            for name in (topic, dead):
                await in_thread(lambda name=name: clients.publisher.create_topic(name=name))
            dead_sub = f"projects/{PROJECT}/subscriptions/orders-dead"
            await in_thread(
                lambda: clients.subscriber.create_subscription(name=dead_sub, topic=dead)
            )
            await in_thread(
                lambda: clients.subscriber.create_subscription(
                    request={
                        "name": table_sub,
                        "topic": topic,
                        "bigquery_config": BQ(table="p.shop.orders", use_table_schema=True),
                        "dead_letter_policy": {
                            "dead_letter_topic": dead,
                            "max_delivery_attempts": 5,
                        },
                        "retry_policy": {"minimum_backoff": "0s", "maximum_backoff": "0s"},
                    }
                )
            )
            await in_thread(
                lambda: clients.subscriber.create_subscription(
                    request={
                        "name": raw_sub,
                        "topic": topic,
                        "bigquery_config": BQ(table="p.shop.raw", write_metadata=True),
                    }
                )
            )
            later_schema = parse_schema(
                [{"name": "id", "type": "INT64"}, {"name": "customer", "type": "STRING"}]
            )
            # The table must exist when the subscription is made (the stand-in's check);
            # dropped afterwards, the subscription shows NOT_FOUND and its messages wait.
            standin.create_table("shop", "later", later_schema)
            await in_thread(
                lambda: clients.subscriber.create_subscription(
                    request={
                        "name": missing_sub,
                        "topic": topic,
                        "bigquery_config": BQ(table="p.shop.later", use_table_schema=True),
                    }
                )
            )
            standin.delete_table("shop", "later")
            later = await in_thread(
                lambda: clients.subscriber.get_subscription(subscription=missing_sub)
            )
            assert later.bigquery_config.state == BQ.State.NOT_FOUND
            futures = [
                clients.publisher.publish(
                    topic, json.dumps({"id": i, "customer": f"c{i}"}).encode(), n=str(i)
                )
                for i in range(2000)
            ]
            futures.append(
                clients.publisher.publish(topic, json.dumps({"id": -1, "extra": 1}).encode())
            )
            ids = [await in_thread(f.result) for f in futures]

            async def all_rows() -> bool:
                return (
                    standin.row_count("shop", "orders") >= 2000
                    and standin.row_count("shop", "raw") >= 2001
                )

            await _until(all_rows, "every row")
            assert standin.query("SELECT count(*), count(DISTINCT id) FROM shop.orders").rows == (
                (2000, 2000),
            )
            assert standin.query("SELECT count(*) FROM shop.orders WHERE id = -1").rows == ((0,),)
            raw = standin.query(
                "SELECT count(*), count(DISTINCT message_id), min(subscription_name) FROM shop.raw"
            ).rows
            assert raw == ((2001, 2001, raw_sub),)
            one = standin.query(
                f"SELECT data, attributes FROM shop.raw WHERE message_id = '{ids[5]}'"
            ).rows
            assert json.loads(one[0][0]) == {"id": 5, "customer": "c5"}
            assert json.loads(one[0][1]) == {"n": "5"}

            # The message with an unknown field ends on the dead-letter topic.
            response = None
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                response = await in_thread(
                    lambda: clients.subscriber.pull(subscription=dead_sub, max_messages=1)
                )
                if response.received_messages:
                    break
                await asyncio.sleep(0.2)
            assert response is not None
            assert response.received_messages
            assert json.loads(response.received_messages[0].message.data)["extra"] == 1

            # The missing table: the messages wait, then go in once it exists.
            got = await in_thread(
                lambda: clients.subscriber.get_subscription(subscription=missing_sub)
            )
            assert got.bigquery_config.state == BQ.State.NOT_FOUND
            assert standin.row_count("shop", "orders") == 2000  # meanwhile, the others wrote
            standin.create_table("shop", "later", later_schema)

            async def later_rows() -> bool:
                return standin.row_count("shop", "later") >= 2000

            await _until(later_rows, "the rows once the table exists")

            # Its backlog holds the message with an unknown field, which it cannot write
            # without drop_unknown_fields: the error state the specification names. The
            # 2,000th row lands with a batch of good messages (ACTIVE); the state turns
            # once the worker has tried the last message, in a batch of its own.
            async def schema_mismatch() -> bool:
                got = await in_thread(
                    lambda: clients.subscriber.get_subscription(subscription=missing_sub)
                )
                return bool(got.bigquery_config.state == BQ.State.SCHEMA_MISMATCH)

            await _until(schema_mismatch, "SCHEMA_MISMATCH for the message it cannot write")
            assert server.exports is not None
            status = server.exports.status(table_sub)
            assert status is not None
            assert status.rows == 2000
            assert status.unwritable >= 5
        finally:
            clients.close()
