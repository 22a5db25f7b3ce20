"""Exactly-once acks, nacks and modacks by unary call: the async part of the ledger.

The decisions are the ledger's (:class:`~eoclient.subscriber.acker.Acker`): what an answer
settles (``apply_unary_answer``), how long to wait before a retry and when to give up
(``retry_delay``). This module only makes the calls and waits, on the ledger's clock, so
a test on a ``FakeClock`` runs through a 600 s retry deadline in a few loop turns.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from eoclient.errors import RpcError

if TYPE_CHECKING:
    from eoclient.subscriber.acker import Acker, AckRequest, Operation

__all__ = ["send_unary"]


async def send_unary(acker: Acker, batch: list[AckRequest]) -> None:
    """One call per RPC kind, deadline and 2,500 ids (``ACK_IDS_PER_REQUEST``), all in flight
    together: the calls of one batch (acks, nacks, modacks of each deadline) are independent."""
    from eoclient.subscriber.acker import ACK_IDS_PER_REQUEST, kind_of

    groups: dict[tuple[Operation, int], list[AckRequest]] = {}
    for request in batch:
        groups.setdefault((kind_of(request), request.wire_seconds), []).append(request)
    calls = [
        _call_with_retry(acker, kind, seconds, requests[start : start + ACK_IDS_PER_REQUEST])
        for (kind, seconds), requests in groups.items()
        for start in range(0, len(requests), ACK_IDS_PER_REQUEST)
    ]
    if len(calls) == 1:
        await calls[0]
        return
    async with asyncio.TaskGroup() as group:
        for call in calls:
            group.create_task(call)


async def _call_with_retry(
    acker: Acker, kind: Operation, seconds: int, requests: list[AckRequest]
) -> None:
    from eoclient.subscriber.acker import Operation

    remaining = {r.ack_id: r for r in requests}
    last_reason: dict[str, str] = {}
    started = acker.clock.now()
    attempt = 0
    while True:
        ids = list(remaining)
        error: RpcError | None = None
        acker.stats.unary_calls += 1
        try:
            if kind is Operation.ACK:
                await acker.transport.acknowledge(acker.subscription, ids)
            else:
                await acker.transport.modify_ack_deadline(acker.subscription, ids, seconds)
        except RpcError as failure:
            error = failure
        acker.apply_unary_answer(kind, remaining, error, last_reason)
        if not remaining:
            return
        attempt += 1
        delay = acker.retry_delay(attempt, acker.clock.now() - started, acker.rng)
        if delay is None:
            acker.give_up(remaining, last_reason)
            return
        await acker.clock.sleep(delay)
