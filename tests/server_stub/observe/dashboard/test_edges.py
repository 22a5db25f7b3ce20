"""The dashboard's panels of the server's edge rooms, over HTTP on real servers: a Cloud
Storage subscription's export (its state, the object it wrote after messages were exported,
NOT_FOUND for a missing bucket), a BigQuery subscription's table and rows, a topic's and a
subscription's message transforms with their counts, and import topics' state (Cloud
Storage: what it ingested; Kinesis: the state a source out of reach shows) — on their pages
and in the overview's list."""

from __future__ import annotations

import asyncio
import datetime
import html
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

import eoclient
from eoclient.admin import (
    AwsKinesisSource,
    BigQueryConfig,
    CloudStorageConfig,
    CloudStorageSource,
    IngestionSettings,
    JavaScriptUdf,
    MessageTransform,
)
from eoclient.server_stub.bigquery import parse_schema
from eoclient.server_stub.server import ReferenceServer, run_server

PROJECT = "projects/edges"
WAIT = 15.0
UPPER = """
function upper(message, metadata) {
  if (message.data === 'drop') return null;
  return {data: message.data.toUpperCase(), attributes: message.attributes};
}
"""
MARK = """
function mark(message, metadata) {
  message.attributes['seen'] = metadata.message_id;
  return message;
}
"""


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _page(http: aiohttp.ClientSession, server: ReferenceServer, kind: str, name: str) -> str:
    url = f"{server.rest_url}/dashboard/{kind}" if kind else f"{server.rest_url}/dashboard"
    async with http.get(url, params={"name": name} if name else {}) as answer:
        assert answer.status == 200, await answer.text()
        return await answer.text()


def _element(page: str, element_id: str) -> str:
    """The text from the element ``element_id`` to its section's end (tags removed,
    entities read)."""
    start = page.index(f"id={element_id}")
    end = page.find("</section>", start)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page[start:end])))


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not await check():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        await asyncio.sleep(0.05)


