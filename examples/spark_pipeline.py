"""A Spark pipeline: sensor readings → windowed per-sensor aggregates → Parquet and a topic.

Against a server (Google's emulator, ``eoclient serve``, or the real service)::

    python examples/spark_pipeline.py --endpoint 127.0.0.1:8085 \\
        --subscription projects/my-project/subscriptions/readings \\
        --topic projects/my-project/topics/reading-aggregates \\
        --output /data/aggregates --checkpoint /data/checkpoints

Self-contained, on an embedded reference server (publishes a few hundred readings, runs the
pipeline once with ``availableNow``, checks its output against a plain-Python computation,
prints a summary and exits; status 1 if they differ)::

    python examples/spark_pipeline.py --demo

Needs the spark extra (``pip install 'eoclient[spark]'``) and Java 17.

**Events.** Every message's data is one JSON reading,
``{"sensor": "sensor-3", "reading": 21.5, "event_time": "2025-01-01T10:00:03.250Z"}``
(``event_time``: ISO 8601, when the sensor measured it). A message that is not such a
reading (not JSON, a field missing or of the wrong type) is skipped.

**Two streaming queries**, each with its own checkpoint under ``--checkpoint``:

1. ``aggregate``: the ``eoclient`` source → parse → watermark on ``event_time`` → per sensor
   and tumbling window: readings, total, minimum, maximum, mean → Parquet file sink, in
   append mode (the only mode a file sink has). A window is written once, when it is closed:
   when the watermark (the latest event time seen, minus ``--watermark``) reaches its end.
   A reading that arrives for a window already closed is dropped: ``--watermark`` is how
   late a reading may be. **Exactly once**: the source acks a message only after Spark
   has committed its micro-batch, and the file sink commits each batch's files atomically
   in its log (``<output>/_spark_metadata``); a batch re-run after a crash is skipped, or its
   uncommitted files are ignored. So read the output with Spark (``spark.read.parquet``),
   which follows that log; a plain directory scan can see files of a failed attempt.
2. ``publish``: Spark's file source on that Parquet output (it also reads only committed
   files, through the same log) → one JSON message per aggregate → the ``eoclient`` sink.
   **At least once**: a publish cannot be taken back, so a task or batch retried after a
   failure may publish some aggregates again. Each message carries the aggregate's identity
   as attributes, ``sensor`` and ``window_start``: a consumer drops duplicates by that pair.
   (The sink's ``idAttribute`` option would add a per-row key too; the pair also survives
   restarting this query from a fresh checkpoint, which republishes everything.)

Why two queries chained through Parquet, and not one ``foreachBatch`` that writes Parquet and
publishes: a subscription gives each message to one reader, so the table and the topic must
be fed from one read; inside ``foreachBatch`` the file sink's atomic commit is gone (a
crash mid-write leaves files that readers see), and exactly-once would rest on hand-made
idempotence. Chained, the Parquet table is the system of record, written exactly once, and
the topic is a feed derived from it that can fall behind, or be rebuilt, without holding up
the ingest.

SIGTERM or Ctrl-C stops both queries; a restart with the same ``--checkpoint`` carries on where
they stopped, windows still open included (they are in the checkpoint's state). The source's
journal is ``<checkpoint>/aggregate-journal``, next to its query's checkpoint
``<checkpoint>/aggregate``: delete them together, never one alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from eoclient import PublisherClient, SubscriberClient
from eoclient.admin import AdminClient, subscription_path, topic_path
from eoclient.spark import local_session

# A reading, as Spark parses it: from_json makes a field it cannot parse null.
READING_SCHEMA = "sensor string, reading double, event_time timestamp"
# The Parquet output, as the publishing query reads it back (a streaming file source must
# be given its schema: the output may still be empty when the query starts).
AGGREGATE_SCHEMA = (
    "sensor string, window_start timestamp, window_end timestamp, readings long, "
    "total double, minimum double, maximum double, mean double"
)


@dataclass(frozen=True)
class Pipeline:
    """Where the pipeline reads, writes and keeps its state."""

    subscription: str
    topic: str
    output: Path
    checkpoint: Path
    endpoint: str | None = None  # None: PUBSUB_EMULATOR_HOST, else the real service
    window: str = "1 minute"
    watermark: str = "30 seconds"
    max_messages_per_trigger: int = 10_000


def aggregate(messages: DataFrame, window: str, watermark: str) -> DataFrame:
    """Per sensor and tumbling ``window`` of event time: count, sum, min, max and mean."""
    readings = (
        messages.select(F.from_json(F.col("data").cast("string"), READING_SCHEMA).alias("r"))
        .select("r.*")
        # Not JSON, or a field missing or of the wrong type: from_json leaves nulls.
        .where("sensor IS NOT NULL AND reading IS NOT NULL AND event_time IS NOT NULL")
    )
    return (
        readings.withWatermark("event_time", watermark)
        .groupBy("sensor", F.window("event_time", window))
        .agg(
            F.count("*").alias("readings"),
            F.sum("reading").alias("total"),
            F.min("reading").alias("minimum"),
            F.max("reading").alias("maximum"),
            F.avg("reading").alias("mean"),
        )
        .select(
            "sensor",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "readings",
            "total",
            "minimum",
            "maximum",
            "mean",
        )
    )


def start_aggregation(spark: SparkSession, pipeline: Pipeline, **trigger: Any) -> StreamingQuery:
    """Query 1: subscription → windowed aggregates → Parquet, exactly once.

    ``start()`` returns once the file sink has created ``<output>/_spark_metadata``, which
    the publishing query's file source must find there (start this one first)."""
    source = (
        spark.readStream.format("eoclient")
        .option("subscription", pipeline.subscription)
        .option("journalPath", str(pipeline.checkpoint / "aggregate-journal"))
        .option("maxMessagesPerTrigger", str(pipeline.max_messages_per_trigger))
    )
    if pipeline.endpoint:
        source = source.option("endpoint", pipeline.endpoint)
    aggregates = aggregate(source.load(), pipeline.window, pipeline.watermark)
    return (
        aggregates.writeStream.queryName("aggregate")
        .format("parquet")
        .outputMode("append")
        .option("path", str(pipeline.output))
        .option("checkpointLocation", str(pipeline.checkpoint / "aggregate"))
        .trigger(**trigger)
        .start()
    )


