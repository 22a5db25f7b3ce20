"""``AdminClient`` and import topics: typed ``ingestion_data_source_settings`` on
create_topic and update_topic for every source, the output-only states read back, back to
a plain topic with ``None`` — against the in-process reference server."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eoclient.admin import (
    AdminClient,
    AwsKinesisSource,
    AwsMskSource,
    AzureEventHubsSource,
    CloudStorageFormat,
    CloudStorageSource,
    CloudStorageState,
    ConfluentCloudSource,
    ConfluentCloudState,
    EventHubsState,
    IngestionLogSeverity,
    IngestionSettings,
    KinesisState,
    MskState,
    TopicState,
    topic_path,
)
from eoclient.errors import InvalidArgument
from eoclient.server_stub.server import ReferenceServer, run_server

ACCOUNT = "ingest@my-project.iam.gserviceaccount.com"
STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
ROLE = "arn:aws:iam::123456789012:role/pubsub-ingest"
SOURCES = [
    (
        AwsKinesisSource(STREAM, f"{STREAM}/consumer/pubsub:1700000000", ROLE, ACCOUNT),
        KinesisState.KINESIS_PERMISSION_DENIED,
    ),
    (
        AwsMskSource(
            "arn:aws:kafka:us-east-1:123456789012:cluster/main/0b7d0c7e-1",
            "orders",
            ROLE,
            ACCOUNT,
        ),
        MskState.MSK_PERMISSION_DENIED,
    ),
    (
        AzureEventHubsSource("rg", "ns", "hub", "client", "tenant", "subscription", ACCOUNT),
        EventHubsState.EVENT_HUBS_PERMISSION_DENIED,
    ),
    (
        ConfluentCloudSource(
            "pkc-1.us-east1.gcp.confluent.cloud:9092", "lkc-1", "orders", "pool-1", ACCOUNT
        ),
        ConfluentCloudState.CONFLUENT_CLOUD_PERMISSION_DENIED,
    ),
]


def new_topic() -> str:
    return topic_path("ingest", f"t-{uuid.uuid4().hex[:8]}")


@pytest.fixture
async def admin(reference: ReferenceServer) -> AsyncIterator[AdminClient]:
    async with AdminClient(reference.address) as client:
        yield client


@pytest.mark.parametrize(("source", "state"), SOURCES)
async def test_sources_in_other_clouds(admin: AdminClient, source: object, state: object) -> None:
    settings = IngestionSettings(source, IngestionLogSeverity.WARNING)  # type: ignore[arg-type]
    created = await admin.create_topic(new_topic(), ingestion_data_source_settings=settings)
    shown = created.ingestion_data_source_settings
    assert shown is not None
    assert shown.source.state == state
    assert shown.source == type(source)(**{**_fields(source), "state": state})
    assert shown.log_severity == IngestionLogSeverity.WARNING
    assert created.state == TopicState.INGESTION_RESOURCE_ERROR
    assert await admin.get_topic(created.name) == created


def _fields(value: object) -> dict[str, object]:
    return {name: getattr(value, name) for name in value.__slots__}  # type: ignore[attr-defined]


async def test_cloud_storage_settings_round_trip_and_back_to_plain(tmp_path: Path) -> None:
    since = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)
    source = CloudStorageSource(
        "landing-zone",
        CloudStorageFormat.TEXT,
        text_delimiter=",",
        match_glob="in/**.csv",
        minimum_object_create_time=since,
    )
    async with (
        run_server(buckets_dir=tmp_path, ingestion_poll_interval=0.05) as server,
        AdminClient(server.address) as admin,
    ):
        name = new_topic()
        await admin.create_topic(name)
        updated = await admin.update_topic(
            name, ingestion_data_source_settings=IngestionSettings(source)
        )
        assert updated.ingestion_data_source_settings == IngestionSettings(
            CloudStorageSource(
                "landing-zone",
                CloudStorageFormat.TEXT,
                ",",
                "in/**.csv",
                since,
                CloudStorageState.ACTIVE,
            )
        )
        avro = CloudStorageSource("landing-zone", CloudStorageFormat.PUBSUB_AVRO)
        again = await admin.update_topic(
            name, ingestion_data_source_settings=IngestionSettings(avro)
        )
        assert again.ingestion_data_source_settings is not None
        assert again.ingestion_data_source_settings.source.input_format == (
            CloudStorageFormat.PUBSUB_AVRO
        )
        plain = await admin.update_topic(name, ingestion_data_source_settings=None)
        assert plain.ingestion_data_source_settings is None
        assert plain.state == TopicState.ACTIVE


async def test_refusals_are_invalid_argument(admin: AdminClient) -> None:
    with pytest.raises(InvalidArgument, match="Missing required fields for AwsKinesis"):
        await admin.create_topic(
            new_topic(),
            ingestion_data_source_settings=IngestionSettings(AwsKinesisSource(STREAM, "", "", "")),
        )
    naive = CloudStorageSource("b-1", minimum_object_create_time=datetime.datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        await admin.create_topic(
            new_topic(), ingestion_data_source_settings=IngestionSettings(naive)
        )
