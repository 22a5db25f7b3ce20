"""Where a Spark micro-batch's time goes: one run of ``spark_pipeline.py`` with each read
task's steps timed and Spark's event log on, merged per batch.

    .venv/bin/python benchmarks/spark_timeline.py [spark_pipeline.py's arguments]

Runs ``benchmarks/spark_pipeline.py`` (its arguments; default ``--batches 100000 --runs
"local[2]:2"``) with

* Spark's event log (a ``spark-defaults.conf`` of its own in ``SPARK_CONF_DIR``): each task's
  launch and finish, and its JVM thread's CPU time;
* a ``sitecustomize`` first on ``PYTHONPATH`` (Spark's Python workers and source runner get
  the driver's ``PYTHONPATH``) that, once ``eoclient.spark.source`` is imported in a process,
  wraps the source's steps to append a timestamp line to a file: ``latestOffset`` and
  ``partitions`` in the source runner; in a read task its start, the end of its settles,
  the end of its pull, the claim (its part journaled), the rows of a part handed to PySpark,
  its end. It wraps private functions of ``eoclient.spark`` (a benchmark's view, not an
  API): one renamed shows as a missing step, never as a wrong time.

Printed, for each batch of the eoclient queries (from one ``latestOffset`` to the next; the
``--baseline`` source's batches have no Python steps and are left out): each step's time
after the batch's ``latestOffset`` began, per read task (``p1``, ``p2``, ...), the JVM's task
launch and finish, and its task thread's CPU (which JVM task ran which part is not known).
What it showed first (2026-11-28, local[2], 100,000 a batch, load 5-8): the JVM writes a
task's Parquet mostly after its Python worker handed the last row (0.4-0.8 s after it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Installed in every Python process of the run; it touches nothing until the source's
# module is imported. ``EOCLIENT_TIMELINE_DIR`` is where the lines go (a file per process).
SITECUSTOMIZE = """
import importlib.abc, importlib.util, os, sys, time

_DIR = os.environ["EOCLIENT_TIMELINE_DIR"]


def _mark(batch, part, step):
    with open(os.path.join(_DIR, f"{os.getpid()}.log"), "a") as out:
        out.write(f"{time.time():.4f} {batch} {part} {step}\\n")


def _patch(source):
    from eoclient.spark import _reader

    reader_class = source.EoclientStreamReader
    latest, partitions, read = (
        reader_class.latestOffset, reader_class.partitions, reader_class.read
    )

    def latest_offset(self, start, limit):
        _mark(start.get("batch"), "-", "latestOffset")
        return latest(self, start, limit)

    def timed_partitions(self, start, end):
        _mark(start.get("batch"), "-", "partitions")
        return partitions(self, start, end)

    def timed_read(self, partition):
        task = partition.value
        _mark(task.batch, task.part, "start")
        yield from read(self, partition)
        _mark(task.batch, task.part, "end")

    reader_class.latestOffset = latest_offset
    reader_class.partitions = timed_partitions
    reader_class.read = timed_read
    pulling = _reader._Pulling
    settled, result = pulling.settled, pulling.result

    def timed_settled(self):
        _mark(self.task.batch, self.task.part, "settled")
        settled(self)

    def timed_result(self):
        attempt = result(self)
        _mark(self.task.batch, self.task.part, "pulled")
        return attempt

    pulling.settled, pulling.result = timed_settled, timed_result
    claim, replay = _reader._claim, _reader._replay

    async def timed_claim(settings, worker, journal, settles, attempt):
        rows = await claim(settings, worker, journal, settles, attempt)
        _mark(attempt.batch, attempt.index, "claimed")
        return rows

    def timed_replay(settings, worker, journal, batch, index, own_rows):
        yield from replay(settings, worker, journal, batch, index, own_rows)
        _mark(batch, index, f"rows of part {index} handed")

    _reader._claim, _reader._replay = timed_claim, timed_replay


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "eoclient.spark.source":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
"""


def _python_marks(directory: Path) -> list[tuple[float, str, str, str]]:
    marks = []
    for log in directory.glob("*.log"):
        for line in log.read_text().splitlines():
            at, batch, part, step = line.split(" ", 3)
            marks.append((float(at), batch, part, step))
    return sorted(marks)


def _spark_tasks(events: Path) -> list[tuple[float, float, float]]:
    """(launch, finish, JVM thread CPU s) of every task in the event log."""
    tasks = []
    for log in events.rglob("events_*"):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerTaskEnd":
                info, metrics = event["Task Info"], event.get("Task Metrics") or {}
                cpu = metrics.get("Executor CPU Time", 0) / 1e9
                tasks.append((info["Launch Time"] / 1000, info["Finish Time"] / 1000, cpu))
    return sorted(tasks)


def report(
    marks: list[tuple[float, str, str, str]], tasks: list[tuple[float, float, float]]
) -> str:
    """One block per batch: every step's seconds after the batch's latestOffset began."""
    # Batches in time order; the runner's latestOffset opens one (a query per runner).
    starts = [(at, batch) for at, batch, part, step in marks if step == "latestOffset"]
    lines = []
    for number, (begin, batch) in enumerate(starts):
        end = starts[number + 1][0] if number + 1 < len(starts) else float("inf")
        inside = [mark for mark in marks if begin <= mark[0] < end]
        by_part: dict[str, dict[str, float]] = defaultdict(dict)
        for at, _, part, step in inside:
            by_part[part][step] = at - begin
        own = [task for task in tasks if begin <= task[0] < end]
        if not any(part != "-" for part in by_part) or not own:
            continue
        lines.append(f"batch {batch} (to the next latestOffset: {end - begin:.3f} s)")
        runner = by_part.pop("-", {})
        lines.append(f"  partitions() called        {runner.get('partitions', float('nan')):.3f}")
        for launch, finish, cpu in own:
            lines.append(
                f"  JVM task launch {launch - begin:.3f}, finish {finish - begin:.3f}, "
                f"CPU {cpu:.3f} s"
            )
        for part in sorted(by_part):
            steps = by_part[part]
            named = sorted(steps.items(), key=lambda item: item[1])
            lines.append(f"  p{part}: " + ", ".join(f"{step} {at:.3f}" for step, at in named))
    return "\n".join(lines)


def main() -> int:
    arguments = sys.argv[1:] or ["--batches", "100000", "--runs", "local[2]:2"]
    with tempfile.TemporaryDirectory(prefix="eoclient-spark-timeline-") as work:
        base = Path(work)
        hooks, marks, events, conf = (base / name for name in ("site", "marks", "events", "conf"))
        for directory in (hooks, marks, events, conf):
            directory.mkdir()
        (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (conf / "spark-defaults.conf").write_text(
            "spark.eventLog.enabled true\n"
            f"spark.eventLog.dir {events.as_uri()}\n"
            "spark.eventLog.compress false\n"
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hooks), env.get("PYTHONPATH")]))
        env["SPARK_CONF_DIR"] = str(conf)
        env["EOCLIENT_TIMELINE_DIR"] = str(marks)
        command = [sys.executable, str(ROOT / "benchmarks" / "spark_pipeline.py"), *arguments]
        returned = subprocess.run(command, env=env, check=False).returncode
        print(report(_python_marks(marks), _spark_tasks(events)))
    return returned


if __name__ == "__main__":
    sys.exit(main())
