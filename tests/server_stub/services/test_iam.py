"""IAM policy methods through both doors, with google-cloud-pubsub's own
clients (gRPC and REST) — the flow of its system tests ``test_managing_topic_iam_policy``
and ``test_managing_subscription_iam_policy`` — and plain HTTP/JSON as curl sends it."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from google.api_core import exceptions as api_exceptions
from support.official_clients import OfficialClients, in_thread
from support.wire import unique

from eoclient.server_stub.server import ReferenceServer, run_server


def _manage(client: Any, resource: str) -> None:
    """The system tests' flow: read, add two bindings, write, read back."""
    policy = client.get_iam_policy(request={"resource": resource})
    assert list(policy.bindings) == []
    assert policy.etag == b"\x00\x20\x01"
    policy.bindings.add(role="roles/pubsub.editor", members=["domain:google.com"])
    policy.bindings.add(role="roles/pubsub.viewer", members=["group:cloud-logs@google.com"])
    new_policy = client.set_iam_policy(request={"resource": resource, "policy": policy})
    again = client.get_iam_policy(request={"resource": resource})
    assert again.bindings == new_policy.bindings
    assert again.etag == new_policy.etag != policy.etag
    bindings = sorted(again.bindings, key=lambda b: b.role)
    assert [(b.role, list(b.members)) for b in bindings] == [
        ("roles/pubsub.editor", ["domain:google.com"]),
        ("roles/pubsub.viewer", ["group:cloud-logs@google.com"]),
    ]
    # A write based on the stale read is refused (read-modify-write with etags).
    # ABORTED over gRPC; HTTP 409 over REST, which api_core reads as Conflict (its base).
    with pytest.raises(api_exceptions.Conflict, match="concurrent policy changes"):
        client.set_iam_policy(request={"resource": resource, "policy": policy})
    permissions = ["pubsub.topics.get", "pubsub.topics.publish"]
    if "/subscriptions/" in resource:
        permissions = ["pubsub.subscriptions.consume", "pubsub.subscriptions.get"]
    answer = client.test_iam_permissions(request={"resource": resource, "permissions": permissions})
    assert sorted(answer.permissions) == permissions


async def test_topic_and_subscription_policies(clients: OfficialClients) -> None:
    topic, sub = unique("topic"), unique("sub")
    await in_thread(lambda: clients.publisher.create_topic(name=topic))
    await in_thread(lambda: clients.subscriber.create_subscription(name=sub, topic=topic))
    await in_thread(lambda: _manage(clients.publisher, topic))
    await in_thread(lambda: _manage(clients.subscriber, sub))


async def test_errors_reach_the_client_typed(clients: OfficialClients) -> None:
    # (BadRequest: InvalidArgument over gRPC is a subclass; REST answers HTTP 400.)
    topic = unique("topic")
    with pytest.raises(api_exceptions.NotFound, match="Resource not found"):
        await in_thread(lambda: clients.publisher.get_iam_policy(request={"resource": topic}))
    await in_thread(lambda: clients.publisher.create_topic(name=topic))
    with pytest.raises(api_exceptions.BadRequest, match="Role roles/bogus"):
        await in_thread(
            lambda: clients.publisher.set_iam_policy(
                request={
                    "resource": topic,
                    "policy": {"bindings": [{"role": "roles/bogus", "members": ["allUsers"]}]},
                }
            )
        )
    with pytest.raises(api_exceptions.BadRequest, match="not valid for this resource"):
        await in_thread(
            lambda: clients.publisher.test_iam_permissions(
                request={"resource": topic, "permissions": ["pubsub.subscriptions.consume"]}
            )
        )


async def test_conditional_policy_over_rest_json(server: ReferenceServer) -> None:
    """curl's view: camelCase JSON, base64 etag, version 3 in the query."""
    topic = unique("topic")
    async with aiohttp.ClientSession(
        server.rest_url, headers={"Content-Type": "application/json"}
    ) as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            data = None if body is None else json.dumps(body)
            async with http.request(method, path, data=data) as response:
                return response.status, await response.json()

        assert (await call("PUT", f"/v1/{topic}", {}))[0] == 200
        status, empty = await call("GET", f"/v1/{topic}:getIamPolicy")
        assert (status, empty) == (200, {"etag": "ACAB"})
        policy = {
            "version": 3,
            "etag": "ACAB",
            "bindings": [
                {
                    "role": "roles/pubsub.subscriber",
                    "members": ["user:a@example.com"],
                    "condition": {"expression": "request.time < timestamp('2030-01-01T00:00:00Z')"},
                }
            ],
        }
        status, stored = await call("POST", f"/v1/{topic}:setIamPolicy", {"policy": policy})
        assert status == 200, stored
        assert stored["version"] == 3
        assert stored["bindings"] == policy["bindings"]
        status, v3 = await call("GET", f"/v1/{topic}:getIamPolicy?options.requestedPolicyVersion=3")
        assert v3 == stored
        status, v1 = await call("GET", f"/v1/{topic}:getIamPolicy")
        assert v1["bindings"][0]["role"].startswith("roles/pubsub.subscriber_withcond_")
        assert "condition" not in v1["bindings"][0]
        status, error = await call(
            "POST",
            f"/v1/{topic}:setIamPolicy",
            {"policy": {"bindings": policy["bindings"], "version": 1}},
        )
        assert status == 400
        assert error["error"]["status"] == "INVALID_ARGUMENT"
        assert "version 3" in error["error"]["message"]
        status, tested = await call(
            "POST",
            f"/v1/{topic}:testIamPermissions",
            {"permissions": ["pubsub.topics.publish"]},
        )
        assert (status, tested) == (200, {"permissions": ["pubsub.topics.publish"]})
        status, error = await call("GET", "/v1/projects/p1/snapshots/nope:getIamPolicy")
        assert status == 404


async def test_policies_survive_a_restart(tmp_path: Any) -> None:
    topic = unique("topic")
    body = {"policy": {"bindings": [{"role": "roles/pubsub.publisher", "members": ["allUsers"]}]}}
    async with (
        run_server(data_dir=tmp_path) as first,
        aiohttp.ClientSession(first.rest_url) as http,
    ):
        async with http.put(f"/v1/{topic}", json={}) as response:
            assert response.status == 200
        async with http.post(f"/v1/{topic}:setIamPolicy", json=body) as response:
            stored = await response.json()
            assert response.status == 200, stored
    async with (
        run_server(data_dir=tmp_path) as second,
        aiohttp.ClientSession(second.rest_url) as http,
        http.get(f"/v1/{topic}:getIamPolicy") as response,
    ):
        assert await response.json() == stored