def start_publishing(spark: SparkSession, pipeline: Pipeline, **trigger: Any) -> StreamingQuery:
    """Query 2: the committed Parquet files → one JSON message per aggregate, at least once."""
    aggregates = spark.readStream.schema(AGGREGATE_SCHEMA).parquet(str(pipeline.output))
    messages = aggregates.select(
        # Timestamps become ISO 8601 strings in the session's time zone (UTC: local_session).
        F.to_json(F.struct(*aggregates.columns)).alias("data"),
        # The aggregate's identity: for consumer-side dedup, and subscription filters.
        F.create_map(
            F.lit("sensor"),
            F.col("sensor"),
            F.lit("window_start"),
            F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX"),
        ).alias("attributes"),
    )
    sink = (
        messages.writeStream.queryName("publish")
        .format("eoclient")
        .option("topic", pipeline.topic)
        .option("checkpointLocation", str(pipeline.checkpoint / "publish"))
    )
    if pipeline.endpoint:
        sink = sink.option("endpoint", pipeline.endpoint)
    return sink.trigger(**trigger).start()


def report(query: StreamingQuery, printed: dict[str, str]) -> None:
    """Print a line for each micro-batch ``query`` ran since the last call."""
    for progress in query.recentProgress:
        if progress.timestamp <= printed.get(query.name, ""):
            continue
        printed[query.name] = progress.timestamp  # ISO 8601 UTC: ordered as strings
        if "addBatch" not in progress.durationMs:
            continue  # an idle trigger (reported every 10 s), not a batch
        watermark = progress.eventTime.get("watermark", "-")
        print(
            f"{query.name} batch {progress.batchId}: {progress.numInputRows} rows in "
            f"{progress.durationMs['triggerExecution']} ms, watermark {watermark}",
            flush=True,
        )


