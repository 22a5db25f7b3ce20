"""The broker: the whole service behind one small facade, over a ``Store``.

Every public method reads the injected clock once and runs to completion without
awaiting; adapters call it from one thread (the event loop). Errors are raised as
``eoclient.errors.RpcError`` subclasses carrying the status the wire must return.

The rooms behind the facade:

* ``resources`` — topics and subscriptions, their validation and field-mask updates;
* ``dispatch`` — publish fan-out, pull and streams, acks and modacks, dead letters
  (the exactly-once rules are there);
* ``snapshots`` — snapshots and seek;
* ``delivery`` — one subscription's backlog, leases, ordering keys and policies;
* ``store`` — where all of it is kept (``MemoryStore`` by default; a durable store is
  passed in and its state is loaded here).

The facade adds time (``tick``: leases, backoffs, retention, expiration) and inspection.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence

from eoclient._clock import Clock
from eoclient.errors import InvalidArgument, NotFound
from eoclient.server_stub.core import validation
from eoclient.server_stub.core.delivery import SubscriptionDelivery
from eoclient.server_stub.core.dispatch import DEFAULT_MAX_LEASES, Dispatch
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.iam import Policy, PolicyRoom, resource_kind
from eoclient.server_stub.core.model import (
    AckReply,
    Delivery,
    NewMessage,
    Page,
    SnapshotView,
    StoredMessage,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
    TopicView,
)
from eoclient.server_stub.core.policies import (
    SeekOutcome,
    SkipOutcome,
    SubscriptionPolicies,
    SubscriptionPolicyCounters,
    TopicPolicies,
    TopicPolicyCounters,
)
from eoclient.server_stub.core.resources import Resources
from eoclient.server_stub.core.schemas import SchemaRevision, SchemaRoom
from eoclient.server_stub.core.snapshots import Snapshots
from eoclient.server_stub.core.stats import BrokerStats, collect_stats
from eoclient.server_stub.core.store import Store
from eoclient.server_stub.core.update_mask import MergeExtras


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
        self._resources = Resources(clock, rng, store, self._forwarder, self._changed)
        self._dispatch = Dispatch(
            clock, store, self._resources, self.history, self._changed, max_leases
        )
        self._snapshots = Snapshots(
            clock, rng, store, self._resources, self._dispatch, self._changed
        )
        state = store.load()
        self._dispatch.last_seq = state.last_seq
        self._resources.restore(state)
        self._snapshots.restore(state.snapshots)
        # issue 14: schemas and IAM (the section at the end of this class)
        self._iam = PolicyRoom(store)
        self._iam.restore(state.documents)
        self._schemas = SchemaRoom(store, rng)
        self._schemas.restore(state.documents)

    def __repr__(self) -> str:
        return (
            f"<Broker [{len(self._resources.topics)} topics, "
            f"{len(self._resources.subscriptions)} subscriptions, "
            f"{self._dispatch.open_streams()} streams] {self.store!r}>"
        )

    def set_listener(self, on_change: Callable[[str], None] | None) -> None:
        """Called with a subscription name whenever it may have something new to deliver."""
        self._on_change = on_change

    def _changed(self, subscription: str) -> None:
        if self._on_change is not None:
            self._on_change(subscription)

    def _forwarder(self, subscription: str) -> Callable[[StoredMessage, int], bool]:
        # Resources builds deliveries before dispatch exists: bind late.
        def forward(message: StoredMessage, delivery_count: int) -> bool:
            return self._dispatch.forwarder(subscription)(message, delivery_count)

        return forward

    # ================================================================ topics

    def create_topic(self, config: TopicConfig) -> TopicView:
        return self._resources.create_topic(config)

    def get_topic(self, name: str) -> TopicView:
        return TopicView(self._resources.topic(name).config)

    def update_topic(
        self, config: TopicConfig, paths: Sequence[str], merge_extras: MergeExtras | None = None
    ) -> TopicView:
        return self._resources.update_topic(config, paths, merge_extras)

    def list_topics(self, project: str, page_size: int, page_token: str) -> Page[TopicView]:
        return self._resources.list_topics(project, page_size, page_token)

    def list_topic_subscriptions(self, topic: str, page_size: int, page_token: str) -> Page[str]:
        return self._resources.list_topic_subscriptions(topic, page_size, page_token)

    def delete_topic(self, name: str) -> None:
        self._resources.delete_topic(name)
        self._iam.forget(name)  # issue 14: a new topic of this name starts without a policy

    # ========================================================= subscriptions

    def create_subscription(self, config: SubscriptionConfig) -> SubscriptionView:
        return self._resources.create_subscription(config)

    def get_subscription(self, name: str) -> SubscriptionView:
        self._resources.subscription(name)
        return self._resources.view(name)

    def update_subscription(
        self,
        config: SubscriptionConfig,
        paths: Sequence[str],
        merge_extras: MergeExtras | None = None,
    ) -> SubscriptionView:
        return self._resources.update_subscription(config, paths, merge_extras)

    def list_subscriptions(
        self, project: str, page_size: int, page_token: str
    ) -> Page[SubscriptionView]:
        return self._resources.list_subscriptions(project, page_size, page_token)

    def delete_subscription(self, name: str) -> None:
        self._resources.delete_subscription(name)
        self._iam.forget(name)  # issue 14

    def detach_subscription(self, name: str) -> None:
        self._resources.detach_subscription(name)

    def subscription_exists(self, name: str) -> bool:
        return name in self._resources.subscriptions

    def subscription_properties(self, name: str) -> tuple[bool, bool]:
        """(exactly_once_delivery_enabled, message_ordering_enabled)."""
        config = self._resources.subscription(name).config
        return config.enable_exactly_once_delivery, config.enable_message_ordering

    # ======================================================== publish / pull

    def publish(
        self, topic_name: str, messages: Sequence[NewMessage], request_bytes: int = 0
    ) -> list[str]:
        return self._dispatch.publish(topic_name, messages, request_bytes)

    def pull(
        self,
        name: str,
        max_messages: int,
        *,
        max_bytes: int = validation.MAX_PULL_RESPONSE_BYTES,
    ) -> list[Delivery]:
        return self._dispatch.pull(name, max_messages, max_bytes=max_bytes)

    def open_stream(
        self,
        name: str,
        *,
        stream_ack_deadline: int,
        max_outstanding_messages: int = 0,
        max_outstanding_bytes: int = 0,
    ) -> int:
        return self._dispatch.open_stream(
            name,
            stream_ack_deadline=stream_ack_deadline,
            max_outstanding_messages=max_outstanding_messages,
            max_outstanding_bytes=max_outstanding_bytes,
        )

    def set_stream_ack_deadline(self, stream_id: int, seconds: int) -> None:
        self._dispatch.set_stream_ack_deadline(stream_id, seconds)

    def stream_pull(self, stream_id: int, max_messages: int = 1000) -> list[Delivery]:
        return self._dispatch.stream_pull(stream_id, max_messages)

    def close_stream(self, stream_id: int) -> None:
        self._dispatch.close_stream(stream_id)

    def stream_subscription(self, stream_id: int) -> str | None:
        return self._dispatch.stream_subscription(stream_id)

    def acknowledge(self, name: str, ack_ids: Sequence[str]) -> AckReply:
        return self._dispatch.acknowledge(name, ack_ids)

    def modify_ack_deadline(self, name: str, ack_ids: Sequence[str], seconds: int) -> AckReply:
        return self._dispatch.modify_ack_deadline(name, ack_ids, seconds)

    # ============================================================= snapshots

    def create_snapshot(
        self, name: str, subscription: str, labels: Mapping[str, str] | None = None
    ) -> SnapshotView:
        return self._snapshots.create(name, subscription, labels)

    def get_snapshot(self, name: str) -> SnapshotView:
        return self._snapshots.get(name)

    def list_snapshots(self, project: str, page_size: int, page_token: str) -> Page[SnapshotView]:
        return self._snapshots.list(project, page_size, page_token)

    def list_topic_snapshots(self, topic: str, page_size: int, page_token: str) -> Page[str]:
        return self._snapshots.list_for_topic(topic, page_size, page_token)

    def update_snapshot(self, snapshot: SnapshotView, paths: Sequence[str]) -> SnapshotView:
        return self._snapshots.update(snapshot, paths)

    def delete_snapshot(self, name: str) -> None:
        self._snapshots.delete(name)
        self._iam.forget(name)  # issue 14

    def seek(
        self, name: str, *, time: float | None = None, snapshot: str | None = None
    ) -> SeekOutcome:
        return self._snapshots.seek(name, time=time, snapshot=snapshot)

    # ======================================================= Pulsar-style policies

    def skip_messages(
        self, subscription: str, message_ids: Sequence[str]
    ) -> dict[str, SkipOutcome]:
        """Acknowledge chosen messages on ``subscription`` (PIP-423); the outcome of each id."""
        return self._dispatch.skip_messages(subscription, message_ids)

    def get_topic_policies(self, topic: str) -> TopicPolicies:
        return self._resources.topic(topic).config.policies

    def set_topic_policies(self, topic: str, policies: TopicPolicies) -> TopicPolicies:
        """Replace the topic's retention, backlog quota and message TTL (policies.py)."""
        return self._resources.set_topic_policies(topic, policies).config.policies

    def get_subscription_policies(self, subscription: str) -> SubscriptionPolicies:
        return self._resources.subscription(subscription).config.policies

    def set_subscription_policies(
        self, subscription: str, policies: SubscriptionPolicies
    ) -> SubscriptionPolicies:
        view = self._resources.set_subscription_policies(subscription, policies)
        return view.config.policies

    def note_held_publish(self, topic: str, *, admitted: bool) -> None:
        """The door held a Publish on a HOLD backlog quota (for the counters)."""
        self._dispatch.note_held_publish(topic, admitted=admitted)

    def subscription_policy_counters(self, subscription: str) -> SubscriptionPolicyCounters:
        now = self._clock.now()
        delivery = self.delivery_state(subscription)
        counters = delivery.counters
        return SubscriptionPolicyCounters(
            skipped=counters.skipped,
            evicted=counters.evicted,
            expired_by_ttl=counters.expired_by_ttl,
            delayed_pending=delivery.delayed_pending(now),
            backlog_messages=delivery.backlog(),
            backlog_bytes=delivery.backlog_bytes(),
            oldest_unacked_publish_time=delivery.oldest_unacked(),
        )

    def topic_policy_counters(self, topic: str) -> TopicPolicyCounters:
        state = self._resources.topic(topic)
        cursor = self._resources.retention_cursor(topic)
        retained = cursor.delivery if cursor is not None else None
        if retained is not None:
            retained.advance(self._clock.now())
        return TopicPolicyCounters(
            held_publishes=state.counters.held_publishes,
            held_then_refused=state.counters.held_then_refused,
            refused_publishes=state.counters.refused_publishes,
            retained_messages=retained.backlog() if retained else 0,
            retained_bytes=retained.backlog_bytes() if retained else 0,
            oldest_retained_publish_time=retained.oldest_unacked() if retained else None,
        )

    # ============================================================ fault injection

    def inject_ack_failure(
        self,
        subscription: str,
        message_id: str,
        reason: str,
        *,
        times: int = 1,
        operations: Iterable[str] = ("ack", "modack"),
    ) -> None:
        """Make the next ``times`` acks/modacks of a message fail with ``reason`` (-1: always).

        ``reason`` is an ErrorInfo metadata value such as ``TRANSIENT_FAILURE_OTHER`` or
        ``PERMANENT_FAILURE_OTHER``; a failed request is not applied.
        """
        self._dispatch.inject_ack_failure(
            subscription, message_id, reason, times=times, operations=operations
        )

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
        self._snapshots.expire(now)
        if idle or self._iam.policies:  # issue 14: expired resources lose their policies
            self._iam.forget_missing(self._iam_resources())
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
        times.extend(snapshot.expire_time for snapshot in self._snapshots.records.values())
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
        return self.delivery_state(name).backlog()

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
        return self._resources.subscription(name).delivery.peek(limit)

    def retained_acked(self, name: str) -> list[StoredMessage]:
        """Acknowledged messages the subscription keeps (retain_acked_messages), oldest first."""
        return [m for _, m in self.delivery_state(name).retained()]

    # ---- schemas and IAM (issue 14)

    def subscription_names(self) -> list[str]:
        """Every subscription a client sees (push delivery scans them for push configs)."""
        return [n for n, s in self._resources.subscriptions.items() if not s.config.internal]

    def _iam_resources(self) -> list[str]:
        """Every resource that may have an IAM policy."""
        return [
            *self._resources.topics,
            *(n for n, s in self._resources.subscriptions.items() if not s.config.internal),
            *self._snapshots.records,
            *self._schemas.schemas,
        ]

    def _iam_resource(self, resource: str) -> str:
        """Check that ``resource`` names an existing resource (InvalidArgument, NotFound)."""
        kind = resource_kind(resource)
        if kind == "topics":
            exists = resource in self._resources.topics
        elif kind == "subscriptions":
            subscription = self._resources.subscriptions.get(resource)
            exists = subscription is not None and not subscription.config.internal
        elif kind == "snapshots":
            exists = resource in self._snapshots.records
        else:
            exists = self._schemas.exists(resource)
        if not exists:
            raise NotFound(f"Resource not found (resource={resource.rsplit('/', 1)[-1]}).")
        return kind

    def get_iam_policy(self, resource: str, requested_version: int = 0) -> Policy:
        self._iam_resource(resource)
        return self._iam.get(resource, requested_version)

    def set_iam_policy(
        self, resource: str, policy: Policy, update_mask: Sequence[str] = ()
    ) -> Policy:
        self._iam_resource(resource)
        return self._iam.set(resource, policy, update_mask)

    def test_iam_permissions(
        self, resource: str, permissions: Sequence[str], member: str | None = None
    ) -> list[str]:
        """The subset of ``permissions`` ``member`` holds (None: the local administrator)."""
        self._iam_resource(resource)
        return self._iam.test(resource, permissions, member)

    def create_schema(
        self, parent: str, schema_id: str, kind: str, definition: str
    ) -> SchemaRevision:
        """A new schema (``kind``: AVRO or PROTOCOL_BUFFER) with its first revision."""
        return self._schemas.create(parent, schema_id, kind, definition, self._clock.now())

    def get_schema(self, name: str) -> SchemaRevision:
        """The newest revision, or the one ``name@revision_id`` names."""
        return self._schemas.get(name)

    def list_schemas(self, parent: str, page_size: int, page_token: str) -> Page[SchemaRevision]:
        return self._schemas.list_schemas(parent, page_size, page_token)

    def list_schema_revisions(
        self, name: str, page_size: int, page_token: str
    ) -> Page[SchemaRevision]:
        """Newest first."""
        return self._schemas.list_revisions(name, page_size, page_token)

    def commit_schema(self, name: str, kind: str, definition: str) -> SchemaRevision:
        return self._schemas.commit(name, kind, definition, self._clock.now())

    def rollback_schema(self, name: str, revision_id: str) -> SchemaRevision:
        return self._schemas.rollback(name, revision_id, self._clock.now())

    def delete_schema_revision(self, name: str, revision_id: str = "") -> SchemaRevision:
        return self._schemas.delete_revision(name, revision_id)

    def delete_schema(self, name: str) -> None:
        self._schemas.delete(name)
        self._iam.forget(name.partition("@")[0])

    def schema_exists(self, name: str) -> bool:
        return self._schemas.exists(name)

    def schema_revision_range(self, name: str, first: str, last: str) -> list[SchemaRevision]:
        """The revisions a topic bound to ``name`` from ``first`` to ``last`` accepts."""
        return self._schemas.revision_range(name, first, last)

    def check_schema_message(
        self, name: str, data: bytes, encoding: str, first: str = "", last: str = ""
    ) -> SchemaRevision:
        """The revision ``data`` matches (the newest in range); ``SchemaError`` if none."""
        return self._schemas.check_message(name, data, encoding, first, last)

    @staticmethod
    def validate_schema_definition(kind: str, definition: str) -> None:
        """ValidateSchema: InvalidArgument unless ``definition`` compiles."""
        SchemaRoom.compiled(kind, definition)

    @staticmethod
    def check_message_against_definition(
        kind: str, definition: str, data: bytes, encoding: str
    ) -> None:
        """ValidateMessage with an inline schema: SchemaError if ``data`` does not match."""
        codec = SchemaRoom.compiled(kind, definition)
        if encoding not in ("JSON", "BINARY"):
            raise InvalidArgument("No encoding provided (JSON or BINARY).")
        codec.check(data, encoding)
