"""Spark pipeline benchmark: reference server → eoclient source → Spark → Parquet, by
master (executors), numPartitions and batch size, against Spark's own file source in the
same session.

    .venv/bin/python benchmarks/spark_pipeline.py [--batches 50000,100000,200000]
        [--rounds 4] [--runs "local[2]:2;local-cluster[2,1,1024]:2"] [--baseline GIT_REF]
        [--repeat 1] [--write]

Starts ``eoclient serve`` in its own process. For each master (``;``-separated, each with the
``numPartitions`` values to run), one SparkSession; in it, for each ``numPartitions`` and
each batch size (``maxMessagesPerTrigger``), a fresh exactly-once subscription pre-filled
with ``rounds`` batches of messages (100 bytes each) is streamed by one ``availableNow``
query into a Parquet file sink; then, for each batch size, the peer: Spark's own file source
reading as many rows of the same schema from Parquet already on disk, into the same kind of
sink, with the same rows per micro-batch. It is what Spark itself manages on this machine
for this pipeline: the ceiling a source can approach.

Before anything is measured in a session, both queries run untimed, ``WARM_UP_QUERIES``
times each, over ``WARM_UP_BATCHES`` batches of ``WARM_UP_BATCH`` rows (``--cold`` skips
it). The two share one JVM and one sink: whichever runs first would otherwise pay for
loading Spark's classes and JIT-compiling the Parquet writer's per-row path that the other
then reuses, well past its first batch (measured: the same query's driver JVM at 16.4 µs a
message cold, 13.0 warm, in one session). Twice, not once: after one warm-up query each, the
JIT still compiled 0.72-1.01 s a second through our first measured query (its driver JVM at
8.0-9.3 µs a message); after two, 0.47-0.50 (4.7-6.5 µs), the state the later queries of a
session run in. More rows or batches in one warm-up query did not do it (4 x 100,000 rows,
or 40 x 2,500): what was still compiling runs once a query, not once a row or a batch.

``--baseline GIT_REF`` also runs the source as it was at that commit (its
``src/eoclient/spark`` copied into a package of its own and registered as the format
``eoclient_baseline``), in the first master's session with the first numPartitions, for each
batch size: the previous design measured in the same run, on the same machine load.

``--repeat N`` runs each batch size's queries N times over, alternated (the source, then its
peer, then the source again...), each round's ratio against the peer of its own round, and
gives each query's ratio as the median of its rounds', each round's listed. One ratio is
weak evidence here: ``--batches 100000 --runs "local[2]:2"`` gave 0.35-0.64 in one evening
for the same code, and every query leaves the JVM warmer for the next (three rounds in one
session: the source at 104,603, 118,812 and 139,470 msg/s, the file source at 263,852,
283,554 and 292,969).

Reported per query (from ``query.recentProgress``): messages per second *sustained after
the first batch* (the rows of batches 2..n over the time from the end of batch 1 to the end
of the last batch: the first batch pays for cold Python workers and the JIT), the ratio to
the file source of the same session, batch size and round, and CPU per message sampled from /proc
over the same window and messages: the *driver's* (the source-runner process, where the
source's driver side runs: probe, plan, bookkeeping), the *read tasks'* (the Python workers
that run ``read``: settle, pull, decode, journal, emit), the server's (``eoclient
serve``) and, for both queries, the driver JVM's (on ``local[n]`` the whole of Spark's side:
the executors' task threads, the JIT compilers, the stream's planning), with the JIT's
compile seconds a second over the same window (still well above zero after the warm-up: it
takes part of the two cores from both queries). Only processes
descending from this session's JVM count (other Spark applications on the machine are not
ours). Also: the largest batch's journal on disk (MB,
and bytes a message), the source runner's peak RSS, and the driver JVM's peak heap use
against its maximum (the default ``spark.driver.memory``, 1 GB, unless set). The
exactly-once check counts the sink's rows through its metadata log: every published id
exactly once, or the run fails. Results are appended to docs/benchmarks.md only with
``--write``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# benchmarks/ is on sys.path when run as a script
from _server import PAYLOAD, fill_subscription, start_server

ROOT = Path(__file__).resolve().parent.parent
SOURCE_RUNNER = "python_streaming_source_runner"
# The Python workers that run tasks (the source's read): forked by pyspark.daemon.
READ_WORKER = "-m\0pyspark.daemon\0pyspark.worker"
# HotSpot's C2 compiles a method after ~10,000 invocations or loop back-edges: four batches
# of 25,000 rows run every per-row method well past that, and take a few seconds. What
# runs once a query needs queries instead: two of each (measured: the docstring above).
WARM_UP_BATCHES = 4
WARM_UP_BATCH = 25_000
WARM_UP_QUERIES = 2
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    name: str
    master: str
    partitions: int | None
    batch: int
    rows: int
    batches: int
    first_batch_s: float
    sustained: float
    latest_offset_ms: float
    add_batch_ms: float
    driver_us_per_msg: float | None = None
    read_us_per_msg: float | None = None
    server_us_per_msg: float | None = None
    jvm_us_per_msg: float | None = None
    jit_share: float | None = None
    journal_mb: float | None = None
    runner_rss_mb: float | None = None
    heap_mb: float | None = None
    ratio: float | None = None
    round: int | None = None  # with --repeat: which round (1, 2, ...)

    @property
    def shown_name(self) -> str:
        return self.name if self.round is None else f"{self.name} (round {self.round})"


def _summary(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput sustained after the first batch, from the query's progress reports."""
    batches = [p for p in progress if p["numInputRows"] > 0]
    if len(batches) < 2:
        raise RuntimeError(f"need at least two batches with rows, got {len(batches)}")

    def ended(p: dict[str, Any]) -> float:
        started = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        return float(started.timestamp() + p["durationMs"]["triggerExecution"] / 1000)

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


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    try:
        while pid > 1:
            pid = _parent(pid)
            if pid == ancestor:
                return True
    except OSError:
        return False
    return False


