"""The storage seam: everything the broker keeps goes through a ``Store``.

The broker core decides; a store keeps. Every state change the core makes is one call
below, small enough to write in one transaction with the others of its group; the store
makes them durable at ``commit()``, which the server's shell awaits before it answers a
Publish (message ids) or reports an acknowledgement's SUCCESS.

The core keeps, in memory, what it needs to decide quickly: resource configs, snapshot
descriptions and, per subscription, a *window* — the oldest part of its backlog (seq
order) with the leases, ordering-key sequences and heaps of ``delivery``. The rest of a
backlog (the *cold* rows, each with a larger seq than anything in the window) stays in the
store and is read ``backlog()`` by ``backlog()`` as the window drains. ``Store.window`` is
the window's size: ``None`` keeps every message in memory (``MemoryStore``: nothing is
cold, ever); a durable store sets a bound so a backlog of millions costs the server only
the window in RAM.

What a store holds, and where the core relies on it:

* topics, subscriptions (config, created, last activity) and snapshot descriptions,
  read back once by ``load()``;
* messages, and per subscription the seqs it has not acknowledged with their failed
  delivery attempts (the *backlog*): the source of the cold rows and, after a restart,
  of everything;
* per subscription the acknowledged messages it retains (``retain_acked_messages``);
* per snapshot the messages it retains, and per topic with snapshots the messages
  published after the oldest one's position (the *topic log*).

* per subscription its ack-id uid, and its leases — for each delivery (and each
  extension) the message's generation and the lease's deadline, until that deadline: after
  a restart an ack id issued before it resolves as it did, and an exactly-once ack of a
  lease whose message is gone since (its ack was committed, the answer lost with the
  process) answers SUCCESS again when retried.

The core hands every lease change over as it happens; the server's shell sends a
delivery of an exactly-once subscription only once the commit holding its lease is done
(``group_commit.py``), so every ack id a client can hold is one the store can resolve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import sub
from typing import NamedTuple, Protocol, runtime_checkable

from eoclient.server_stub.core.model import StoredMessage, SubscriptionConfig, TopicConfig

SeqMessage = tuple[int, StoredMessage]


def consecutive_stretches(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each stretch of ``seqs`` that counts up by one: the ids of one
    Pull's response, whose leases hold consecutive slots of the core's lease table and
    whose acks the store deletes as one range. A request mixing several Pulls' ids (two
    readers' responses taken in turns) is several stretches. Found in C: a request that is
    one stretch (an Acknowledge of one Pull's 1,000 ids, in order) by one comparison with
    the range it spans (0.017 ms), any other by one pass of subtractions and one of
    comparisons (0.054 ms; a loop a seq: 0.081, measured)."""
    count = len(seqs)
    if not count:
        return []
    if seqs[-1] - seqs[0] == count - 1 and list(range(seqs[0], seqs[-1] + 1)) == list(seqs):
        return [(0, count)]
    steps = map(sub, islice(seqs, 1, None), seqs)
    starts = [0, *compress(range(1, count), map((1).__ne__, steps))]
    return list(zip(starts, [*starts[1:], count], strict=True))


@dataclass(frozen=True)
class SubscriptionRecord:
    """A subscription as stored: its config (defaults applied) and its clocks."""

    config: SubscriptionConfig
    created: float
    last_activity: float  # the expiration policy counts from here
    uid: str = ""  # of its ack ids (ack_ids.py); "": none stored yet (a new one is made)


@dataclass(frozen=True)
class SnapshotRecord:
    """A snapshot's description; its messages are the store's (``SnapshotStore.messages``)."""

    name: str
    topic: str
    expire_time: float
    labels: Mapping[str, str]
    position: int  # the last seq the topic had published when the snapshot was taken


