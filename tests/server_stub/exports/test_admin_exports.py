"""The SDK's admin API with typed export configs: create, the state on what it returns,
update masks (a field, then back to pull), the dataclass's own checks."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from eoclient.admin import (
    AdminClient,
    CloudStorageConfig,
    CloudStorageOutputFormat,
    ExportState,
)
from eoclient.errors import InvalidArgument
from eoclient.server_stub.server import run_server


async def test_typed_cloud_storage_configs(tmp_path: Path) -> None:
    async with run_server(buckets_dir=tmp_path / "buckets", rest_port=None) as server:
        assert server.buckets is not None
        await server.buckets.create_bucket("typed")
        async with AdminClient(server.address) as admin:
            topic = "projects/p/topics/typed-exports"
            name = "projects/p/subscriptions/typed-exports"
            await admin.create_topic(topic)
            config = CloudStorageConfig(
                "typed",
                filename_prefix="x/",
                output_format=CloudStorageOutputFormat.AVRO,
                write_metadata=True,
                max_duration=datetime.timedelta(minutes=2),
                max_messages=2000,
            )
            created = await admin.create_subscription(name, topic, cloud_storage_config=config)
            assert created.cloud_storage_config is not None
            assert created.cloud_storage_config.state is ExportState.ACTIVE
            assert created.cloud_storage_config == config.__class__(
                **{**_fields(config), "state": ExportState.ACTIVE}
            )
            changed = await admin.update_subscription(
                name, cloud_storage_config=CloudStorageConfig("missing-bucket")
            )
            assert changed.cloud_storage_config is not None
            assert changed.cloud_storage_config.bucket == "missing-bucket"
            assert changed.cloud_storage_config.state is ExportState.NOT_FOUND
            with pytest.raises(InvalidArgument, match="max_bytes"):
                await admin.update_subscription(
                    name, cloud_storage_config=CloudStorageConfig("typed", max_bytes=10)
                )
            pulled = await admin.update_subscription(name, cloud_storage_config=None)
            assert pulled.cloud_storage_config is None
            assert (await admin.get_subscription(name)).cloud_storage_config is None


def _fields(config: CloudStorageConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_metadata_needs_avro() -> None:
    with pytest.raises(ValueError, match="Avro"):
        CloudStorageConfig("b-1", write_metadata=True)
