"""An SDK round trip run by a Python that has only the installed wheel (not a test file:
test_release_wheel.py runs it with a bare-wheel venv's interpreter, ``python -I``).

``sdk_smoke.py TOPIC SUBSCRIPTION COUNT`` publishes COUNT messages to TOPIC, consumes
them from SUBSCRIPTION (exactly-once) with ``ack_with_response``, and prints one JSON
object: where eoclient was imported from, each message id with how often it arrived and
its ack status, and which modules of the server, the command or their dependencies the
interpreter ended up holding. The server is ``PUBSUB_EMULATOR_HOST``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys

import eoclient

# A stream that has delivered everything goes quiet; this bounds a lost message.
RECEIVE_TIMEOUT = 60.0
NOT_THE_SDK = ("eoclient.server_stub", "eoclient.cli", "aiohttp", "click", "rich", "fastavro")


async def round_trip(topic: str, subscription: str, count: int) -> dict[str, object]:
    async with eoclient.PublisherClient() as publisher:
        published = await asyncio.gather(
            *(publisher.publish(topic, f"message {i}".encode(), index=str(i)) for i in range(count))
        )
    arrivals: collections.Counter[str] = collections.Counter()
    statuses: dict[str, str] = {}
    async with (
        eoclient.SubscriberClient() as subscriber,
        subscriber.subscribe(subscription) as stream,
        asyncio.timeout(RECEIVE_TIMEOUT),
    ):
        async for message in stream:
            arrivals[message.message_id] += 1
            statuses[message.message_id] = (await message.ack_with_response()).name
            if len(statuses) == count:
                break
    return {
        "eoclient": eoclient.__file__,
        "published": published,
        "arrivals": dict(arrivals),
        "statuses": statuses,
        "not_the_sdk": sorted(m for m in sys.modules if m.startswith(NOT_THE_SDK)),
    }


if __name__ == "__main__":
    topic, subscription, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(json.dumps(asyncio.run(round_trip(topic, subscription, count))))
