"""Fixtures of the service tests that go through google-cloud-pubsub's own clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from support.official_clients import OfficialClients

from eoclient.server_stub.server import ReferenceServer, run_server


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv


@pytest.fixture(params=["grpc", "rest"])
def clients(request: pytest.FixtureRequest, server: ReferenceServer) -> Iterator[OfficialClients]:
    """The official clients over each door in turn."""
    made = OfficialClients(server, request.param)
    yield made
    made.close()
