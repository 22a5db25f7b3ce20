"""An executor's lease keeper: extends the leases of journaled parts until they are settled.

A part's deliveries must stay leased from the moment it is journaled until a later batch's
read task acks them (``_settle``): through the rest of its batch (the sink writing it) and
the planning of the next. The read task that emits a part hands its ack ids to the keeper of
its Python worker process, which lives on after the task (Spark reuses Python workers, and
the worker's loop thread runs between tasks). Every ``LEASE_TICK`` the keeper drops the parts
that are settled (``part-<i>.settled``) or pruned, and extends, by the SDK's lease rules
(``_decisions.Leases``), those whose deadline nears. An ack id the server no longer knows
(the lease was lost anyway) is dropped: its message comes back as a redelivery, which
admission acks or keeps with its batch.

A keeper is best effort: a worker that dies (its executor killed, or Spark stopping workers
idle for a minute, or ``spark.python.worker.reuse`` off) takes its keeper along, and the
leases then run out: the messages are redelivered, and since their ids are in the journal,
acked, not emitted. Only wasted work, never a duplicate. A part every task of which is done
but that is never settled (the query stopped for good) is kept at most ``MAX_HOLD``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from eoclient._tasks import cancel_and_wait
from eoclient._transport import PubSubTransport
from eoclient.spark import _acks
from eoclient.spark._decisions import Leases
from eoclient.subscriber import AcknowledgeStatus, AckRetrySettings

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
    Every method runs on the worker's loop."""

    def __init__(self, transport: PubSubTransport, subscription: str, lease_seconds: int) -> None:
        self._transport = transport
        self._subscription = subscription
        self._leases = Leases(lease_seconds)
        self._held: dict[str, _Held] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._held)

    def hold(
        self, part: Path, settled: Path, ack_ids: Collection[str], leased_until: float, now: float
    ) -> None:
        """Keep the deliveries of ``part`` leased until ``settled`` exists (or the part is
        pruned). ``leased_until``: when they run out now (the puller's wall clock)."""
        group = str(part)
        if group in self._held or settled.exists():
            return
        self._held[group] = _Held(part, settled, now)
        self._leases.add(group, ack_ids, leased_until, now)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._keep())

    def release_settled(self, now: float) -> None:
        """Forget the parts that are settled, pruned or held too long."""
        for group, held in list(self._held.items()):
            if held.settled.exists() or not held.part.exists() or now - held.since > MAX_HOLD:
                self._leases.remove(group)
                del self._held[group]

    async def _keep(self) -> None:
        while self._held:
            now = time.time()
            wakeup = self._leases.next_wakeup(now)
            pause = LEASE_TICK if wakeup is None else min(LEASE_TICK, max(0.0, wakeup - now))
            await asyncio.sleep(pause)
            self.release_settled(time.time())
            for group, ack_ids in self._leases.due(time.time()).items():
                try:
                    failed = await _acks.modify_ack_deadline(
                        self._transport,
                        self._subscription,
                        ack_ids,
                        self._leases.lease_seconds,
                        LEASE_RETRY,
                    )
                except Exception as error:  # the next round tries again
                    logger.warning("extending %d leases failed: %s", len(ack_ids), error)
                    continue
                lost = [
                    a for a, status in failed.items() if status is AcknowledgeStatus.INVALID_ACK_ID
                ]
                self._leases.lost(group, lost)

    async def close(self) -> None:
        await cancel_and_wait(self._task)
