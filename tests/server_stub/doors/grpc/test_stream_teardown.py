"""A client that ends its StreamingPull while the server is writing to it — cancels the
call, or its process dies with the connection — is the client's doing: one INFO line at
most, no ERROR and no traceback (grpc's write then fails with an ExecuteBatchError, which was
logged as "StreamingPull ... failed" with its traceback)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import textwrap

import grpc
import pytest

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer

TOPIC = "projects/p1/topics/teardown"
SUBSCRIPTION = "projects/p1/subscriptions/teardown"
# Responses of ~3 MiB that the client does not read: the server's next write waits on
# HTTP/2 flow control, and the client ends the call under it.
CLIENT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import grpc
    from eoclient._proto import pubsub_pb2

    async def main() -> None:
        channel = grpc.aio.insecure_channel(
            sys.argv[1], options=[("grpc.max_receive_message_length", -1)]
        )
        call = channel.stream_stream(
            "/google.pubsub.v1.Subscriber/StreamingPull",
            request_serializer=pubsub_pb2.StreamingPullRequest.SerializeToString,
            response_deserializer=pubsub_pb2.StreamingPullResponse.FromString,
        )()
        await call.write(
            pubsub_pb2.StreamingPullRequest(
                subscription=sys.argv[2], stream_ack_deadline_seconds=60
            )
        )
        await call.read()
        print("read", flush=True)
        await asyncio.sleep(1.0)
        if sys.argv[3] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        call.cancel()
        await asyncio.sleep(0.5)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("how", ["cancel", "kill"])
async def test_a_client_ending_its_stream_under_a_write_is_one_info_line(
    reference: ReferenceServer, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.INFO)
    broker = reference.broker
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUBSCRIPTION, TOPIC))
    for _ in range(4):
        broker.publishing.publish(TOPIC, [NewMessage(b"x" * 300_000) for _ in range(10)])
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLIENT,
        reference.address,
        SUBSCRIPTION,
        how,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert client.stdout is not None
    assert await asyncio.wait_for(client.stdout.readline(), 30) == b"read\n"
    assert await asyncio.wait_for(client.wait(), 30) in (0, -signal.SIGKILL)
    for _ in range(100):  # the server notices when its write fails
        if any("ended by the client" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.02)
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]
    # One line at most: none when grpc cancels the call before the server writes again.
    lines = [r for r in caplog.records if "ended by the client" in r.getMessage()]
    assert len(lines) <= 1
    assert all(r.levelno == logging.INFO and SUBSCRIPTION in r.getMessage() for r in lines)
    # The server is fine: a new stream opens and is delivered to.
    broker.publishing.publish(TOPIC, [NewMessage(b"after")])
    async with grpc.aio.insecure_channel(
        reference.address, options=[("grpc.max_receive_message_length", -1)]
    ) as channel:
        call = channel.stream_stream(
            "/google.pubsub.v1.Subscriber/StreamingPull",
            request_serializer=pubsub_pb2.StreamingPullRequest.SerializeToString,
            response_deserializer=pubsub_pb2.StreamingPullResponse.FromString,
        )()
        await call.write(
            pubsub_pb2.StreamingPullRequest(
                subscription=SUBSCRIPTION, stream_ack_deadline_seconds=60
            )
        )
        response = await asyncio.wait_for(call.read(), 10)
        assert response.received_messages
        call.cancel()
