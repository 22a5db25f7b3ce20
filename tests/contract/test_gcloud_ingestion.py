"""The gcloud CLI's import-topic flags against the reference server's REST door: a Cloud
Storage import topic made with ``gcloud pubsub topics create --cloud-storage-ingestion-*``
publishes its bucket's lines, a Kinesis one shows KINESIS_PERMISSION_DENIED, and
``topics update --clear-ingestion-data-source-settings`` makes a topic plain again.

gcloud is pointed at the door by ``CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB`` with credentials
disabled, in a configuration directory of its own (the user's is never touched).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from eoclient.server_stub.buckets import LocalBuckets
from eoclient.server_stub.server import run_server

PROJECT = "gcloud-ingestion"
STREAM = "arn:aws:kinesis:us-west-2:111111111111:stream/orders"

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")


async def gcloud(env: dict[str, str], *args: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        "gcloud",
        "pubsub",
        *args,
        "--format=json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout) if stdout.strip() else None


@pytest.mark.timeout(180)
async def test_import_topics_made_with_gcloud(tmp_path: Path) -> None:
    buckets = LocalBuckets(tmp_path / "buckets")
    await buckets.create_bucket("landing")
    await buckets.write_bytes("landing", "in/a.txt", b"one\ntwo\n")
    async with run_server(buckets_dir=tmp_path / "buckets", ingestion_poll_interval=0.05) as srv:
        env = {
            **os.environ,
            "CLOUDSDK_CONFIG": str(tmp_path / "gcloud-config"),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB": srv.rest_url.rstrip("/") + "/",
            "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
            "CLOUDSDK_CORE_PROJECT": PROJECT,
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        }
        await gcloud(env, "topics", "create", "landing")
        await gcloud(env, "subscriptions", "create", "landing-sub", "--topic=landing")
        await gcloud(
            env,
            "topics",
            "update",
            "landing",
            "--cloud-storage-ingestion-bucket=landing",
            "--cloud-storage-ingestion-input-format=text",
            "--cloud-storage-ingestion-match-glob=in/**",
            "--cloud-storage-ingestion-minimum-object-create-time=2020-01-01T00:00:00Z",
        )
        pulled: list[str] = []
        for _ in range(100):
            got = await gcloud(env, "subscriptions", "pull", "landing-sub", "--auto-ack")
            pulled += [m["message"]["data"] for m in got or []]
            if len(pulled) >= 2:
                break
        assert sorted(pulled) == ["b25l", "dHdv"]  # base64 of "one", "two"
        described = await gcloud(env, "topics", "describe", "landing")
        storage = described["ingestionDataSourceSettings"]["cloudStorage"]
        assert (storage["state"], storage["bucket"], storage["textFormat"]) == (
            "ACTIVE",
            "landing",
            {"delimiter": "\n"},
        )
        streamed = await gcloud(
            env,
            "topics",
            "create",
            "streamed",
            f"--kinesis-ingestion-stream-arn={STREAM}",
            f"--kinesis-ingestion-consumer-arn={STREAM}/consumer/pubsub:1700000000",
            "--kinesis-ingestion-role-arn=arn:aws:iam::111111111111:role/ingest",
            "--kinesis-ingestion-service-account=ingest@p.iam.gserviceaccount.com",
            "--ingestion-log-severity=WARNING",
        )
        [created] = streamed if isinstance(streamed, list) else [streamed]
        kinesis = created["ingestionDataSourceSettings"]["awsKinesis"]
        assert kinesis["state"] == "KINESIS_PERMISSION_DENIED"
        assert created["state"] == "INGESTION_RESOURCE_ERROR"
        await gcloud(env, "topics", "update", "streamed", "--clear-ingestion-data-source-settings")
        plain = await gcloud(env, "topics", "describe", "streamed")
        assert "ingestionDataSourceSettings" not in plain
    await buckets.aclose()