class ProcessCpu:
    """Samples the CPU time of some processes while a query runs: ``(wall time, CPU seconds
    so far)`` every 0.1 s, and their largest peak RSS. The processes: ``pid``, or those whose
    command line holds ``command`` and that descend from ``ancestor`` (this session's JVM:
    the source runner, a new one per query; the Python workers)."""

    def __init__(self, *, pid: int | None = None, command: str = "", ancestor: int = 0) -> None:
        self._pid = pid
        self._command = command.encode()
        self._ancestor = ancestor
        self._seen: dict[int, float] = {}
        self._ours: dict[int, bool] = {}
        self.samples: list[tuple[float, float]] = []
        self.peak_rss_kb = 0
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
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            ours = self._ours.get(pid)
            if ours is None:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        ours = self._command in cmdline.read() and (
                            not self._ancestor or _descends_from(pid, self._ancestor)
                        )
                except OSError:
                    continue
                self._ours[pid] = ours
            if ours:
                pids.append(pid)
        return pids

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            for pid in self._pids():
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                    with open(f"/proc/{pid}/status") as status:
                        for line in status:
                            if line.startswith("VmHWM:"):
                                self.peak_rss_kb = max(self.peak_rss_kb, int(line.split()[1]))
                except OSError:
                    continue
                # utime, stime: fields 14 and 15 of stat (11 and 12 after the comm).
                cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICK
                self._seen[pid] = max(self._seen.get(pid, 0.0), cpu)
            self.samples.append((time.time(), sum(self._seen.values())))


class JournalSize:
    """Samples the size of each batch directory of a journal while a query runs: the
    largest one (bytes) is the journal a batch needs."""

    def __init__(self, journal: Path) -> None:
        self._journal = journal
        self.largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> JournalSize:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                batches = [p for p in os.scandir(self._journal) if p.name.startswith("batch-")]
                for batch in batches:
                    size = sum(f.stat().st_size for f in os.scandir(batch.path) if f.is_file())
                    self.largest = max(self.largest, size)
            except OSError:
                continue  # a batch pruned while it was measured


class JvmUse:
    """Samples the driver JVM every 0.5 s: its used heap (total - free), for the peak, and
    the JIT compilers' accumulated compile time (``CompilationMXBean``: the sum of every
    compile's duration, so above 1 s a second while its threads compile side by side).
    The JIT keeps compiling long after a query's first batch (Spark's planning and
    bookkeeping run a few times a batch and cross HotSpot's thresholds slowly), on the
    same two cores as the work; the share shows how much of a window it took."""

    def __init__(self, spark: Any) -> None:
        management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
        self._runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
        self._compilation = management.getCompilationMXBean()
        self.maximum = self._runtime.maxMemory()
        self.peak = 0
        self._compiled: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> JvmUse:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def compiling(self, start: float, end: float) -> float | None:
        """JIT compile seconds a second of wall time from ``start`` to ``end``."""
        inside = [(when, ms) for when, ms in self._compiled if start <= when <= end]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / 1000 / (inside[-1][0] - inside[0][0])

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            used = self._runtime.totalMemory() - self._runtime.freeMemory()
            self.peak = max(self.peak, used)
            self._compiled.append((time.time(), float(self._compilation.getTotalCompilationTime())))


def jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


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
    batch: int,
    rounds: int,
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
            batch * rounds,
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
    jvm = jvm_pid(spark)
    with (
        ProcessCpu(command=SOURCE_RUNNER, ancestor=jvm) as cpu,
        ProcessCpu(command=READ_WORKER, ancestor=jvm) as read_cpu,
        ProcessCpu(pid=process.pid) as server_cpu,
        ProcessCpu(pid=jvm) as jvm_cpu,
        JournalSize(work / "journal") as journal,
        JvmUse(spark) as jvm_use,
    ):
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
        batch,
        # Over the sustained window too: the runner's start-up (imports, first batch) is
        # a fixed cost, not a per-message one.
        driver_us_per_msg=cpu.between(start, end) / rows * 1e6,
        read_us_per_msg=read_cpu.between(start, end) / rows * 1e6,
        server_us_per_msg=server_cpu.between(start, end) / rows * 1e6,
        jvm_us_per_msg=jvm_cpu.between(start, end) / rows * 1e6,
        jit_share=jvm_use.compiling(start, end),
        journal_mb=journal.largest / 1e6,
        runner_rss_mb=cpu.peak_rss_kb / 1024,
        heap_mb=jvm_use.peak / 2**20,
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
    with JvmUse(spark) as jvm_use, ProcessCpu(pid=jvm_pid(spark)) as jvm_cpu:
        summary = _summary(_run_query(reader, work))
    start, end, rows = summary.pop("window")
    return Result(
        "Spark file source (peer)",
        master,
        None,
        batch,
        heap_mb=jvm_use.peak / 2**20,
        jvm_us_per_msg=jvm_cpu.between(start, end) / rows * 1e6,
        jit_share=jvm_use.compiling(start, end),
        **summary,
    )


def warm_up(spark: Any, server: Any, work: Path, master: str, partitions: int) -> None:
    """Both queries ``WARM_UP_QUERIES`` times, alternated and untimed, so that neither
    measured one pays for the JVM's start."""
    rows = WARM_UP_BATCH * WARM_UP_BATCHES
    print(
        f"{master}, warm-up: both sources, {WARM_UP_QUERIES} x {rows:,} rows, untimed",
        flush=True,
    )
    for query in range(WARM_UP_QUERIES):
        each = work.with_name(f"{work.name}-{query}")
        run_eoclient(spark, server, each, master, partitions, WARM_UP_BATCH, WARM_UP_BATCHES)
        run_file_source(spark, each.with_name(f"{each.name}-files"), master, rows, WARM_UP_BATCH)


def _executors(master: str) -> str:
    if master.startswith("local-cluster["):
        workers, cores, _ = master.removeprefix("local-cluster[").rstrip("]").split(",")
        return f"{workers} × {cores} core (own JVMs)"
    if master.startswith("local["):
        return f"1 (the driver's JVM, {master[6:-1]} cores)"
    return master


def run_round(
    spark: Any,
    server: Any,
    work: Path,
    master: str,
    partition_counts: list[int],
    batch: int,
    options: argparse.Namespace,
    *,
    baseline: bool,
    round_number: int | None,
    failures: list[str],
) -> list[Result]:
    """One round for one batch size: the baseline (if any), the source for each
    numPartitions, then the peer; each of ours with its ratio to this round's peer.
    ``round_number``: this round's, with --repeat (None without)."""
    label = "" if round_number is None else f" (round {round_number})"
    ours: list[Result] = []
    if baseline:
        print(f"{master}, batch {batch}, the source at {options.baseline}{label}", flush=True)
        try:
            ours.append(
                run_eoclient(
                    spark,
                    server,
                    work / f"baseline-{uuid.uuid4().hex}",
                    master,
                    partition_counts[0],
                    batch,
                    options.rounds,
                    source_format=BASELINE_FORMAT,
                    name=f"eoclient source at {options.baseline[:10]}",
                )
            )
        except Exception as error:  # an older design may not cope: say so
            print(f"  the source at {options.baseline} failed: {error}", flush=True)
            failures.append(f"{options.baseline[:10]}, batch {batch}: {error}")
    for partitions in partition_counts:
        print(f"{master}, batch {batch}, numPartitions={partitions}{label}", flush=True)
        ours.append(
            run_eoclient(
                spark,
                server,
                work / f"eoclient-{uuid.uuid4().hex}",
                master,
                partitions,
                batch,
                options.rounds,
                name="eoclient source",
            )
        )
    print(f"{master}, batch {batch}, Spark's file source{label}", flush=True)
    peer = run_file_source(
        spark, work / f"files-{uuid.uuid4().hex}", master, batch * options.rounds, batch
    )
    for result in ours:
        result.ratio = result.sustained / peer.sustained
    for result in (*ours, peer):
        result.round = round_number
    return [*ours, peer]


