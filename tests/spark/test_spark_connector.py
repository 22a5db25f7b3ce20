"""eoclient.spark against the reference server (in a thread of the test process, whose
broker the tests look into: ``_server.py``).

One SparkSession for the module (start-up costs 7-15 s here:
docs/protocol.md#spark-startup-cost). The crash tests run the driver as a subprocess
(``_driver.py``) and ``kill -9`` its whole process group at a fault point, then restart it
from the checkpoint; the sink's rows are read through the file sink's own metadata log
(``_spark_metadata``) and compared with the published message ids.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._crash import (
    Driver,
    drain,
    exactly_once_errors,
    make_subscription,
    negative_control,
    publish,
    run_stream,
    sink_ids,
)
from ._server import DurableServer, ThreadedServer

pytest.importorskip(
    "pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')"
)
if shutil.which("java") is None:  # pragma: no cover - Java 17 is installed here
    pytest.skip("Spark needs java on PATH", allow_module_level=True)

pytestmark = pytest.mark.slow


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
    # Four batches of 500, each acked by the next batch's task; the fifth batch only acks
    # the fourth (no row). Everything acked and the journal pruned.
    assert len(list((tmp_path / "checkpoint" / "commits").glob("[0-9]*"))) == 5
    assert list((tmp_path / "journal").glob("batch-*")) == []
    assert spark_server.backlog(subscription) == 0


def test_the_session_runs_streaming_queries_without_adaptive_execution(spark: Any) -> None:
    # Spark disables it for every streaming query, warning each time (a crash driver's log
    # has no such warning: Driver.run checks).
    assert spark.conf.get("spark.sql.adaptive.enabled") == "false"


def test_spark_s_python_workers_keep_what_they_hold_out_of_the_daemon_s_collections(
    spark: Any,
) -> None:
    # The read tasks' workers are reused, and their daemon collects after every task: the
    # condition under which a worker freezes what it holds (``_worker.SurvivorFreeze``).
    # A local function, pickled by value: the workers cannot import this test module.
    def freezes(_: object) -> bool:
        from eoclient.spark._worker import freeze_survivors

        return freeze_survivors.enabled

    assert spark.sparkContext.parallelize([0, 1], 2).map(freezes).collect() == [True, True]


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


# Five Spark driver starts: ~2 min on an idle machine, 5-10 min when it is shared and busy.
@pytest.mark.timeout(900)
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
    # Restarted, Spark re-runs batch 1 and the file sink skips it. Killed then once batch 1
    # is committed but not acked (batch 2's task about to ack it): its messages must not be
    # emitted again when the lost acks let the server redeliver them.
    assert driver.run(*options, crash_at="before_settle:1") == "killed"
    assert (commits / "1").exists()
    assert driver.run(*options) == "done"

    assert exactly_once_errors(sink_ids(spark, tmp_path / "out"), published) == []
    assert spark_server.backlog(subscription) == 0


@negative_control
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

    assert driver.run(*options, crash_at="before_settle:1") == "killed"
    # Batch 0 is in the sink, unacked; its leases lapse and the server redelivers it.
    assert driver.run(*options, "dedupe=false", "restartGraceSeconds=12") == "done"

    found = sink_ids(spark, tmp_path / "out")
    errors = exactly_once_errors(found, published)
    assert errors, "the negative control found no duplicates"
    assert "more than once" in errors[0]
    assert set(found) == set(published)


# One Spark driver start and one server restart: ~1.5 min on an idle machine.
@pytest.mark.timeout(600)
def test_a_durable_server_restarted_between_two_batches(spark: Any, tmp_path: Path) -> None:
    """``eoclient serve --data-dir`` killed (SIGKILL) and started again on its data between
    two micro-batches: batch 0 committed, not yet acked; batch 1 planned, its probe's part
    journaled with the old server's ack ids. The query goes on against the restarted
    server: acks batch 0 with those ids, replays the probe, pulls the rest; every message
    reaches the sink once and none is left unacknowledged."""
    server = DurableServer(tmp_path / "data")
    try:
        topic, subscription = make_subscription(server.address)
        published = publish(server.address, topic, 9000)
        driver = Driver(server.address, subscription, tmp_path)
        options = ("maxMessagesPerTrigger=3000", "numPartitions=2")

        def restart() -> None:
            server.kill()
            server.start()

        # after_journal:2: batch 1 is planned (batch 0 committed), before its tasks run.
        assert driver.run(*options, pause_at="after_journal:2", on_pause=restart) == "done"

        assert exactly_once_errors(sink_ids(spark, tmp_path / "out"), published) == []
        assert server.backlog(subscription) == 0
    finally:
        server.stop()
