"""A Spark driver the crash tests run as a subprocess (and kill -9).

    python _driver.py ENDPOINT SUBSCRIPTION WORKDIR [option=value ...]

Streams SUBSCRIPTION into a Parquet file sink at WORKDIR/out with availableNow, checkpoint
WORKDIR/checkpoint and journal WORKDIR/journal; prints "done" when the run ends. Crash points
are source options (faultPoints, faultDir: see eoclient.spark._faults). The Spark master is
``EOCLIENT_TEST_SPARK_MASTER`` (default ``local[2]``; the cluster tests use
``local-cluster[2,1,1024]``: executors in processes of their own). ``start_query`` is that
query, which the in-process tests start too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

MASTER_ENV = "EOCLIENT_TEST_SPARK_MASTER"


def start_query(spark: Any, subscription: str, work: Path, options: dict[str, str]) -> Any:
    """SUBSCRIPTION → Parquet at WORK/out, availableNow, checkpoint WORK/checkpoint, journal
    WORK/journal, plus source ``options``: the query of every Spark connector test."""
    reader = (
        spark.readStream.format("eoclient")
        .option("subscription", subscription)
        .option("journalPath", str(work / "journal"))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )


def main(argv: list[str]) -> None:
    endpoint, subscription, workdir = argv[:3]
    options = dict(item.split("=", 1) for item in argv[3:])
    os.environ["PUBSUB_EMULATOR_HOST"] = endpoint
    from eoclient.spark import local_session

    master = os.environ.get(MASTER_ENV, "local[2]")
    conf = {}
    if master.startswith("local-cluster"):
        # Each worker offers 1024 MB; an executor asks for 1 GB by default (plus overhead).
        conf["spark.executor.memory"] = "512m"
    spark = local_session("eoclient-crash-driver", master=master, conf=conf)
    # WARN: the test checks the log for Spark's warnings about the session.
    spark.sparkContext.setLogLevel("WARN")
    query = start_query(spark, subscription, Path(workdir), options)
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
