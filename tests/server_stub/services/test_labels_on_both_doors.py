"""Labels outside the service's rules are INVALID_ARGUMENT on gRPC and on REST, for topics,
subscriptions and snapshots, at create and at update; nothing is stored (core/labels.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

import eoclient
from eoclient.errors import InvalidArgument
from eoclient.server_stub.core.labels import RULE
from eoclient.server_stub.server import ReferenceServer, run_server

P = "projects/labels"
BAD = {"Team": "payments"}
THE_RULE = 'key "Team" does not conform to regular expression'


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv


async def test_grpc_refuses_bad_labels_and_stores_nothing(server: ReferenceServer) -> None:
    async with eoclient.AdminClient(server.address) as admin:
        with pytest.raises(InvalidArgument) as raised:
            await admin.create_topic(f"{P}/topics/orders", labels=BAD)
        assert THE_RULE in raised.value.message
        assert raised.value.message.endswith(RULE)
        assert [t.name async for t in admin.list_topics(P)] == []
        await admin.create_topic(f"{P}/topics/orders", labels={"team": "payments"})
        with pytest.raises(InvalidArgument, match=THE_RULE):
            await admin.update_topic(f"{P}/topics/orders", labels=BAD)
        assert (await admin.get_topic(f"{P}/topics/orders")).labels == {"team": "payments"}
        with pytest.raises(InvalidArgument, match=THE_RULE):
            await admin.create_subscription(
                f"{P}/subscriptions/billing", f"{P}/topics/orders", labels=BAD
            )
        await admin.create_subscription(f"{P}/subscriptions/billing", f"{P}/topics/orders")
        with pytest.raises(InvalidArgument, match="65 labels"):
            await admin.update_subscription(
                f"{P}/subscriptions/billing", labels={f"k{i}": "v" for i in range(65)}
            )
        with pytest.raises(InvalidArgument, match=THE_RULE):
            await admin.create_snapshot(
                f"{P}/snapshots/before", f"{P}/subscriptions/billing", labels=BAD
            )
        await admin.create_snapshot(f"{P}/snapshots/before", f"{P}/subscriptions/billing")
        with pytest.raises(InvalidArgument, match='value "X" of key "team"'):
            await admin.update_snapshot(f"{P}/snapshots/before", labels={"team": "X"})
        assert (await admin.get_snapshot(f"{P}/snapshots/before")).labels == {}


async def test_rest_refuses_bad_labels_with_400_and_the_rule(server: ReferenceServer) -> None:
    base = f"{server.rest_url}/v1"
    async with aiohttp.ClientSession() as http:
        async with http.put(f"{base}/{P}/topics/orders", json={"labels": BAD}) as answer:
            assert answer.status == 400
            error = (await answer.json())["error"]
            assert error["status"] == "INVALID_ARGUMENT"
            assert THE_RULE in error["message"]
            assert error["message"].endswith(RULE)
        async with http.put(f"{base}/{P}/topics/orders", json={}) as answer:
            assert answer.status == 200
        body = {"topic": f"{P}/topics/orders", "labels": {"": "empty key"}}
        async with http.put(f"{base}/{P}/subscriptions/billing", json=body) as answer:
            assert answer.status == 400
            assert 'key "" does not conform' in (await answer.json())["error"]["message"]
        patch = {"topic": {"labels": {"team": "a" * 64}}, "updateMask": "labels"}
        async with http.patch(f"{base}/{P}/topics/orders", json=patch) as answer:
            assert answer.status == 400
            assert "it is 64 characters long" in (await answer.json())["error"]["message"]
        async with http.get(f"{base}/{P}/topics/orders") as answer:
            assert (await answer.json()).get("labels", {}) == {}
