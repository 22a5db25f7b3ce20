"""Pulling one part of a batch: Pull calls in flight, decoded to Arrow, admitted, logged.

Shared by the driver's probe (``_runner.py``) and the read tasks (``_reader.py``). A Pull is
the SDK's ``SubscriberClient.pull_raw``: the answer's wire bytes, which ``_wire`` decodes
into columns, with the SDK's retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from eoclient._clock import AsyncClock
from eoclient.admin import RetrySettings
from eoclient.spark._dated_ids import DatedIds
from eoclient.spark._decisions import Admission
from eoclient.spark._lease_log import LeaseLog
from eoclient.spark._schema import WIRE_SCHEMA
from eoclient.spark._wire import Received, decode_bytes
from eoclient.subscriber import SubscriberClient

# One Pull asks for at most this many messages (the service caps a Pull at 1000).
PULL_MAX = 1000
# Pull calls kept in flight at once: with two, the server encodes the next response while
# this process decodes the last.
PULLS_IN_FLIGHT = 2
# A Pull call's whole budget, retries included (each attempt is sent with what remains):
# servers hold an empty Pull for a few seconds at most. It also bounds how long after its
# send a call the puller died during can have leased messages (_decisions.grace_until), so
# it stays short: a restarted availableNow run waits that long for what it may hold.
PULL_CALL_TIMEOUT = 10.0
# A Pull that fails with a retryable status (UNAVAILABLE: a busy server slow to accept a
# connection; DEADLINE_EXCEEDED; errors.py's table) is sent again by the SDK's one retry
# mechanism, from 0.25 s doubling, within the call's budget; then the error fails the task
# (Spark retries it). A failed attempt's deliveries, if the server made any, are never
# emitted: they come back at their deadline (the lease log shows the call unanswered).
PULL_RETRY = RetrySettings(
    initial_backoff=0.25,
    max_backoff=8.0,
    multiplier=2.0,
    deadline=PULL_CALL_TIMEOUT,
    codes=frozenset(
        {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNKNOWN"}
    ),
)


def open_client(endpoint: str | None, clock: AsyncClock) -> SubscriberClient:
    """The SDK client a puller, a settle and a lease keeper share (its channel is made on
    the loop of its first call); the caller closes it (``aclose``)."""
    return SubscriberClient(endpoint, clock=clock)


@dataclass(slots=True)
class Pulled:
    """What one pull collected: every Pull answer (chunks) and the admission's choices."""

    admission: Admission
    chunks: list[Received] = field(default_factory=list)
    first_sent: float | None = None  # wall clock: no delivery of it is older

    def rows(self) -> pa.Table:
        """The emitted deliveries (``WIRE_SCHEMA``), in the order they first arrived."""
        if not self.admission.confirm():
            return WIRE_SCHEMA.empty_table()
        table = pa.Table.from_batches([chunk.rows for chunk in self.chunks], WIRE_SCHEMA)
        if self.admission.all_emitted():
            # All rows in arrival order, without sorting positions (~0.2 µs a message).
            return table.combine_chunks()
        positions = sorted(self.admission.emitted.values())
        starts = [0]
        for chunk in self.chunks:
            starts.append(starts[-1] + len(chunk))
        return table.take(pa.array([starts[c] + r for c, r in positions], pa.int64()))

    def emitted_ids(self) -> DatedIds:
        """The message ids of the emitted deliveries, in Arrow (for ``_dated_ids.ids_among``):
        while every delivery is emitted, the chunks' own columns with their publish times,
        with no Python object; else the ids alone."""
        if self.admission.all_emitted():
            return DatedIds(self._column("message_id"), self._column("publish_time"))
        return DatedIds(pa.array(list(self.admission.emitted), pa.string()))

    def _column(self, name: str) -> pa.Array:
        columns = [chunk.rows.column(name) for chunk in self.chunks]
        return pa.chunked_array(columns, WIRE_SCHEMA.field(name).type).combine_chunks()


async def pull_part(
    client: SubscriberClient,
    subscription: str,
    pulled: Pulled,
    log: LeaseLog,
    *,
    max_rows: int,
    deadline: float | Callable[[], float],
    clock: AsyncClock,
    keep_waiting: Callable[[float], bool] = lambda now: False,
) -> None:
    """Pull until ``max_rows`` messages are emitted, a Pull comes back empty, or
    ``deadline`` (on ``clock``; a callable is asked again at each answer) passes.

    ``PULLS_IN_FLIGHT`` calls overlap, in a TaskGroup. Every call asks for no more than is
    still missing (counting the calls in flight), so the batch never exceeds ``max_rows``.
    Once it is time to stop, no new call goes out, but those in flight are still awaited
    and their messages taken: one may hold messages even when another came back empty, and
    a cancelled call's messages would come back only after their ack deadline. An empty
    answer ends the pull unless it has nothing yet and ``keep_waiting(now)`` (an
    ``availableNow`` run waiting for the redeliveries of a dead run). A call that fails
    for good ends the pull with its error, once the other calls are cancelled.
    """
    failure: Exception | None = None
    in_flight: dict[asyncio.Task[bytes | Exception], tuple[int, int]] = {}
    stopping = False
    async with asyncio.TaskGroup() as calls:
        try:
            while failure is None:
                asked = sum(count for _, count in in_flight.values())
                # At most: a message delivered twice counts twice until it is confirmed.
                room = max_rows - pulled.admission.emitted_count - asked
                while not stopping and room > 0 and len(in_flight) < PULLS_IN_FLIGHT:
                    count = min(PULL_MAX, room)
                    call_number = log.sent()
                    if pulled.first_sent is None:
                        pulled.first_sent = clock.now()
                    call = calls.create_task(_pull_bytes(client, subscription, count))
                    in_flight[call] = (call_number, count)
                    room -= count
                if not in_flight:
                    # Once per pull, unless it found a message twice: then there is room.
                    if stopping or pulled.admission.confirm() >= max_rows:
                        break
                    continue
                answered, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for call in answered:
                    call_number, _ = in_flight.pop(call)
                    answer = call.result()
                    if isinstance(answer, Exception):
                        failure = answer
                        break
                    received = decode_bytes(answer)
                    log.answered(call_number, received.ack_ids)
                    pulled.chunks.append(received)
                    pulled.admission.admit(
                        received.message_ids, received.ack_ids, received.publish_ns
                    )
                    now = clock.now()
                    if not received:
                        waiting = not pulled.admission.emitted_count and keep_waiting(now)
                        stopping = stopping or not waiting
                    elif now >= (deadline() if callable(deadline) else deadline):
                        stopping = True
        finally:
            # Only when a call failed or this was cancelled: end the others (the group
            # waits for them).
            for call in in_flight:
                call.cancel()
    if failure is not None:
        raise failure


async def _pull_bytes(client: SubscriberClient, subscription: str, count: int) -> bytes | Exception:
    """One Pull call's answer as its serialized ``PullResponse`` (``decode_bytes`` parses it
    as columns), or its error, which ``pull_part`` raises once the other calls are
    collected (never into the TaskGroup)."""
    try:
        return await client.pull_raw(
            subscription, count, retry=PULL_RETRY, timeout=PULL_CALL_TIMEOUT
        )
    except Exception as error:
        return error
