"""``_transport.GrpcPullStream``: the gRPC side of the subscriber's transport seam, on real
gRPC against the reference server (the session's own tests use the in-memory fake)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from eoclient._proto import pubsub_pb2
from eoclient._transport import Endpoint, PubSubTransport, create_channel
from eoclient.errors import NotFound, StreamClosedError
from eoclient.server_stub.server import ReferenceServer, run_server

from .test_session_support import make_env


@pytest.fixture
async def transport() -> AsyncIterator[tuple[ReferenceServer, PubSubTransport]]:
    async with run_server(rest_port=None) as srv:
        client = PubSubTransport(create_channel(Endpoint(srv.address, secure=False)))
        yield srv, client
        await client.close()


async def test_a_stream_delivers_then_ends_with_none_after_half_close(
    transport: tuple[ReferenceServer, PubSubTransport],
) -> None:
    srv, client = transport
    env = make_env(srv, exactly_once=False)
    env.publish(3)
    stream = client.open_stream(env.subscription)
    await stream.send(
        pubsub_pb2.StreamingPullRequest(
            subscription=env.subscription, stream_ack_deadline_seconds=60
        )
    )
    received: list[str] = []
    while len(received) < 3:
        response = await stream.receive()
        assert response is not None
        received += [m.ack_id for m in response.received_messages]
    await stream.send(pubsub_pb2.StreamingPullRequest(ack_ids=received))
    await stream.done_writing()
    while (response := await stream.receive()) is not None:
        pass
    with pytest.raises(StreamClosedError):
        await stream.send(pubsub_pb2.StreamingPullRequest())
    stream.cancel()  # idempotent on an ended call


async def test_a_refused_stream_raises_the_mapped_status(
    transport: tuple[ReferenceServer, PubSubTransport],
) -> None:
    _, client = transport
    missing = "projects/eo-tests/subscriptions/missing"
    stream = client.open_stream(missing)
    # The first write is buffered (it may also fail at once, as StreamClosedError); the
    # reader gets the status.
    with contextlib.suppress(StreamClosedError):
        await stream.send(
            pubsub_pb2.StreamingPullRequest(subscription=missing, stream_ack_deadline_seconds=60)
        )
    with pytest.raises(NotFound):
        await stream.receive()
