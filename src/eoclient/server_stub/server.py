"""The reference server as a program and as a test instrument.

``async with run_server() as srv`` starts the gRPC door on 127.0.0.1, port 0 by
default, and the REST/JSON door (``srv.rest_address``, another free port unless
``rest_port`` says otherwise; ``None``: no REST) over one fresh broker, and stops
them on exit. Tests reach into ``srv``: the
broker (``srv.broker``), per-RPC fault injection (``srv.faults``), per-message ack
failures (``srv.inject_ack_failure``), dropped streams (``srv.drop_streams``),
history of deliveries/acks/modacks (``srv.history``), and time: pass a
``FakeClock`` and call ``srv.tick()`` after advancing it.

``run_server(data_dir=...)`` (and ``eoclient serve --data-dir``) keep the state in a
``SqliteStore``: it survives a restart or a crash, and nothing is answered before it is
committed (``group_commit``).

Export subscriptions are delivered by the server (``exports/``): Cloud Storage objects go
to the Cloud Storage JSON API at ``STORAGE_EMULATOR_HOST`` when it is set, else into bucket
directories (``buckets_dir``; default ``<data_dir>/buckets``, else a temporary directory
removed when the block ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from prometheus_client.registry import Collector

from eoclient._clock import Clock, SystemClock
from eoclient._tasks import TaskOwner, cancel_and_wait
from eoclient.server_stub.access.security import DoorSecurity, exposure_warnings
from eoclient.server_stub.bigquery import BigQueryStandIn
from eoclient.server_stub.bigquery.page import BigQueryPage
from eoclient.server_stub.buckets import BucketStore, open_bucket_store
from eoclient.server_stub.core import Broker
from eoclient.server_stub.core.history import MessageHistory
from eoclient.server_stub.core.leasing import DEFAULT_MAX_LEASES
from eoclient.server_stub.doors.grpc.door import GrpcDoor
from eoclient.server_stub.doors.rest.door import RestDoor
from eoclient.server_stub.exports import ExportRunner
from eoclient.server_stub.exports.bigquery import bigquery_workers
from eoclient.server_stub.exports.metrics import ExportCollector
from eoclient.server_stub.group_commit import GroupCommit
from eoclient.server_stub.ingestion import IngestedObjects, Ingestion
from eoclient.server_stub.ingestion.cloud_storage import DEFAULT_POLL_INTERVAL
from eoclient.server_stub.ingestion.metrics import IngestionCollector
from eoclient.server_stub.observe.dashboard.site import Dashboard
from eoclient.server_stub.observe.metrics import ServerMetrics
from eoclient.server_stub.push import PushSender
from eoclient.server_stub.services.faults import InjectedStatus, RpcFaults
from eoclient.server_stub.services.open_streams import StreamRegistry
from eoclient.server_stub.services.table import EdgeStates, Services
from eoclient.server_stub.transforms import TransformLimits

logger = logging.getLogger("eoclient.server_stub")

# Publish requests may be 10 MB (plus framing): accept up to 32 MiB.
MAX_RECEIVE_BYTES = 32 * 2**20
# The ticker wakes at the next lease deadline or backoff, and at least this often
# (so a FakeClock advanced by a test is noticed without an explicit tick()).
MAX_TICK_INTERVAL = 0.25


@dataclass(frozen=True)
class EdgeRooms:
    """The rooms at the server's edge that it starts and stops with itself: import topics
    (``ingestion``), export subscriptions (``exports``), and what they read and write: the
    bucket store (``buckets``) and the BigQuery stand-in (``bigquery``; None: BigQuery
    subscriptions wait in NOT_FOUND)."""

    ingestion: Ingestion
    exports: ExportRunner | None = None
    buckets: BucketStore | None = None
    bigquery: BigQueryStandIn | None = None


class ReferenceServer:
    def __init__(
        self,
        broker: Broker,
        clock: Clock,
        edge: EdgeRooms | None = None,
        security: DoorSecurity | None = None,
        transform_limits: TransformLimits | None = None,
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.security = security or DoorSecurity()
        self.faults = RpcFaults()
        self.streams = StreamRegistry(self.security.stream_limits)
        self.group_commit = GroupCommit(broker.store)
        edge = edge or EdgeRooms(Ingestion(broker, clock))
        # Import topics are fed by the server itself (``ingestion/``), export subscriptions
        # delivered by it (``exports/``); the services ask them for their states.
        self.ingestion = edge.ingestion
        self.exports = edge.exports
        self.buckets = edge.buckets  # where Cloud Storage exports write, ingestion reads
        # BigQuery subscriptions write to the stand-in (through the export runner);
        # /eoclient/bigquery/ serves it (bigquery/).
        self.bigquery = edge.bigquery
        self.services = Services(
            broker,
            self.faults,
            self.group_commit,
            self.security.tokens,
            transform_limits,
            EdgeStates(
                self.ingestion,
                self.exports.fill_states if self.exports is not None else None,
                self.bigquery,
            ),
            self.streams,
        )
        # Push subscriptions are delivered by the server itself (``push/``).
        self.push = PushSender(broker, clock, deliver=self.services.transforms.deliver)
        if self.exports is not None:
            # What an export leases passes through the subscription's transforms first.
            self.exports.deliver = self.services.transforms.deliver
        broker.set_listener(self._notify)
        # /metrics on the REST door (observe/metrics.py), with the message transforms', the
        # import topics' and the exports' series.
        self.metrics = ServerMetrics(broker, self._collectors, transforms=self.services.transforms)
        # / on the REST door (observe/dashboard/); it reads the edge rooms' states.
        self.dashboard = Dashboard(self.services, clock, edge)
        self.bigquery_page = BigQueryPage(lambda: self.bigquery)
        self.host = ""
        self.port = 0
        self.rest_port: int | None = None
        self._grpc: grpc.aio.Server | None = None
        self._rest: web.AppRunner | None = None
        # The server's own tasks, from start to stop: the commit loop, the ticker, the push
        # sender, the ingestion loop, the export runner, the dashboard's sampler.
        self._tasks = TaskOwner()
        self._running: dict[str, asyncio.Task[None]] = {}

    def _collectors(self, projects: frozenset[str] | None) -> list[Collector]:
        """The series of the edge rooms, for a grant's projects (None: every project)."""
        collectors: list[Collector] = [IngestionCollector(self.ingestion, projects)]
        if self.exports is not None:
            collectors.append(ExportCollector(self.exports, projects))
        return collectors

    def _notify(self, subscription: str) -> None:
        """The broker has messages for ``subscription``: wake whoever waits for them."""
        self.streams.notify(subscription)
        self.services.subscriber.notify(subscription)
        self.push.notify(subscription)
        if self.exports is not None:
            self.exports.notify(subscription)

    def __repr__(self) -> str:
        return f"<ReferenceServer {self.address} {self.broker!r}>"

    @property
    def address(self) -> str:
        """``host:port`` — what PUBSUB_EMULATOR_HOST should be set to."""
        return f"{self.host}:{self.port}"

    @property
    def rest_address(self) -> str:
        """``host:port`` of the REST/JSON door (RuntimeError if it is not served)."""
        if self.rest_port is None:
            raise RuntimeError("the reference server is not serving REST/JSON")
        return f"{self.host}:{self.rest_port}"

    @property
    def rest_url(self) -> str:
        """``http(s)://host:port`` of the REST/JSON door (its paths start with ``/v1/``)."""
        return f"{self.security.rest_scheme}://{self.rest_address}"

    async def start(self, host: str, port: int, rest_port: int | None = 0) -> None:
        """Serve gRPC on ``port`` and REST/JSON on ``rest_port`` (0: any free port;
        ``None``: no REST door). Port 0 for gRPC picks a free port too."""
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers(GrpcDoor(self.services).generic_handlers())
        try:
            bound = self.security.add_grpc_port(server, f"{host}:{port}")
        except RuntimeError:  # grpc raises this for an address in use
            bound = 0
        if bound == 0:
            raise OSError(
                f"could not bind the reference server to {host}:{port} "
                "(is the port in use? --port 0 picks a free one)"
            )
        await self._tasks.open()
        self._spawn("group-commit", self.group_commit.run)
        await server.start()
        self._grpc = server
        self.host, self.port = host, bound
        if rest_port is not None:
            try:
                self.rest_port = await self._start_rest(host, rest_port)
            except BaseException:
                await self.stop(0)
                raise
        self._spawn("ticker", self._tick_forever)
        self._spawn("push", self.push.run)
        self._spawn("ingestion", lambda: self.ingestion.run(self.services))
        if self.exports is not None:
            self._spawn("exports", self.exports.run)
        self._spawn("dashboard", self.dashboard.sample_forever)
        for warning in exposure_warnings(host, self.security):
            logger.warning("eoclient reference server: %s", warning)

    async def _start_rest(self, host: str, port: int) -> int:
        # gRPC (HTTP/2) and HTTP/1.1 cannot share grpc.aio's port: REST gets its own.
        policy = self.security.browser.with_host(host)
        pages = (self.metrics, self.dashboard, self.bigquery_page)
        runner = RestDoor(self.services, policy, pages).runner()
        await runner.setup()
        self._rest = runner
        site = web.TCPSite(runner, host, port, ssl_context=self.security.rest_ssl_context())
        await site.start()
        sockname = runner.addresses[0]
        return int(sockname[1])

    def _spawn(self, name: str, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = self._tasks.spawn(_logged(name, work), name=f"reference-server-{name}")
        if task is not None:
            self._running[name] = task

    async def stop(self, grace: float | None = 1.0) -> None:
        running = self._running
        # Pushes in flight end (their leases lapse).
        await cancel_and_wait(running.pop("push", None))
        # The object under way is ingested first (bounded).
        await self.ingestion.finish(running.pop("ingestion", None))
        # Batches being filled are given back (their messages wait in the subscription).
        await cancel_and_wait(running.pop("exports", None))
        await cancel_and_wait(running.pop("ticker", None))
        await cancel_and_wait(running.pop("dashboard", None))
        if self._rest is not None:
            await self._rest.cleanup()
            self._rest = None
            self.rest_port = None
        if self._grpc is not None:
            # Open streams end with UNAVAILABLE, which clients treat as "reconnect".
            self.drop_streams("UNAVAILABLE", "The reference server is shutting down.")
            await self._grpc.stop(grace)
            self._grpc = None
        await self.group_commit.aclose()  # the commit in flight first
        running.clear()
        await self._tasks.close()
        self.group_commit.commit()  # what the last calls changed, answered or not
        self.services.transforms.close()  # the UDFs' isolates and threads

    async def _tick_forever(self) -> None:
        while True:
            try:
                self.broker.tick()
            except Exception:  # a bug: logged, and the next tick tries again
                logger.exception("the reference server's ticker failed")
            # Changes nobody waits for (expiries, streaming acks without exactly-once,
            # activity clocks) are committed here, at least every MAX_TICK_INTERVAL.
            self.group_commit.commit_pending()
            wakeup = self.broker.next_wakeup()
            delay = MAX_TICK_INTERVAL
            if wakeup is not None:
                delay = min(delay, max(wakeup - self.clock.now(), 0.001))
            await asyncio.sleep(delay)

    # ------------------------------------------------------- instrument

    def tick(self) -> None:
        """Process expired leases and backoffs now (after advancing a FakeClock)."""
        self.broker.tick()

    def drop_streams(self, code: str = "UNAVAILABLE", message: str = "") -> int:
        """End every open StreamingPull with ``code``; returns how many were dropped."""
        text = message or f"stream dropped by fault injection ({code})"
        return self.streams.drop_all(InjectedStatus(code, text))

    def open_streams(self) -> int:
        return self.streams.count()

    def inject_ack_failure(
        self,
        subscription: str,
        message_id: str,
        reason: str,
        *,
        times: int = 1,
        operations: Iterable[str] = ("ack", "modack"),
    ) -> None:
        self.broker.acks.inject_failure(
            subscription, message_id, reason, times=times, operations=operations
        )

    def history(self, subscription: str, message_id: str) -> MessageHistory:
        return self.broker.history.of(subscription, message_id)


@contextlib.asynccontextmanager
async def run_server(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    clock: Clock | None = None,
    record_history: bool = True,
    rest_port: int | None = 0,
    data_dir: str | os.PathLike[str] | None = None,
    security: DoorSecurity | None = None,
    max_leases: int = DEFAULT_MAX_LEASES,
    buckets_dir: str | os.PathLike[str] | None = None,
    bigquery_db: str | os.PathLike[str] | None = None,
    transform_limits: TransformLimits | None = None,
    ingestion_poll_interval: float = DEFAULT_POLL_INTERVAL,
) -> AsyncIterator[ReferenceServer]:
    """Run a reference server for the duration of the block (REST too unless ``rest_port``
    is None); durable in ``data_dir`` when given (``StoreError`` if it cannot be used).

    Cloud Storage exports and import topics use the Cloud Storage JSON API at
    ``STORAGE_EMULATOR_HOST`` when it is set, else the bucket directories of ``buckets_dir``
    (default: ``<data_dir>/buckets``, else a temporary directory removed at the end of the
    block); ``srv.buckets`` is the store, and ``ingestion_poll_interval`` how often import
    topics list their buckets. BigQuery subscriptions write to the DuckDB stand-in
    ``bigquery_db`` when given (``srv.bigquery``); without it they wait in NOT_FOUND."""
    clock = clock or SystemClock()
    store = None
    if data_dir is not None:
        from eoclient.server_stub.storage.sqlite import SqliteStore

        store = SqliteStore(data_dir)
    with contextlib.ExitStack() as scratch:
        try:
            if buckets_dir is None:
                buckets_dir = (
                    Path(data_dir) / "buckets"
                    if data_dir is not None
                    else scratch.enter_context(
                        tempfile.TemporaryDirectory(prefix="eoclient-buckets-")
                    )
                )
            buckets = open_bucket_store(buckets_dir)
            broker = Broker(
                clock, record_history=record_history, store=store, max_leases=max_leases
            )
            bigquery = None
            if bigquery_db is not None:
                bigquery = BigQueryStandIn(bigquery_db, clock=clock)
                scratch.callback(bigquery.close)
            exports = ExportRunner(
                broker,
                clock,
                buckets,
                work_dir=Path(data_dir) / "exports" if data_dir is not None else None,
                durable=data_dir is not None,
                bigquery=bigquery_workers(bigquery) if bigquery is not None else None,
            )
            ingestion = Ingestion(
                broker,
                clock,
                buckets,
                IngestedObjects.in_directory(data_dir),
                ingestion_poll_interval,
            )
            edge = EdgeRooms(ingestion, exports, buckets, bigquery)
            server = ReferenceServer(broker, clock, edge, security, transform_limits)
            try:
                await server.start(host, port, rest_port)
                try:
                    yield server
                finally:
                    await server.stop()
            finally:
                await buckets.aclose()
        finally:
            if store is not None:
                store.close()


async def _logged(name: str, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run one of the server's own tasks; a failure (a bug) is logged, and never reaches
    the task group (which would cancel whoever started the server)."""
    try:
        await work()
    except Exception:
        logger.exception("the reference server's %s task failed", name)
