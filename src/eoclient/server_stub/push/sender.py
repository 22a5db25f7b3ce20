"""Push delivery: the async shell that POSTs push subscriptions' messages.

It leases from the broker exactly as a subscriber does (``broker.leasing.pull``, then
``broker.acks.acknowledge`` on a success, ``modify_ack_deadline(0)`` on a failure, lease extensions
while a message is held), so every rule of the core applies unchanged to push: ack
deadlines, retry-policy backoff after a nack, dead-letter topics and their delivery
attempts, ordering keys, filters, seek. What is push's own — the window, the push
backoff, one message in flight per ordering key — is decided by ``flow.PushFlow``
(pure); the HTTP formats are ``payload``'s.

Shape: ``run()`` owns one aiohttp session and one TaskGroup; in it, one worker task per
push subscription (started when a scan or a broker notification finds one, ended when
the subscription is deleted, detached or switched to pull) and one task per push in
flight. ``run()`` ends only when cancelled (the server's ``stop``), which ends them all.
A push that meets a bug is logged and counted as a failure; it never stops the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from eoclient._clock import Clock
from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError
from eoclient.server_stub.core import Broker, Delivery
from eoclient.server_stub.push.flow import PushFlow, PushSettings
from eoclient.server_stub.push.payload import (
    SUCCESS_STATUSES,
    PushTarget,
    push_request,
    push_target,
)

logger = logging.getLogger("eoclient.server_stub.push")

# What leaves a subscription passes through its message transforms first: given the
# subscription and what was leased, the deliveries to send (transforms/stage.py settles
# the ones filtered out or failed).
Deliver = Callable[[str, list[Delivery]], Awaitable[list[Delivery]]]

# A worker looks at its subscription (config, leases, backoff) at least this often, so a
# FakeClock advanced by a test or a config changed by UpdateSubscription is noticed.
MAX_IDLE_SECONDS = 0.25
# Push subscriptions that exist but have had no news (created with a backlog by seek,
# switched from pull by ModifyPushConfig, loaded at start-up) are found by a scan this often.
SCAN_INTERVAL_SECONDS = 1.0


@dataclass
class PushMetrics:
    """What one push subscription's deliveries did (cumulative since the server started)."""

    attempts: int = 0
    successes: int = 0
    failures: int = 0
    timeouts: int = 0
    connection_errors: int = 0
    statuses: Counter[int] = field(default_factory=Counter)  # HTTP status -> count
    window: int = 0  # the current push window
    in_flight: int = 0
    held: int = 0  # in flight, or leased and waiting behind an earlier message of their key
    backoff_until: float = 0.0  # no push before this time (clock seconds); 0: none
    last_error: str = ""


@dataclass
class _Settings:
    target: PushTarget
    ack_deadline: int
    ordered: bool
    has_retry_policy: bool


@dataclass(eq=False)
class _Worker:
    name: str
    flow: PushFlow
    settings: _Settings
    metrics: PushMetrics
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    deliveries: dict[str, Delivery] = field(default_factory=dict)


