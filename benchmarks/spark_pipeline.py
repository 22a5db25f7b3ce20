"""Spark pipeline benchmark: reference server → eoclient source → Spark → Parquet, by
master (executors) and numPartitions, against Spark's own file source in the same session.

    .venv/bin/python benchmarks/spark_pipeline.py [--messages 300000] [--batch 50000]
        [--runs "local[2]:1,2,4;local-cluster[2,1,1024]:2,4"] [--baseline GIT_REF] [--write]

Starts ``eoclient serve`` in its own process. For each master (``;``-separated, each with the
``numPartitions`` values to run), one SparkSession; in it, for each ``numPartitions``, a
fresh exactly-once subscription pre-filled with the messages (100 bytes each) is streamed
by one ``availableNow`` query into a Parquet file sink; then, the peer: Spark's own file
source reading as many rows of the same schema from Parquet already on disk, into the same
kind of sink, with the same rows per micro-batch. It is what Spark itself manages on this
machine for this pipeline: the ceiling a source can approach.

``--baseline GIT_REF`` also runs the source as it was at that commit (its
``src/eoclient/spark`` copied into a package of its own and registered as the format
``eoclient_baseline``), in the first master's session with numPartitions 2: the previous
design measured in the same run, on the same machine load.

Reported per query (from ``query.recentProgress``): messages per second *sustained after
the first batch* (the rows of batches 2..n over the time from the end of batch 1 to the end
of the last batch: the first batch pays for cold Python workers and the JIT), the ratio to
the file source of the same session, and the *driver's CPU per message*: the CPU time the
source-runner process (where the source's driver side runs: probe, plan, acks, leases)
spends in the same window, sampled from /proc, over the same messages; and the server's
(``eoclient serve``: Pull, Acknowledge) likewise. The exactly-once check counts
the sink's rows through its metadata log: every published id exactly once, or the run fails.
Results are appended to docs/benchmarks.md only with ``--write``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# benchmarks/ is on sys.path when run as a script
from _server import PAYLOAD, fill_subscription, start_server

ROOT = Path(__file__).resolve().parent.parent
SOURCE_RUNNER = "python_streaming_source_runner"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    name: str
    master: str
    partitions: int | None
    rows: int
    batches: int
    first_batch_s: float
    sustained: float
    latest_offset_ms: float
    add_batch_ms: float
    driver_us_per_msg: float | None = None
    server_us_per_msg: float | None = None
    ratio: float | None = None


def _summary(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput sustained after the first batch, from the query's progress reports."""
    batches = [p for p in progress if p["numInputRows"] > 0]
    if len(batches) < 2:
        raise RuntimeError(f"need at least two batches with rows, got {len(batches)}")

    def ended(p: dict[str, Any]) -> float:
        started = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        return started.timestamp() + p["durationMs"]["triggerExecution"] / 1000

    rows_after_first = sum(p["numInputRows"] for p in batches[1:])
    return {
        "window": (ended(batches[0]), ended(batches[-1]), rows_after_first),
        "rows": sum(p["numInputRows"] for p in batches),
        "batches": len(batches),
        "first_batch_s": batches[0]["durationMs"]["triggerExecution"] / 1000,
        "sustained": rows_after_first / (ended(batches[-1]) - ended(batches[0])),
        "latest_offset_ms": sum(p["durationMs"].get("latestOffset", 0) for p in batches[1:])
        / (len(batches) - 1),
        "add_batch_ms": sum(p["durationMs"].get("addBatch", 0) for p in batches[1:])
        / (len(batches) - 1),
    }


