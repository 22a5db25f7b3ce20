"""eoclient.spark against the reference server (``eoclient serve`` in a subprocess).

One SparkSession for the module (start-up costs 7-15 s here, spark-notes §0). The crash tests
run the driver as a subprocess (``_driver.py``) and ``kill -9`` its whole process group at a
fault point, then restart it from the checkpoint; the sink's rows are read through the file
sink's own metadata log (``_spark_metadata``) and compared with the published message ids.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eoclient.admin import AdminClient
from eoclient.publisher import PublisherClient
from eoclient.subscriber import SubscriberClient

from ._driver import start_query
from ._server import ThreadedServer

pytest.importorskip(
    "pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')"
)
if shutil.which("java") is None:  # pragma: no cover - Java 17 is installed here
    pytest.skip("Spark needs java on PATH", allow_module_level=True)

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("_driver.py")
PROJECT = "spark-tests"


# ------------------------------------------------------------------------- helpers


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:10]
    return (
        f"projects/{PROJECT}/topics/topic-{suffix}",
        f"projects/{PROJECT}/subscriptions/sub-{suffix}",
    )


def make_subscription(endpoint: str, *, exactly_once: bool = True) -> tuple[str, str]:
    topic, subscription = _names()

    async def create() -> None:
        async with AdminClient(endpoint) as admin:
            await admin.create_topic(topic)
            await admin.create_subscription(
                subscription,
                topic,
                ack_deadline_seconds=10,
                enable_exactly_once_delivery=exactly_once,
            )

    asyncio.run(create())
    return topic, subscription


def publish(endpoint: str, topic: str, count: int) -> list[str]:
    async def run() -> list[str]:
        async with PublisherClient(endpoint) as client:
            futures = [
                client.publish_nowait(topic, f"event-{i}".encode(), key=str(i % 7))
                for i in range(count)
            ]
            return list(await asyncio.gather(*futures))

    return asyncio.run(run())


def drain(endpoint: str, subscription: str, expected: int) -> list[Any]:
    """Pull and ack until ``expected`` messages arrived (or two empty pulls in a row)."""

    async def run() -> list[Any]:
        received: list[Any] = []
        empty = 0
        async with SubscriberClient(endpoint) as client:
            while len(received) < expected and empty < 2:
                messages = await client.pull(subscription, 1000)
                empty = 0 if messages else empty + 1
                for message in messages:
                    await message.ack_with_response()
                received.extend(messages)
        return received

    return asyncio.run(run())


def sink_ids(spark: Any, out: Path) -> Counter[str]:
    """The message ids in a file sink, read through its metadata log (only committed files)."""
    assert (out / "_spark_metadata").is_dir(), "not a file sink with a metadata log"
    rows = spark.read.parquet(str(out)).select("message_id").collect()
    return Counter(row.message_id for row in rows)


def exactly_once_errors(found: Counter[str], published: list[str]) -> list[str]:
    """Why ``found`` is not exactly ``published``, once each ([] when it is)."""
    errors = []
    duplicates = {k: n for k, n in found.items() if n > 1}
    missing = set(published) - set(found)
    extra = set(found) - set(published)
    if duplicates:
        errors.append(f"{len(duplicates)} ids more than once, e.g. {sorted(duplicates)[:3]}")
    if missing:
        errors.append(f"{len(missing)} ids missing, e.g. {sorted(missing)[:3]}")
    if extra:
        errors.append(f"{len(extra)} ids never published, e.g. {sorted(extra)[:3]}")
    return errors


def run_stream(spark: Any, subscription: str, work: Path, **options: str) -> None:
    query = start_query(spark, subscription, work, options)
    query.awaitTermination(120)
    if query.exception() is not None:
        raise query.exception()


class Driver:
    """``_driver.py`` in its own process group, killed with SIGKILL at a fault point."""

    def __init__(self, endpoint: str, subscription: str, work: Path) -> None:
        self.endpoint, self.subscription, self.work = endpoint, subscription, work
        self.faults = work / "faults"
        self.faults.mkdir(parents=True, exist_ok=True)

    def run(
        self,
        *options: str,
        crash_at: str = "",
        pause_at: str = "",
        on_pause: Callable[[], None] | None = None,
        kill_when: Path | None = None,
        timeout: float = 90.0,
    ) -> str:
        """Run until done ("done"), or until the fault point ``crash_at`` fires or the file
        ``kill_when`` appears, and then kill it ("killed"). At the fault point ``pause_at``
        the driver waits while ``on_pause()`` runs, then goes on."""
        env = dict(os.environ)
        env.pop("PUBSUB_EMULATOR_HOST", None)
        log = (self.work / f"driver-{time.monotonic_ns()}.log").open("wb")
        points = ",".join(filter(None, [crash_at, f"{pause_at}:pause" if pause_at else ""]))
        process = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                self.endpoint,
                self.subscription,
                str(self.work),
                *options,
                f"faultDir={self.faults}",
                f"faultPoints={points}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        marker = self.faults / crash_at.split(":")[0] if crash_at else kill_when
        paused = self.faults / f"{pause_at.split(':')[0]}.paused" if pause_at else None
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if paused is not None and paused.exists():
                    if on_pause is not None:
                        on_pause()
                    paused.with_suffix(".resume").touch()
                    paused = None
                if marker is not None and marker.exists():
                    os.killpg(process.pid, signal.SIGKILL)  # the whole driver: JVM + runner
                    process.wait(10)
                    return "killed"
                if process.poll() is not None:
                    text = Path(log.name).read_text(errors="replace")
                    assert process.returncode == 0, text[-3000:]
                    # local_session turns adaptive execution off: no warning per query.
                    assert "is not supported in streaming" not in text, text[-3000:]
                    return "done"
                time.sleep(0.05)
            raise AssertionError(f"driver still running after {timeout} s")
        finally:
            log.close()
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


# ------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from eoclient.spark import local_session

    session = local_session("eoclient-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# --------------------------------------------------------------------------- tests


@pytest.mark.timeout(180)
def test_round_trip_is_exactly_once(
    spark: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    served = spark_server.address
    topic, subscription = make_subscription(served)
    published = publish(served, topic, 2000)

    run_stream(spark, subscription, tmp_path, endpoint=served, maxMessagesPerTrigger="500")

    assert exactly_once_errors(sink_ids(spark, tmp_path / "out"), published) == []
    row = spark.read.parquet(str(tmp_path / "out")).where("data = 'event-8'").collect()
    assert len(row) == 1
    assert row[0].attributes == {"key": "1"}
    assert row[0].ordering_key == ""
    # Four batches of 500; everything acked (the last one early, at the final latestOffset)
    # and the journal pruned.
    assert len(list((tmp_path / "checkpoint" / "commits").glob("[0-9]*"))) == 4
    assert list((tmp_path / "journal").glob("batch-*")) == []
    assert spark_server.backlog(subscription) == 0


def test_the_session_runs_streaming_queries_without_adaptive_execution(spark: Any) -> None:
    # Spark disables it for every streaming query, warning each time (a crash driver's log
    # has no such warning: Driver.run checks).
    assert spark.conf.get("spark.sql.adaptive.enabled") == "false"


def _first_line_of_failure(call: Callable[[], None]) -> str:
    """The first line of the error ``call()`` raises, as the user sees it."""
    # An AnalysisException from load(), a StreamingQueryException from a query.
    with pytest.raises(Exception) as caught:
        call()
    return str(caught.value).splitlines()[0]


@pytest.mark.timeout(120)
def test_a_mistake_reaches_the_user_as_one_line_at_the_top(
    spark: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    served = spark_server.address
    _, plain = make_subscription(served, exactly_once=False)
    missing = plain.replace("sub-", "missing-")

    def load(**options: str) -> Any:
        reader = spark.readStream.format("eoclient").option("endpoint", served)
        for key, value in {"journalPath": str(tmp_path / "journal"), **options}.items():
            reader = reader.option(key, value)
        return reader

    # Found by load(), before a query starts.
    line = _first_line_of_failure(lambda: load(subscription="orders").load())
    assert 'eoclient source: "orders" is not a subscription name: expected projects/' in line
    line = _first_line_of_failure(lambda: load(subscription=plain, maxMessagesPerTriger="9").load())
    assert 'unknown option "maxmessagespertriger"; did you mean "maxMessagesPerTrigger"?' in line
    # Found by the running query (the server's answer; a schema given with .schema() skips
    # the check in load()).
    line = _first_line_of_failure(
        lambda: run_stream(spark, missing, tmp_path / "missing", endpoint=served)
    )
    assert f"eoclient source: the subscription {missing} does not exist" in line
    line = _first_line_of_failure(
        lambda: run_stream(spark, plain, tmp_path / "plain", endpoint=served)
    )
    assert f"eoclient source: {plain} does not have exactly-once delivery" in line
    assert 'set .option("allowAtLeastOnce", "true")' in line
    from eoclient.spark import SCHEMA

    stream = load(subscription="nope").schema(SCHEMA).load()
    line = _first_line_of_failure(
        lambda: (
            stream.writeStream.format("noop")
            .trigger(availableNow=True)
            .start()
            .awaitTermination(60)
        )
    )
    assert '"nope" is not a subscription name' in line


@pytest.mark.timeout(120)
def test_accepts_a_subscription_without_exactly_once_if_told(
    spark: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    served = spark_server.address
    topic, subscription = make_subscription(served, exactly_once=False)
    published = publish(served, topic, 20)
    run_stream(spark, subscription, tmp_path / "accepted", endpoint=served, allowAtLeastOnce="true")
    assert set(sink_ids(spark, tmp_path / "accepted" / "out")) == set(published)


@pytest.mark.timeout(120)
def test_sink_publishes_batch_and_stream_rows(
    spark: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    served = spark_server.address
    topic, subscription = make_subscription(served)
    rows = [(f"row-{i}", {"n": str(i), "unset": None}, f"k{i % 2}") for i in range(50)]
    frame = spark.createDataFrame(
        rows, "data string, attributes map<string,string>, ordering_key string"
    )

    # A schema that does not fit is refused before anything is published.
    with pytest.raises(Exception, match="needs a 'data' column"):
        frame.withColumnRenamed("data", "payload").write.format("eoclient").option(
            "topic", topic
        ).option("endpoint", served).mode("append").save()

    frame.write.format("eoclient").option("topic", topic).option("endpoint", served).mode(
        "append"
    ).save()

    frame.write.parquet(str(tmp_path / "input"))
    query = (
        spark.readStream.schema(frame.schema)
        .parquet(str(tmp_path / "input"))
        .writeStream.format("eoclient")
        .option("topic", topic)
        .option("endpoint", served)
        .option("idAttribute", "spark_key")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(60)

    received = drain(served, subscription, 100)
    assert Counter(m.data for m in received) == Counter({f"row-{i}".encode(): 2 for i in range(50)})
    for message in received:
        assert message.attributes["n"] == message.data.decode().removeprefix("row-")
        assert "unset" not in message.attributes  # a null value: no such attribute
        assert message.ordering_key == f"k{int(message.attributes['n']) % 2}"
    keys = [m.attributes["spark_key"] for m in received if "spark_key" in m.attributes]
    assert len(keys) == len(set(keys)) == 50  # <queryId>:<batchId>:<partition>:<row>
    assert all(key.count(":") == 3 for key in keys)


@pytest.mark.timeout(300)
def test_driver_killed_at_four_points_restarts_exactly_once(
    spark: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    served = spark_server.address
    topic, subscription = make_subscription(served)
    published = publish(served, topic, 1500)
    driver = Driver(served, subscription, tmp_path)
    options = ("maxMessagesPerTrigger=500", "leaseSeconds=10", "restartGraceSeconds=0")
    commits = tmp_path / "checkpoint" / "commits"

    # Killed once batch 1 is journaled (Spark has not written offsets/1 yet): the restart
    # must emit that journal file as batch 1, not pull other messages.
    assert driver.run(*options, crash_at="after_journal:2") == "killed"
    # Killed while an executor reads batch 1 (offsets/1 written, the sink's files partial).
    assert driver.run(*options, crash_at="read:1") == "killed"
    # Killed after the file sink committed batch 1, before Spark's commits/1. A FIFO in
    # place of commits/1 holds Spark there: before writing a commit it reads the file, and
    # opening a FIFO with no writer blocks. It is made while batch 1 is read (Spark would
    # block on it at start-up too, reading its commit log); the sink's log entry for batch
    # 1 appearing means Spark is at, or about to block on, the FIFO.
    assert (
        driver.run(
            *options,
            pause_at="read:1",
            on_pause=lambda: os.mkfifo(commits / "1"),
            kill_when=tmp_path / "out" / "_spark_metadata" / "1",
        )
        == "killed"
    )
    assert stat.S_ISFIFO((commits / "1").stat().st_mode), "Spark wrote commits/1: not held"
    (commits / "1").unlink()
    # Restarted, Spark re-runs batch 1 and the file sink skips it (spark-notes §3.3). Killed
    # then once batch 1 is committed but not acked: its messages must not be emitted again
    # when the lost acks let the server redeliver them.
    assert driver.run(*options, crash_at="before_ack:1") == "killed"
    assert (commits / "1").exists()
    assert driver.run(*options) == "done"

    assert exactly_once_errors(sink_ids(spark, tmp_path / "out"), published) == []
    assert spark_server.backlog(subscription) == 0


@pytest.mark.timeout(180)
def test_negative_control_catches_duplicates(
    spark: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    """The same crash with dedup switched off emits the redelivered batch again: the check
    above would fail, so it can fail."""
    served = spark_server.address
    topic, subscription = make_subscription(served)
    published = publish(served, topic, 300)
    driver = Driver(served, subscription, tmp_path)
    options = ("maxMessagesPerTrigger=100", "leaseSeconds=10")

    assert driver.run(*options, crash_at="before_ack:1") == "killed"
    # Batch 0 is in the sink, unacked; its leases lapse and the server redelivers it.
    assert driver.run(*options, "dedupe=false", "restartGraceSeconds=12") == "done"

    found = sink_ids(spark, tmp_path / "out")
    errors = exactly_once_errors(found, published)
    assert errors, "the negative control found no duplicates"
    assert "more than once" in errors[0]
    assert set(found) == set(published)
