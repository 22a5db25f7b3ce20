"""Spark pipeline benchmark: reference server → eoclient source → Spark → Parquet, on local[2].

    .venv/bin/python benchmarks/spark_pipeline.py [--messages 300000] [--batch 50000] [--write]

Starts ``eoclient serve`` in its own process, pre-publishes the messages (100 bytes each) to
an exactly-once subscription, and runs one ``availableNow`` query that streams the
subscription into a Parquet file sink (``eoclient`` source: journal, ack after commit).

The peer, in the same run and the same SparkSession: Spark's own file source reading the
same number of rows (same schema) from Parquet files already on disk, into the same kind of
sink, with about the same rows per micro-batch. It is what Spark itself manages on this
machine for this pipeline: the ceiling a source can approach.

Reported per query (from ``query.recentProgress``): messages per second *sustained after
the first batch* (the rows of batches 2..n over the time from the end of batch 1 to the end
of the last batch: the first batch pays for cold Python workers and the JIT), the first
batch's duration, and the rows per batch. The exactly-once check counts the sink's rows
through its metadata log: every published id exactly once, or the run fails.
Results are appended to docs/benchmarks.md only with ``--write``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# benchmarks/ is on sys.path when run as a script
from _server import PAYLOAD, fill_subscription, start_server

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "projects/bench/topics/spark-events"
SUBSCRIPTION = "projects/bench/subscriptions/spark-events"


def _progress_summary(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Throughput sustained after the first batch, from the query's progress reports."""
    batches = [p for p in progress if p["numInputRows"] > 0]
    if len(batches) < 2:
        raise RuntimeError(f"need at least two batches with rows, got {len(batches)}")

    def ended(p: dict[str, Any]) -> float:
        started = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        return started.timestamp() + p["durationMs"]["triggerExecution"] / 1000

    rows_after_first = sum(p["numInputRows"] for p in batches[1:])
    seconds = ended(batches[-1]) - ended(batches[0])
    return {
        "rows": sum(p["numInputRows"] for p in batches),
        "batches": len(batches),
        "first_batch_s": batches[0]["durationMs"]["triggerExecution"] / 1000,
        "sustained_msg_per_s": rows_after_first / seconds,
        "latest_offset_ms": sum(p["durationMs"].get("latestOffset", 0) for p in batches[1:])
        / (len(batches) - 1),
        "add_batch_ms": sum(p["durationMs"].get("addBatch", 0) for p in batches[1:])
        / (len(batches) - 1),
    }


def _run_query(reader: Any, work: Path) -> list[dict[str, Any]]:
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return [json.loads(p.json) for p in query.recentProgress]


def run_eoclient(
    spark: Any, address: str, work: Path, batch: int, ids: list[str]
) -> dict[str, float]:
    reader = (
        spark.readStream.format("eoclient")
        .option("subscription", SUBSCRIPTION)
        .option("endpoint", address)
        .option("journalPath", str(work / "journal"))
        .option("maxMessagesPerTrigger", str(batch))
        .option("restartGraceSeconds", "0")
    )
    result = _run_query(reader, work)
    found = spark.read.parquet(str(work / "out")).select("message_id")
    distinct = found.distinct().count()
    total = found.count()
    if total != len(ids) or distinct != len(ids):
        raise RuntimeError(f"not exactly once: {total} rows, {distinct} distinct, {len(ids)} sent")
    return _progress_summary(result)


def run_file_source(spark: Any, work: Path, count: int, batch: int) -> dict[str, float]:
    """Spark's own file source over the same rows, already landed as Parquet files."""
    from eoclient.spark import SCHEMA

    landing = work / "landing"
    frame = spark.range(count).selectExpr(
        "cast(id as string) as message_id",
        f"cast(repeat('x', {len(PAYLOAD)}) as binary) as data",
        "map('key', cast(id % 16 as string)) as attributes",
        "'' as ordering_key",
        "current_timestamp() as publish_time",
        "1 as delivery_attempt",
    )
    files = max(1, count // batch)
    frame.repartition(files).write.parquet(str(landing))
    reader = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", "1").format("parquet")
    reader = reader.option("path", str(landing))
    return _progress_summary(_run_query(reader, work))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=50_000, help="maxMessagesPerTrigger")
    parser.add_argument(
        "--write", action="store_true", help="append the table to docs/benchmarks.md"
    )
    options = parser.parse_args()

    from eoclient.spark import local_session

    server, address = start_server()
    work = Path(tempfile.mkdtemp(prefix="eoclient-spark-bench-"))
    try:
        started = time.perf_counter()
        ids = asyncio.run(
            fill_subscription(
                address,
                TOPIC,
                SUBSCRIPTION,
                options.messages,
                attributes=lambda i: {"key": str(i % 16)},
                enable_exactly_once_delivery=True,
                ack_deadline_seconds=60,
            )
        )
        print(f"published {len(ids)} in {time.perf_counter() - started:.1f} s", flush=True)
        spark = local_session("eoclient-benchmark")
        spark.sparkContext.setLogLevel("ERROR")
        rows = [
            (
                "eoclient source",
                run_eoclient(spark, address, work / "eoclient", options.batch, ids),
            ),
            (
                "Spark file source (peer)",
                run_file_source(spark, work / "files", options.messages, options.batch),
            ),
        ]
        spark.stop()
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    for name, r in rows:
        print(
            f"{name:26} {r['rows']:>8.0f} rows {r['batches']:>3.0f} batches "
            f"{r['sustained_msg_per_s']:>10,.0f} msg/s sustained, "
            f"first batch {r['first_batch_s']:.1f} s, "
            f"latestOffset {r['latest_offset_ms']:.0f} ms, addBatch {r['add_batch_ms']:.0f} ms",
            flush=True,
        )
    ratio = rows[0][1]["sustained_msg_per_s"] / rows[1][1]["sustained_msg_per_s"]
    print(f"ratio eoclient / Spark file source: {ratio:.2f}")
    if options.write:
        load = os.getloadavg()[0]
        lines = [
            "",
            f"### Spark pipeline, {time.strftime('%Y-%m-%d')} (`{' '.join(sys.argv)}`, "
            f"load average at the end ≈ {load:.1f})",
            "",
            "| source | rows | batches | msg/s sustained after batch 1 | first batch s | "
            "latestOffset ms/batch | addBatch ms/batch |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in rows:
            lines.append(
                f"| {name} | {r['rows']:.0f} | {r['batches']:.0f} | "
                f"{r['sustained_msg_per_s']:,.0f} | {r['first_batch_s']:.1f} | "
                f"{r['latest_offset_ms']:.0f} | {r['add_batch_ms']:.0f} |"
            )
        lines += ["", f"Ratio eoclient / Spark's file source: **{ratio:.2f}**."]
        with (ROOT / "docs" / "benchmarks.md").open("a") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
