"""``eoclient subscriptions create|update|describe`` with the export flags gcloud names."""

from __future__ import annotations

from .support import Eo


def test_cloud_storage_flags(eo: Eo) -> None:
    eo.ok("topics", "create", "logs")
    created = eo.json(
        "subscriptions",
        "create",
        "to-files",
        "--topic",
        "logs",
        "--cloud-storage-bucket",
        "no-such-bucket",
        "--cloud-storage-file-prefix",
        "logs/",
        "--cloud-storage-file-suffix",
        ".avro",
        "--cloud-storage-file-datetime-format",
        "YYYY-MM-DD/hh_mm_ss",
        "--cloud-storage-max-duration",
        "2m",
        "--cloud-storage-max-bytes",
        "1000000",
        "--cloud-storage-max-messages",
        "5000",
        "--cloud-storage-output-format",
        "avro",
        "--cloud-storage-write-metadata",
    )
    assert created["bigqueryConfig"] is None
    assert created["cloudStorageConfig"] == {
        "bucket": "no-such-bucket",
        "filenamePrefix": "logs/",
        "filenameSuffix": ".avro",
        "filenameDatetimeFormat": "YYYY-MM-DD/hh_mm_ss",
        "outputFormat": "avro",
        "writeMetadata": True,
        "useTopicSchema": False,
        "maxDuration": "120s",
        "maxBytes": "1000000",
        "maxMessages": "5000",
        "serviceAccountEmail": "",
        "state": "NOT_FOUND",
    }
    # An update that names one field keeps the others.
    updated = eo.json("subscriptions", "update", "to-files", "--cloud-storage-max-messages", "9000")
    assert updated["cloudStorageConfig"]["maxMessages"] == "9000"
    assert updated["cloudStorageConfig"]["filenamePrefix"] == "logs/"
    shown = eo.ok("subscriptions", "describe", "to-files").stdout
    assert "no-such-bucket" in shown
    assert "NOT_FOUND" in shown
    assert "logs/<YYYY-MM-DD/hh_mm_ss>_<uuid>.avro" in shown
    # The service's limits, in its words.
    error = eo.fails("subscriptions", "update", "to-files", "--cloud-storage-max-messages", "500")
    assert "max_messages" in error
    assert "1000" in error
    error = eo.fails(
        "subscriptions",
        "create",
        "bad",
        "--topic",
        "logs",
        "--cloud-storage-bucket",
        "b-1",
        "--cloud-storage-write-metadata",
        code=2,  # a usage problem
    )
    assert "--cloud-storage-output-format=avro" in error
    cleared = eo.json("subscriptions", "update", "to-files", "--clear-cloud-storage-config")
    assert cleared["cloudStorageConfig"] is None
