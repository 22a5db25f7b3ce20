"""The gcloud CLI (installed here with the emulator) against the reference server's REST
door: schemas, a topic bound to one, push and IAM, as a gcloud user types them.

gcloud is pointed at the door by ``CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB`` with credentials
disabled, in a configuration directory of its own (the user's is never touched).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from eoclient.server_stub.server import ReferenceServer, run_server

PROJECT = "gcloud-contract"
AVRO = '{"type":"record","name":"Reading","fields":[{"name":"sensor","type":"string"}]}'

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")


class Gcloud:
    def __init__(self, server: ReferenceServer, config: Path) -> None:
        assert server.rest_url is not None
        self.env = {
            **os.environ,
            "CLOUDSDK_CONFIG": str(config),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB": server.rest_url.rstrip("/") + "/",
            "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
            "CLOUDSDK_CORE_PROJECT": PROJECT,
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        }

    async def run(self, *args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            "gcloud",
            "pubsub",
            *args,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode is not None
        return process.returncode, stdout.decode(), stderr.decode()

    async def ok(self, *args: str) -> Any:
        code, stdout, stderr = await self.run(*args, "--format=json")
        assert code == 0, stderr
        return json.loads(stdout) if stdout.strip() else None


class Receiver:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.url = ""

    async def push(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        self.arrived.set()
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/push", receiver.push)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}/push"
    try:
        yield receiver
    finally:
        await runner.cleanup()


@pytest.fixture
async def gcloud(tmp_path: Path) -> AsyncIterator[Gcloud]:
    async with run_server() as srv:
        yield Gcloud(srv, tmp_path / "gcloud-config")


@pytest.mark.timeout(180)
async def test_schemas_and_a_bound_topic(gcloud: Gcloud, tmp_path: Path) -> None:
    definition = tmp_path / "reading.avsc"
    definition.write_text(AVRO)
    schema = await gcloud.ok(
        "schemas", "create", "readings", "--type=avro", f"--definition-file={definition}"
    )
    assert schema["name"] == f"projects/{PROJECT}/schemas/readings"
    assert schema["type"] == "AVRO"
    good, bad = '{"sensor":"a"}', '{"sensor":1}'
    validate = ("schemas", "validate-message", "--schema-name=readings", "--message-encoding=json")
    code, _, stderr = await gcloud.run(*validate, f"--message={good}")
    assert code == 0, stderr
    code, _, stderr = await gcloud.run(*validate, f"--message={bad}")
    assert code != 0
    assert "INVALID_ARGUMENT" in stderr
    assert "schema validation" in stderr
    await gcloud.ok("topics", "create", "bound", "--schema=readings", "--message-encoding=json")
    topic = await gcloud.ok("topics", "describe", "bound")
    assert topic["schemaSettings"]["schema"] == schema["name"]
    assert topic["schemaSettings"]["encoding"] == "JSON"
    published = await gcloud.ok("topics", "publish", "bound", f"--message={good}")
    assert published["messageIds"]
    code, _, stderr = await gcloud.run("topics", "publish", "bound", f"--message={bad}")
    assert code != 0
    assert "Message failed schema validation" in stderr


@pytest.mark.timeout(180)
async def test_push_subscription_and_back_to_pull(gcloud: Gcloud, receiver: Receiver) -> None:
    await gcloud.ok("topics", "create", "orders")
    push = f"--push-endpoint={receiver.url}"
    await gcloud.ok("subscriptions", "create", "orders-push", "--topic=orders", push)
    described = await gcloud.ok("subscriptions", "describe", "orders-push")
    assert described["pushConfig"]["pushEndpoint"] == receiver.url
    [message_id] = (
        await gcloud.ok("topics", "publish", "orders", "--message=pushed", "--attribute=k=v")
    )["messageIds"]
    await asyncio.wait_for(receiver.arrived.wait(), 30)
    [body] = receiver.bodies
    assert body["subscription"] == f"projects/{PROJECT}/subscriptions/orders-push"
    assert body["message"]["messageId"] == message_id
    assert body["message"]["attributes"] == {"k": "v"}
    await gcloud.ok("subscriptions", "modify-push-config", "orders-push", "--push-endpoint=")
    described = await gcloud.ok("subscriptions", "describe", "orders-push")
    assert described.get("pushConfig", {}) == {}


@pytest.mark.timeout(180)
async def test_iam_policy_bindings(gcloud: Gcloud) -> None:
    await gcloud.ok("topics", "create", "audited")
    member, role = "user:ana@example.com", "roles/pubsub.publisher"
    added = await gcloud.ok(
        "topics", "add-iam-policy-binding", "audited", f"--member={member}", f"--role={role}"
    )
    assert added["bindings"] == [{"members": [member], "role": role}]
    read = await gcloud.ok("topics", "get-iam-policy", "audited")
    assert read["bindings"] == added["bindings"]
    assert read["etag"] == added["etag"]
    removed = await gcloud.ok(
        "topics", "remove-iam-policy-binding", "audited", f"--member={member}", f"--role={role}"
    )
    assert not removed.get("bindings")
    assert removed["etag"] != added["etag"]
