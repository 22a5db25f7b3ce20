"""The source's options: parsed and checked once, every mistake named in one line.

Spark hands a data source its options as a case-insensitive dict of strings, keys lower-cased
(docs/protocol.md#spark-data-source-options), so a misspelt option would otherwise be
silently ignored: an unknown name is an error that suggests the closest known one.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping

from eoclient.errors import SparkConnectorError

# Every source option, as documented in eoclient/spark/__init__.py (canonical spelling).
SOURCE_OPTIONS = (
    "subscription",
    "journalPath",
    "endpoint",
    "maxMessagesPerTrigger",
    "numPartitions",
    "pullTimeoutSeconds",
    "leaseSeconds",
    "restartGraceSeconds",
    "allowAtLeastOnce",
    "dedupe",
    "journalReplay",
    "readAhead",
    "faultPoints",
    "faultDir",
)
_CANONICAL = {name.lower(): name for name in SOURCE_OPTIONS}

# A subscription's full name (google.pubsub.v1 proto comments on Subscription.name): the id
# starts with a letter, holds only [A-Za-z0-9-_.~+%], is 3..255 long, not "goog..."; the
# project is any non-empty segment (emulators accept ids the real service would not).
_SUBSCRIPTION = re.compile(r"projects/[^/]+/subscriptions/([A-Za-z][A-Za-z0-9\-_.~+%]{2,254})")


def _fail(message: str) -> SparkConnectorError:
    return SparkConnectorError(f"eoclient source: {message}")


def check_known(options: Mapping[str, str]) -> None:
    """Refuse an option the source does not have (naming the one probably meant)."""
    for key in options:
        if key.lower() in _CANONICAL:
            continue
        close = difflib.get_close_matches(key.lower(), list(_CANONICAL), n=1, cutoff=0.6)
        hint = f'; did you mean "{_CANONICAL[close[0]]}"?' if close else ""
        raise _fail(f'unknown option "{key}"{hint} (the options: {", ".join(SOURCE_OPTIONS)})')


# A URL of one of Spark's Hadoop file systems (hdfs://, s3a://, ...), but not file://.
_HADOOP_URL = re.compile(r"^(?!file://)[a-zA-Z][a-zA-Z0-9+.-]*://")


def check_journal_path(path: str) -> str:
    """The journal must be a local (or mounted) path: Python read tasks cannot open Spark's
    Hadoop file systems."""
    if _HADOOP_URL.match(path):
        raise _fail(
            f'journalPath "{path}" is a Hadoop file system URL, which the source\'s Python '
            "read tasks cannot open. Give a path on a file system the driver and every "
            "executor mount at the same place (local disk in local mode, NFS or another "
            "shared mount on a cluster)."
        )
    return path


def check_subscription(name: str) -> str:
    match = _SUBSCRIPTION.fullmatch(name)
    if match is None or match[1].lower().startswith("goog"):
        raise _fail(
            f'"{name}" is not a subscription name: expected '
            "projects/<project>/subscriptions/<id>, the id 3 to 255 characters of "
            "A-Z a-z 0-9 - _ . ~ + %, starting with a letter (not 'goog')"
        )
    return name


class SourceSettings:
    """The source's options, parsed once (picklable: plain values only)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        options = {key.lower(): value for key, value in options.items()}
        check_known(options)
        self.subscription = check_subscription(_required(options, "subscription"))
        # Absolute here, on the driver: a relative path is the driver's working directory's
        # (as Spark takes a relative checkpointLocation), not each executor's.
        journal = check_journal_path(_required(options, "journalPath"))
        self.journal_path = os.path.abspath(journal.removeprefix("file://"))
        self.endpoint = options.get("endpoint") or None
        self.max_rows = _integer(options, "maxMessagesPerTrigger", 10_000, low=1)
        self.num_partitions = _integer(options, "numPartitions", 2, low=1)
        self.pull_timeout = _number(options, "pullTimeoutSeconds", 2.0, low=0.1)
        self.lease_seconds = _integer(options, "leaseSeconds", 60, low=10, high=600)
        grace = options.get("restartgraceseconds")
        self.restart_grace = _number(options, "restartGraceSeconds", 0.0) if grace else None
        self.allow_at_least_once = _flag(options, "allowAtLeastOnce", False)
        # Only for the negative controls of the crash tests: emit redeliveries again; let
        # a task's re-run pull anew instead of replaying the journaled part.
        self.dedupe = _flag(options, "dedupe", True)
        self.journal_replay = _flag(options, "journalReplay", True)
        # A worker pulls the next batch's share while Spark finishes this one (``_ahead``).
        self.read_ahead = _flag(options, "readAhead", True)
        # Crash-test instrumentation (eoclient.spark._faults).
        self.fault_points = options.get("faultpoints") or None
        self.fault_dir = options.get("faultdir") or None


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name.lower())
    if not value:
        raise _fail(f'needs .option("{name}", ...)')
    return value


def _integer(
    options: Mapping[str, str], name: str, default: int, *, low: int, high: int | None = None
) -> int:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"in {low}..{high}" if high is not None else f">= {low}"
        raise _fail(f'option "{name}" must be a whole number {bounds}, got "{text}"')
    return value


def _number(options: Mapping[str, str], name: str, default: float, *, low: float = 0.0) -> float:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= low:  # also NaN
        raise _fail(f'option "{name}" must be a number of seconds >= {low:g}, got "{text}"')
    return value


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise _fail(f'option "{name}" must be "true" or "false", got "{text}"')
    return value == "true"
