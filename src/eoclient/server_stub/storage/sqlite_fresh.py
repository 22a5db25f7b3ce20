"""``FreshRows``: the backlog rows each subscription has beyond what its window has read,
known without reading the table.

A subscriber that keeps up with its topic refills its window with the rows published
since the last refill, none of them delivered yet. Reading those from ``backlog`` costs
the refill a statement, and first every buffered write run on the event loop's thread
after the commit in flight is done (``Writes.read``: a read sees the writes before it).
Yet the store sees every write to ``backlog`` go by. So for each subscription it can keep
a seq ``low`` and the runs of seqs published to it since, and the claim

    the subscription's backlog rows with a seq above ``low`` are exactly the runs' seqs,
    each with no failed attempt and generation 0 (never delivered).

A read from a seq at or above ``low`` is answered from the runs; any other reads the
table. Each write keeps the claim true:

* a publish appends its seqs, which are above every seq issued before, so above ``low``;
* a read through seq X (the rows up to X are the window's now) raises ``low`` to X if X
  is above it, and drops the seqs up to X: from here on the window leases, ends and
  settles those rows, which the claim no longer covers. A read that found fewer rows
  than it asked for saw every row after its start, so the claim is then simply "none
  after the last row read";
* a settle or a lease's end of a seq above ``low`` (a message acknowledged before any
  read reached it: an ack by id, an eviction), a seek and a deletion forget the claim.
  With none, the one that is always true is taken the next time it is needed: no row
  above the last seq issued.

Runs, not single seqs: a publish batch is one run, and one topic's consecutive batches
merge into one, so a backlog of millions costs a pair of ints. A subscription whose seqs
come apart (a filter that lets every other message in, topics published in turn) beyond
``max_runs`` forgets its claim, and its refills read the table as they did before. A
restart starts with no claim. ``tests/server_stub/storage/test_sqlite_fresh.py`` checks
every read of a store with claims against one without, over random writes.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from eoclient.server_stub.core.store import consecutive_stretches

# Runs a subscription's claim holds at most. A run costs two ints in two lists (~80 bytes
# with the int objects), so a subscription costs at most ~80 KB, a thousand subscriptions
# with broken-up seqs ~80 MB at worst. A subscriber keeping up needs a window's worth of
# runs at most (10,000 seqs: ``sqlite.DEFAULT_WINDOW``) and far fewer in practice: one
# run per publish batch when its topic's publishes interleave with another topic's.
MAX_RUNS = 1024
# Runs dropped from the front of the lists before they are compacted (a deletion from
# the front of a list moves the rest: done once this many are dead, and at least half).
_COMPACT_AT = 256


class _Claim:
    """Rows above ``low`` are the seqs above ``low`` of runs ``first``.. (``starts[i]``
    to ``ends[i]`` inclusive, ascending; each ends above ``low``)."""

    __slots__ = ("ends", "first", "low", "starts")

    def __init__(self, low: int) -> None:
        self.low = low
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.first = 0

    def last(self) -> int:
        """The highest seq the claim names: its last run's end, or ``low``."""
        return self.ends[-1] if len(self.ends) > self.first else self.low

    def runs(self) -> int:
        return len(self.ends) - self.first

    def drop_through(self, seq: int) -> None:
        """The rows up to ``seq`` leave the claim (``seq`` >= ``low``)."""
        self.low = seq
        first = bisect_right(self.ends, seq, self.first)
        if first >= _COMPACT_AT and 2 * first >= len(self.ends):
            del self.starts[:first], self.ends[:first]
            first = 0
        self.first = first


class FreshRows:
    """Per subscription, the claim above (none kept: ``max_runs`` 0)."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self.max_runs = max_runs
        self._claims: dict[int, _Claim] = {}

    def published(self, subscription: int, seqs: Sequence[int], last_seq: int) -> None:
        """``seqs`` (ascending) joined the subscription's backlog; ``last_seq``: the
        highest seq issued before them (no row is above it)."""
        if not seqs or not self.max_runs:
            return
        claim = self._claims.get(subscription)
        if claim is None:
            claim = self._claims[subscription] = _Claim(last_seq)
        if seqs[0] <= claim.last():  # not above the claim's seqs: it cannot say what is
            del self._claims[subscription]
            return
        starts, ends = claim.starts, claim.ends
        for start, end in consecutive_stretches(seqs):
            if claim.runs() and ends[-1] + 1 == seqs[start]:
                ends[-1] = seqs[end - 1]  # right after the last run: it grows
            else:
                starts.append(seqs[start])
                ends.append(seqs[end - 1])
        if claim.runs() > self.max_runs:
            del self._claims[subscription]

    def after(self, subscription: int, after_seq: int, limit: int) -> list[int] | None:
        """The seqs of the first ``limit`` rows above ``after_seq``, each never delivered;
        ``None`` where the claim does not say (no claim, or ``after_seq`` below it)."""
        claim = self._claims.get(subscription)
        if claim is None or after_seq < claim.low:
            return None
        starts, ends = claim.starts, claim.ends
        found: list[int] = []
        index = bisect_right(ends, after_seq, claim.first)
        while index < len(ends) and len(found) < limit:
            start = max(starts[index], after_seq + 1)
            found.extend(range(start, min(ends[index] + 1, start + limit - len(found))))
            index += 1
        return found

    def read(self, subscription: int, last_read: int, complete: bool) -> None:
        """A read of the subscription's rows ended at ``last_read`` (the seq of its last
        row, or where it started if it found none); ``complete``: it found fewer than
        it asked for, so no row is above ``last_read``."""
        if not self.max_runs:
            return
        if complete:
            self._claims[subscription] = _Claim(last_read)
            return
        claim = self._claims.get(subscription)
        if claim is not None and last_read >= claim.low:
            claim.drop_through(last_read)

    def changed(self, subscription: int, seqs: Sequence[int]) -> None:
        """Rows of ``seqs`` were settled or their leases ended."""
        claim = self._claims.get(subscription)
        if claim is not None and seqs and max(seqs) > claim.low:
            del self._claims[subscription]

    def forget(self, subscription: int) -> None:
        """The subscription's rows were replaced (a seek) or deleted."""
        self._claims.pop(subscription, None)