class PushSender:
    """Pushes the messages of every push subscription of one broker."""

    def __init__(
        self,
        broker: Broker,
        clock: Clock,
        settings: PushSettings | None = None,
        deliver: Deliver | None = None,
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.settings = settings or PushSettings()
        self._deliver = deliver
        self._workers: dict[str, _Worker] = {}
        self._metrics: dict[str, PushMetrics] = {}
        self._scan_now = asyncio.Event()
        self._tasks: asyncio.TaskGroup | None = None
        self._http: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------- public

    def notify(self, subscription: str) -> None:
        """The broker may have something new for ``subscription`` (its listener)."""
        worker = self._workers.get(subscription)
        if worker is not None:
            worker.wake.set()
        else:
            self._scan_now.set()

    def metrics(self, subscription: str) -> PushMetrics:
        """The push counters of ``subscription`` (zeros if it never pushed)."""
        return self._metrics.get(subscription) or PushMetrics()

    def pushing(self) -> list[str]:
        """The subscriptions being pushed now."""
        return sorted(self._workers)

    async def run(self) -> None:
        """Push until cancelled."""
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(timeout=timeout) as http, asyncio.TaskGroup() as tasks:
            self._http, self._tasks = http, tasks
            try:
                while True:
                    self._scan()
                    self._scan_now.clear()
                    await _wait(self._scan_now, SCAN_INTERVAL_SECONDS)
            finally:
                self._http = self._tasks = None

    # ----------------------------------------------------------- workers

    def _scan(self) -> None:
        assert self._tasks is not None
        for name in self.broker.subscriptions.visible_names():
            if name in self._workers:
                continue
            settings = self._settings(name)
            if settings is None:
                continue
            metrics = self._metrics.setdefault(name, PushMetrics())
            worker = _Worker(name, PushFlow(self.settings), settings, metrics)
            self._workers[name] = worker
            self._tasks.create_task(self._work(worker), name=f"push:{name}")

    def _settings(self, name: str) -> _Settings | None:
        """The subscription's push settings; None if it is gone, detached or pull."""
        try:
            view = self.broker.subscriptions.get(name)
        except RpcError:
            return None
        config = view.config
        if config.detached or not config.extras:
            return None
        target = push_target(pubsub_pb2.Subscription.FromString(config.extras).push_config)
        if target is None:
            return None
        return _Settings(
            target,
            config.ack_deadline_seconds,
            config.enable_message_ordering,
            config.retry_policy is not None,
        )

    async def _work(self, worker: _Worker) -> None:
        try:
            while True:
                worker.wake.clear()
                settings = self._settings(worker.name)
                if settings is None:
                    return
                worker.settings = settings
                now = self.clock.now()
                self._extend_leases(worker, now)
                room = worker.flow.room(now)
                if room:
                    try:
                        leased = self.broker.leasing.pull(worker.name, room)
                    except RpcError:
                        return  # deleted, detached: the next scan decides
                    if self._deliver is not None and leased:
                        leased = await self._deliver(worker.name, leased)
                    self._admit(worker, leased, now)
                self._observe(worker)
                await self._idle(worker)
        finally:
            del self._workers[worker.name]
            released = worker.flow.forget()
            self._release(worker, released)

    async def _idle(self, worker: _Worker) -> None:
        now = self.clock.now()
        delay = MAX_IDLE_SECONDS
        wakeup = worker.flow.next_wakeup(now)
        if wakeup is not None:
            delay = min(delay, max(wakeup - now, 0.001))
        await _wait(worker.wake, delay)

    def _admit(self, worker: _Worker, leased: list[Delivery], now: float) -> None:
        assert self._tasks is not None
        items = []
        for delivery in leased:
            worker.deliveries[delivery.ack_id] = delivery
            key = delivery.message.ordering_key if worker.settings.ordered else ""
            items.append((delivery.ack_id, key))
        for ack_id in worker.flow.admit(items, now, worker.settings.ack_deadline):
            self._tasks.create_task(self._push(worker, ack_id))

    def _extend_leases(self, worker: _Worker, now: float) -> None:
        by_seconds: dict[int, list[str]] = {}
        for ack_id, seconds in worker.flow.leases_to_extend(now):
            by_seconds.setdefault(int(seconds), []).append(ack_id)
        for seconds, ack_ids in by_seconds.items():
            with contextlib.suppress(RpcError):
                self.broker.acks.modify_ack_deadline(worker.name, ack_ids, seconds)

    def _release(self, worker: _Worker, ack_ids: list[str] | tuple[str, ...]) -> None:
        """Nack: the broker redelivers them (after the retry policy's backoff, if any)."""
        for ack_id in ack_ids:
            worker.deliveries.pop(ack_id, None)
        if ack_ids:
            with contextlib.suppress(RpcError):
                self.broker.acks.modify_ack_deadline(worker.name, list(ack_ids), 0)

    def _observe(self, worker: _Worker) -> None:
        metrics = worker.metrics
        metrics.window = worker.flow.window
        metrics.in_flight = worker.flow.in_flight
        metrics.held = worker.flow.outstanding
        metrics.backoff_until = worker.flow.not_before

    # -------------------------------------------------------------- pushes

    async def _push(self, worker: _Worker, ack_id: str) -> None:
        delivery = worker.deliveries[ack_id]
        settings = worker.settings
        metrics = worker.metrics
        metrics.attempts += 1
        ok = False
        try:
            ok = await self._post(settings, worker.name, delivery, metrics)
        except Exception:  # a bug here must not stop the other pushes
            logger.exception("push of %s to %s failed", ack_id, settings.target.endpoint)
            metrics.last_error = "internal error (logged)"
        now = self.clock.now()
        worker.deliveries.pop(ack_id, None)
        if ok:
            metrics.successes += 1
            with contextlib.suppress(RpcError):
                self.broker.acks.acknowledge(worker.name, [ack_id])
            assert self._tasks is not None
            for following in worker.flow.succeeded(ack_id, now):
                self._tasks.create_task(self._push(worker, following))
        else:
            metrics.failures += 1
            failure = worker.flow.failed(ack_id, now, backoff=not settings.has_retry_policy)
            with contextlib.suppress(RpcError):
                self.broker.acks.modify_ack_deadline(worker.name, [ack_id], 0)
            self._release(worker, failure.released)
        self._observe(worker)
        worker.wake.set()

    async def _post(
        self, settings: _Settings, name: str, delivery: Delivery, metrics: PushMetrics
    ) -> bool:
        assert self._http is not None
        body, headers = push_request(settings.target, name, delivery, self.clock.now())
        # The endpoint has the ack deadline to answer (Pub/Sub: "the push endpoint must
        # respond within the acknowledgement deadline").
        timeout = aiohttp.ClientTimeout(total=settings.ack_deadline)
        try:
            async with self._http.post(
                settings.target.endpoint, data=body, headers=headers, timeout=timeout
            ) as response:
                await response.read()
                status = response.status
        except TimeoutError:
            metrics.timeouts += 1
            metrics.last_error = f"no answer within the ack deadline ({settings.ack_deadline} s)"
            return False
        except aiohttp.ClientError as error:
            metrics.connection_errors += 1
            metrics.last_error = f"{type(error).__name__}: {error}"
            return False
        metrics.statuses[status] += 1
        if status not in SUCCESS_STATUSES:
            metrics.last_error = f"HTTP {status}"
            return False
        return True


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Until ``event`` is set or ``seconds`` pass (no helper task, unlike ``wait_for``:
    tests count the tasks a server leaves)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
