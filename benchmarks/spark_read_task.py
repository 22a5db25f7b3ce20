"""One Spark read task's work per message, without Spark: the CPU a read task spends on each
message (settle the previous part, pull, decode to Arrow, admit, lease log, journal, read
back, hand the rows over), by source version, alternating in one run.

    .venv/bin/python benchmarks/spark_read_task.py [--batch 50000] [--batches 4]
        [--rounds 3] [--versions worktree,e605fcb] [--server worktree] [--profile]

Starts ``eoclient serve`` (of ``--server``: ``worktree`` or a git ref, its ``src`` extracted
with ``git archive``) in its own process. Then, ``rounds`` times, for each version in
``--versions`` in turn (``worktree``: this checkout's ``src``; a git ref: that commit's
``src``, the whole SDK with it), a child process of its own (``PYTHONPATH`` = that ``src``)
fills a fresh exactly-once subscription with ``batches`` x ``batch`` messages (100 bytes, one
attribute, as ``benchmarks/spark_pipeline.py``) and runs the read tasks of ``batches``
batches one after another, each a ``ReadTask`` of one part with the whole batch as its quota
that settles the previous batch's part first (what a read task of a ``numPartitions=1``
query does), through the source's own ``read_part`` on a journal in a temporary directory.
The rows each task returns are written to an Arrow IPC stream in memory, as PySpark's worker
hands them to the JVM.

Reported per version: CPU time of the child process (``time.process_time``: its main thread,
its event loop thread with the Pull calls and the lease keeper, gRPC's threads) per message
over the batches after the first (the first pays for imports and the connection), its
minimum and median over the rounds, split by thread (the main thread: the journal's files,
the hand-off; the event loop thread: Pull calls, decoding, admission, acks; the other
threads: gRPC's own, in C), the messages per Pull response, and the ratio to the
first version. Apart from it, the server's CPU a message over the same batches (its own
process, read from /proc: what the read tasks' calls cost it). ``--profile``: one more
child per version under cProfile (the main thread and the loop thread, merged), its top
functions by own time printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def extract_src(ref: str, into: Path) -> Path:
    """``src`` of ``ref`` (``worktree``: this checkout's) as a directory for PYTHONPATH."""
    if ref == "worktree":
        return ROOT / "src"
    target = into / ref.replace("/", "_")
    if not target.exists():
        target.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def start_server(src: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    server = subprocess.Popen(
        [sys.executable, "-m", "eoclient.cli", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith("export PUBSUB_EMULATOR_HOST="):
            return server, line.strip().split("=", 1)[1]
    server.wait(timeout=10)
    raise RuntimeError("eoclient serve exited before printing its address")


# ------------------------------------------------------------------------------ the child


def child(
    address: str, batch: int, batches: int, profile: bool, server_pid: int | None
) -> dict[str, Any]:
    """Run ``batches`` read tasks in this process (the version on ``sys.path``)."""
    import pyarrow as pa
    import pyarrow.ipc

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _server import fill_subscription, process_cpu

    from eoclient.spark import _pull, _reader
    from eoclient.spark._journal import Journal, Plan
    from eoclient.spark._options import SourceSettings

    name = f"read-task-{os.getpid()}-{time.time_ns()}"
    topic, subscription = f"projects/bench/topics/{name}", f"projects/bench/subscriptions/{name}"
    asyncio.run(
        fill_subscription(
            address,
            topic,
            subscription,
            batch * batches,
            attributes=lambda i: {"key": str(i % 16)},
            enable_exactly_once_delivery=True,
            ack_deadline_seconds=60,
        )
    )
    responses: list[int] = []
    # The decoder _pull calls: of the serialized response (since the columnar decoding) or
    # of the parsed one (before).
    name = "decode_bytes" if hasattr(_pull, "decode_bytes") else "decode"
    decode = getattr(_pull, name)

    def counting_decode(response: Any) -> Any:
        received = decode(response)
        responses.append(len(received))
        return received

    setattr(_pull, name, counting_decode)

    profilers: list[Any] = []
    if profile:
        import cProfile

        # CPU time of the thread each profiler runs in: the wait for the other thread is
        # not counted as the waiter's.
        profilers = [cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)]

    with tempfile.TemporaryDirectory() as work:
        journal = Journal(Path(work) / "journal")
        journal.create()
        settings = SourceSettings(
            {
                "subscription": subscription,
                "endpoint": address,
                "journalPath": str(journal.directory),
                "maxMessagesPerTrigger": str(batch),
                "numPartitions": "1",
            }
        )
        cpu: list[float] = []
        main_cpu: list[float] = []
        loop_cpu: list[float] = []
        rows: list[int] = []
        server_cpu: list[float] = []
        for k in range(batches):
            settles = (k - 1,) if k else ()
            journal.write_plan(k, Plan((batch,), False, settles, None, 60.0))
            task = _reader.ReadTask(k, 1, batch, tuple((s, 1) for s in settles))
            # The first task opens the worker's loop thread: profiled from the second.
            if profile and k == 1:
                worker = _reader._workers[settings.endpoint]
                worker.loop.loop.call_soon_threadsafe(profilers[1].enable)
                profilers[0].enable()
            loop_started = _loop_cpu(_reader, settings.endpoint)
            main_started = time.thread_time()
            server_started = process_cpu(server_pid) if server_pid else 0.0
            started = time.process_time()
            sink = pa.BufferOutputStream()
            count = 0
            writer = None
            for record_batch in _reader.read_part(settings, task):
                if writer is None:
                    writer = pyarrow.ipc.new_stream(sink, record_batch.schema)
                writer.write_batch(record_batch)
                count += record_batch.num_rows
            if writer is not None:
                writer.close()
            cpu.append(time.process_time() - started)
            server_cpu.append(process_cpu(server_pid) - server_started if server_pid else 0.0)
            main_cpu.append(time.thread_time() - main_started)
            loop_cpu.append(_loop_cpu(_reader, settings.endpoint) - loop_started)
            rows.append(count)
        if profile:
            profilers[0].disable()
            worker = _reader._workers[settings.endpoint]
            worker.loop.run(_disable(profilers[1]))
        _reader.close_workers()
    result: dict[str, Any] = {
        "cpu": cpu,
        "main_cpu": main_cpu,
        "loop_cpu": loop_cpu,
        "rows": rows,
        "server_cpu": server_cpu,
        "per_response": sum(responses) / max(1, len(responses)),
    }
    if profile:
        import io
        import pstats

        out = io.StringIO()
        stats = pstats.Stats(profilers[0], stream=out)
        stats.add(profilers[1])
        stats.sort_stats("tottime").print_stats(30)
        out.write("\n")
        stats.sort_stats("cumulative").print_stats(40)
        result["profile"] = out.getvalue()
    return result


async def _disable(profiler: Any) -> None:
    profiler.disable()


async def _thread_time() -> float:
    return time.thread_time()


def _loop_cpu(reader: Any, endpoint: str | None) -> float:
    """CPU time of the read tasks' event loop thread so far (0 before the first task)."""
    worker = reader._workers.get(endpoint)
    if worker is None:
        return 0.0
    value: float = worker.loop.run(_thread_time())
    return value


# ----------------------------------------------------------------------------- the parent


def run_child(
    src: Path, address: str, server_pid: int, args: argparse.Namespace, profile: bool
) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        address,
        "--batch",
        str(args.batch),
        "--batches",
        str(args.batches),
        "--server-pid",
        str(server_pid),
    ]
    if profile:
        command.append("--profile")
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the read tasks of {src} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--versions", default="worktree")
    parser.add_argument("--server", default="worktree")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", metavar="ADDRESS")
    parser.add_argument("--server-pid", type=int)
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.batch, args.batches, args.profile, args.server_pid)
        print(json.dumps(result))
        return 0

    versions = args.versions.split(",")
    with tempfile.TemporaryDirectory() as work:
        sources = {v: extract_src(v, Path(work)) for v in versions}
        server, address = start_server(extract_src(args.server, Path(work)))
        try:
            print(f"load: {os.getloadavg()}", flush=True)
            per_message: dict[str, list[float]] = {v: [] for v in versions}
            per_response: dict[str, list[float]] = {v: [] for v in versions}
            split: dict[str, list[tuple[float, float, float]]] = {v: [] for v in versions}
            server_us: dict[str, list[float]] = {v: [] for v in versions}
            for round_ in range(args.rounds):
                for version in versions:
                    result = run_child(sources[version], address, server.pid, args, profile=False)
                    cpu, rows = result["cpu"][1:], result["rows"][1:]
                    if sum(rows) != args.batch * (args.batches - 1):
                        raise RuntimeError(f"{version}: {rows} rows, not {args.batch} a batch")
                    us = sum(cpu) / sum(rows) * 1e6
                    main_us = sum(result["main_cpu"][1:]) / sum(rows) * 1e6
                    loop_us = sum(result["loop_cpu"][1:]) / sum(rows) * 1e6
                    split[version].append((main_us, loop_us, us - main_us - loop_us))
                    per_message[version].append(us)
                    server_us[version].append(sum(result["server_cpu"][1:]) / sum(rows) * 1e6)
                    per_response[version].append(result["per_response"])
                    print(
                        f"round {round_ + 1} {version}: {us:.2f} µs/msg (main thread "
                        f"{main_us:.2f}, loop thread {loop_us:.2f}, other threads "
                        f"{us - main_us - loop_us:.2f}; "
                        f"{result['per_response']:.0f} msgs/Pull response; server "
                        f"{server_us[version][-1]:.2f} µs/msg)",
                        flush=True,
                    )
            if args.profile:
                for version in versions:
                    result = run_child(sources[version], address, server.pid, args, profile=True)
                    print(f"\n===== profile of {version} (batches 2..n)\n{result['profile']}")
            print(f"load: {os.getloadavg()}", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=10)
    first = statistics.median(per_message[versions[0]])
    print(
        "\n| version | CPU µs/msg (min) | CPU µs/msg (median) | ratio to first (median) "
        "| main thread | loop thread | other threads | msgs per Pull response "
        "| server CPU µs/msg (median) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for version in versions:
        median = statistics.median(per_message[version])
        print(
            f"| {version} | {min(per_message[version]):.2f} | {median:.2f} | "
            f"{median / first:.2f} | "
            + " | ".join(f"{statistics.median(s[i] for s in split[version]):.2f}" for i in range(3))
            + f" | {statistics.median(per_response[version]):.0f}"
            + f" | {statistics.median(server_us[version]):.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
