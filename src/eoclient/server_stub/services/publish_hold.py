"""A Publish held by a backlog quota whose action is PRODUCER_REQUEST_HOLD
(docs/protocol.md#backlog-quotas).

The broker core refuses such a Publish with ``BacklogQuotaHeld`` and stores nothing;
waiting is the door's part (the core never awaits). Pulsar's broker holds the
producer's send "until space frees or client sendTimeoutMs expires"; here the wait is
bounded by the quota's ``hold_timeout`` (default 30 s, Pulsar's sendTimeoutMs default),
after which the publisher gets RESOURCE_EXHAUSTED, which publishers retry within their
own retry settings (eoclient's and the official clients' alike).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from eoclient.errors import ResourceExhausted
from eoclient.server_stub.core import Broker
from eoclient.server_stub.core.model import NewMessage
from eoclient.server_stub.core.policies import BacklogQuotaHeld

# A held Publish tries again this often (and once more when its hold ends). Trying is
# cheap (the quota is checked before anything is stored), and trying sees every way a
# backlog shrinks: acks, skips, TTL, retention, a changed or removed quota, a deleted
# subscription; change notifications would miss the last few.
HOLD_RETRY_SECONDS = 0.05


async def publish_held(
    broker: Broker,
    topic: str,
    messages: Sequence[NewMessage],
    request_bytes: int,
    held: BacklogQuotaHeld,
) -> list[str]:
    """Finish a Publish the broker held: its message ids once the backlog is back under
    the quota, or RESOURCE_EXHAUSTED after ``held.hold_timeout`` seconds.

    The refusal carries the quota's latest text and how long the publish waited. Every
    held publish is counted on the topic (``publishing.note_held``), admitted or not. The
    hold is real time whatever the broker's clock: it is the door's wait, not the
    broker's. Another error on a retry (the topic deleted, the quota changed to
    PRODUCER_EXCEPTION) ends the hold with that error.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + held.hold_timeout
    admitted = False
    try:
        while True:
            remaining = deadline - loop.time()
            await asyncio.sleep(max(0.0, min(HOLD_RETRY_SECONDS, remaining)))
            try:
                ids = broker.publishing.publish(topic, messages, request_bytes)
            except BacklogQuotaHeld as again:
                if remaining <= HOLD_RETRY_SECONDS:
                    raise ResourceExhausted(
                        f"{again.message} The publish was held {held.hold_timeout:g} s "
                        "(producer_request_hold) and the backlog did not shrink in time."
                    ) from None
                continue
            admitted = True
            return ids
    finally:
        broker.publishing.note_held(topic, admitted=admitted)