@dataclass(slots=True)
class BacklogRow:
    """One unacknowledged message of a subscription, as stored; once loaded, a waiting
    message of the delivery engine's window as it is (``delivery.entries.Entry``), which
    sets the last two fields and may change the middle ones. So a store hands out a new
    object for every row it reads, and keeps none. Not frozen: one is read for every
    message a durable store hands back, and a frozen dataclass's constructor costs three
    times a plain one's."""

    seq: int
    message: StoredMessage
    failed_attempts: int = 0  # nacks + deadline expiries (delivery_attempt = this + 1)
    generation: int = 0  # of its latest delivery (0: none); the next one's ack id: + 1
    ready_at: float = 0.0  # in the window: deliverable from then on (0: at once)
    key_position: int = -1  # in the window: its place in its ordering key's sequence


class Acked(NamedTuple):
    """An acknowledged message a subscription retains (``retain_acked_messages``)."""

    seq: int
    publish_time: float
    # None: the core does not hold the body — only with a store that keeps every body
    # itself (one that bounds the window).
    message: StoredMessage | None


@dataclass(frozen=True, slots=True)
class StoredLease:
    """A backlog row leased when the store last committed: what its lease needs back."""

    seq: int
    generation: int
    deadline: float
    failed_attempts: int
    size: int
    publish_time: float
    ordering_key: str


@dataclass(frozen=True, slots=True)
class StoredAck:
    """A lease whose message left the backlog before the lease's deadline (acked, or
    settled by a policy acting as a subscriber): a retried ack of it answers SUCCESS."""

    seq: int
    generation: int
    deadline: float


@dataclass(frozen=True)
class StoredSubscription:
    record: SubscriptionRecord
    backlog: int  # how many unacknowledged messages the store holds for it (leased too)
    backlog_bytes: int  # and their sizes, as flow control counts them
    leases: Sequence[StoredLease] = ()  # in seq order
    acks: Sequence[StoredAck] = ()


@dataclass(frozen=True)
class StoredState:
    """What ``load()`` returns: enough to rebuild the core's memory."""

    topics: Sequence[TopicConfig] = ()
    subscriptions: Sequence[StoredSubscription] = ()
    snapshots: Sequence[SnapshotRecord] = ()
    last_seq: int = 0  # seqs (and message ids) continue after it
    # Other resources the core keeps whole (schemas, IAM policies, ...): (kind, name) -> body.
    documents: Mapping[tuple[str, str], bytes] = field(default_factory=dict)


class ResourceStore(Protocol):
    """Topics, subscriptions and documents (``Store.resources``)."""

    def put_topic(self, config: TopicConfig) -> None: ...

    def delete_topic(self, name: str) -> None: ...

    def put_subscription(self, record: SubscriptionRecord) -> None: ...

    def touch_subscription(self, name: str, last_activity: float) -> None:
        """Only the activity clock changed (frequent: a store may write it lazily)."""
        ...

    def put_document(self, kind: str, name: str, body: bytes) -> None:
        """Keep a resource the core stores whole (a schema, an IAM policy): ``kind`` says
        which, ``body`` is its encoding (the core's choice)."""
        ...

    def delete_document(self, kind: str, name: str) -> None: ...


class SnapshotStore(Protocol):
    """Snapshots and the topic logs they pin (``Store.snapshots``); a snapshot is created
    by ``Store.put_snapshot``, which reads the subscription's backlog."""

    def update(self, record: SnapshotRecord) -> None: ...

    def delete(self, name: str) -> None: ...

    def messages(self, name: str) -> list[SeqMessage]:
        """The messages snapshot ``name`` retains, in seq order."""
        ...

    def topic_log(self, topic: str, after_seq: int) -> list[SeqMessage]:
        """Messages ``topic`` published after ``after_seq``; complete while a snapshot of
        the topic has a position at or before ``after_seq``."""
        ...


