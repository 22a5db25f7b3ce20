"""Which topic a message id was published to, for skip by id (docs/policies.md).

Message ids are one sequence over the whole server (``Publishing.last_seq``), so an id
alone does not say its topic, and once every subscription acknowledged a message its
body is gone. Skip by id must still tell "published to another topic" (the caller named
the wrong subscription, or copied an id from elsewhere) apart from "already acknowledged
here". This index keeps runs of consecutive seqs published to one topic: a Publish
numbers its messages in one go, so a run per Publish at worst and one per change of topic
in practice (one topic published to in a row is one run).

Bounded: at most ``max_runs`` runs (:data:`MAX_RUNS`, about 16 bytes each in the two
arrays plus a reference to the interned topic name); past it the oldest half is dropped
and ``indexed_from`` moves up. Seqs older than ``indexed_from`` — dropped, or published
before this server process started (the index is not stored) — answer ``None``: unknown.
Pure; O(log runs) a lookup, O(1) amortised a record.
"""

from __future__ import annotations

import bisect
import sys
from array import array

# Runs kept at most: 1,000,000 runs ~ 24 MB at worst (two 8-byte columns plus a list of
# references), reached only by a million Publish calls alternating between topics.
MAX_RUNS = 1_000_000


class SeqTopics:
    """Runs of seqs and their topic; ``topic_of(seq)`` for a seq at or after
    ``indexed_from``."""

    def __init__(self, indexed_from: int = 1, *, max_runs: int = MAX_RUNS) -> None:
        if max_runs < 2:
            raise ValueError(f"max_runs must be >= 2, got {max_runs}")
        self.indexed_from = indexed_from
        self._max_runs = max_runs
        self._firsts = array("q")  # first seq of each run, ascending
        self._lasts = array("q")  # last seq of each run
        self._topics: list[str] = []

    def __len__(self) -> int:
        return len(self._firsts)

    def record(self, first: int, last: int, topic: str) -> None:
        """Seqs ``first..last`` (ascending, after every recorded one) went to ``topic``."""
        if last < first:
            return
        if self._topics and self._topics[-1] == topic and self._lasts[-1] == first - 1:
            self._lasts[-1] = last
            return
        if len(self._firsts) >= self._max_runs:
            self._drop_oldest(len(self._firsts) // 2)
        self._firsts.append(first)
        self._lasts.append(last)
        self._topics.append(sys.intern(topic))

    def topic_of(self, seq: int) -> str | None:
        """The topic ``seq`` was published to; ``None`` when the index cannot say (older
        than ``indexed_from``, or never numbered)."""
        if seq < self.indexed_from:
            return None
        index = bisect.bisect_right(self._firsts, seq) - 1
        if index < 0 or seq > self._lasts[index]:
            return None
        return self._topics[index]

    def _drop_oldest(self, count: int) -> None:
        self.indexed_from = self._lasts[count - 1] + 1
        del self._firsts[:count]
        del self._lasts[:count]
        del self._topics[:count]
