"""``eoclient topics create|update`` with gcloud's ingestion flags, against the reference
server: a Kinesis import topic and its state, a Cloud Storage one with every optional flag,
switching to another source and back to a plain topic, and the flag rules (one source,
every required flag of it, the log severity only with a source)."""

from __future__ import annotations

from .support import Eo

STREAM = "arn:aws:kinesis:us-west-2:111111111111:stream/orders"
KINESIS = [
    "--kinesis-ingestion-stream-arn",
    STREAM,
    "--kinesis-ingestion-consumer-arn",
    f"{STREAM}/consumer/pubsub:1700000000",
    "--kinesis-ingestion-role-arn",
    "arn:aws:iam::111111111111:role/ingest",
    "--kinesis-ingestion-service-account",
    "ingest@my-project.iam.gserviceaccount.com",
]


def test_kinesis_import_topic(eo: Eo) -> None:
    created = eo.json("topics", "create", "orders", *KINESIS, "--ingestion-log-severity", "warning")
    assert created["state"] == "INGESTION_RESOURCE_ERROR"
    assert created["ingestionDataSourceSettings"] == {
        "awsKinesis": {
            "state": "KINESIS_PERMISSION_DENIED",
            "streamArn": STREAM,
            "consumerArn": f"{STREAM}/consumer/pubsub:1700000000",
            "awsRoleArn": "arn:aws:iam::111111111111:role/ingest",
            "gcpServiceAccount": "ingest@my-project.iam.gserviceaccount.com",
        },
        "platformLogsSettings": {"severity": "WARNING"},
    }
    described = eo.ok("topics", "describe", "orders").stdout
    assert f"Kinesis {STREAM}: KINESIS_PERMISSION_DENIED" in described


def test_cloud_storage_then_plain_again(eo: Eo) -> None:
    eo.ok("topics", "create", "landing")
    updated = eo.json(
        "topics",
        "update",
        "landing",
        "--cloud-storage-ingestion-bucket",
        "landing-zone",
        "--cloud-storage-ingestion-input-format",
        "text",
        "--cloud-storage-ingestion-text-delimiter",
        ",",
        "--cloud-storage-ingestion-minimum-object-create-time",
        "2024-05-01T12:30:00Z",
        "--cloud-storage-ingestion-match-glob",
        "in/**.csv",
    )
    assert updated["ingestionDataSourceSettings"]["cloudStorage"] == {
        "state": "ACTIVE",
        "bucket": "landing-zone",
        "textFormat": {"delimiter": ","},
        "minimumObjectCreateTime": "2024-05-01T12:30:00Z",
        "matchGlob": "in/**.csv",
    }
    avro = eo.json(
        "topics",
        "update",
        "landing",
        "--cloud-storage-ingestion-bucket",
        "landing-zone",
        "--cloud-storage-ingestion-input-format",
        "pubsub_avro",
    )
    assert avro["ingestionDataSourceSettings"]["cloudStorage"]["pubsubAvroFormat"] == {}
    plain = eo.json("topics", "update", "landing", "--clear-ingestion-data-source-settings")
    assert plain["ingestionDataSourceSettings"] is None
    assert plain["state"] == "ACTIVE"


def test_flag_rules(eo: Eo) -> None:
    both = eo.fails(
        "topics", "create", "t", *KINESIS, "--cloud-storage-ingestion-bucket", "b-1", code=2
    )
    assert "an import topic has one source" in both
    partial = eo.fails("topics", "create", "t", *KINESIS[:2], code=2)
    assert "--kinesis-ingestion-consumer-arn" in partial
    alone = eo.fails("topics", "create", "t", "--ingestion-log-severity", "info", code=2)
    assert "needs an ingestion source" in alone
    clash = eo.fails(
        "topics", "update", "t", "--clear-ingestion-data-source-settings", *KINESIS, code=2
    )
    assert "contradict" in clash
    refused = eo.fails(
        "topics",
        "create",
        "t",
        "--cloud-storage-ingestion-bucket",
        "b-1",
        "--cloud-storage-ingestion-input-format",
        "text",
        "--cloud-storage-ingestion-text-delimiter",
        "ab",
    )
    assert "must be a single character" in refused
