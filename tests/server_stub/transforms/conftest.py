"""Fixtures of the message-transform tests: a reference server whose UDFs have a short
time limit (a runaway UDF costs each of its messages one limit), and google-cloud-pubsub's
own clients on it over each door."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from support.official_clients import OfficialClients

from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.server_stub.transforms import TransformLimits

LIMITS = TransformLimits(time_per_message=0.2, memory_bytes=32 * 2**20)


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server(transform_limits=LIMITS) as srv:
        yield srv


@pytest.fixture(params=["grpc", "rest"])
def clients(request: pytest.FixtureRequest, server: ReferenceServer) -> Iterator[OfficialClients]:
    """The official clients over each door in turn."""
    made = OfficialClients(server, request.param)
    yield made
    made.close()


@pytest.fixture
def grpc_clients(server: ReferenceServer) -> Iterator[OfficialClients]:
    made = OfficialClients(server, "grpc")
    yield made
    made.close()
