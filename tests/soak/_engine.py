"""An exactly-once soak: many messages, several subscriber clients, everything failing.

``run_soak`` pre-publishes ``SoakPlan.messages`` to an exactly-once subscription of a
reference server (a ``ServerThread``), plans ack faults on some of them (transient ones,
which the client retries to SUCCESS, and permanent ones, which it reports and the server
redelivers when the lease ends), and consumes them with ``SoakPlan.subscribers``
``SubscriberClient``s whose handlers fail now and then (the message is nacked), while
every open StreamingPull is dropped by the server every ``drop_interval`` seconds. It
returns when the subscription's backlog is empty.

The invariants (``SoakReport.violations``):

* **no delivery after SUCCESS**: on the clients, no handler starts on a message after an
  ack of it returned SUCCESS; on the server (its history), no delivery of a message after
  the ack it applied, and exactly one applied ack per message;
* **nothing lost**: every published message was delivered, and acknowledged (the
  backlog is empty and each message has its applied ack).

It also counts what the issue asks: acks that ended OTHER because the stream carrying
them broke before its confirmation arrived (the client re-sends them by unary call and
finds them settled: it cannot tell whether its own ack did it, so it does not say SUCCESS).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import eoclient
from eoclient.pytest_plugin.server_thread import ServerThread
from eoclient.server_stub.server import ReferenceServer

T = TypeVar("T")

TOPIC = "projects/soak/topics/soak"
SUBSCRIPTION = "projects/soak/subscriptions/soak"
PUBLISH_BATCH = 1000
# The OTHER a client reports for an ack whose stream broke before the confirmation came,
# when its unary retry finds the id already settled (subscriber/acker.py).
LOST_CONFIRMATION = "an earlier attempt may have been applied"
# Leases of 10 s (the minimum): a message whose ack failed permanently comes back soon.
LEASE = eoclient.LeaseSettings(min_extension=10, max_extension=10)
STREAM = eoclient.StreamSettings(stream_ack_deadline=10)


@dataclass(frozen=True)
class SoakPlan:
    messages: int = 50_000
    subscribers: int = 4
    drop_interval: float = 1.0  # seconds between drops of every open stream
    transient_fault_rate: float = 0.005  # messages whose first 2 acks fail transiently
    permanent_fault_rate: float = 0.002  # messages whose first ack fails permanently
    handler_failure_rate: float = 0.01  # messages whose first handler raises (nacked)
    seed: int = 13
    timeout: float = 300.0  # seconds for the consumption to finish
    check_server_history: bool = True


@dataclass
class SoakReport:
    plan: SoakPlan
    published: int = 0
    deliveries: int = 0
    handler_failures: int = 0
    stream_drops: int = 0
    streams_dropped: int = 0
    transient_faults: int = 0
    permanent_faults: int = 0
    results: collections.Counter[str] = field(default_factory=collections.Counter)
    permanent_seen: int = 0  # acks that ended with a permanent failure (not applied)
    other_lost_confirmation: int = 0
    other_reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)

    @property
    def redeliveries(self) -> int:
        return self.deliveries - self.published

    def summary(self) -> str:
        rate = self.published / self.seconds if self.seconds else 0.0
        return (
            f"{self.published:,} messages, {self.plan.subscribers} subscribers, "
            f"{self.seconds:.1f} s ({rate:,.0f} msg/s); {self.deliveries:,} deliveries "
            f"({self.redeliveries:,} redeliveries); {self.stream_drops} drops of every stream "
            f"({self.streams_dropped} streams); faults planned: {self.transient_faults} "
            f"transient, {self.permanent_faults} permanent; {self.handler_failures} handler "
            f"failures; ack results {dict(self.results)}; OTHER from lost confirmations: "
            f"{self.other_lost_confirmation}; violations: {len(self.violations)}"
        )


class _Log:
    """Client-side events in one order (a counter): deliveries and ack results."""

    def __init__(self) -> None:
        self.clock = itertools.count()
        self.delivered: dict[str, list[int]] = collections.defaultdict(list)
        self.first_success: dict[str, int] = {}
        self.failed_once: set[str] = set()


def _chosen(message_id: str, salt: str, rate: float, seed: int) -> bool:
    """A deterministic draw per message (no shared RNG state between tasks)."""
    return zlib.crc32(f"{seed}:{salt}:{message_id}".encode()) % 1_000_000 < rate * 1_000_000


class _HandlerFailure(Exception):
    """A handler's planned failure (the client nacks the message)."""


async def run_soak(server: ServerThread, plan: SoakPlan) -> SoakReport:
    report = SoakReport(plan)
    async with eoclient.AdminClient(server.address) as admin:
        await admin.create_topic(TOPIC)
        await admin.create_subscription(
            SUBSCRIPTION, TOPIC, enable_exactly_once_delivery=True, ack_deadline_seconds=10
        )
    ids = await _publish(server.address, plan.messages)
    report.published = len(ids)
    _plan_faults(server, ids, plan, report)
    log = _Log()
    started = time.monotonic()
    quiet = logging.getLogger("eoclient.subscriber")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # each planned handler failure logs a traceback
    try:
        await _consume(server, plan, report, log)
    finally:
        quiet.setLevel(level)
    report.seconds = time.monotonic() - started
    report.deliveries = sum(len(events) for events in log.delivered.values())
    report.handler_failures = len(log.failed_once)
    _check_clients(ids, log, report)
    if plan.check_server_history:
        server.call(lambda s: _check_server(s, ids, report), timeout=600)
    return report