def run_until_stopped(spark: SparkSession, pipeline: Pipeline, trigger_seconds: float) -> int:
    """Run both queries until SIGTERM / SIGINT (0) or until one of them fails (1)."""
    stop = threading.Event()
    # Installed after the session exists: pyspark installs a SIGINT handler of its own.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    interval = f"{trigger_seconds} seconds"
    queries = [
        start_aggregation(spark, pipeline, processingTime=interval),
        start_publishing(spark, pipeline, processingTime=interval),
    ]
    print("running; SIGTERM or Ctrl-C to stop", flush=True)
    printed: dict[str, str] = {}
    failed: StreamingQuery | None = None
    try:
        # Polled, not awaitAnyTermination(): Python runs a signal handler only between
        # bytecodes, never while this thread waits inside a Py4J call.
        while failed is None and not stop.wait(1.0):
            for query in queries:
                report(query, printed)
            failed = next((q for q in queries if not q.isActive), None)
    finally:
        # A batch cut short here is re-run from the checkpoints on the next start.
        for query in queries:
            query.stop()
    if failed is not None:
        print(f"query {failed.name} failed: {failed.exception()}", file=sys.stderr, flush=True)
        return 1
    print("stopped", flush=True)
    return 0


# ------------------------------------------------------------------------------ the demo

DEMO_PROJECT = "eoclient-demo"
DEMO_WINDOW = timedelta(minutes=1)
DEMO_WATERMARK = timedelta(seconds=30)
DEMO_START = datetime(2025, 1, 1, 10, 0, tzinfo=UTC)
# The readings cover this much event time, each up to JITTER behind its place in the
# sequence: the last windows stay open (their end is after the final watermark).
DEMO_SPAN = timedelta(seconds=400)
JITTER = timedelta(seconds=10)
# The demo reads all its events in one micro-batch (maxMessagesPerTrigger = their number;
# this many arrive well within the source's pull timeout). Cut into several batches, which
# readings come too late would depend on the order of delivery, which Pub/Sub does not keep
# (on this machine a first batch of 200 held readings of minutes 3 to 6, and the readings
# of minutes 0 to 2 in the next batches were then behind the watermark and dropped).
DEMO_MAX_EVENTS = 1000


