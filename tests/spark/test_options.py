"""The source's options: defaults, and every mistake refused with a message naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from eoclient.errors import SparkConnectorError
from eoclient.spark._options import SourceSettings

SUBSCRIPTION = "projects/p/subscriptions/orders"


def _settings(**options: str) -> SourceSettings:
    # Spark hands the options over with lower-cased keys.
    given = {"subscription": SUBSCRIPTION, "journalPath": "/j", **options}
    return SourceSettings({key.lower(): value for key, value in given.items()})


def test_defaults() -> None:
    settings = _settings()
    assert (settings.subscription, settings.journal_path) == (SUBSCRIPTION, "/j")
    # A relative journal path is the driver's working directory's, also on the executors.
    assert _settings(journalPath="q1/journal").journal_path == str(Path.cwd() / "q1/journal")
    assert _settings(journalPath="file:///data/j").journal_path == "/data/j"
    assert (settings.max_rows, settings.num_partitions, settings.lease_seconds) == (10_000, 2, 60)
    assert (settings.pull_timeout, settings.restart_grace) == (2.0, None)
    assert (settings.allow_at_least_once, settings.dedupe) == (False, True)


def test_values_are_parsed() -> None:
    settings = _settings(
        maxMessagesPerTrigger="50000",
        pullTimeoutSeconds="0.5",
        restartGraceSeconds="12",
        allowAtLeastOnce="TRUE",
        dedupe="false",
    )
    assert settings.max_rows == 50_000
    assert (settings.pull_timeout, settings.restart_grace) == (0.5, 12.0)
    assert (settings.allow_at_least_once, settings.dedupe) == (True, False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"maxMessagesPerTriger": "5"},
            'unknown option "maxmessagespertriger"; did you mean "maxMessagesPerTrigger"',
        ),
        ({"colour": "red"}, 'unknown option "colour" \\(the options: subscription, '),
        ({"subscription": "orders"}, '"orders" is not a subscription name'),
        ({"subscription": "projects/p/topics/orders"}, "is not a subscription name"),
        ({"subscription": "projects/p/subscriptions/goog-x"}, "is not a subscription name"),
        ({"subscription": "projects/p/subscriptions/ab"}, "is not a subscription name"),
        ({"subscription": ""}, 'needs .option\\("subscription"'),
        ({"journalPath": ""}, 'needs .option\\("journalPath"'),
        ({"journalPath": "hdfs://nn/q1/journal"}, "is a Hadoop file system URL"),
        ({"journalPath": "s3a://bucket/j"}, "is a Hadoop file system URL"),
        ({"maxMessagesPerTrigger": "0"}, '"maxMessagesPerTrigger" must be a whole number >= 1'),
        ({"maxMessagesPerTrigger": "1e4"}, 'got "1e4"'),
        ({"leaseSeconds": "5"}, '"leaseSeconds" must be a whole number in 10..600, got "5"'),
        ({"pullTimeoutSeconds": "nan"}, '"pullTimeoutSeconds" must be a number of seconds'),
        ({"allowAtLeastOnce": "yes"}, '"allowAtLeastOnce" must be "true" or "false"'),
    ],
)
def test_mistakes_are_refused_naming_them(options: dict[str, str], message: str) -> None:
    with pytest.raises(SparkConnectorError, match=f"^eoclient source: .*{message}"):
        _settings(**options)


def test_a_connector_error_is_a_value_error() -> None:
    # Callers that caught ValueError for a bad option still do.
    with pytest.raises(ValueError):
        _settings(numPartitions="none")
