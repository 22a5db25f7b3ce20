"""Exactly once with executors in processes of their own: Spark's ``local-cluster`` master
(a standalone master and two workers in the driver's JVM, each executor a JVM of its own
with its own Python workers), from the pyspark wheel alone.

Against ``eoclient serve --data-dir`` (a durable server in a process of its own), with
batches above what its lease window once held. Read tasks are stopped at each step an
executor takes: about to ack a committed part of the previous batch, having acked it (not
yet marked settled), after its pull (before journaling) and after journaling (before
returning its rows); each time the test kills that executor with SIGKILL (its JVM, Python
daemon and worker, and with them the worker's lease keeper) and Spark retries the task on a
new one. Then the whole driver is killed while a batch runs, and again while the last
batch (which only acks the one before) runs, and restarted from the checkpoint each time.
The sink's metadata log must hold every published id exactly once, with nothing left
unacked. The negative control (opt-in: ``EOCLIENT_SPARK_NEGATIVE_CONTROLS=1``, on the
in-memory server) switches the journal's replay off: the retry of the task killed after
journaling pulls other messages, so the journaled ones are acked but never written
(missing) and the retry's are written but never acked (written again when redelivered:
duplicates).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._crash import (
    Driver,
    exactly_once_errors,
    kill_executor,
    make_subscription,
    negative_control,
    publish,
    sink_ids,
)
from ._server import DurableServer, ThreadedServer

pytest.importorskip(
    "pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')"
)
if shutil.which("java") is None:  # pragma: no cover - Java 17 is installed here
    pytest.skip("Spark needs java on PATH", allow_module_level=True)

from eoclient.spark._journal import Plan

pytestmark = pytest.mark.slow

# Two workers of one core and 1024 MB: two executors, each in its own JVM.
MASTER = "local-cluster[2,1,1024]"
OPTIONS = ("maxMessagesPerTrigger=10000", "numPartitions=2")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local session, only to read the sink (through its metadata log)."""
    from eoclient.spark import local_session

    session = local_session("eoclient-cluster-tests", master="local[1]")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _executor_killer(faults: Path, points: list[str]) -> Callable[[], None]:
    """A watch that kills the executor of the read task stopped at each fault point."""
    killed: list[str] = []

    def watch() -> None:
        for point in points:
            marker = faults / point
            if point in killed or not marker.exists():
                continue
            pid = marker.read_text()  # the worker's pid (written just after the file is made)
            if pid:
                kill_executor(int(pid))
                killed.append(point)

    return watch


def _running(checkpoint: Path, batch: int) -> Callable[[], bool]:
    """Whether Spark is in the middle of ``batch`` (planned, not committed)."""
    return lambda: (
        (checkpoint / "offsets" / str(batch)).exists()
        and not (checkpoint / "commits" / str(batch)).exists()
    )


def _settling_only(work: Path) -> Callable[[], bool]:
    """Whether Spark is in the middle of a batch that only acks the one before (its plan
    reads nothing: the last batch of an availableNow run)."""

    def check() -> bool:
        for plan_file in (work / "journal").glob("batch-*/plan.json"):
            batch = int(plan_file.parent.name.removeprefix("batch-"))
            try:
                plan = Plan.from_json(plan_file.read_bytes())
            except (OSError, ValueError):
                continue  # pruned or being replaced
            if not plan.reads and _running(work / "checkpoint", batch)():
                return True
        return False

    return check


def _all_fired(faults: Path, points: list[str], checkpoint: Path) -> Callable[[], bool]:
    """Whether every point fired (its executor killed) and a batch is still running."""

    def check() -> bool:
        if not all((faults / point).exists() for point in points):
            return False
        batches = [int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")]
        return bool(batches) and _running(checkpoint, max(batches))()

    return check


# Against a durable server (eoclient serve --data-dir, its own process) with batches of
# 25,000, above the 21,000 outstanding leases its window once stopped at. Three cluster
# starts and four executor relaunches: ~5 min on an idle machine; much longer when the
# machine is shared and busy.
@pytest.mark.timeout(1500)
def test_executors_and_the_driver_killed_on_a_cluster_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    server = DurableServer(tmp_path / "data")
    try:
        topic, subscription = make_subscription(server.address)
        published = publish(server.address, topic, 50_000)
        driver = Driver(server.address, subscription, tmp_path, master=MASTER)
        options = ("maxMessagesPerTrigger=25000", "numPartitions=2")
        executor_points = ["before_settle", "after_settle", "before_claim", "after_claim"]

        # Each executor step killed once; then the driver, while a batch runs.
        assert (
            driver.run(
                *options,
                points=",".join(f"{point}:1" for point in executor_points),
                watch=_executor_killer(driver.faults, executor_points),
                kill_when=_all_fired(driver.faults, executor_points, tmp_path / "checkpoint"),
                timeout=600,
            )
            == "killed"
        )
        assert driver.run(*options, kill_when=_settling_only(tmp_path), timeout=420) == "killed"
        assert driver.run(*options, timeout=420) == "done"

        assert exactly_once_errors(sink_ids(spark, tmp_path / "out"), published) == []
        assert server.backlog(subscription) == 0
    finally:
        server.stop()


@negative_control
@pytest.mark.timeout(600)
def test_negative_control_without_replay_loses_and_duplicates(
    spark: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    served = spark_server.address
    topic, subscription = make_subscription(served)
    published = publish(served, topic, 20_000)
    driver = Driver(served, subscription, tmp_path, master=MASTER)

    # The run keeps looking for messages until the retry's unacked ones come back.
    assert (
        driver.run(
            *OPTIONS,
            "journalReplay=false",
            "restartGraceSeconds=45",
            points="after_claim:1",
            watch=_executor_killer(driver.faults, ["after_claim"]),
            timeout=420,
        )
        == "done"
    )

    errors = exactly_once_errors(sink_ids(spark, tmp_path / "out"), published)
    assert any("more than once" in error for error in errors), errors
    assert any("missing" in error for error in errors), errors


# Read-ahead (eoclient.spark._ahead): an executor killed while its worker holds a read-ahead
# (its task done, the next not started), and one killed while a task has just adopted one
# (the read-ahead log renamed to its attempt log, nothing admitted yet). 100,000 messages in
# batches of 25,000 on two one-core executors: each worker reads ahead after each batch.
@pytest.mark.timeout(1500)
def test_executors_killed_holding_and_adopting_a_read_ahead_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    server = DurableServer(tmp_path / "data")
    try:
        topic, subscription = make_subscription(server.address)
        published = publish(server.address, topic, 100_000)
        driver = Driver(server.address, subscription, tmp_path, master=MASTER)
        points = ["read_ahead", "after_adopt"]
        assert (
            driver.run(
                "maxMessagesPerTrigger=25000",
                "numPartitions=2",
                points=",".join(f"{point}:1" for point in points),
                watch=_executor_killer(driver.faults, points),
                timeout=900,
            )
            == "done"
        )
        assert [point for point in points if not (driver.faults / point).exists()] == []

        assert exactly_once_errors(sink_ids(spark, tmp_path / "out"), published) == []
        assert server.backlog(subscription) == 0
    finally:
        server.stop()
