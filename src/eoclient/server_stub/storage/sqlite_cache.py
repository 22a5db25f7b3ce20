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


class TailCache:
    """seq -> message for the latest messages published, within ``budget`` bytes."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self.messages: dict[int, StoredMessage] = {}
        # Publish batches in seq order, oldest first: (topic, seqs, bytes counted).
        self._batches: deque[tuple[int, list[int], int]] = deque()
        self.size = 0  # bytes counted for the batches held

    @property
    def low(self) -> int | None:
        """The smallest seq the cache can hold: every seq below it is a miss (None:
        empty). Seqs grow with each publish, so the oldest batch's first one."""
        return self._batches[0][1][0] if self._batches else None

    def add(self, topic: int, messages: Sequence[SeqMessage]) -> None:
        """Keep one publish batch (seqs ascending, above every seq already held), and
        evict the oldest batches beyond the budget."""
        cost = sum(message.size for _, message in messages) + ENTRY_OVERHEAD * len(messages)
        if cost > self.budget:
            return  # a batch larger than the whole budget is not worth evicting all for
        self.messages.update(messages)
        self._batches.append((topic, [seq for seq, _ in messages], cost))
        self.size += cost
        while self.size > self.budget:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        _, seqs, cost = self._batches.popleft()
        pop = self.messages.pop
        for seq in seqs:
            pop(seq, None)
        self.size -= cost

    def drop(self, topic: int, start: int, end: int) -> None:
        """Garbage collection deletes the topic's messages with seq in [start, end)."""
        kept: deque[tuple[int, list[int], int]] = deque()
        pop = self.messages.pop
        for batch in self._batches:
            batch_topic, seqs, cost = batch
            if batch_topic != topic or seqs[0] >= end or seqs[-1] < start:
                kept.append(batch)
            elif start <= seqs[0] and seqs[-1] < end:  # all of it: its bytes are freed
                for seq in seqs:
                    pop(seq, None)
                self.size -= cost
            else:  # a part: gone from the map, counted until the batch is evicted
                for seq in seqs:
                    if start <= seq < end:
                        pop(seq, None)
                kept.append(batch)
        self._batches = kept