def median_ratios(results: list[Result]) -> list[str]:
    """For ``--repeat``: each query's ratio as the median of its rounds', rounds listed."""
    rounds: dict[tuple[str, str, int | None, int], list[float]] = {}
    for r in results:
        if r.ratio is not None:
            key = (r.name, r.master, r.partitions, r.batch)
            rounds.setdefault(key, []).append(r.ratio)
    return [
        f"Ratio to the file source, {name}, `{master}`, numPartitions={partitions}, batch "
        f"{batch:,}: **{statistics.median(ratios):.2f}** (rounds: "
        f"{', '.join(f'{ratio:.2f}' for ratio in ratios)})."
        for (name, master, partitions, batch), ratios in rounds.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--batches",
        default="50000,100000,200000",
        help="maxMessagesPerTrigger values, ','-separated: a query each",
    )
    parser.add_argument(
        "--rounds", type=int, default=4, help="batches per query (the first is not counted)"
    )
    parser.add_argument(
        "--runs",
        default="local[2]:2",
        help="masters, ';'-separated, each with the numPartitions values to run",
    )
    parser.add_argument(
        "--baseline", help="also run the source as it was at this git commit (same session)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of each query and its peer, alternated (ratios: the median)",
    )
    parser.add_argument(
        "--cold", action="store_true", help="no untimed warm-up queries before the measured ones"
    )
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    options = parser.parse_args()
    batches = [int(n) for n in options.batches.split(",")]

    from eoclient.spark import local_session

    load_before = os.getloadavg()[0]
    server, address = start_server()
    work = Path(tempfile.mkdtemp(prefix="eoclient-spark-bench-"))
    if options.baseline:
        extract_baseline(options.baseline, work / "baseline")
    results: list[Result] = []
    failures: list[str] = []
    try:
        for number, spec in enumerate(options.runs.split(";")):
            master, _, counts = spec.partition(":")
            conf = {"spark.executor.memory": "512m"} if master.startswith("local-cluster") else {}
            spark = local_session("eoclient-benchmark", master=master, conf=conf)
            spark.sparkContext.setLogLevel("ERROR")
            partition_counts = [int(n) for n in counts.split(",")]
            session: list[Result] = []
            if not options.cold:
                warm_up(
                    spark,
                    (server, address),
                    work / f"warm-up-{number}",
                    master,
                    partition_counts[0],
                )
            if options.baseline and number == 0:
                import importlib

                baseline = importlib.import_module(f"{BASELINE_PACKAGE}.datasource")
                spark.dataSource.register(baseline.EoclientDataSource)
            for batch in batches:
                for round_ in range(options.repeat):
                    session += run_round(
                        spark,
                        (server, address),
                        work,
                        master,
                        partition_counts,
                        batch,
                        options,
                        baseline=bool(options.baseline and number == 0),
                        round_number=round_ + 1 if options.repeat > 1 else None,
                        failures=failures,
                    )
            results += session
            spark.stop()
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    def shown(value: float | None, digits: int = 1) -> str:
        return "" if value is None else f"{value:,.{digits}f}"

    header = (
        "| source | master (executors) | numPartitions | batch | rows | batches | msg/s "
        "sustained after batch 1 | ratio to file source | driver CPU µs/msg | read tasks "
        "CPU µs/msg | server CPU µs/msg | journal MB/batch (B/msg) | source runner peak "
        "RSS MB | driver heap peak MB | first batch s | latestOffset ms/batch | addBatch "
        "ms/batch | driver JVM CPU µs/msg | driver JVM JIT compiling s/s |"
    )
    lines = [
        header,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        journal = (
            ""
            if r.journal_mb is None
            else f"{r.journal_mb:.1f} ({r.journal_mb * 1e6 / r.batch:.0f})"
        )
        lines.append(
            f"| {r.shown_name} | `{r.master}` ({_executors(r.master)}) | {r.partitions or ''} | "
            f"{r.batch:,} | {r.rows:,} | {r.batches} | {r.sustained:,.0f} | "
            f"{shown(r.ratio, 2)} | {shown(r.driver_us_per_msg, 2)} | "
            f"{shown(r.read_us_per_msg)} | {shown(r.server_us_per_msg)} | {journal} | "
            f"{shown(r.runner_rss_mb, 0)} | {shown(r.heap_mb, 0)} | "
            f"{r.first_batch_s:.1f} | {r.latest_offset_ms:.0f} | {r.add_batch_ms:.0f} | "
            f"{shown(r.jvm_us_per_msg)} | {shown(r.jit_share, 2)} |"
        )
    load_after = os.getloadavg()[0]
    if options.repeat > 1:
        lines += ["", *median_ratios(results)]
    lines += [f"\nFailed: {failure[:300]}" for failure in failures]
    print("\n".join(lines))
    print(f"load average {load_before:.1f} before, {load_after:.1f} after")
    if options.write:
        text = [
            "",
            f"### Spark pipeline, {time.strftime('%Y-%m-%d')} (`{' '.join(sys.argv)}`, "
            f"load average {load_before:.1f} before, {load_after:.1f} after)",
            "",
            *lines,
        ]
        with (ROOT / "docs" / "benchmarks.md").open("a") as handle:
            handle.write("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
