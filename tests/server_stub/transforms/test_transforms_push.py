"""A push subscription's transforms: what the endpoint receives is what the UDF returned;
a filtered message is never pushed (the server acknowledges it)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from support.wire import Wire

from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer

UDF = pb.MessageTransform(
    javascript_udf=pb.JavaScriptUDF(
        function_name="mark",
        code="function mark(m, md) { if (m.data === 'skip') return null;"
        " m.attributes.pushed_id = md.message_id; m.data = '<' + m.data + '>'; return m; }",
    )
)


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, list[Any]]]:
    received: list[Any] = []

    async def handle(request: web.Request) -> web.Response:
        received.append(json.loads(await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/push", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/push", received
    await runner.cleanup()


async def test_pushes_carry_what_the_transform_returned(
    server: ReferenceServer, endpoint: tuple[str, list[Any]]
) -> None:
    url, received = endpoint
    wire = Wire(server.address)
    try:
        topic, sub = await wire.subscription(
            push_config=pb.PushConfig(push_endpoint=url), message_transforms=[UDF]
        )
        await wire.publish(topic, b"a", b"skip", b"b")
        for _ in range(500):
            if len(received) >= 2 and not server.broker.backlog(sub):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # nothing more comes
    finally:
        await wire.close()
    messages = [r["message"] for r in received]
    assert sorted(base64.b64decode(m["data"]) for m in messages) == [b"<a>", b"<b>"]
    assert all(m["attributes"]["pushed_id"] == m["messageId"] for m in messages)
    assert not server.broker.backlog(sub)  # the filtered one was acknowledged
    counts = server.services.transforms.subscription_counts[sub]
    assert (counts.transformed, counts.filtered, counts.failed) == (2, 1, 0)