class ProcessCpu:
    """Samples the CPU time of some processes while a query runs: ``(wall time, CPU seconds
    so far)`` every 0.1 s. The processes: ``pid``, or those whose command line holds
    ``command`` (the source runner: a new one per query)."""

    def __init__(self, *, pid: int | None = None, command: str = "") -> None:
        self._pid = pid
        self._command = command.encode()
        self._seen: dict[int, float] = {}
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ProcessCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> float:
        """CPU seconds spent from wall time ``start`` to ``end`` (the samples nearest
        inside)."""
        inside = [cpu for when, cpu in self.samples if start <= when <= end]
        return inside[-1] - inside[0] if len(inside) >= 2 else 0.0

    def _pids(self) -> list[int]:
        if self._pid is not None:
            return [self._pid]
        pids = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                        if self._command in cmdline.read():
                            pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            for pid in self._pids():
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                # utime, stime: fields 14 and 15 of stat (11 and 12 after the comm).
                cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICK
                self._seen[pid] = max(self._seen.get(pid, 0.0), cpu)
            self.samples.append((time.time(), sum(self._seen.values())))


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


BASELINE_PACKAGE = "eoclient_baseline_spark"
BASELINE_FORMAT = "eoclient_baseline"


def extract_baseline(ref: str, into: Path) -> None:
    """``src/eoclient/spark`` at git ``ref`` as the package ``BASELINE_PACKAGE`` in ``into``
    (its imports and format name rewritten), importable by Spark's Python workers too."""
    package = into / BASELINE_PACKAGE
    package.mkdir(parents=True)
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", ref, "src/eoclient/spark/"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in names:
        text = subprocess.run(
            ["git", "show", f"{ref}:{name}"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
        text = text.replace("eoclient.spark.", f"{BASELINE_PACKAGE}.").replace(
            "from eoclient.spark import", f"from {BASELINE_PACKAGE} import"
        )
        text = text.replace('return "eoclient"', f'return "{BASELINE_FORMAT}"')
        (package / Path(name).name).write_text(text)
    sys.path.insert(0, str(into))
    # Spark's Python workers (children of the JVM) take the driver's PYTHONPATH along.
    paths = [str(into), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, paths))


def run_eoclient(
    spark: Any,
    server: Any,
    work: Path,
    master: str,
    partitions: int,
    count: int,
    batch: int,
    *,
    source_format: str = "eoclient",
    name: str = "eoclient source",
) -> Result:
    process, address = server
    topic = f"projects/bench/topics/spark-{work.name}"
    subscription = f"projects/bench/subscriptions/spark-{work.name}"
    started = time.perf_counter()
    ids = asyncio.run(
        fill_subscription(
            address,
            topic,
            subscription,
            count,
            attributes=lambda i: {"key": str(i % 16)},
            enable_exactly_once_delivery=True,
            ack_deadline_seconds=60,
        )
    )
    print(f"  published {len(ids)} in {time.perf_counter() - started:.1f} s", flush=True)
    reader = (
        spark.readStream.format(source_format)
        .option("subscription", subscription)
        .option("endpoint", address)
        .option("journalPath", str(work / "journal"))
        .option("maxMessagesPerTrigger", str(batch))
        .option("numPartitions", str(partitions))
        .option("restartGraceSeconds", "0")
    )
    with ProcessCpu(command=SOURCE_RUNNER) as cpu, ProcessCpu(pid=process.pid) as server_cpu:
        progress = _run_query(reader, work)
    found = spark.read.parquet(str(work / "out")).select("message_id")
    distinct, total = found.distinct().count(), found.count()
    if total != len(ids) or distinct != len(ids):
        raise RuntimeError(f"not exactly once: {total} rows, {distinct} distinct, {len(ids)} sent")
    summary = _summary(progress)
    start, end, rows = summary.pop("window")
    return Result(
        name,
        master,
        partitions,
        # Over the sustained window too: the runner's start-up (imports, first batch) is
        # a fixed cost, not a per-message one.
        driver_us_per_msg=cpu.between(start, end) / rows * 1e6,
        server_us_per_msg=server_cpu.between(start, end) / rows * 1e6,
        **summary,
    )


def run_file_source(spark: Any, work: Path, master: str, count: int, batch: int) -> Result:
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
    frame.repartition(max(1, count // batch)).write.parquet(str(landing))
    reader = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", "1").format("parquet")
    reader = reader.option("path", str(landing))
    summary = _summary(_run_query(reader, work))
    summary.pop("window")
    return Result("Spark file source (peer)", master, None, **summary)


def _executors(master: str) -> str:
    if master.startswith("local-cluster["):
        workers, cores, _ = master.removeprefix("local-cluster[").rstrip("]").split(",")
        return f"{workers} × {cores} core (own JVMs)"
    if master.startswith("local["):
        return f"1 (the driver's JVM, {master[6:-1]} cores)"
    return master


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=50_000, help="maxMessagesPerTrigger")
    parser.add_argument(
        "--runs",
        default="local[2]:1,2,4;local-cluster[2,1,1024]:2,4",
        help="masters, ';'-separated, each with the numPartitions values to run",
    )
    parser.add_argument(
        "--baseline", help="also run the source as it was at this git commit (same session)"
    )
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    options = parser.parse_args()

    from eoclient.spark import local_session

    server, address = start_server()
    work = Path(tempfile.mkdtemp(prefix="eoclient-spark-bench-"))
    if options.baseline:
        extract_baseline(options.baseline, work / "baseline")
    results: list[Result] = []
    try:
        for number, spec in enumerate(options.runs.split(";")):
            master, _, counts = spec.partition(":")
            conf = {"spark.executor.memory": "512m"} if master.startswith("local-cluster") else {}
            spark = local_session("eoclient-benchmark", master=master, conf=conf)
            spark.sparkContext.setLogLevel("ERROR")
            session: list[Result] = []
            if options.baseline and number == 0:
                import importlib

                baseline = importlib.import_module(f"{BASELINE_PACKAGE}.datasource")
                spark.dataSource.register(baseline.EoclientDataSource)
                print(f"{master}, the source at {options.baseline}", flush=True)
                session.append(
                    run_eoclient(
                        spark,
                        (server, address),
                        work / "baseline-run",
                        master,
                        2,
                        options.messages,
                        options.batch,
                        source_format=BASELINE_FORMAT,
                        name=f"eoclient source at {options.baseline[:10]}",
                    )
                )
            for partitions in (int(n) for n in counts.split(",")):
                print(f"{master}, numPartitions={partitions}", flush=True)
                run = work / f"eoclient-{len(results) + len(session)}"
                session.append(
                    run_eoclient(
                        spark,
                        (server, address),
                        run,
                        master,
                        partitions,
                        options.messages,
                        options.batch,
                    )
                )
            print(f"{master}, Spark's file source", flush=True)
            peer = run_file_source(
                spark, work / f"files-{len(results)}", master, options.messages, options.batch
            )
            for result in session:
                result.ratio = result.sustained / peer.sustained
            results += [*session, peer]
            spark.stop()
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    header = (
        "| source | master (executors) | numPartitions | rows | batches | msg/s sustained "
        "after batch 1 | ratio to file source | driver CPU µs/msg | server CPU µs/msg | "
        "first batch s | "
        "latestOffset ms/batch | addBatch ms/batch |"
    )
    lines = [header, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(
            f"| {r.name} | `{r.master}` ({_executors(r.master)}) | {r.partitions or ''} | "
            f"{r.rows} | {r.batches} | {r.sustained:,.0f} | "
            f"{'' if r.ratio is None else f'{r.ratio:.2f}'} | "
            f"{'' if r.driver_us_per_msg is None else f'{r.driver_us_per_msg:.1f}'} | "
            f"{'' if r.server_us_per_msg is None else f'{r.server_us_per_msg:.1f}'} | "
            f"{r.first_batch_s:.1f} | {r.latest_offset_ms:.0f} | {r.add_batch_ms:.0f} |"
        )
    print("\n".join(lines))
    if options.write:
        load = os.getloadavg()[0]
        text = [
            "",
            f"### Spark pipeline, {time.strftime('%Y-%m-%d')} (`{' '.join(sys.argv)}`, "
            f"load average at the end ≈ {load:.1f})",
            "",
            *lines,
        ]
        with (ROOT / "docs" / "benchmarks.md").open("a") as handle:
            handle.write("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