class Store(Protocol):
    """Where the broker's state lives. Calls are synchronous and applied in order; a
    store may buffer them, and they are durable once ``commit()`` returns."""

    @property
    def window(self) -> int | None:
        """Per-subscription waiting messages the core keeps in memory. None: all of them,
        and every leased message's body too — such a store keeps no bodies and nothing of
        the leases (the core hands it no lease changes)."""
        ...

    def load(self) -> StoredState: ...

    # ---------------------------------------------------------------- resources

    @property
    def resources(self) -> ResourceStore:
        """Where topics, subscriptions and documents are kept."""
        ...

    def delete_subscription(self, name: str) -> None:
        """The subscription's record, its backlog, leases and retained messages go."""
        ...

    # ----------------------------------------------------------------- messages

    def publish(
        self,
        topic: str,
        messages: Sequence[SeqMessage],
        receivers: Mapping[str, Sequence[int]],
    ) -> None:
        """Store ``messages`` of ``topic`` and add ``receivers[subscription]`` (seqs) to
        each receiving subscription's backlog."""
        ...

    def backlog(self, subscription: str, after_seq: int, limit: int) -> list[BacklogRow]:
        """Up to ``limit`` backlog rows with seq > ``after_seq``, in seq order (new objects:
        the core keeps them, see ``BacklogRow``)."""
        ...

    def settle(self, subscription: str, seqs: Sequence[int], retain: Sequence[Acked]) -> None:
        """``seqs`` leave the backlog (acknowledged, dead-lettered, filtered out, past
        their retention); ``retain`` are kept as retained acknowledged messages."""
        ...

    def rows(self, subscription: str, seqs: Sequence[int]) -> list[BacklogRow]:
        """The backlog rows of ``seqs`` (ascending) that exist, in seq order."""
        ...

    def lease(self, subscription: str, seq: int, generation: int, deadline: float) -> None:
        """Row ``seq`` is leased (delivered as ``generation``, or extended) until ``deadline``.
        Kept until ``forget_leases`` passes that deadline; a later call for the seq wins.
        (A store may take one Pull's leases in one call: ``LeasesInBulk``.)"""
        ...

    def end_lease(
        self, subscription: str, seq: int, generation: int, deadline: float, failed_attempts: int
    ) -> None:
        """Row ``seq``'s lease of ``generation`` (until ``deadline``) ended without an ack
        (nack, expiry, an ordering key's rewind); its failed delivery attempts are now
        ``failed_attempts``."""
        ...

    def forget_leases(self, subscription: str, now: float) -> None:
        """Forget the leases whose deadline is at or before ``now``."""
        ...

    def retained(self, subscription: str) -> list[SeqMessage]:
        """Retained acknowledged messages, in seq order."""
        ...

    def oldest_retained(self, subscription: str) -> float | None:
        """Publish time of the oldest retained acknowledged message."""
        ...

    def prune_retained(self, subscription: str, cutoff: float) -> None:
        """Forget retained acknowledged messages published at or before ``cutoff``."""
        ...

    def drop_retained(self, subscription: str) -> None: ...

    def reset_subscription(
        self,
        subscription: str,
        unacked: Sequence[SeqMessage],
        retained: Sequence[SeqMessage],
        uid: str,
    ) -> None:
        """Seek: the backlog becomes ``unacked`` (no failed attempts, no leases), the
        retained acknowledged messages ``retained``, the ack-id uid ``uid``."""
        ...

    # ---------------------------------------------------------------- snapshots

    def put_snapshot(
        self, record: SnapshotRecord, subscription: str, window: Sequence[SeqMessage]
    ) -> None:
        """A new snapshot retains the subscription's whole backlog: ``window`` (what the
        core holds) and the store's cold rows of it."""
        ...

    @property
    def snapshots(self) -> SnapshotStore:
        """Where snapshots and the topic logs they pin are kept."""
        ...

    # ---------------------------------------------------------------- lifecycle

    @property
    def dirty(self) -> bool:
        """Some change is not committed yet."""
        ...

    def commit(self) -> None:
        """Make every change so far durable."""
        ...

    def begin_commit(self) -> bool:
        """The first half of ``commit``, on the broker's thread: False if there is
        nothing to commit, else ``finish_commit`` must follow."""
        ...

    def finish_commit(self) -> None:
        """The second half (the fsync), in any thread; the broker may go on meanwhile
        (its changes are kept for the next commit)."""
        ...

    def collect_garbage(self) -> None:
        """Reclaim what nothing refers to any more (called from the broker's tick)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class LeasesInBulk(Protocol):
    """A store that takes one Pull's leases in one call (a durable store is handed one
    lease a delivered message: a call each is a good part of a Pull's cost there)."""

    def lease_many(
        self, subscription: str, seqs: Sequence[int], generations: Sequence[int], deadline: float
    ) -> None:
        """``Store.lease`` of each of ``seqs`` (ascending, each with its generation in
        ``generations``) until ``deadline``, in that order."""
        ...


