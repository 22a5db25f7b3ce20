"""Push delivery against ``eoclient serve`` and Google's emulator (0.8.20): the same push
subscriptions on both, one local receiver each, and the requests compared — the wrapped
JSON's fields, the unwrapped body and its metadata headers, redelivery after a failure.

Where the emulator departs from the service, the test pins each side: it omits
``orderingKey`` and ``deliveryAttempt`` from the wrapped message, sends no OIDC token,
and accepts exactly-once push subscriptions (the service refuses them).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from aiohttp import web
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb

pytestmark = pytest.mark.emulator

WAIT = 10.0


@pytest.fixture(params=["reference", "emulator"])
def target(request: pytest.FixtureRequest, wire_factory: Callable[[str], Wire]) -> Wire:
    address = request.getfixturevalue("served" if request.param == "reference" else "emulator")
    wire = wire_factory(address)
    wire.kind = request.param  # type: ignore[attr-defined]
    return wire


class Receiver:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.fail_first = 0
        self.arrived = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.headers), await request.read()))
        self.arrived.set()
        if self.fail_first > 0:
            self.fail_first -= 1
            return web.Response(status=503)
        return web.Response(status=200)

    async def wait_for(self, path: str, count: int) -> list[tuple[dict[str, str], bytes]]:
        async def enough() -> list[tuple[dict[str, str], bytes]]:
            while True:
                found = [(h, b) for p, h, b in self.requests if p == path]
                if len(found) >= count:
                    return found
                self.arrived.clear()
                await self.arrived.wait()

        return await asyncio.wait_for(enough(), WAIT)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    made = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", made.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    made.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield made
    await runner.cleanup()


async def test_push_requests_match_the_emulators(target: Wire, receiver: Receiver) -> None:
    topic = await target.topic()
    tag = unique("sub").rsplit("-", 2)[1]
    wrapped, unwrapped = f"/wrapped-{tag}", f"/unwrapped-{tag}"
    await target.subscription(
        topic,
        enable_message_ordering=True,
        push_config=pb.PushConfig(push_endpoint=receiver.url + wrapped),
    )
    await target.subscription(
        topic,
        enable_message_ordering=True,
        push_config=pb.PushConfig(
            push_endpoint=receiver.url + unwrapped,
            no_wrapper=pb.PushConfig.NoWrapper(write_metadata=True),
        ),
    )
    receiver.fail_first = 1  # the first push (of either) fails and is pushed again
    message = pb.PubsubMessage(data=b"hello", attributes={"k": "v"}, ordering_key="key")
    (message_id,) = (
        await target.Publish(pb.PublishRequest(topic=topic, messages=[message]))
    ).message_ids

    (headers, body), *_ = await receiver.wait_for(wrapped, 1)
    document: dict[str, Any] = json.loads(body)
    assert headers["Content-Type"] == "application/json"
    assert document["subscription"].startswith("projects/p1/subscriptions/")
    got = document["message"]
    assert base64.b64decode(got["data"]) == b"hello"
    assert got["attributes"] == {"k": "v"}
    assert got["messageId"] == got["message_id"] == message_id
    assert got["publishTime"] == got["publish_time"]
    common = {"data", "attributes", "messageId", "message_id", "publishTime", "publish_time"}
    extra = set(got) - common
    assert extra == (set() if target.kind == "emulator" else {"orderingKey"})  # type: ignore[attr-defined]

    (headers, body), *_ = await receiver.wait_for(unwrapped, 1)
    assert body == b"hello"
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered["k"] == "v"
    assert lowered["x-goog-pubsub-message-id"] == message_id
    assert lowered["x-goog-pubsub-subscription-name"].startswith("projects/p1/subscriptions/")
    assert lowered["x-goog-pubsub-publish-time"].endswith("Z")
    assert lowered["x-goog-ordering-key"] == "key"

    # One push failed and was pushed again; then both were acknowledged: no fourth.
    async def three() -> None:
        while sum(1 for p, _, _ in receiver.requests if p in (wrapped, unwrapped)) < 3:
            receiver.arrived.clear()
            await receiver.arrived.wait()

    await asyncio.wait_for(three(), WAIT)
    await asyncio.sleep(1.0)
    assert sum(1 for p, _, _ in receiver.requests if p in (wrapped, unwrapped)) == 3


async def test_exactly_once_push_is_refused_by_the_reference_only(
    target: Wire, receiver: Receiver
) -> None:
    topic = await target.topic()
    push = pb.PushConfig(push_endpoint=receiver.url + "/eod")
    call = target.subscription(topic, push_config=push, enable_exactly_once_delivery=True)
    if target.kind == "emulator":  # type: ignore[attr-defined]
        await call  # the emulator accepts it; the service does not
        return
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
