"""The broker: the whole service as rooms over one ``Store``, and the time they share.

Every public method reads the injected clock once and runs to completion without
awaiting; adapters call it from one thread (the event loop). Errors are raised as
``eoclient.errors.RpcError`` subclasses carrying the status the wire must return.

The services reach each room through its attribute, never through a forwarding method:

* ``topics``, ``subscriptions`` — each kind's CRUD, update masks and Pulsar-style
  policies, over one registry of both (``resources``);
* ``publishing`` — Publish fan-out, backlog quotas, dead letters, skip by id;
* ``leasing`` — Pull and StreamingPull streams, flow control and the lease limit;
* ``acks`` — Acknowledge and ModifyAckDeadline, the exactly-once rules;
* ``snapshots`` — snapshots and seek;
* ``schemas`` and ``iam`` — the schema registry and IAM policies;
* ``delivery`` (inside each subscription) — its backlog, leases, ordering keys and
  policies;
* ``store`` — where all of it is kept (``MemoryStore`` by default; a durable store is
  passed in and its state is loaded here).

The broker itself adds what spans the rooms: time (``tick``: leases, backoffs,
retention, expiration), the listener told of news, and inspection for tests, metrics and
the dashboard.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from eoclient._clock import Clock
from eoclient.server_stub.core.acks import Acks
from eoclient.server_stub.core.delivery import SubscriptionDelivery
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.iam import IamPolicies, resource_kind
from eoclient.server_stub.core.leasing import DEFAULT_MAX_LEASES, Leasing
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.publishing import Publishing
from eoclient.server_stub.core.resources import Resources
from eoclient.server_stub.core.schemas import SchemaRegistry
from eoclient.server_stub.core.snapshots import Snapshots
from eoclient.server_stub.core.stats import BrokerStats, collect_stats
from eoclient.server_stub.core.store import Store
from eoclient.server_stub.core.subscriptions import Subscriptions
from eoclient.server_stub.core.topics import Topics


class Broker:
    """The whole service state. Pure apart from the injected clock, random source and store."""

    def __init__(
        self,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        on_change: Callable[[str], None] | None = None,
        record_history: bool = True,
        store: Store | None = None,
        max_leases: int = DEFAULT_MAX_LEASES,
    ) -> None:
        if store is None:
            from eoclient.server_stub.storage.memory import MemoryStore

            store = MemoryStore()
        self._clock = clock
        rng = rng or random.Random()  # seeded from os.urandom: ack ids differ across runs
        self._on_change = on_change
        self.store = store
        self.history = History(enabled=record_history)
        changed = self._changed
        # A deleted resource's IAM policy goes with it: a new one of the same name
        # starts without one.
        self.iam = IamPolicies(store, self._iam_resource_exists)
        forget = self.iam.forget
        self._resources = Resources(clock, rng, store, self._forwarder, changed)
        self.topics = Topics(clock, store, self._resources, forget)
        self.subscriptions = Subscriptions(clock, rng, store, self._resources, changed, forget)
        self.publishing = Publishing(clock, store, self._resources, self.history, changed)
        self.leasing = Leasing(clock, self._resources, self.history, max_leases)
        self.acks = Acks(clock, self._resources, self.history, changed)
        self.snapshots = Snapshots(
            clock, rng, store, self._resources, self.publishing, changed, forget
        )
        self.schemas = SchemaRegistry(store, rng, clock, forget)
        state = store.load()
        self.publishing.restored(state.last_seq)
        self._resources.restore(state)
        self.snapshots.restore(state.snapshots)
        self.iam.restore(state.documents)
        self.schemas.restore(state.documents)

    def __repr__(self) -> str:
        return (
            f"<Broker [{len(self._resources.topics)} topics, "
            f"{len(self._resources.subscriptions)} subscriptions, "
            f"{self.leasing.open_streams()} streams] {self.store!r}>"
        )

    def set_listener(self, on_change: Callable[[str], None] | None) -> None:
        """Called with a subscription name whenever it may have something new to deliver."""
        self._on_change = on_change

    def _changed(self, subscription: str) -> None:
        if self._on_change is not None:
            self._on_change(subscription)

    def _forwarder(self, subscription: str) -> Callable[[StoredMessage, int], bool]:
        # The registry builds deliveries before publishing exists: bind late.
        def forward(message: StoredMessage, delivery_count: int) -> bool:
            return self.publishing.forwarder(subscription)(message, delivery_count)

        return forward

    # ================================================================== time

    def tick(self) -> None:
        """Process expired leases, elapsed backoffs, retention and expiration policies;
        notify subscriptions with news."""
        now = self._clock.now()
        idle: list[str] = []
        for name, subscription in self._resources.subscriptions.items():
            if self._resources.expires_at(subscription, now) <= now:
                idle.append(name)
                continue
            wakeup = subscription.delivery.next_wakeup()
            if wakeup is not None and wakeup <= now:
                subscription.delivery.advance(now)
                # A retention cursor is never delivered from: no news for anyone.
                internal = subscription.config.internal
                if not internal and subscription.delivery.has_deliverable(now):
                    self._changed(name)
        for name in idle:
            self._resources.remove_subscription(name)
        self.snapshots.expire(now)
        if idle or self.iam.policies:  # expired resources lose their policies
            self.iam.forget_missing(self._iam_resources())
        self.store.collect_garbage()

    def next_wakeup(self) -> float | None:
        """The earliest time ``tick`` has work to do (None: nothing scheduled)."""
        now = self._clock.now()
        times: list[float] = []
        for subscription in self._resources.subscriptions.values():
            wakeup = subscription.delivery.next_wakeup()
            if wakeup is not None:
                times.append(wakeup)
            expires = self._resources.expires_at(subscription, now)
            if expires != float("inf"):
                times.append(expires)
        times.extend(snapshot.expire_time for snapshot in self.snapshots.records.values())
        return min(times) if times else None

    def has_deliverable(self, name: str) -> bool:
        subscription = self._resources.subscriptions.get(name)
        if subscription is None:
            return False
        return subscription.delivery.has_deliverable(self._clock.now())

    # ============================================================ introspection

    def delivery_state(self, name: str) -> SubscriptionDelivery:
        """The subscription's delivery state with due expiries and retention processed
        (they are otherwise processed lazily, at the next call that needs them)."""
        delivery = self._resources.subscription(name).delivery
        delivery.advance(self._clock.now())
        return delivery

    def backlog(self, name: str) -> int:
        """Messages of the subscription not acknowledged yet (waiting or outstanding)."""
        return self.delivery_state(name).reads.backlog()

    def counters(self, name: str) -> Mapping[str, int]:
        counters = self.delivery_state(name).counters
        return {
            "delivered": counters.delivered,
            "acked": counters.acked,
            "nacked": counters.nacked,
            "expired": counters.expired,
            "dead_lettered": counters.dead_lettered,
            "filtered": counters.filtered,
            "discarded": counters.discarded,
            "skipped": counters.skipped,
            "evicted": counters.evicted,
            "expired_by_ttl": counters.expired_by_ttl,
        }

    def stats(self) -> BrokerStats:
        """Every topic's and subscription's counters and backlog, read without changing
        anything (``stats.py``; the reference server's ``/metrics``)."""
        return collect_stats(self._resources, self._clock.now())

    def peek(self, name: str, limit: int) -> list[tuple[StoredMessage, bool]]:
        """The subscription's oldest ``limit`` unacknowledged messages and whether each is
        leased now, without leasing or changing anything (the dashboard's peek)."""
        return self._resources.subscription(name).delivery.reads.peek(limit)

    def retained_acked(self, name: str) -> list[StoredMessage]:
        """Acknowledged messages the subscription keeps (retain_acked_messages), oldest first."""
        return [m for _, m in self.delivery_state(name).reads.retained()]

    # ================================================================ IAM

    def _iam_resources(self) -> list[str]:
        """Every resource that may have an IAM policy."""
        return [
            *self._resources.topics,
            *self.subscriptions.visible_names(),
            *self.snapshots.records,
            *self.schemas.schemas,
        ]

    def _iam_resource_exists(self, resource: str) -> bool:
        kind = resource_kind(resource)
        if kind == "topics":
            return resource in self._resources.topics
        if kind == "subscriptions":
            subscription = self._resources.subscriptions.get(resource)
            return subscription is not None and not subscription.config.internal
        if kind == "snapshots":
            return resource in self.snapshots.records
        return self.schemas.exists(resource)