async def _publish(address: str, count: int) -> list[str]:
    ids: list[str] = []
    async with eoclient.PublisherClient(address) as publisher:
        for start in range(0, count, PUBLISH_BATCH):
            futures = [
                publisher.publish_nowait(TOPIC, f"m{n}".encode())
                for n in range(start, min(start + PUBLISH_BATCH, count))
            ]
            ids.extend(await asyncio.gather(*futures))
    return ids


def _plan_faults(server: ServerThread, ids: list[str], plan: SoakPlan, report: SoakReport) -> None:
    transient = [m for m in ids if _chosen(m, "transient", plan.transient_fault_rate, plan.seed)]
    permanent = [
        m
        for m in ids
        if _chosen(m, "permanent", plan.permanent_fault_rate, plan.seed) and m not in transient
    ]

    def inject(s: ReferenceServer) -> None:
        for message_id in transient:
            s.inject_ack_failure(
                SUBSCRIPTION, message_id, "TRANSIENT_FAILURE_OTHER", times=2, operations=("ack",)
            )
        for message_id in permanent:
            s.inject_ack_failure(
                SUBSCRIPTION, message_id, "PERMANENT_FAILURE_OTHER", times=1, operations=("ack",)
            )

    server.call(inject, timeout=60)
    report.transient_faults, report.permanent_faults = len(transient), len(permanent)


async def _consume(server: ServerThread, plan: SoakPlan, report: SoakReport, log: _Log) -> None:
    async def handler(message: eoclient.Message) -> None:
        message_id = message.message_id
        log.delivered[message_id].append(next(log.clock))
        if message_id not in log.failed_once and _chosen(
            message_id, "handler", plan.handler_failure_rate, plan.seed
        ):
            log.failed_once.add(message_id)
            raise _HandlerFailure(message_id)
        message.ack()
        result = await message.ack_result()
        report.results[result.status.name] += 1
        if result.status is eoclient.AcknowledgeStatus.INVALID_ACK_ID or (
            result.status is eoclient.AcknowledgeStatus.OTHER
            and result.info.startswith("PERMANENT_FAILURE")
        ):
            report.permanent_seen += 1
        if result.status is eoclient.AcknowledgeStatus.SUCCESS:
            log.first_success.setdefault(message_id, next(log.clock))
        elif result.status is eoclient.AcknowledgeStatus.OTHER:
            if result.info.startswith(LOST_CONFIRMATION):
                report.other_lost_confirmation += 1
            else:
                report.other_reasons[result.info[:80]] += 1

    clients = [eoclient.SubscriberClient(server.address) for _ in range(plan.subscribers)]
    async with contextlib.AsyncExitStack() as stack:
        for client in clients:
            await stack.enter_async_context(client)
        async with asyncio.TaskGroup() as group:
            runs = [
                group.create_task(client.run(SUBSCRIPTION, handler, lease=LEASE, stream=STREAM))
                for client in clients
            ]
            dropper = group.create_task(_drop_streams(server, plan, report))
            try:
                await asyncio.wait_for(_drained(server), plan.timeout)
            except TimeoutError:
                backlog = server.call(lambda s: s.broker.backlog(SUBSCRIPTION))
                report.violations.append(
                    f"not drained after {plan.timeout} s: {backlog} messages still unacked"
                )
            finally:
                for task in (*runs, dropper):
                    task.cancel()


async def _drop_streams(server: ServerThread, plan: SoakPlan, report: SoakReport) -> None:
    while True:
        await asyncio.sleep(plan.drop_interval)
        dropped = await _on_server(server, lambda s: s.drop_streams("UNAVAILABLE"))
        report.stream_drops += 1
        report.streams_dropped += dropped


async def _drained(server: ServerThread) -> None:
    # Polled: the backlog lives on the server's loop, in another thread.
    while await _on_server(server, lambda s: s.broker.backlog(SUBSCRIPTION)):  # noqa: ASYNC110
        await asyncio.sleep(0.2)


async def _on_server(server: ServerThread, function: Callable[[ReferenceServer], T]) -> T:
    return await asyncio.to_thread(server.call, function)


def _check_clients(ids: list[str], log: _Log, report: SoakReport) -> None:
    for message_id in ids:
        deliveries = log.delivered.get(message_id)
        if not deliveries:
            report.violations.append(f"{message_id}: never delivered")
            continue
        success = log.first_success.get(message_id)
        late = [seq for seq in deliveries if success is not None and seq > success]
        if late:
            report.violations.append(
                f"{message_id}: delivered {len(late)} time(s) after an ack returned SUCCESS"
            )


def _check_server(server: ReferenceServer, ids: list[str], report: SoakReport) -> None:
    backlog = server.broker.backlog(SUBSCRIPTION)
    if backlog:
        report.violations.append(f"server: {backlog} messages still unacked")
    for message_id in ids:
        history = server.history(SUBSCRIPTION, message_id)
        applied = history.successful_acks
        if len(applied) != 1:
            report.violations.append(f"{message_id}: {len(applied)} acks applied by the server")
            continue
        late = [d for d in history.deliveries if d.time > applied[0].time]
        if late:
            report.violations.append(f"{message_id}: delivered after the server applied its ack")


def summary_lines(report: SoakReport) -> list[str]:
    lines = [report.summary()]
    lines += [f"  OTHER ({count}): {reason}" for reason, count in report.other_reasons.items()]
    lines += [f"  violation: {v}" for v in report.violations[:20]]
    return lines
