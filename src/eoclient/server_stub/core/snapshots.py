"""Snapshots and seek (docs/protocol.md#seek-and-snapshots).

A snapshot records the subscription's unacknowledged messages at creation and the topic's
position (the last seq published); what the topic publishes afterwards stays in the
store's topic log while a snapshot of the topic pins it. A seek rebuilds the
subscription's delivery state (``SubscriptionDelivery.reset``): to a time, from what the
subscription retains (unacked and retained acked messages); to a snapshot, from the
snapshot's messages and the topic log after its position. Snapshots expire 7 days after
the oldest message they retain and are removed by the broker's ``tick`` (or on access).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from eoclient._clock import Clock
from eoclient.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from eoclient.server_stub.core import names
from eoclient.server_stub.core.ack_ids import new_uid
from eoclient.server_stub.core.labels import check as labels_check
from eoclient.server_stub.core.model import (
    SNAPSHOT_LIFETIME,
    SNAPSHOT_MIN_LIFETIME,
    Page,
    SnapshotView,
)
from eoclient.server_stub.core.policies import SeekOutcome
from eoclient.server_stub.core.publishing import Publishing
from eoclient.server_stub.core.resources import Resources
from eoclient.server_stub.core.store import SnapshotRecord, Store


def _view(record: SnapshotRecord) -> SnapshotView:
    return SnapshotView(record.name, record.topic, record.expire_time, dict(record.labels))


class Snapshots:
    """Snapshots by name, and seek."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        store: Store,
        resources: Resources,
        publishing: Publishing,
        changed: Callable[[str], None],
        deleted: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._store = store
        self._resources = resources
        self._publishing = publishing  # the topic position a snapshot records
        self._changed = changed
        self._deleted = deleted  # a deleted resource's name (its IAM policy goes with it)
        self.records: dict[str, SnapshotRecord] = {}

    def restore(self, records: Sequence[SnapshotRecord]) -> None:
        self.records.update((record.name, record) for record in records)

    def create(
        self, name: str, subscription: str, labels: Mapping[str, str] | None = None
    ) -> SnapshotView:
        """Capture the subscription's unacked backlog and the topic's position.

        ``name`` may be empty (gRPC): the server assigns one in the subscription's project.
        The snapshot expires 7 days after the oldest message it retains (now when there
        is none); refused with FAILED_PRECONDITION when that is less than an hour away.
        """
        now = self._clock.now()
        self.expire(now)
        if not name:
            project, _ = names.parse(subscription, "subscriptions")
            name = f"projects/{project}/snapshots/snapshot-{self._rng.getrandbits(64):016x}"
        names.parse(name, "snapshots")
        labels_check(labels or {})
        if not subscription:
            raise InvalidArgument("The snapshot's subscription must be set.")
        if name in self.records:
            raise AlreadyExists("Snapshot already exists")
        source = self._resources.subscription(subscription)
        source.delivery.advance(now)
        oldest = source.delivery.reads.oldest_unacked()
        oldest = now if oldest is None else oldest
        expire_time = oldest + SNAPSHOT_LIFETIME
        if expire_time - now < SNAPSHOT_MIN_LIFETIME:
            age = now - oldest
            raise FailedPrecondition(
                f"The snapshot cannot be created: the oldest unacknowledged message of "
                f"{subscription} was published {age / 3600:.1f} h ago, so the snapshot would "
                "expire within an hour (a snapshot expires 7 days after the oldest message it "
                "retains)."
            )
        record = SnapshotRecord(
            name,
            source.config.topic,
            expire_time,
            dict(labels or {}),
            self._publishing.last_seq,
        )
        self.records[name] = record
        self._store.put_snapshot(record, subscription, source.delivery.reads.held())
        return _view(record)

    def expire(self, now: float) -> None:
        for name in [n for n, s in self.records.items() if s.expire_time <= now]:
            self._drop(name)

    def _drop(self, name: str) -> None:
        del self.records[name]
        self._store.snapshots.delete(name)

    def _snapshot(self, name: str) -> SnapshotRecord:
        names.parse(name, "snapshots")
        self.expire(self._clock.now())
        record = self.records.get(name)
        if record is None:
            raise NotFound(f"Resource not found (resource={names.short_id(name)}).")
        return record

    def get(self, name: str) -> SnapshotView:
        return _view(self._snapshot(name))

    def list(self, project: str, page_size: int, page_token: str) -> Page[SnapshotView]:
        project_id = names.parse_project(project)
        self.expire(self._clock.now())
        prefix = f"projects/{project_id}/snapshots/"
        matching = sorted(n for n in self.records if n.startswith(prefix))
        page, token = names.paginate(matching, page_size, page_token)
        return Page(tuple(_view(self.records[n]) for n in page), token)

    def list_for_topic(self, topic: str, page_size: int, page_token: str) -> Page[str]:
        self._resources.topic(topic)
        self.expire(self._clock.now())
        matching = sorted(n for n, s in self.records.items() if s.topic == topic)
        page, token = names.paginate(matching, page_size, page_token)
        return Page(tuple(page), token)

    def update(self, snapshot: SnapshotView, paths: Sequence[str]) -> SnapshotView:
        """Apply ``labels`` and/or ``expire_time`` (field-mask paths) from ``snapshot``."""
        record = self._snapshot(snapshot.name)
        if not paths:
            raise InvalidArgument("The update_mask in the UpdateSnapshotRequest must be set.")
        labels, expire_time = record.labels, record.expire_time
        for path in paths:
            if path == "labels":
                labels = dict(snapshot.labels)
                labels_check(labels)
            elif path == "expire_time":
                if snapshot.expire_time <= self._clock.now():
                    raise InvalidArgument(
                        "Invalid update_mask provided in the UpdateSnapshotRequest: the "
                        "expire_time must be in the future."
                    )
                expire_time = snapshot.expire_time
            else:
                raise InvalidArgument(
                    f"Invalid update_mask provided in the UpdateSnapshotRequest: {path!r} is "
                    "not an updatable Snapshot field (labels, expire_time)."
                )
        record = replace(record, labels=labels, expire_time=expire_time)
        self.records[record.name] = record
        self._store.snapshots.update(record)
        return _view(record)

    def delete(self, name: str) -> None:
        self._snapshot(name)
        self._drop(name)
        self._deleted(name)

    # ================================================================== seek

    def seek(
        self, name: str, *, time: float | None = None, snapshot: str | None = None
    ) -> SeekOutcome:
        """Seek to a time (retained messages published before it acked, the others
        unacked; a future time purges) or to a snapshot (its ack state).

        Every ack id issued before is invalid afterwards, and every message left
        unacked is delivered again. A seek to a time replays what the subscription keeps
        and what its topic's retention policy keeps (policies.py); the outcome says how
        far back that reached.
        """
        outcome = SeekOutcome(None, complete=True)
        subscription = self._resources.subscription(name)
        now = self._clock.now()
        delivery = subscription.delivery
        delivery.advance(now)
        if snapshot:
            record = self._snapshot(snapshot)
            if record.topic != subscription.config.topic:
                raise FailedPrecondition(
                    f"The snapshot {snapshot} retains messages of topic {record.topic}, but "
                    f"the subscription {name} is attached to topic "
                    f"{subscription.config.topic}: they must be the same topic."
                )
            current = delivery.reads.unacked() + delivery.reads.retained()
            target = dict(self._store.snapshots.messages(snapshot))
            for seq, message in self._store.snapshots.topic_log(record.topic, record.position):
                if subscription.filter is None or subscription.filter.matches(message.attributes):
                    target[seq] = message
            unacked = list(target.items())
            acked = [(seq, m) for seq, m in current if seq not in target]
        elif time is not None:
            available = dict(delivery.reads.unacked() + delivery.reads.retained())
            cursor = self._resources.retention_cursor(subscription.config.topic)
            # A detached subscription is cut off from its topic: nothing of the topic's
            # is replayed into a backlog no one can pull.
            if cursor is not None and not subscription.config.detached:
                cursor.delivery.advance(now)
                matches = subscription.filter.matches if subscription.filter else None
                for seq, message in cursor.delivery.reads.unacked():
                    if seq not in available and (matches is None or matches(message.attributes)):
                        available[seq] = message
            unacked = [(seq, m) for seq, m in available.items() if m.publish_time >= time]
            acked = [(seq, m) for seq, m in available.items() if m.publish_time < time]
            oldest = min((m.publish_time for m in available.values()), default=None)
            outcome = SeekOutcome(oldest, complete=oldest is None or time >= oldest)
        else:
            raise InvalidArgument("The seek target must be set: a time or a snapshot.")
        delivery.reset(new_uid(self._rng), unacked, acked, now)
        self._resources.touch(subscription, now)
        self._changed(name)
        return outcome
