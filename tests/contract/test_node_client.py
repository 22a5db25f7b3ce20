"""Google's Node.js client (@google-cloud/pubsub, installed from npm) against the reference
server: IAM policies, schemas and push delivery as a Node user calls them.

The client is installed once per machine into ``~/.cache/eoclient-tests/node-pubsub`` (npm
registry); the test skips, saying why, where ``node``/``npm`` are absent or the install
fails — never silently passes.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from support.node_client import node_client

from eoclient.server_stub.server import ReferenceServer, run_server

SCRIPT = Path(__file__).parent / "node" / "push_schemas_iam.mjs"


def _node_client() -> Path:
    return node_client()


class Receiver:
    """A push endpoint: records each POST (path, headers, JSON body), answers 204."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.url = ""

    async def push(self, request: web.Request) -> web.Response:
        self.posts.append((request.path, await request.json()))
        return web.Response(status=204)

    async def received(self, _: web.Request) -> web.Response:
        return web.json_response({"count": len(self.posts)})


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/push", receiver.push)
    app.router.add_get("/received", receiver.received)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    receiver.url = f"http://127.0.0.1:{port}"
    try:
        yield receiver
    finally:
        await runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv


@pytest.mark.timeout(300)  # a first run installs the client from npm
async def test_node_client_iam_schemas_and_push(
    server: ReferenceServer, receiver: Receiver
) -> None:
    home = await asyncio.to_thread(_node_client)
    run_id = uuid.uuid4().hex[:10]
    env = {
        **os.environ,
        "PUBSUB_EMULATOR_HOST": server.address,
        "RUN_ID": run_id,
        "PUSH_URL": receiver.url + "/push",
        "RECEIVED_URL": receiver.url + "/received",
        "NODE_PATH": str(home / "node_modules"),
    }
    # An .mjs script resolves packages from its own directory upwards, not NODE_PATH:
    # run a copy placed beside the installed node_modules.
    script = home / SCRIPT.name
    script.write_text(SCRIPT.read_text())
    process = await asyncio.create_subprocess_exec(
        "node",
        str(script),
        cwd=home,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()[-2000:]
    out = json.loads(stdout.decode().strip().splitlines()[-1])

    assert out["iamBindings"] == [
        {"role": "roles/pubsub.publisher", "members": ["user:node@example.com"]}
    ]
    assert out["iamEtagChanged"] is True
    assert out["iamReread"] == ["roles/pubsub.publisher"]
    assert out["iamPermissions"] == {"pubsub.topics.publish": True}

    schema = f"projects/node-contract/schemas/schema-{run_id}"
    assert out["schemaName"] == schema
    assert out["boundSchema"] == schema
    assert out["validMessageId"]
    refused = out["invalidRefused"]
    assert refused is not None, "a message that does not match the schema was accepted"
    assert refused["code"] == 3  # INVALID_ARGUMENT
    assert "schema" in refused["details"].lower()

    assert out["pushEndpoint"] == receiver.url + "/push"
    assert out["pushEndpointAfter"] == ""
    [(path, body)] = receiver.posts
    assert path == "/push"
    assert body["subscription"] == f"projects/node-contract/subscriptions/push-{run_id}"
    assert body["message"]["messageId"] == out["pushedMessageId"]
    assert body["message"]["attributes"] == {"origin": "node"}
