"""``TailCache``: the messages ``SqliteStore`` appended last, kept in memory to refill
windows without reading them back.

A subscriber that keeps up with its topic asks the store for rows it was handed moments
ago: the window's refill (``BacklogTables.backlog``) would read each of them back through
a join of ``backlog`` and ``messages`` (9 columns a row, and a ``StoredMessage`` built
from them: about 1.7 µs a row). Apache Pulsar's broker keeps an entry cache for the same
reason — consumers who keep up with producers never read the ledger back. Here the
messages given to ``publish`` are kept, by seq, under a byte budget (oldest publish batch
evicted first); a refill reads only the backlog's own columns and takes the messages from
the cache, reading the join only for those it misses.

A batch also leaves once every subscription it was published to has read past it, as
Pulsar's managed ledger invalidates the entries below its slowest active cursor: after
that only a redelivery or a seek would ask for those messages again, and they read them
back. So the memory the cache holds is what some subscriber has yet to read, not the last
128 MiB whatever happened to them: a million outstanding leases cost no more than before.

Why it cannot serve a stale message: a seq names one message for ever (seqs are never
reused, a message row is never updated), and which rows a subscription has is still read
from ``backlog`` every time — the cache only supplies the body of a seq the backlog names.
The one write that removes message rows, garbage collection (``drop``), removes them from
the cache too, so a read finds exactly what the join would. A restart starts empty.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Sequence

from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import SeqMessage

# Bytes of Python objects a cached message costs beyond its ``size`` (data, attributes,
# ordering key): the StoredMessage with its slots, the bytes and message id objects, the
# publish time, an attributes dict, and the cache's own dict entry and seq. Measured with
# tracemalloc: 455 bytes for a 100-byte message with no attributes.
ENTRY_OVERHEAD = 360
# The cache's budget. The server must stay safe to leave running on a laptop: 128 MiB is
# under 2 % of an 8 GB machine (less than a browser tab), about twenty subscriptions'
# windows (``sqlite.DEFAULT_WINDOW``: ~6 MB each), and holds ~295,000 messages of 100
# bytes (128 MiB / 455 bytes) or ~97,000 of 1 KB: thirty windows of small messages, so a
# subscriber within that many windows of its topic's head reads no message back. (The
# memory server holds every message, at the same cost each.)
CACHE_BYTES = 128 * 1024 * 1024
# A publish batch's own objects (its record, its list of seqs, its readers), counted
# once a batch: a topic published one message at a time pays them for each message.
BATCH_OVERHEAD = 200


class _Batch:
    """One publish batch held: its topic, seqs (ascending), bytes counted, the
    subscriptions it was published to, and how many of them have not read past it yet."""

    __slots__ = ("cost", "readers", "seqs", "topic", "unread")

    def __init__(self, topic: int, seqs: list[int], cost: int, readers: tuple[int, ...]) -> None:
        self.topic, self.seqs, self.cost = topic, seqs, cost
        self.readers, self.unread = readers, len(readers)


class TailCache:
    """seq -> message for the latest messages published, within ``budget`` bytes, until
    their subscriptions have read past them."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self.messages: dict[int, StoredMessage] = {}
        # Publish batches held, in seq order, oldest first. A batch released (its seqs
        # emptied) leaves each of the queues below when it reaches the front.
        self._batches: deque[_Batch] = deque()
        # Each topic's batches, the same way, for garbage collection to look at its own.
        self._of_topic: dict[int, deque[_Batch]] = {}
        # Per subscription: the batches published to it that it has not read past yet,
        # oldest first.
        self._unread: dict[int, deque[_Batch]] = {}
        self.size = 0  # bytes counted for the batches held

    @property
    def low(self) -> int | None:
        """The smallest seq the cache can hold: every seq below it is a miss (None:
        empty). Seqs grow with each publish, so the oldest batch's first one."""
        return self._batches[0].seqs[0] if self._batches else None

    def add(
        self, topic: int, messages: Sequence[SeqMessage], readers: Collection[int] = ()
    ) -> None:
        """Keep one publish batch (seqs ascending, above every seq already held) until
        ``readers`` (the subscriptions it was published to; none: until evicted) have read
        past it, and evict the oldest batches beyond the budget."""
        cost = sum(message.size for _, message in messages) + ENTRY_OVERHEAD * len(messages)
        cost += BATCH_OVERHEAD
        if cost > self.budget:
            return  # a batch larger than the whole budget is not worth evicting all for
        self.messages.update(messages)
        batch = _Batch(topic, [seq for seq, _ in messages], cost, tuple(readers))
        self._batches.append(batch)
        self._of_topic.setdefault(topic, deque()).append(batch)
        for subscription in batch.readers:
            self._unread.setdefault(subscription, deque()).append(batch)
        self.size += cost
        while self.size > self.budget:
            self._release(self._batches[0])

    def read(self, subscription: int, through: int) -> None:
        """``subscription`` has its rows up to ``through`` (a window's refill read them,
        or they joined its window when published): it stops being a reader of the
        batches that end there or before."""
        unread = self._unread.get(subscription)
        while unread:
            first = unread[0]
            if first.seqs and first.seqs[-1] > through:
                break
            unread.popleft()
            if first.seqs:  # (else released already: by the budget, or collected)
                self._read_past(first)

    def forget(self, subscription: int) -> None:
        """A deleted subscription reads nothing more."""
        for batch in self._unread.pop(subscription, ()):
            if batch.seqs:
                self._read_past(batch)

    def _read_past(self, batch: _Batch) -> None:
        batch.unread -= 1
        if batch.unread == 0:
            self._release(batch)

    def _release(self, batch: _Batch) -> None:
        """The batch's messages leave the cache, and the batch every queue whose front
        it reaches (a released batch has no seqs, so releasing it again does nothing)."""
        pop = self.messages.pop
        for seq in batch.seqs:
            pop(seq, None)
        self.size -= batch.cost
        batch.seqs, batch.cost = [], 0
        of_topic = self._of_topic.get(batch.topic)
        for queue in (self._batches, of_topic, *map(self._unread.get, batch.readers)):
            while queue and not queue[0].seqs:
                queue.popleft()
        if not of_topic:
            self._of_topic.pop(batch.topic, None)

    def drop(self, topic: int, start: int, end: int) -> None:
        """Garbage collection deletes the topic's messages with seq in [start, end): only
        the topic's batches that begin below ``end`` are looked at."""
        of_topic = self._of_topic.get(topic)
        if not of_topic:
            return
        pop = self.messages.pop
        below_end = itertools.takewhile(
            lambda batch: not batch.seqs or batch.seqs[0] < end, of_topic
        )
        for batch in list(below_end):
            seqs = batch.seqs
            if not seqs or seqs[-1] < start:
                continue
            if start <= seqs[0] and seqs[-1] < end:  # all of it: its bytes are freed
                self._release(batch)
            else:  # a part: gone from the map, counted until the batch leaves
                for seq in seqs:
                    if start <= seq < end:
                        pop(seq, None)
