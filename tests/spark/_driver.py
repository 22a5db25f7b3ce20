"""A Spark driver the crash tests run as a subprocess (and kill -9).

    python _driver.py ENDPOINT SUBSCRIPTION WORKDIR [option=value ...]

Streams SUBSCRIPTION into a Parquet file sink at WORKDIR/out with availableNow, checkpoint
WORKDIR/checkpoint and journal WORKDIR/journal; prints "done" when the run ends. Crash points
are source options (faultPoints, faultDir: see eoclient.spark._faults).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    endpoint, subscription, workdir = argv[:3]
    options = dict(item.split("=", 1) for item in argv[3:])
    os.environ["PUBSUB_EMULATOR_HOST"] = endpoint
    from eoclient.spark import local_session

    spark = local_session("eoclient-crash-driver")
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(workdir)
    reader = (
        spark.readStream.format("eoclient")
        .option("subscription", subscription)
        .option("journalPath", str(work / "journal"))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
