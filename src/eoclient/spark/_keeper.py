"""An executor's lease keeper: extends the leases of journaled parts until they are settled.

A part's deliveries must stay leased from the moment it is journaled until a later batch's
read task acks them (``_settle``): through the rest of its batch (the sink writing it) and
the planning of the next. The read task that emits a part hands its ack ids to the keeper of
its Python worker process, which lives on after the task (Spark reuses Python workers, and
the worker's loop thread runs between tasks). Every ``LEASE_TICK`` the keeper drops the parts
that are settled (``part-<i>.settled``) or pruned, and extends, by the SDK's lease rules
(:class:`eoclient.subscriber.LeaseGroups`, with ``SubscriberClient.modify_ack_deadline``),
those whose deadline nears. An ack id the server no longer knows
(the lease was lost anyway) is dropped: its message comes back as a redelivery, which
admission acks or keeps with its batch.

A keeper is best effort: a worker that dies (its executor killed, or Spark stopping workers
idle for a minute, or ``spark.python.worker.reuse`` off) takes its keeper along, and the
leases then run out: the messages are redelivered, and since their ids are in the journal,
acked, not emitted. Only wasted work, never a duplicate. A part every task of which is done
but that is never settled (the query stopped for good) is kept at most ``MAX_HOLD``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from eoclient._clock import AsyncClock
from eoclient._tasks import TaskOwner
from eoclient.spark._decisions import CLOCK_SKEW_SECONDS
from eoclient.subscriber import (
    AcknowledgeStatus,
    AckRetrySettings,
    LeaseGroups,
    SubscriberClient,
)

# How often the keeper looks for settled parts and leases to extend (seconds).
LEASE_TICK = 1.0
# An extension is retried for at most this long: the next tick sends it again anyway.
LEASE_RETRY = AckRetrySettings(deadline=LEASE_TICK * 2)
# A part is given up after this long (seconds): its batch's query has stopped, or runs
# batches this far apart that the leases may as well run out.
MAX_HOLD = 3600.0

logger = logging.getLogger("eoclient.spark")


class StringColumn(Collection[str]):
    """An Arrow string column as a collection of ``str``, converted only when iterated: a
    part's ack ids are held until it is settled, and most parts are settled before their
    leases need extending (a Python list and set of them was ~0.1 µs a message)."""

    def __init__(self, column: pa.Array | pa.ChunkedArray) -> None:
        self._column = column

    def __len__(self) -> int:
        return len(self._column)

    def __iter__(self) -> Iterator[str]:
        return iter(self._column.to_pylist())

    def __contains__(self, value: object) -> bool:
        return value in self._column.to_pylist()


@dataclass(frozen=True, slots=True)
class _Held:
    part: Path
    settled: Path
    since: float


class LeaseKeeper:
    """The leases of the parts one worker's read tasks emitted, for one subscription.
    Every method runs on the worker's loop; ``clock`` is wall-clock time (a part's
    ``leased_until`` comes from another process)."""

    def __init__(
        self, client: SubscriberClient, subscription: str, lease_seconds: int, clock: AsyncClock
    ) -> None:
        self._client = client
        self._subscription = subscription
        self._clock = clock
        self._leases = LeaseGroups(lease_seconds)
        self._held: dict[str, _Held] = {}
        self._tasks = TaskOwner()
        self._keeping = False

    def __len__(self) -> int:
        return len(self._held)

    async def hold(
        self, part: Path, settled: Path, ack_ids: Collection[str], leased_until: float
    ) -> None:
        """Keep the deliveries of ``part`` leased until ``settled`` exists (or the part is
        pruned). ``leased_until``: when they run out now (the puller's wall clock)."""
        if self._add(part, settled, ack_ids, leased_until) and not self._keeping:
            await self._tasks.open()
            self._keeping = self._tasks.spawn(self._keep(), "eoclient-spark-leases") is not None

    def _add(
        self, part: Path, settled: Path, ack_ids: Collection[str], leased_until: float
    ) -> bool:
        group = str(part)
        if group in self._held or settled.exists():
            return False
        now = self._clock.now()
        self._held[group] = _Held(part, settled, now)
        # The puller's clock may be ahead of this one: count its lease end that much early.
        self._leases.add(group, ack_ids, leased_until=leased_until - CLOCK_SKEW_SECONDS, now=now)
        return True

    def release_settled(self, now: float) -> None:
        """Forget the parts that are settled, pruned or held too long."""
        for group, held in list(self._held.items()):
            if held.settled.exists() or not held.part.exists() or now - held.since > MAX_HOLD:
                self._leases.remove(group)
                del self._held[group]

    async def _keep(self) -> None:
        clock = self._clock
        try:
            while self._held:
                now = clock.now()
                wakeup = self._leases.next_wakeup(now)
                pause = LEASE_TICK if wakeup is None else min(LEASE_TICK, max(0.0, wakeup - now))
                await clock.sleep(pause)
                self.release_settled(clock.now())
                for group, ack_ids in self._leases.due(clock.now()).items():
                    await self._extend(group, ack_ids)
        finally:
            self._keeping = False

    async def _extend(self, group: str, ack_ids: list[str]) -> None:
        try:
            results = await self._client.modify_ack_deadline(
                self._subscription, ack_ids, self._leases.lease_seconds, ack_retry=LEASE_RETRY
            )
        except Exception as error:  # the next round tries again
            logger.warning("extending %d leases failed: %s", len(ack_ids), error)
            return
        failed = results.failed.items()
        self._leases.lost(
            group, [a for a, r in failed if r.status is AcknowledgeStatus.INVALID_ACK_ID]
        )

    async def close(self) -> None:
        await self._tasks.close()
