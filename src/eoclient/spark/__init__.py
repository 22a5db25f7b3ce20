"""PySpark connector: an exactly-once streaming source and a sink (``pip install eoclient[spark]``).

Built on PySpark's pure-Python Data Source API (PySpark >= 4.2); nothing beyond the ``pyspark``
wheel is needed. ::

    from eoclient.spark import local_session

    spark = local_session()                      # registers the "eoclient" format
    events = (
        spark.readStream.format("eoclient")
        .option("subscription", "projects/p/subscriptions/s")
        .option("journalPath", "/data/q1/journal")   # next to the query's checkpoint
        .load()
    )
    events.writeStream.format("parquet").option("checkpointLocation", "/data/q1/ckpt") ...

    df.write.format("eoclient").option("topic", "projects/p/topics/t").mode("append").save()

Source options (names are case-insensitive; values are strings; an unknown name is an error):

* ``subscription`` (required): the full subscription name.
* ``journalPath`` (required): the journal directory. It belongs to ONE checkpoint: keep it next
  to ``checkpointLocation`` and delete both together. On a cluster, a path the driver and
  every executor see at the same place (a shared mount); Hadoop URLs are refused; a relative
  path is the driver's working directory's.
* ``endpoint``: ``host:port`` of the server; default ``PUBSUB_EMULATOR_HOST``.
* ``maxMessagesPerTrigger`` (default 10000): rows per micro-batch at most (``ReadMaxRows``).
* ``numPartitions``: read tasks per micro-batch, each acking its share of the previous
  (committed) batch and pulling its share of this one on an executor; default the
  session's parallelism (``eoclient.spark.register``), else 2.
* ``pullTimeoutSeconds`` (default 2): how long the driver's first round, and each read task
  (once the acks of its share of the previous batch are done), pull at most.
* ``leaseSeconds`` (default 60, 10..600): the deadline journaled deliveries are extended to.
* ``restartGraceSeconds``: how long an ``availableNow`` run keeps looking at an empty
  subscription before it concludes there is nothing left. By default 0, except after a run
  that died with a Pull call in flight: then until what that call may have leased comes
  back (its send + 10 s + the subscription's ack deadline + 2 s). What a dead run's pullers
  held and recorded is given back at once: the driver's probe at the restart, a read task's
  when its batch is acked.
* ``allowAtLeastOnce`` (default false): accept a subscription WITHOUT exactly-once delivery.
  The result is then **at-least-once**: an acked message can still be redelivered after its
  batch was pruned from the journal, and it is emitted again.
* ``dedupe`` / ``journalReplay`` (default true): ``false`` emits redeliveries again / lets a
  task's re-run pull anew instead of replaying its journaled part. Only for the crash
  tests' negative controls; never in a pipeline.
* ``readAhead`` (default true): once a read task that pulled its whole share has handed its
  rows, its Python worker pulls the next batch's share while Spark finishes this batch, and
  its next read task adopts it (``eoclient.spark._ahead``); ``false``: every share is pulled
  by its own task.
* ``faultPoints`` / ``faultDir``: crash-test instrumentation (``eoclient.spark._faults``).

Guarantee (with an exactly-once subscription and a batch-idempotent sink such as the file
sink, or ``foreachBatch`` keyed by batch id): every message reaches the sink exactly once,
across driver and executor crashes and restarts from the checkpoint (``source.py`` has the
design and what happens when each process dies at each step). Not supported: async progress
tracking (``asyncProgressTrackingEnabled``), which breaks the "latestOffset(k) follows the
commit of k - 1" ordering the acks rely on.

Sink rows: a ``data`` column (string or binary), optional ``attributes`` (map<string,string>;
a null value drops that attribute) and ``ordering_key`` (string); other columns are ignored,
and a schema that does not fit fails when the write starts, naming the column.
Sink options: ``topic`` (required), ``endpoint``, and ``idAttribute``: if set, every message
gets that attribute with a deterministic key (``<queryId>:<batchId>:<partition>:<row>`` when
streaming), so consumers can drop the duplicates a retried task may publish: the sink is
at-least-once (Pub/Sub publish is not transactional).
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "eoclient.spark needs the spark extra: pip install 'eoclient[spark]'"
    ) from error

from eoclient.spark.datasource import SCHEMA, EoclientDataSource
from eoclient.spark.session import local_session, register

__all__ = ["SCHEMA", "EoclientDataSource", "local_session", "register"]
