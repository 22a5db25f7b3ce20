"""Resource limits of the doors, each with a clear error.

Open StreamingPulls per connection and in all (RESOURCE_EXHAUSTED naming the limit),
and the request sizes: 32 MiB a gRPC message, 10 MB a PublishRequest, 32 MiB a REST body.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest
from support.wire import Wire

from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.access.limits import StreamLimits
from eoclient.server_stub.access.security import DoorSecurity
from eoclient.server_stub.server import ReferenceServer, run_server


@pytest.fixture
async def limited() -> AsyncIterator[ReferenceServer]:
    limits = StreamLimits(max_streams_per_connection=2, max_streams=3)
    async with run_server(security=DoorSecurity(stream_limits=limits)) as server:
        yield server


async def test_streams_per_connection_and_in_all_are_limited(
    limited: ReferenceServer, wire_factory: Wire
) -> None:
    one, two = wire_factory(limited.address), wire_factory(limited.address)
    # Channels of one process share a connection unless told otherwise.
    await two.channel.close()
    two.channel = grpc.aio.insecure_channel(
        limited.address, options=[("grpc.use_local_subchannel_pool", 1)]
    )
    _, sub = await one.subscription()
    first, second = one.stream(sub, protocol_version=1), one.stream(sub, protocol_version=1)
    await first.sync()
    await second.sync()
    refused = one.stream(sub)
    error = await refused.ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-streams-per-connection" in (error.details() or "")

    third = two.stream(sub, protocol_version=1)  # another connection: within its own limit
    await third.sync()
    error = await two.stream(sub).ended()
    assert error is not None
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-streams)" in (error.details() or "")
    assert limited.open_streams() == 3

    await first.cancel()  # a closed stream frees its place
    for _ in range(100):
        if limited.open_streams() == 2:
            break
        await first.quiet(0.01)
    again = two.stream(sub, protocol_version=1)
    await again.sync()
    assert limited.open_streams() == 3


def test_stream_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_streams"):
        StreamLimits(max_streams=-1)
    assert StreamLimits(0, 0).max_streams == 0  # unlimited


async def test_request_size_limits(reference: ReferenceServer, wire: Wire) -> None:
    topic = await wire.topic()
    # A PublishRequest may carry 10 MB (the service's limit); gRPC accepts 32 MiB.
    too_big = pb.PublishRequest(
        topic=topic, messages=[pb.PubsubMessage(data=b"x" * (10_000_000 + 1))]
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.Publish(too_big)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "10000000 bytes" in (caught.value.details() or "")
    beyond_grpc = pb.PublishRequest(
        topic=topic, messages=[pb.PubsubMessage(data=b"x" * (33 * 2**20))]
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.Publish(beyond_grpc)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{reference.rest_url}/v1/{topic}:publish",
            data=io.BytesIO(b"{" + b" " * (33 * 2**20) + b"}"),
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        assert response.status == 400
        body = await response.json()
    assert "exceeds the limit" in body["error"]["message"]