async def test_cloud_storage_export_shows_its_state_and_the_object_it_wrote(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    topic, sub = f"{PROJECT}/topics/logs", f"{PROJECT}/subscriptions/logs-to-files"
    missing = f"{PROJECT}/subscriptions/logs-nowhere"
    async with run_server(buckets_dir=tmp_path / "buckets") as server:
        assert server.buckets is not None
        await server.buckets.create_bucket("archive")
        async with eoclient.AdminClient(server.address) as admin:
            await admin.create_topic(topic)
            # A batch closes at 1,000 bytes: two lines of 500 bytes make one object.
            await admin.create_subscription(
                sub,
                topic,
                cloud_storage_config=CloudStorageConfig(
                    "archive", filename_prefix="logs/", filename_suffix=".txt", max_bytes=1000
                ),
            )
            await admin.create_subscription(
                missing, topic, cloud_storage_config=CloudStorageConfig("no-such-bucket")
            )
        async with eoclient.PublisherClient(server.address) as publisher:
            for n in range(3):
                await publisher.publish(topic, str(n).encode() * 499)

        async def one_object() -> bool:
            assert server.buckets is not None
            return len(await server.buckets.list("archive")) == 1

        await _until(one_object, "the export's first object")
        (written,) = await server.buckets.list("archive")
        exports = server.exports
        assert exports is not None

        async def counted() -> bool:
            # The object is in place a moment before it is counted, and the third message
            # may be taken into the next batch a moment after.
            status = exports.status(sub)
            return status is not None and status.objects == 1 and status.open_messages == 1

        await _until(counted, "its status")

        page = await _page(http, server, "subscription", sub)
        assert "<h2>Cloud Storage export</h2>" in page
        settings = _element(page, "export-settings")
        assert "gs://archive" in settings
        assert "logs/YYYY-MM-DDThh:mm:ss+00:00_<uuid>.txt" in settings
        assert "every 5m, or at 1,000 B, whichever comes first" in settings
        state = _element(page, "export-state")
        assert "ACTIVE" in state
        assert "2 messages in 1 object, 1,000 B" in state
        assert "being written now 1 message, 500 B" in state  # data and newline
        objects = _element(page, "export-written")
        assert f"gs://archive/{written.name}" in objects
        assert re.search(r"2 1,000 B \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", objects), objects

        nowhere = await _page(http, server, "subscription", missing)
        state = _element(nowhere, "export-state")
        assert "NOT_FOUND" in state
        assert "bucket 'no-such-bucket' does not exist" in state
        assert "the messages wait in the subscription" in _element(nowhere, "export-written")

        overview = await _page(http, server, "", "")
        rows = _element(overview, "edges")
        assert "Cloud Storage export gs://archive ACTIVE 2 messages in 1 object" in rows
        assert "Cloud Storage export gs://no-such-bucket NOT_FOUND" in rows
        # A plain subscription has no export section.
        async with eoclient.AdminClient(server.address) as admin:
            await admin.create_subscription(f"{PROJECT}/subscriptions/plain", topic)
        plain = await _page(http, server, "subscription", f"{PROJECT}/subscriptions/plain")
        assert "section-export" not in plain
        assert "section-transforms" not in plain


async def test_bigquery_subscription_shows_its_table_and_rows(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    topic, sub = f"{PROJECT}/topics/orders", f"{PROJECT}/subscriptions/orders-to-table"
    async with run_server(bigquery_db=tmp_path / "bq.duckdb") as server:
        assert server.bigquery is not None
        assert server.exports is not None
        server.bigquery.create_dataset("shop")
        server.bigquery.create_table(
            "shop", "orders", parse_schema([{"name": "data", "type": "STRING"}])
        )
        async with eoclient.AdminClient(server.address) as admin:
            await admin.create_topic(topic)
            await admin.create_subscription(
                sub,
                topic,
                bigquery_config=BigQueryConfig("edges.shop.orders", drop_unknown_fields=True),
            )
        async with eoclient.PublisherClient(server.address) as publisher:
            for n in range(3):
                await publisher.publish(topic, f"order {n}".encode())
        exports = server.exports

        async def three_rows() -> bool:
            status = exports.status(sub)
            return status is not None and status.rows == 3

        await _until(three_rows, "three rows")
        page = await _page(http, server, "subscription", sub)
        assert "<h2>BigQuery export</h2>" in page
        settings = _element(page, "export-settings")
        assert "table edges.shop.orders" in settings
        assert "drop unknown fields" in settings
        assert "write metadata" not in settings
        state = _element(page, "export-state")
        assert "ACTIVE" in state
        assert "3 messages in 3 rows" in state
        assert "edges.shop.orders" in _element(page, "export-written")
        table = _element(page, "export-table")
        assert re.search(r"3 rows written in \d+ writes? by 1 subscription, 0 refused", table)
        overview = _element(await _page(http, server, "", ""), "edges")
        assert "BigQuery export edges.shop.orders ACTIVE 3 messages in 3 rows" in overview


async def test_transforms_of_a_topic_and_a_subscription_with_their_counts(
    http: aiohttp.ClientSession,
) -> None:
    topic, sub = f"{PROJECT}/topics/shouting", f"{PROJECT}/subscriptions/shouting-marked"
    async with run_server() as server:
        async with eoclient.AdminClient(server.address) as admin:
            await admin.create_topic(
                topic, message_transforms=[MessageTransform(JavaScriptUdf("upper", UPPER))]
            )
            await admin.create_subscription(
                sub,
                topic,
                message_transforms=[
                    MessageTransform(JavaScriptUdf("mark", MARK)),
                    MessageTransform(JavaScriptUdf("upper", UPPER), disabled=True),
                ],
            )
        async with eoclient.PublisherClient(server.address) as publisher:
            for data in (b"hello", b"drop", b"world"):
                await publisher.publish(topic, data)
        async with eoclient.SubscriberClient(server.address) as subscriber:
            pulled = await subscriber.pull(sub, 10)
            assert sorted(m.data for m in pulled) == [b"HELLO", b"WORLD"]
            for message in pulled:
                message.ack()

        page = await _page(http, server, "topic", topic)
        transforms = _element(page, "transforms")
        assert "1 upper applied" in transforms
        assert "function upper(message, metadata)" in transforms  # the code, escaped
        counts = _element(page, "transform-counts")
        assert "transformed (since start) 2 messages" in counts
        assert "filtered out 1 message" in counts
        assert "failed 0 messages" in counts

        page = await _page(http, server, "subscription", sub)
        transforms = _element(page, "transforms")
        assert "1 mark applied" in transforms
        assert "2 upper disabled" in transforms
        assert "transformed (since start) 2 messages" in _element(page, "transform-counts")


async def test_import_topics_show_their_source_state_and_what_they_ingested(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    lines, kinesis = f"{PROJECT}/topics/from-files", f"{PROJECT}/topics/from-kinesis"
    async with run_server(buckets_dir=tmp_path / "buckets", ingestion_poll_interval=0.05) as server:
        assert server.buckets is not None
        await server.buckets.create_bucket("incoming")
        await server.buckets.write_bytes("incoming", "day1.txt", b"a\nb\nc\n")
        earliest = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
        async with eoclient.AdminClient(server.address) as admin:
            await admin.create_topic(
                lines,
                ingestion_data_source_settings=IngestionSettings(
                    CloudStorageSource(
                        "incoming", match_glob="*.txt", minimum_object_create_time=earliest
                    )
                ),
            )
            await admin.create_topic(
                kinesis,
                ingestion_data_source_settings=IngestionSettings(
                    AwsKinesisSource(
                        "arn:aws:kinesis:us-east-1:111111111111:stream/orders",
                        "arn:aws:kinesis:us-east-1:111111111111:stream/orders/consumer/c:1",
                        "arn:aws:iam::111111111111:role/reader",
                        "reader@edges.iam.gserviceaccount.com",
                    )
                ),
            )

        async def ingested() -> bool:
            status = server.ingestion.status(lines)
            return status is not None and status.counters.messages == 3

        await _until(ingested, "three messages ingested")
        page = await _page(http, server, "topic", lines)
        settings = _element(page, "ingestion-settings")
        assert "source Cloud Storage" in settings
        assert "bucket gs://incoming" in settings
        assert "match_glob *.txt" in settings
        assert "minimum_object_create_time 2020-01-01T00:00:00Z" in settings
        state = _element(page, "ingestion-state")
        assert "state ACTIVE topic state ACTIVE" in state
        assert "ingested (since start) 3 messages from 1 object, 6 B" in state
        assert "last object day1.txt at " in state
        assert "failures none" in state

        page = await _page(http, server, "topic", kinesis)
        assert "source Amazon Kinesis Data Streams" in _element(page, "ingestion-settings")
        state = _element(page, "ingestion-state")
        assert "KINESIS_PERMISSION_DENIED" in state
        assert "federated identity" in state  # why it shows that state
        assert "INGESTION_RESOURCE_ERROR" in state

        overview = _element(await _page(http, server, "", ""), "edges")
        assert "Cloud Storage ingestion gs://incoming ACTIVE 3 messages from 1 object" in overview
        assert "Amazon Kinesis Data Streams ingestion arn:aws:kinesis" in overview
