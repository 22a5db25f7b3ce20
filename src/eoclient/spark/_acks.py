"""Acks and modacks of many ack ids at once, by unary call, for the source's bulk work.

A read task settles a committed part (tens of thousands of ack ids), a lease keeper extends a
part's leases, a puller gives deliveries back. ``SubscriberClient.acknowledge`` returns a
result object per id, built from a request object per id: about 4 µs of CPU a message here,
as much as pulling and decoding it. Here a call that succeeds (the common case) costs nothing
per id: an OK answer applies every id it carried. Only a failed call is looked at id by id,
by the SDK's own rules (:func:`eoclient.subscriber.ack_results.classify_unary_error`: the
status and the ``ErrorInfo`` listing the ids that failed); transient failures are sent again
with the SDK's backoff settings (:class:`~eoclient.subscriber.AckRetrySettings`) until their
deadline.

The subscription is taken to have exactly-once delivery: on one without it, a failed call
then reports its ids as failed where the SDK would report SUCCESS. The source only makes
them *pending* (a redelivery is acked, not emitted), which is right for any subscription.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

from eoclient._transport import PubSubTransport
from eoclient.errors import RpcError
from eoclient.subscriber import AcknowledgeStatus, AckRetrySettings
from eoclient.subscriber.ack_records import ACK_IDS_PER_REQUEST
from eoclient.subscriber.ack_results import classify_unary_error

# A call that takes longer fails (DEADLINE_EXCEEDED) and is retried: an ack of 2,500 ids
# takes milliseconds.
CALL_TIMEOUT = 30.0
# Chunks of one bulk operation in flight at once.
CALLS_IN_FLIGHT = 8


async def acknowledge(
    transport: PubSubTransport, subscription: str, ack_ids: Sequence[str], retry: AckRetrySettings
) -> dict[str, AcknowledgeStatus]:
    """Acknowledge ``ack_ids``; the ids that did not succeed, with their status (a transient
    failure that outlived ``retry.deadline``, or a broken channel: OTHER)."""
    return await _bulk(transport, subscription, ack_ids, None, retry)


async def modify_ack_deadline(
    transport: PubSubTransport,
    subscription: str,
    ack_ids: Sequence[str],
    seconds: int,
    retry: AckRetrySettings,
) -> dict[str, AcknowledgeStatus]:
    """Set the deadline of ``ack_ids`` to ``seconds`` (0: give them back now); the ids that
    did not succeed, with their status."""
    return await _bulk(transport, subscription, ack_ids, seconds, retry)


async def _bulk(
    transport: PubSubTransport,
    subscription: str,
    ack_ids: Sequence[str],
    seconds: int | None,
    retry: AckRetrySettings,
) -> dict[str, AcknowledgeStatus]:
    ids = list(dict.fromkeys(ack_ids))
    chunks = [
        ids[start : start + ACK_IDS_PER_REQUEST]
        for start in range(0, len(ids), ACK_IDS_PER_REQUEST)
    ]
    failed: dict[str, AcknowledgeStatus] = {}
    room = asyncio.Semaphore(CALLS_IN_FLIGHT)

    async def one(chunk: list[str]) -> None:
        async with room:
            failed.update(await _chunk(transport, subscription, chunk, seconds, retry))

    if len(chunks) == 1:
        await one(chunks[0])
    elif chunks:
        async with asyncio.TaskGroup() as group:
            for chunk in chunks:
                group.create_task(one(chunk))
    return failed


async def _chunk(
    transport: PubSubTransport,
    subscription: str,
    ack_ids: list[str],
    seconds: int | None,
    retry: AckRetrySettings,
) -> dict[str, AcknowledgeStatus]:
    failed: dict[str, AcknowledgeStatus] = {}
    remaining = ack_ids
    started = time.monotonic()
    delay = retry.initial_backoff
    while True:
        try:
            if seconds is None:
                await transport.acknowledge(subscription, remaining, timeout=CALL_TIMEOUT)
            else:
                await transport.modify_ack_deadline(
                    subscription, remaining, seconds, timeout=CALL_TIMEOUT
                )
            return failed
        except RpcError as error:
            outcome = classify_unary_error(remaining, error, exactly_once=True)
        for ack_id, result in outcome.final.items():
            if result.status is not AcknowledgeStatus.SUCCESS:
                failed[ack_id] = result.status
        remaining = list(outcome.retry)
        if not remaining:
            return failed
        if time.monotonic() - started + delay > retry.deadline:
            failed.update(dict.fromkeys(remaining, AcknowledgeStatus.OTHER))
            return failed
        # Jittered like the SDK's retries, so tasks that failed together spread out.
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * retry.multiplier, retry.max_backoff)