def demo_events(count: int, sensors: int, seed: int = 7) -> list[bytes]:
    """``count`` readings over ``sensors`` sensors, plus two messages that are not readings."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        behind = JITTER * rng.random()
        event_time = DEMO_START + max(timedelta(0), DEMO_SPAN * i / count - behind)
        reading = {
            "sensor": f"sensor-{rng.randrange(sensors)}",
            "reading": round(rng.uniform(15.0, 30.0), 2),
            "event_time": event_time.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        events.append(json.dumps(reading).encode())
    events.insert(count // 3, b"sensor-1 offline")
    events.insert(2 * count // 3, b'{"sensor": "sensor-2", "event_time": "2025-01-01T10:03:00Z"}')
    return events


@dataclass(frozen=True)
class Aggregate:
    readings: int
    total: float
    minimum: float
    maximum: float
    mean: float

    def agrees_with(self, other: Aggregate) -> bool:
        # A float sum depends on the order of addition, which Spark does not fix.
        mine = (self.total, self.minimum, self.maximum, self.mean)
        theirs = (other.total, other.minimum, other.maximum, other.mean)
        return self.readings == other.readings and all(
            math.isclose(a, b, rel_tol=1e-9) for a, b in zip(mine, theirs, strict=True)
        )


WindowKey = tuple[str, datetime]  # (sensor, window start)


def expected_aggregates(
    events: Sequence[bytes],
) -> tuple[dict[WindowKey, Aggregate], int, int]:
    """What the pipeline should write, computed in plain Python from the published events:
    the aggregates of the windows the final watermark closed, the number of valid readings,
    and the number of windows left open (in Spark's state, until later readings close them)."""
    values: dict[WindowKey, list[float]] = {}
    latest = datetime.min.replace(tzinfo=UTC)
    for data in events:
        try:
            event = json.loads(data)
            sensor, reading = str(event["sensor"]), float(event["reading"])
            event_time = datetime.fromisoformat(event["event_time"])
        except (ValueError, KeyError, TypeError):
            continue
        start = DEMO_START + DEMO_WINDOW * ((event_time - DEMO_START) // DEMO_WINDOW)
        values.setdefault((sensor, start), []).append(reading)
        latest = max(latest, event_time)
    # Spark closes a window when the watermark reaches its end (checked: end == watermark
    # closes it). availableNow ends with a batch without data that applies the last watermark.
    watermark = latest - DEMO_WATERMARK
    closed = {
        key: Aggregate(len(v), sum(v), min(v), max(v), sum(v) / len(v))
        for key, v in values.items()
        if key[1] + DEMO_WINDOW <= watermark
    }
    readings = sum(len(v) for v in values.values())
    return closed, readings, len(values) - len(closed)


def parse_aggregate(text: str | bytes) -> tuple[WindowKey, Aggregate]:
    """One aggregate in the pipeline's JSON (a published message, or a Parquet row)."""
    row = json.loads(text)
    key = (row["sensor"], datetime.fromisoformat(row["window_start"]))
    return key, Aggregate(
        row["readings"], row["total"], row["minimum"], row["maximum"], row["mean"]
    )


def compare(
    expected: dict[WindowKey, Aggregate], found: list[tuple[WindowKey, Aggregate]]
) -> list[str]:
    """Why ``found`` is not exactly ``expected``, each window once ([] when it is)."""
    problems = []
    by_key = dict(found)
    if len(by_key) != len(found):
        problems.append(f"{len(found) - len(by_key)} windows more than once")
    missing, extra = expected.keys() - by_key.keys(), by_key.keys() - expected.keys()
    if missing:
        problems.append(f"{len(missing)} windows missing, e.g. {min(missing)}")
    if extra:
        problems.append(f"{len(extra)} windows not expected, e.g. {min(extra)}")
    differ = sorted(
        k for k in expected.keys() & by_key.keys() if not expected[k].agrees_with(by_key[k])
    )
    if differ:
        key = differ[0]
        problems.append(
            f"{len(differ)} windows differ, e.g. {key}: {by_key[key]} != {expected[key]}"
        )
    return problems


@contextlib.contextmanager
def embedded_server() -> Iterator[str]:
    """The reference server on 127.0.0.1, on an event loop in a thread; yields host:port.

    A thread, because this one spends the run blocked in Spark calls while the source, in a
    Python process Spark starts, talks to the server over TCP.
    """
    from eoclient.server_stub import run_server

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="reference-server", daemon=True)
    thread.start()
    stack = contextlib.AsyncExitStack()
    try:
        server = asyncio.run_coroutine_threadsafe(
            stack.enter_async_context(run_server()), loop
        ).result(30)
        yield server.address
    finally:
        asyncio.run_coroutine_threadsafe(stack.aclose(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


async def prepare_demo(endpoint: str, pipeline: Pipeline, check: str, events: list[bytes]) -> None:
    """Create the topics and subscriptions, then publish the events."""
    readings = topic_path(DEMO_PROJECT, "readings")
    async with AdminClient(endpoint) as admin:
        await admin.create_topic(readings)
        # The eoclient source refuses a subscription without exactly-once delivery.
        await admin.create_subscription(
            pipeline.subscription, readings, enable_exactly_once_delivery=True
        )
        await admin.create_topic(pipeline.topic)
        # Before anything is published: a subscription receives only later messages.
        await admin.create_subscription(check, pipeline.topic)
    async with PublisherClient(endpoint) as publisher:
        await asyncio.gather(*(publisher.publish_nowait(readings, e) for e in events))


async def drain(endpoint: str, subscription: str) -> list[bytes]:
    """Pull and ack until a pull comes back empty; the payloads."""
    received: list[bytes] = []
    async with SubscriberClient(endpoint) as client:
        while messages := await client.pull(subscription, 1000):
            await asyncio.gather(*(m.ack_with_response() for m in messages))
            received.extend(m.data for m in messages)
    return received


def demo(count: int, sensors: int) -> int:
    started = time.monotonic()
    events = demo_events(count, sensors)
    # Spark first: it forks this process to start its JVM, which gRPC complains about
    # once the server's threads are running.
    spark = local_session("eoclient-spark-pipeline-demo")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with (
            tempfile.TemporaryDirectory(prefix="eoclient-spark-pipeline-") as tmp,
            embedded_server() as endpoint,
        ):
            print(f"embedded reference server on {endpoint}", flush=True)
            pipeline = Pipeline(
                subscription=subscription_path(DEMO_PROJECT, "readings-pipeline"),
                topic=topic_path(DEMO_PROJECT, "reading-aggregates"),
                output=Path(tmp) / "aggregates",
                checkpoint=Path(tmp) / "checkpoints",
                endpoint=endpoint,
                max_messages_per_trigger=len(events),
            )
            check = subscription_path(DEMO_PROJECT, "reading-aggregates-check")
            asyncio.run(prepare_demo(endpoint, pipeline, check, events))
            print(f"published {len(events)} events", flush=True)
            # availableNow: what is there now, then stop. One query after the other, so
            # that the publishing query sees every window the first one wrote.
            for start in (start_aggregation, start_publishing):
                query = start(spark, pipeline, availableNow=True)
                query.awaitTermination()  # raises if the query failed
                counts = "+".join(str(p.numInputRows) for p in query.recentProgress)
                print(f"{query.name}: rows per micro-batch {counts}", flush=True)
            # Through Spark, so that only the files committed in the sink's log count.
            table = spark.read.parquet(str(pipeline.output))
            rows = table.select(F.to_json(F.struct(*table.columns))).collect()
            written = [parse_aggregate(row[0]) for row in rows]
            published = [parse_aggregate(data) for data in asyncio.run(drain(endpoint, check))]
    finally:
        spark.stop()

    expected, readings, still_open = expected_aggregates(events)
    problems = compare(expected, written)
    problems += [f"published: {problem}" for problem in compare(expected, published)]
    for problem in problems:
        print(problem, file=sys.stderr, flush=True)
    print(
        f"summary: events={len(events)} readings={readings} windows={len(expected)} "
        f"open={still_open} parquet_rows={len(written)} published={len(published)} "
        f"matches={'no' if problems else 'yes'} elapsed={time.monotonic() - started:.1f}s",
        flush=True,
    )
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint",
        help="host:port of the server (default: PUBSUB_EMULATOR_HOST, else the real service)",
    )
    parser.add_argument("--subscription", help="the readings: projects/{p}/subscriptions/{s}")
    parser.add_argument("--topic", help="for the aggregates: projects/{p}/topics/{t}")
    parser.add_argument("--output", type=Path, help="the Parquet output directory")
    parser.add_argument(
        "--checkpoint", type=Path, help="directory for the queries' checkpoints and the journal"
    )
    parser.add_argument("--window", default="1 minute", help="window length (default 1 minute)")
    parser.add_argument(
        "--watermark",
        default="30 seconds",
        help="how late a reading may arrive; a window is written this long after its end "
        "(default 30 seconds)",
    )
    parser.add_argument(
        "--trigger-seconds", type=float, default=10.0, help="micro-batch interval (default 10)"
    )
    parser.add_argument(
        "--max-messages-per-trigger",
        type=int,
        default=10_000,
        help="at most this many messages per micro-batch (default 10000)",
    )
    parser.add_argument(
        "--demo", action="store_true", help="run on an embedded reference server and exit"
    )
    parser.add_argument(
        "--events",
        type=int,
        default=600,
        help=f"--demo: how many readings, at most {DEMO_MAX_EVENTS} (default 600)",
    )
    parser.add_argument("--sensors", type=int, default=6, help="--demo: sensors (default 6)")
    args = parser.parse_args(argv)
    if args.demo:
        if not 1 <= args.events <= DEMO_MAX_EVENTS or args.sensors < 1:
            parser.error(f"--events must be in 1..{DEMO_MAX_EVENTS} and --sensors >= 1")
        return demo(args.events, args.sensors)
    required = ("subscription", "topic", "output", "checkpoint")
    missing = [f"--{name}" for name in required if getattr(args, name) is None]
    if missing:
        parser.error(f"{', '.join(missing)} required (or use --demo)")
    pipeline = Pipeline(
        subscription=args.subscription,
        topic=args.topic,
        output=args.output,
        checkpoint=args.checkpoint,
        endpoint=args.endpoint,
        window=args.window,
        watermark=args.watermark,
        max_messages_per_trigger=args.max_messages_per_trigger,
    )
    # local[2]. On a cluster: build the session as usual, then eoclient.spark.register(spark).
    spark = local_session("eoclient-spark-pipeline")
    spark.sparkContext.setLogLevel("WARN")
    try:
        return run_until_stopped(spark, pipeline, args.trigger_seconds)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