@runtime_checkable
class LeaseEndsInBulk(Protocol):
    """A store that takes the ends of one request's nacks in one call."""

    def end_leases(
        self,
        subscription: str,
        seqs: Sequence[int],
        generations: Sequence[int],
        deadlines: Sequence[float],
        failed_attempts: Sequence[int],
    ) -> None:
        """``Store.end_lease`` of each of ``seqs`` (with the same position of the other
        columns), in that order."""
        ...


class SubscriptionStorage:
    """One subscription's part of a store: what its delivery state hands over and reads."""

    __slots__ = ("_end_leases", "_lease_many", "_store", "name", "window")

    def __init__(self, store: Store, name: str) -> None:
        self._store = store
        self.name = name
        self.window = store.window
        self._lease_many = store.lease_many if isinstance(store, LeasesInBulk) else None
        self._end_leases = store.end_leases if isinstance(store, LeaseEndsInBulk) else None

    def settle(self, seqs: Sequence[int], retain: Sequence[Acked] = ()) -> None:
        self._store.settle(self.name, seqs, retain)

    def lease(self, seq: int, generation: int, deadline: float) -> None:
        self._store.lease(self.name, seq, generation, deadline)

    def lease_many(self, seqs: Sequence[int], generations: Sequence[int], deadline: float) -> None:
        """``lease`` of each of ``seqs`` (one Pull's): one store call if it takes them so."""
        if self._lease_many is not None:
            self._lease_many(self.name, seqs, generations, deadline)
            return
        lease, name = self._store.lease, self.name
        for seq, generation in zip(seqs, generations, strict=True):
            lease(name, seq, generation, deadline)

    def end_lease(self, seq: int, generation: int, deadline: float, failed_attempts: int) -> None:
        self._store.end_lease(self.name, seq, generation, deadline, failed_attempts)

    def end_leases(
        self,
        seqs: Sequence[int],
        generations: Sequence[int],
        deadlines: Sequence[float],
        failed_attempts: Sequence[int],
    ) -> None:
        """``end_lease`` of each of ``seqs`` (one request's nacks): one store call if it
        takes them so."""
        if self._end_leases is not None:
            self._end_leases(self.name, seqs, generations, deadlines, failed_attempts)
            return
        end_lease, name = self._store.end_lease, self.name
        for seq, generation, deadline, failed in zip(
            seqs, generations, deadlines, failed_attempts, strict=True
        ):
            end_lease(name, seq, generation, deadline, failed)

    def forget_leases(self, now: float) -> None:
        self._store.forget_leases(self.name, now)

    def backlog(self, after_seq: int, limit: int) -> list[BacklogRow]:
        return self._store.backlog(self.name, after_seq, limit)

    def rows(self, seqs: Sequence[int]) -> list[BacklogRow]:
        return self._store.rows(self.name, seqs)

    def retained(self) -> list[SeqMessage]:
        return self._store.retained(self.name)

    def oldest_retained(self) -> float | None:
        return self._store.oldest_retained(self.name)

    def prune_retained(self, cutoff: float) -> None:
        self._store.prune_retained(self.name, cutoff)

    def drop_retained(self) -> None:
        self._store.drop_retained(self.name)

    def reset(
        self, unacked: Sequence[SeqMessage], retained: Sequence[SeqMessage], uid: str
    ) -> None:
        self._store.reset_subscription(self.name, unacked, retained, uid)
