"""Pulling one part of a batch: Pull calls in flight, decoded to Arrow, admitted, logged.

Shared by the driver's probe (``_runner.py``) and the read tasks (``_reader.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import pyarrow as pa

from eoclient._proto import pubsub_pb2
from eoclient._transport import Endpoint, PubSubTransport, create_channel, rpc_error_from_grpc
from eoclient.errors import RpcError
from eoclient.spark._decisions import Admission
from eoclient.spark._lease_log import LeaseLog
from eoclient.spark._schema import WIRE_SCHEMA
from eoclient.spark._wire import Received, decode_bytes

_PULL = "/google.pubsub.v1.Subscriber/Pull"

# One Pull asks for at most this many messages (the service caps a Pull at 1000).
PULL_MAX = 1000
# Pull calls kept in flight at once: with two, the server encodes the next response while
# this process decodes the last.
PULLS_IN_FLIGHT = 2
# A Pull call that takes longer fails (DEADLINE_EXCEEDED): servers hold an empty Pull for a
# few seconds at most. It also bounds how long after its send a call the puller died during
# can have leased messages (_decisions.leftovers).
PULL_CALL_TIMEOUT = 10.0
# A Pull that fails with a retryable status (UNAVAILABLE: a busy server slow to accept a
# connection; DEADLINE_EXCEEDED) is sent again after this long, doubling, up to
# PULL_RETRIES times in a row; then the error fails the task (Spark retries it). A failed
# call's deliveries, if the server made any, are never emitted: they come back at their
# deadline (its lease log shows it unanswered).
PULL_RETRY_BACKOFF = 0.25
PULL_RETRIES = 6


def open_transport(endpoint: str | None) -> PubSubTransport:
    """A gRPC channel for raw Pulls (the SDK's transport: its channel options, its error
    mapping); the caller closes it."""
    return PubSubTransport(create_channel(Endpoint.resolve(endpoint)))


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

    def emitted_ids(self) -> pa.Array:
        """The message ids of the emitted deliveries, in Arrow (for ``_journal.ids_among``):
        while every delivery is emitted, the chunks' own column, with no Python object."""
        if self.admission.all_emitted():
            columns = [chunk.rows.column("message_id") for chunk in self.chunks]
            return pa.chunked_array(columns, pa.string()).combine_chunks()
        return pa.array(list(self.admission.emitted), pa.string())


async def pull_part(
    transport: PubSubTransport,
    subscription: str,
    pulled: Pulled,
    log: LeaseLog,
    *,
    max_rows: int,
    deadline: float,
    keep_waiting: Callable[[float], bool] = lambda now: False,
) -> None:
    """Pull until ``max_rows`` messages are emitted, a Pull comes back empty, or the
    monotonic ``deadline`` passes.

    ``PULLS_IN_FLIGHT`` calls overlap. Every call asks for no more than is still missing
    (counting the calls in flight), so the batch never exceeds ``max_rows``. Once it is time
    to stop, no new call goes out, but those in flight are still awaited and their messages
    taken: one may hold messages even when another came back empty, and a cancelled call's
    messages would come back only after their ack deadline. An empty answer ends the pull
    unless it has nothing yet and ``keep_waiting(now)`` (an ``availableNow`` run waiting for
    the redeliveries of a dead run).
    """
    in_flight: dict[asyncio.Task[bytes], tuple[int, int]] = {}
    stopping = False
    failures = 0
    try:
        while True:
            asked = sum(count for _, count in in_flight.values())
            # At most: a message delivered twice counts twice until it is confirmed below.
            room = max_rows - pulled.admission.emitted_count - asked
            while not stopping and room > 0 and len(in_flight) < PULLS_IN_FLIGHT:
                count = min(PULL_MAX, room)
                call_number = log.sent()
                if pulled.first_sent is None:
                    pulled.first_sent = time.time()
                call = asyncio.ensure_future(_pull_bytes(transport, subscription, count))
                in_flight[call] = (call_number, count)
                room -= count
            if not in_flight:
                # Once per pull, unless it found a message twice: then there is room again.
                if stopping or pulled.admission.confirm() >= max_rows:
                    return
                continue
            answered, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for call in answered:
                call_number, _ = in_flight.pop(call)
                error = call.exception()
                if error is not None:
                    if not (isinstance(error, RpcError) and error.retryable):
                        raise error
                    failures += 1
                    if failures > PULL_RETRIES:
                        raise error
                    await asyncio.sleep(PULL_RETRY_BACKOFF * 2 ** (failures - 1))
                    continue
                failures = 0
                received = decode_bytes(call.result())
                log.answered(call_number, received.ack_ids)
                pulled.chunks.append(received)
                pulled.admission.admit(received.message_ids, received.ack_ids, received.publish_ns)
                now = time.monotonic()
                if not received:
                    waiting = not pulled.admission.emitted_count and keep_waiting(now)
                    stopping = stopping or not waiting
                elif now >= deadline:
                    stopping = True
    finally:
        # Only when a call failed or this was cancelled: end the others and collect what
        # they raised (nobody else will).
        for call in in_flight:
            call.cancel()
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)


async def _pull_bytes(transport: PubSubTransport, subscription: str, count: int) -> bytes:
    """One Pull call's answer as its serialized ``PullResponse``: ``decode_bytes`` parses it
    as columns (``PubSubTransport.call`` would parse it into a ``PullResponse`` first). The
    routing header (docs/protocol.md#request-routing-header) and the error mapping are the
    transport's."""
    pull = transport.channel.unary_unary(
        _PULL,
        request_serializer=pubsub_pb2.PullRequest.SerializeToString,
        response_deserializer=None,  # the bytes as they came
    )
    try:
        answer = await pull(
            pubsub_pb2.PullRequest(subscription=subscription, max_messages=count),
            timeout=PULL_CALL_TIMEOUT,
            metadata=(("x-goog-request-params", f"subscription={subscription}"),),
        )
    except grpc.aio.AioRpcError as error:
        raise rpc_error_from_grpc(error) from error
    assert isinstance(answer, bytes)
    return answer
