"""A read task's Python worker: its event loop, SDK client, lease keepers, read-ahead and
early settles, kept for its next read tasks (``_reader``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from eoclient._clock import AsyncClock, SystemClock
from eoclient.spark._ahead import ReadAheadSlot
from eoclient.spark._faults import fault_point
from eoclient.spark._keeper import LeaseKeeper
from eoclient.spark._loop import LoopThread
from eoclient.spark._options import SourceSettings
from eoclient.spark._pull import open_client
from eoclient.spark._settle import EarlySettles
from eoclient.subscriber import SubscriberClient


@dataclass(slots=True)
class Worker:
    """This Python worker's event loop, SDK client, lease keepers and read-ahead
    (``_ahead``), kept for its next read tasks: Spark reuses a worker process for many tasks
    (``spark.python.worker.reuse``), so a task does not pay for a new connection (a busy
    server may be slow to accept one), and the keepers go on extending leases between tasks.
    ``clock`` is wall-clock time: lease ends and send times are compared across processes."""

    loop: LoopThread
    client: SubscriberClient
    clock: AsyncClock
    keepers: dict[tuple[str, str], LeaseKeeper] = field(default_factory=dict)
    ahead: ReadAheadSlot = field(init=False)
    settles: EarlySettles = field(init=False)

    def __post_init__(self) -> None:
        self.ahead = ReadAheadSlot(self.client, self.clock)
        self.settles = EarlySettles(self.client, self.clock)

    def keeper(self, settings: SourceSettings) -> LeaseKeeper:
        key = (settings.journal_path, settings.subscription)
        keeper = self.keepers.get(key)
        if keeper is None:
            keeper = self.keepers[key] = LeaseKeeper(
                self.client, settings.subscription, settings.lease_seconds, self.clock
            )
        return keeper


workers: dict[str | None, Worker] = {}

# How many read tasks a worker process starts with the objects alive at their start frozen
# before one starts without (``freeze_survivors``).
FREEZE_RENEWAL_TASKS = 32


class SurvivorFreeze:
    """Keeps the objects a worker process holds between tasks out of its full collections.

    With worker reuse, PySpark's daemon runs ``gc.collect()`` in the worker after every
    task (``pyspark/daemon.py``). A full collection walks every object the collector tracks,
    and a read task's worker holds ~93,000: the modules it imports (pyarrow, grpc, PySpark's
    own), its loop, channel and keepers. Measured in ``benchmarks/spark_pipeline.py``
    (local[2], 100,000 a batch): 30 ms of CPU after every task, a quarter of the read
    workers' samples, on two cores the pipeline keeps busy. So each read task starts with
    ``gc.freeze()``: what is alive is moved out of the collector's generations (still freed
    by its reference count when it dies), and the daemon's collection walks only what the
    task made (it left the profile). The daemon collected just before (but for a worker's
    first task), so no garbage is frozen; what is frozen alive and later dies in a reference
    cycle is not collected while frozen, so every ``FREEZE_RENEWAL_TASKS``-th task unfreezes
    instead, and the collection after it walks everything once: such a cycle is freed at
    most that many tasks late (or when the process ends, in a worker that runs no further
    read task). A read task's own objects die by reference count: of ten collections after
    read tasks, nine found no garbage and one found 15 objects.
    """

    def __init__(self, *, enabled: bool, renewal: int = FREEZE_RENEWAL_TASKS) -> None:
        self.enabled = enabled
        self._renewal = renewal
        self._tasks = 0

    def task_started(self) -> None:
        if not self.enabled:
            return
        self._tasks += 1
        if self._tasks % self._renewal == 0:
            gc.unfreeze()
        else:
            gc.freeze()


# Only where the daemon collects after every task: it does with worker reuse, which it
# learns from this variable; elsewhere (a test calling ``read_part``, no reuse) nothing
# changes in how the process collects.
freeze_survivors = SurvivorFreeze(enabled=bool(os.environ.get("SPARK_REUSE_WORKER")))


def worker(endpoint: str | None, clock: AsyncClock | None = None) -> Worker:
    worker = workers.get(endpoint)
    if worker is None:
        loop = LoopThread("eoclient-spark-read")
        clock = clock or SystemClock()
        worker = workers[endpoint] = Worker(loop, open_client(endpoint, clock), clock)
    return worker


def close_workers() -> None:
    """Close this process's read-task clients and keepers (for tests: a worker process just
    exits)."""
    for worker in workers.values():

        async def close(worker: Worker = worker) -> None:
            await worker.ahead.close()
            await worker.settles.close()
            for keeper in worker.keepers.values():
                await keeper.close()
            await worker.client.aclose()

        with contextlib.suppress(Exception):
            worker.loop.run(close(), timeout=10)
        worker.loop.close()
    workers.clear()


def read_ahead_key(settings: SourceSettings) -> tuple[str, str]:
    """Which read-aheads a task may adopt: its journal's and subscription's."""
    return (settings.journal_path, settings.subscription)


def fault_hook(settings: SourceSettings) -> Callable[[str], Awaitable[None]] | None:
    """``fault_point`` for the worker's loop (in a thread: the loop must not block)."""
    spec, directory = settings.fault_points, settings.fault_dir
    if not spec or not directory:
        return None

    async def hook(name: str) -> None:
        await asyncio.to_thread(fault_point, name, spec, directory)

    return hook
