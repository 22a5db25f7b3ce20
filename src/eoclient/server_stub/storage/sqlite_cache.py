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

Why it cannot serve a stale message: a seq names one message for ever (seqs are never
reused, a message row is never updated), and which rows a subscription has is still read
from ``backlog`` every time — the cache only supplies the body of a seq the backlog names.
The one write that removes message rows, garbage collection (``drop``), removes them from
the cache too, so a read finds exactly what the join would. A restart starts empty.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

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


# A publish batch's own objects (its record, its list of seqs), counted once a batch:
# a topic published one message at a time pays them for each message.
BATCH_OVERHEAD = 200


class _Batch:
    """One publish's messages in the cache: their topic, seqs (ascending) and the bytes
    counted for them (0 once garbage collection dropped them all)."""

    __slots__ = ("cost", "seqs", "topic")

    def __init__(self, topic: int, seqs: list[int], cost: int) -> None:
        self.topic = topic
        self.seqs = seqs
        self.cost = cost


class TailCache:
    """seq -> message for the latest messages published, within ``budget`` bytes."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self.messages: dict[int, StoredMessage] = {}
        # Publish batches in seq order, oldest first (evicted from the left); and each
        # topic's, for garbage collection to look at its own only.
        self._batches: deque[_Batch] = deque()
        self._of_topic: dict[int, deque[_Batch]] = {}
        self.size = 0  # bytes counted for the batches held

    @property
    def low(self) -> int | None:
        """Every seq below it is a miss (None: empty). Seqs grow with each publish, so
        the oldest batch's first one."""
        return self._batches[0].seqs[0] if self._batches else None

    def add(self, topic: int, messages: Sequence[SeqMessage]) -> None:
        """Keep one publish batch (seqs ascending, above every seq already held), and
        evict the oldest batches beyond the budget."""
        cost = sum(message.size for _, message in messages) + ENTRY_OVERHEAD * len(messages)
        cost += BATCH_OVERHEAD
        if cost > self.budget:
            return  # a batch larger than the whole budget is not worth evicting all for
        self.messages.update(messages)
        batch = _Batch(topic, [seq for seq, _ in messages], cost)
        self._batches.append(batch)
        self._of_topic.setdefault(topic, deque()).append(batch)
        self.size += cost
        while self.size > self.budget:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        batch = self._batches.popleft()
        # The oldest of all is the oldest of its topic, unless garbage collection took it.
        of_topic = self._of_topic.get(batch.topic)
        if of_topic and of_topic[0] is batch:
            of_topic.popleft()
            if not of_topic:
                del self._of_topic[batch.topic]
        pop = self.messages.pop
        for seq in batch.seqs:
            pop(seq, None)
        self.size -= batch.cost

    def drop(self, topic: int, start: int, end: int) -> None:
        """Garbage collection deletes the topic's messages with seq in [start, end): only
        the topic's batches below ``end`` are looked at."""
        of_topic = self._of_topic.get(topic)
        if not of_topic:
            return
        pop = self.messages.pop
        kept: list[_Batch] = []
        while of_topic and of_topic[0].seqs[0] < end:
            batch = of_topic.popleft()
            for seq in batch.seqs:
                if start <= seq < end:
                    pop(seq, None)
            if start <= batch.seqs[0] and batch.seqs[-1] < end:  # all of it: bytes freed
                self.size -= batch.cost
                batch.cost = 0  # its place in the eviction order goes at the front
            else:  # a part: gone from the map, counted until the batch is evicted
                kept.append(batch)
        of_topic.extendleft(reversed(kept))
        if not of_topic:
            del self._of_topic[topic]
        batches = self._batches
        while batches and not batches[0].cost:  # dropped whole, oldest first (as usual)
            batches.popleft()
