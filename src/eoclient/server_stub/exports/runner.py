"""The export runner: one worker per export subscription, next to the push sender at the
server's edge (docs/architecture.md#rooms-of-the-server).

``run()`` owns one TaskGroup: a scan that finds export subscriptions (created, updated,
restored at start-up, switched from pull) and starts a worker for each, the workers, and the
writes they start. A worker ends when its subscription is deleted, detached or no longer that
kind of export; ``run()`` ends only when cancelled (the server's ``stop``), which ends them
all: batches being filled are given back (nacked), and a durable server's journals give back
what a crash left leased when it starts again (``journal``).

What the rest of the server sees: ``notify`` (the broker's listener: a subscription may have
messages), ``fill_states`` (the services' hook that sets the output-only ``state`` of a
config as GetSubscription, ListSubscriptions, CreateSubscription and UpdateSubscription
answer it), ``status`` / ``statuses`` (``/metrics`` and the dashboard).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from eoclient._clock import Clock
from eoclient._proto import pubsub_pb2
from eoclient.server_stub.buckets import BucketError, BucketStore
from eoclient.server_stub.core import Broker
from eoclient.server_stub.exports import journal
from eoclient.server_stub.exports.cloud_storage import CloudStorageWorker
from eoclient.server_stub.exports.context import (
    Deliver,
    ExportContext,
    deliver_unchanged,
    export_config,
    export_kind,
)
from eoclient.server_stub.exports.status import (
    ACTIVE,
    BIGQUERY,
    CLOUD_STORAGE,
    NOT_FOUND,
    ExportStatus,
)

logger = logging.getLogger("eoclient.server_stub.exports")

# Export subscriptions that exist but had no news (restored at start-up, switched by an
# update) are found by a scan this often.
SCAN_INTERVAL_SECONDS = 1.0
# GetSubscription and ListSubscriptions report a destination's state as it is when they
# answer (a bucket or table removed a moment ago shows at once): looked at within this long.
STATE_FRESH_SECONDS = 0.0


class Worker(Protocol):
    kind: str
    name: str
    status: ExportStatus
    wake: asyncio.Event

    async def run(self) -> None: ...

    async def refresh(self, now: float, fresh_for: float = 0.0) -> None:
        """Look at the destination (its state) now, unless it was looked at within
        ``fresh_for`` seconds with the settings the subscription has now."""
        ...


# A worker for one BigQuery subscription (``exports/bigquery.py``), when the server has the
# BigQuery stand-in.
WorkerFactory = Callable[[ExportContext, str, ExportStatus], Worker]


class ExportRunner:
    """Exports the export subscriptions of one broker."""

    def __init__(
        self,
        broker: Broker,
        clock: Clock,
        buckets: BucketStore,
        *,
        work_dir: Path | None = None,
        durable: bool = False,
        bigquery: WorkerFactory | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.buckets = buckets
        self.work_dir = work_dir
        self.durable = durable and work_dir is not None
        self._bigquery = bigquery
        self._random = rng or random.Random()
        self._workers: dict[str, Worker] = {}
        self._statuses: dict[str, ExportStatus] = {}
        self._scan_now = asyncio.Event()
        self._context: ExportContext | None = None
        # The subscriptions' message transforms (the server sets it: transforms/).
        self.deliver: Deliver = deliver_unchanged

    # ------------------------------------------------------------- public

    def notify(self, subscription: str) -> None:
        worker = self._workers.get(subscription)
        if worker is not None:
            worker.wake.set()
        else:
            self._scan_now.set()

    def status(self, subscription: str) -> ExportStatus | None:
        return self._statuses.get(subscription)

    def statuses(self) -> list[ExportStatus]:
        return [self._statuses[name] for name in sorted(self._statuses)]

    def exporting(self) -> list[str]:
        return sorted(self._workers)

    async def fill_states(self, subscription: pubsub_pb2.Subscription) -> None:
        """Set the ``state`` of ``subscription``'s export config (the services' hook)."""
        kind = export_kind(subscription)
        if kind is None:
            return
        state = await self._state(subscription.name, kind)
        if kind == CLOUD_STORAGE:
            config = subscription.cloud_storage_config
            config.state = pubsub_pb2.CloudStorageConfig.State.Value(state)  # type: ignore[assignment]
        else:
            bigquery = subscription.bigquery_config
            bigquery.state = pubsub_pb2.BigQueryConfig.State.Value(state)  # type: ignore[assignment]

    async def _state(self, name: str, kind: str) -> str:
        if self._context is None:  # not running (a Services without a server)
            return ACTIVE
        worker = self._workers.get(name)
        if worker is None or worker.kind != kind:
            worker = self._start(name, kind)
        if worker is None:  # a BigQuery export on a server without a stand-in
            status = self._statuses.get(name)
            return status.state if status is not None else ACTIVE
        with contextlib.suppress(BucketError):
            await worker.refresh(self.clock.now(), STATE_FRESH_SECONDS)
        return worker.status.state

    async def run(self) -> None:
        """Export until cancelled."""
        with contextlib.ExitStack() as stack:
            work_dir = self.work_dir
            if work_dir is None:
                work_dir = Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="eoclient-exports-"))
                )
            work_dir.mkdir(parents=True, exist_ok=True)
            async with asyncio.TaskGroup() as tasks:
                self._context = ExportContext(
                    self.broker,
                    self.clock,
                    self.buckets,
                    work_dir,
                    self.durable,
                    tasks,
                    self._random,
                    self.deliver,
                )
                try:
                    self._release_leftovers(work_dir)
                    while True:
                        self._scan()
                        self._scan_now.clear()
                        await _wait(self._scan_now, SCAN_INTERVAL_SECONDS)
                finally:
                    self._context = None

    # ------------------------------------------------------------ workers

    def _release_leftovers(self, work_dir: Path) -> None:
        """Give back what batches of a server killed on this directory held, and remove
        their files (docs/protocol.md#exports-after-a-crash)."""
        assert self._context is not None
        for path, subscription, ack_ids in journal.leftovers(work_dir):
            if subscription and ack_ids:
                self._context.give_back(subscription, ack_ids)
            path.unlink(missing_ok=True)
        for part in work_dir.glob("*.part"):
            part.unlink(missing_ok=True)

    def _scan(self) -> None:
        for name in self.broker.subscriptions.visible_names():
            if name in self._workers:
                continue
            config = export_config(self.broker, name)
            if config is not None:
                self._start(name, config.kind)

    def _start(self, name: str, kind: str) -> Worker | None:
        context = self._context
        if context is None:
            return None
        status = self._statuses.get(name)
        if status is None or status.kind != kind:
            status = self._statuses[name] = ExportStatus(name, kind)
        worker: Worker
        if kind == CLOUD_STORAGE:
            worker = CloudStorageWorker(context, name, status)
        elif kind == BIGQUERY and self._bigquery is not None:
            worker = self._bigquery(context, name, status)
        else:
            status.set_state(NOT_FOUND, "this server has no BigQuery stand-in", self.clock.now())
            return None
        previous = self._workers.get(name)
        if previous is not None:
            previous.wake.set()  # it sees the new kind and ends
        self._workers[name] = worker
        context.tasks.create_task(self._work(worker), name=f"export:{name}")
        return worker

    async def _work(self, worker: Worker) -> None:
        try:
            await worker.run()
        except Exception:  # a bug in one export must not stop the others
            logger.exception("export of %s failed; it starts again at the next scan", worker.name)
        finally:
            if self._workers.get(worker.name) is worker:
                del self._workers[worker.name]
            if export_config(self.broker, worker.name) is None:
                self._statuses.pop(worker.name, None)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


StateHook = Callable[[pubsub_pb2.Subscription], Awaitable[None]]
