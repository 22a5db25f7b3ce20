"""The policy extension behind bearer tokens (``eoclient serve --auth-token-file``): the
gRPC service, the Pub/Sub-shaped REST routes and the Pulsar alias check the caller's
projects like every google.pubsub.v1 call, before anything is looked up or changed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest

from eoclient._proto import broker_policies_pb2 as bp
from eoclient.server_stub.access.security import DoorSecurity
from eoclient.server_stub.access.tokens import TokenTable
from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

TOKENS = """\
team-a-token   team-a
"""
TOPIC = "projects/team-b/topics/orders"
SUB = "projects/team-b/subscriptions/billing"
ALIAS = "/admin/v2/persistent/team-b/default/orders/subscription/billing/skipByMessageIds"


@pytest.fixture
async def secured() -> AsyncIterator[ReferenceServer]:
    async with run_server(security=DoorSecurity(tokens=TokenTable.parse(TOKENS))) as server:
        server.broker.topics.create(TopicConfig(TOPIC))
        server.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
        server.broker.publishing.publish(TOPIC, [NewMessage(b"m")])
        yield server


async def test_the_grpc_extension_checks_the_callers_projects(secured: ReferenceServer) -> None:
    async with grpc.aio.insecure_channel(secured.address) as channel:
        skip = channel.unary_unary(
            "/eoclient.broker.v1.BrokerPolicies/SkipMessages",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=bp.SkipMessagesResponse.FromString,
        )
        request = bp.SkipMessagesRequest(subscription=SUB, message_ids=["1"])
        for metadata, code in (
            ((), grpc.StatusCode.UNAUTHENTICATED),
            ((("authorization", "Bearer team-a-token"),), grpc.StatusCode.PERMISSION_DENIED),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await skip(request, metadata=metadata)
            assert caught.value.code() == code
    assert secured.broker.backlog(SUB) == 1


async def test_rest_routes_and_the_pulsar_alias_check_the_callers_projects(
    secured: ReferenceServer,
) -> None:
    body = json.dumps({"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": 1}]})
    headers = {"Content-Type": "application/json"}
    team_a = {**headers, "Authorization": "Bearer team-a-token"}
    async with aiohttp.ClientSession() as http:
        async with http.post(secured.rest_url + ALIAS, data=body, headers=headers) as answer:
            assert answer.status == 401
        async with http.post(secured.rest_url + ALIAS, data=body, headers=team_a) as answer:
            assert answer.status == 403
            assert "may not use project 'team-b'" in (await answer.json())["reason"]
        missing = ALIAS.replace("/billing/", "/missing/")
        async with http.post(secured.rest_url + missing, data=body, headers=team_a) as answer:
            assert answer.status == 403  # not 404: nothing is revealed about team-b
        async with http.get(
            f"{secured.rest_url}/v1/{TOPIC}/policies", headers={"Authorization": "Bearer x"}
        ) as answer:
            assert answer.status == 401
        async with http.get(f"{secured.rest_url}/v1/{TOPIC}/policies", headers=team_a) as answer:
            assert answer.status == 403
    assert secured.broker.backlog(SUB) == 1
