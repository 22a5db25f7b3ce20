"""``MemoryStore``: the broker's state in the process, gone when it exits.

The core keeps every unacknowledged message in memory (``window`` is None), so this store
holds only what the core hands over: retained acknowledged messages, snapshots' messages
and topic logs. Resource and backlog changes need nothing kept here, and ``commit`` has
nothing to do.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence

from eoclient.server_stub.core.model import StoredMessage, TopicConfig
from eoclient.server_stub.core.store import (
    Acked,
    BacklogRow,
    SeqMessage,
    SnapshotRecord,
    StoredState,
    SubscriptionRecord,
)


class RetainedAcked:
    """Acknowledged messages kept for replay (retain_acked_messages), oldest first out.

    ``_heap`` orders (publish_time, seq) so pruning by retention costs O(log n) per
    message whatever order the acks came in; ``_messages`` holds the bodies by seq.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._messages: dict[int, StoredMessage] = {}

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, seq: int, message: StoredMessage) -> None:
        self._messages[seq] = message
        heapq.heappush(self._heap, (message.publish_time, seq))

    def prune(self, cutoff: float) -> None:
        """Forget every message published at or before ``cutoff``."""
        while self._heap and self._heap[0][0] <= cutoff:
            _, seq = heapq.heappop(self._heap)
            self._messages.pop(seq, None)

    def oldest(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def items(self) -> list[SeqMessage]:
        """(seq, message) in seq order."""
        return sorted(self._messages.items())


class NoResources:
    """Topics, subscriptions and documents: the core keeps them in memory itself."""

    def put_topic(self, config: TopicConfig) -> None:
        pass

    def delete_topic(self, name: str) -> None:
        pass

    def put_subscription(self, record: SubscriptionRecord) -> None:
        pass

    def touch_subscription(self, name: str, last_activity: float) -> None:
        pass

    def put_document(self, kind: str, name: str, body: bytes) -> None:
        pass

    def delete_document(self, kind: str, name: str) -> None:
        pass


class MemorySnapshots:
    """Each snapshot's messages, and by topic, while a snapshot of the topic pins it, what
    the topic published since."""

    def __init__(self) -> None:
        self._snapshots: dict[str, tuple[SnapshotRecord, dict[int, StoredMessage]]] = {}
        self._logs: dict[str, deque[SeqMessage]] = {}

    def __repr__(self) -> str:
        return f"<MemorySnapshots [{len(self._snapshots)} snapshots, {len(self._logs)} topic logs]>"

    def put(self, record: SnapshotRecord, window: Sequence[SeqMessage]) -> None:
        self._snapshots[record.name] = (record, dict(window))
        self._logs.setdefault(record.topic, deque())

    def published(self, topic: str, messages: Sequence[SeqMessage]) -> None:
        """``topic`` published ``messages``: kept in its log if a snapshot pins it."""
        log = self._logs.get(topic)
        if log is not None:
            log.extend(messages)

    def update(self, record: SnapshotRecord) -> None:
        _, messages = self._snapshots[record.name]
        self._snapshots[record.name] = (record, messages)

    def delete(self, name: str) -> None:
        """Forget the snapshot and unpin what only it kept in its topic's log."""
        record, _ = self._snapshots.pop(name)
        log = self._logs.get(record.topic)
        if log is None:
            return
        positions = [r.position for r, _ in self._snapshots.values() if r.topic == record.topic]
        if not positions:
            del self._logs[record.topic]
            return
        floor = min(positions)
        while log and log[0][0] <= floor:
            log.popleft()

    def messages(self, name: str) -> list[SeqMessage]:
        return sorted(self._snapshots[name][1].items())

    def topic_log(self, topic: str, after_seq: int) -> list[SeqMessage]:
        return [(seq, m) for seq, m in self._logs.get(topic, ()) if seq > after_seq]

    def pinned_topics(self) -> int:
        """Topic logs kept (test introspection: they must go with the last snapshot)."""
        return len(self._logs)


class MemoryStore:
    def __init__(self) -> None:
        self._retained: dict[str, RetainedAcked] = {}
        self._resources = NoResources()
        self._snapshots = MemorySnapshots()

    def __repr__(self) -> str:
        return f"<MemoryStore {self._snapshots!r}>"

    @property
    def window(self) -> int | None:
        return None

    def load(self) -> StoredState:
        return StoredState()

    # ---------------------------------------------------------------- resources

    @property
    def resources(self) -> NoResources:
        return self._resources

    def delete_subscription(self, name: str) -> None:
        self._retained.pop(name, None)

    # ----------------------------------------------------------------- messages

    def publish(
        self,
        topic: str,
        messages: Sequence[SeqMessage],
        receivers: Mapping[str, Sequence[int]],
    ) -> None:
        self._snapshots.published(topic, messages)

    def backlog(self, subscription: str, after_seq: int, limit: int) -> list[BacklogRow]:
        return []  # the core holds the whole backlog

    def rows(self, subscription: str, seqs: Sequence[int]) -> list[BacklogRow]:
        return []  # the core holds every body

    def settle(self, subscription: str, seqs: Sequence[int], retain: Sequence[Acked]) -> None:
        if retain:
            self._retain(subscription, [(seq, message) for seq, _, message in retain if message])

    def _retain(self, subscription: str, messages: Sequence[SeqMessage]) -> None:
        if messages:
            retained = self._retained.get(subscription)
            if retained is None:
                retained = self._retained[subscription] = RetainedAcked()
            for seq, message in messages:
                retained.add(seq, message)

    # Leases are kept for a restart, and this store has none.

    def lease(self, subscription: str, seq: int, generation: int, deadline: float) -> None:
        pass

    def lease_many(
        self, subscription: str, seqs: Sequence[int], generations: Sequence[int], deadline: float
    ) -> None:
        pass

    def end_lease(
        self, subscription: str, seq: int, generation: int, deadline: float, failed_attempts: int
    ) -> None:
        pass

    def forget_leases(self, subscription: str, now: float) -> None:
        pass

    def retained(self, subscription: str) -> list[SeqMessage]:
        retained = self._retained.get(subscription)
        return retained.items() if retained is not None else []

    def oldest_retained(self, subscription: str) -> float | None:
        retained = self._retained.get(subscription)
        return retained.oldest() if retained is not None else None

    def prune_retained(self, subscription: str, cutoff: float) -> None:
        retained = self._retained.get(subscription)
        if retained is not None:
            retained.prune(cutoff)
            if not retained:
                del self._retained[subscription]

    def drop_retained(self, subscription: str) -> None:
        self._retained.pop(subscription, None)

    def reset_subscription(
        self,
        subscription: str,
        unacked: Sequence[SeqMessage],
        retained: Sequence[SeqMessage],
        uid: str,
    ) -> None:
        self._retained.pop(subscription, None)
        self._retain(subscription, retained)

    # ---------------------------------------------------------------- snapshots

    def put_snapshot(
        self, record: SnapshotRecord, subscription: str, window: Sequence[SeqMessage]
    ) -> None:
        self._snapshots.put(record, window)

    @property
    def snapshots(self) -> MemorySnapshots:
        return self._snapshots

    # ---------------------------------------------------------------- lifecycle

    @property
    def dirty(self) -> bool:
        return False  # nothing is kept beyond the process: nothing to commit

    def commit(self) -> None:
        pass

    def begin_commit(self) -> bool:
        return False

    def finish_commit(self) -> None:
        pass

    def collect_garbage(self) -> None:
        pass

    def close(self) -> None:
        pass
