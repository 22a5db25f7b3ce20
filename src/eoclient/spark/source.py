"""The streaming source: subscription → DataFrame, exactly once into a batch-idempotent sink,
read by the executors; the driver's work per batch does not grow with its messages.

Where things run. Spark calls every method but ``read`` in one long-lived *source runner*
process next to the driver, on one reader object: there a :class:`~eoclient.spark._runner.Runner`
owns an event loop thread, a channel and the driver-side state. ``read`` runs in Python
workers on the executors, one task per partition, on pickled copies of the reader
(``eoclient.spark._reader``). Offsets are ``{"journal": <epoch>, "batch": k}``: batch ``k``
is what the journal's ``batch-<k>/`` holds (layout: ``eoclient.spark._journal``).

A micro-batch:

1. ``latestOffset(start = k)``: Spark calls it only once batches below ``k`` are in its
   commit log (docs/protocol.md#spark-micro-batch-commit-order). The driver forgets (prunes)
   the batches the committed batches' tasks have settled; batch ``k - 1`` is committed but
   not acked yet: batch ``k`` will settle it. It marks ``k - 1`` committed
   (``batch-<k-1>/committed``): each worker whose task emitted one of its parts settles that
   part from then on, on its own loop (``_settle.EarlySettles``), while the driver and Spark
   plan batch ``k``. Then it *probes*: pulls one round (up to 2,000 messages, whatever the
   batch size), acks the redeliveries of committed messages among them (a round of nothing
   else pulls again: the subscription is not known to be empty), journals the rest as part 0
   and writes the batch's *plan*: how many read tasks pull how many messages each (the rest
   of ``maxMessagesPerTrigger`` over ``numPartitions``; none if the probe found the
   subscription nearly drained and no worker holds a fresh read-ahead), which committed
   batches its tasks settle, the ``availableNow`` cutoff. Returns ``k + 1``. If the probe
   found nothing: ``k + 1`` all the same while a worker's read-ahead log is fresh (read
   tasks, which may adopt it) or a committed batch waits for its acks (a batch of settle
   tasks, no row), else ``k`` (Spark may then end the query: everything is acked). Before
   probing it gives back the read-ahead logs older than the hold bound (``_ahead``). A plan
   that exists (a crash after it, before Spark's offset log) is returned as is.
2. ``partitions(k, k + 1)``: one partition per read task of the plan, the first of them
   also carrying part 0 (part 0 alone if the plan has no read task), and the parts of the
   batches it settles dealt round-robin over them (settle tasks alone if the batch reads
   nothing).
3. ``read``: settle the parts dealt to the task (``_settle``: ack every journaled ack id;
   give back what their dead attempts pulled and never journaled; record the messages whose
   ack is not confirmed as *pending*: a redelivery of one is acked, not emitted; mark the
   part settled), each under the part's settle lock: a part its worker settled early is
   found settled, one being settled is waited for. A journaled part is then replayed;
   otherwise the task pulls its share (the pull starts as the first settle sends its acks,
   and runs alongside them), and once the settles are done acks redeliveries of committed
   messages, journals what it pulled *before* returning a row, atomically and only if no
   other attempt did (the loser gives its messages back with modack 0 and replays the
   winner); the task carrying part 0 replays it before its own rows. A part's ack ids go to
   the worker's lease keeper (``_keeper``), which extends their leases until the part is
   settled. See ``_reader``. A task whose pull came back with its whole quota then has its
   worker pull the same quota ahead (read-ahead, ``_ahead``): the worker's next read task
   adopts those answers as its own first ones (admitted under its batch's plan) and pulls
   only the rest.
4. The sink commits, Spark writes ``commits/k``; the next ``latestOffset(k + 1)`` marks
   batch ``k`` committed (its workers settle their parts) and plans batch ``k + 1``, whose
   tasks settle what of batch ``k`` is left.

So the driver reads plans, lists directories, scans the previous batch's message ids (Arrow
columns, for its probe's redeliveries) and pulls one round: its work per batch is bounded
by the number of partitions and the probe, not by the batch's messages. Every puller logs
the ack ids it holds before they are journaled (``_lease_log``), so deliveries a dead
puller held come back at once (modack 0) rather than after their deadline: the driver's own
probe at its restart, a read task's when its batch is settled.

What happens when a process dies (kill -9) at each step, and the query is restarted from
its checkpoint (or Spark retries a task):

=============================================  =============================================
dies                                           then
=============================================  =============================================
driver, probing (before part 0 exists)         the restart gives the probe's deliveries
                                               back (its lease log); a Pull call in flight
                                               then makes an availableNow run wait for its
                                               deadline; nothing was emitted
driver, after part 0, before the plan          the restart plans the batch as part 0 alone
driver, after the plan, before offsets/k       the restart returns the same ``k + 1``
                                               (a settle-only batch too)
driver, batch k running (offsets/k written)    Spark re-runs batch k: journaled parts are
                                               replayed, others pulled anew; settled parts
                                               are skipped, the rest settled; what dead read
                                               tasks held is given back when k is settled
driver, after the sink's commit, before        Spark re-runs k, the sink skips it (its
commits/k                                      tasks, settles included, had all finished);
                                               batch k + 1 settles k
driver, after commits/k, before batch k + 1    the restart plans k + 1 to settle k; leases
settles it                                     that ran out meanwhile: the settle's acks of
                                               them fail (pending), their redeliveries are
                                               acked, not emitted
executor (or its Python worker), settling a    Spark retries the task: it settles the part
part, before its acks                          (not marked settled) again; what the task's
                                               pull (started with the first acks) held is
                                               given back as for a death while pulling
executor, after a part's acks, before it is    the retry acks again; ids acked the first
marked settled                                 time fail and go pending (harmless: never
                                               redelivered, only remembered)
executor (its Python worker), settling a part  the lock dies with it; the task dealt the
early, before or after its acks                part settles it, as above
executor, pulling                              Spark retries the task elsewhere: it pulls
                                               anew; the dead attempt's deliveries are
                                               given back when the batch is settled (or come
                                               back at their deadline); never emitted
executor, after its part is journaled          the retry replays the journaled part
executor holding a lease keeper (between its   the leases of the parts it kept run out:
tasks, or Spark stopping an idle worker)       their redeliveries are acked (committed) or
                                               kept with their batch, never emitted twice;
                                               the settle's acks of the dead ids go pending
two attempts of one part (retry + straggler,   one journal wins (``link``); the other
speculation)                                   gives its messages back and replays it
executor holding a read-ahead (after its       its deliveries come back at their deadline,
task, before a next task adopts it)            or sooner: the driver gives back a
                                               read-ahead log older than the hold bound +
                                               clock skew (renamed first: no worker adopts
                                               it then); never emitted
executor adopting a read-ahead                 the adoption renames the read-ahead log to
                                               the attempt's lease log (one file lists the
                                               deliveries at every instant): before it, as
                                               above; after it, as a death while pulling
                                               (the batch's settle gives them back)
a read-ahead held past the hold bound (a       the driver renames and gives back its log;
stalled worker)                                the task that then tries to adopt it finds
                                               the log gone, gives back what it holds and
                                               pulls anew
a lease lost (a batch slower than the          the redelivery's message id is journaled:
deadline despite extensions)                   it is acked with the batch, or at once if
                                               committed; never emitted twice
=============================================  =============================================

Guarantee (with an exactly-once subscription and a batch-idempotent sink such as the file
sink, or ``foreachBatch`` keyed by batch id): every message reaches the sink exactly once,
across driver and executor crashes and restarts from the checkpoint. Needs a journal every
executor and the driver reach at the same POSIX path (a shared mount on a cluster), and host
clocks within a second (``_decisions.CLOCK_SKEW_SECONDS``). Not supported: async progress
tracking (``asyncProgressTrackingEnabled``), which breaks the "latestOffset(k) follows the
commit of k - 1" ordering the settles rely on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from eoclient.errors import SparkConnectorError
from eoclient.spark._errors import one_line_errors
from eoclient.spark._faults import fault_point
from eoclient.spark._options import SourceSettings
from eoclient.spark._reader import ReadTask, read_part
from eoclient.spark._runner import Runner


class EoclientStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. Constructed in the source runner and in planner processes;
    pickled to executors for ``read`` (where ``__init__`` does not run), so it opens nothing
    until a driver-side method is first called."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Checked (SourceSettings) at the first call, not here: Spark's source runner turns
        # an error raised while it builds the reader into an UnboundLocalError of its own.
        self._options = dict(options)
        self._settings: SourceSettings | None = None
        self._runner: Runner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "_settings": self.settings, "_runner": None}

    @property
    def settings(self) -> SourceSettings:
        if self._settings is None:
            with one_line_errors():
                self._settings = SourceSettings(self._options)
        return self._settings

    def _get_runner(self) -> Runner:
        if self._runner is None:
            with one_line_errors():
                self._runner = Runner(self.settings)
        return self._runner

    def _batch(self, offset: Mapping[str, Any], runner: Runner) -> int:
        if "batch" not in offset:
            with one_line_errors():
                raise SparkConnectorError(
                    f"eoclient source: the checkpoint's offset {dict(offset)} was written by an "
                    "earlier version of the source (offsets by sequence number): start this "
                    "query with a new checkpointLocation and journalPath"
                )
        if offset.get("journal") != runner.epoch:
            raise RuntimeError(
                f"offset {dict(offset)} is not from the journal in {runner.journal.directory} "
                f"(epoch {runner.epoch}): journalPath must stay with its checkpoint"
            )
        return int(offset["batch"])

    def _offset(self, runner: Runner, batch: int) -> dict[str, Any]:
        return {"journal": runner.epoch, "batch": batch}

    # ------------------------------------------------------------- Spark's API

    def initialOffset(self) -> dict[str, Any]:
        # Called twice in a fresh run: the epoch is persisted, so both answers agree.
        return self._offset(self._get_runner(), 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        runner = self._get_runner()
        runner.available_now = True
        runner.cutoff_ns = round(runner.clock.now() * 1e9)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        runner = self._get_runner()
        batch = self._batch(start, runner)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.settings.max_rows
        end = runner.loop.run(runner.latest(batch, max_rows))
        if end != batch:
            fault_point("after_journal", self.settings.fault_points, self.settings.fault_dir)
        return self._offset(runner, end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        runner = self._get_runner()
        first, last = self._batch(start, runner), self._batch(end, runner)

        async def plan() -> list[ReadTask]:
            return runner.partitions(first, last)

        return [InputPartition(task) for task in runner.loop.run(plan())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_part(self.settings, partition.value)

    def commit(self, end: dict[str, Any]) -> None:
        # Spark calls it for batch k - 1 once it has asked for batch k: latestOffset(k)
        # has already learnt that k - 1 is committed (and batch k's tasks settle it).
        return None

    def stop(self) -> None:
        # Rarely called (the JVM usually kills this process): nothing relies on it.
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(Exception):
                runner.loop.run(runner.close(), timeout=5.0)
            runner.loop.close()
