"""A small gRPC server that answers ``Publisher/GetTopic`` and ``Subscriber/Pull`` (no
messages) and records what each call carried: its metadata (``authorization``,
``x-goog-user-project``), the client certificate's name (mutual TLS) and the deadline it
came with. The instrument for what a client *sends*, which the reference server does not
expose. ``hold`` makes it answer late (a server slower than the caller's timeout)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from eoclient._proto import pubsub_pb2

from .certificates import Certificates


@dataclass
class Seen:
    metadata: dict[str, str]
    client_names: list[str]  # x509 common names of the peer's certificate (mutual TLS)
    time_remaining: float | None  # the call's deadline, seconds from its arrival


@dataclass
class RecordingServer:
    address: str
    calls: list[Seen] = field(default_factory=list)
    hold: float = 0.0  # seconds to wait before answering


@asynccontextmanager
async def recording_server(
    certificates: Certificates | None, *, require_client_certificate: bool = False
) -> AsyncIterator[RecordingServer]:
    """TLS with ``certificates``; plain text on 127.0.0.1 without."""
    server = grpc.aio.server()
    recorder = RecordingServer("")

    async def record(context: Any) -> None:
        metadata = {
            key: value for key, value in context.invocation_metadata() if isinstance(value, str)
        }
        names = [name.decode() for name in context.auth_context().get("x509_common_name", [])]
        recorder.calls.append(Seen(metadata, names, context.time_remaining()))
        if recorder.hold:
            await asyncio.sleep(recorder.hold)

    async def get_topic(request: pubsub_pb2.GetTopicRequest, context: Any) -> pubsub_pb2.Topic:
        await record(context)
        return pubsub_pb2.Topic(name=request.topic)

    async def pull(request: pubsub_pb2.PullRequest, context: Any) -> pubsub_pb2.PullResponse:
        await record(context)
        return pubsub_pb2.PullResponse()

    handler = grpc.method_handlers_generic_handler(
        "google.pubsub.v1.Publisher",
        {
            "GetTopic": grpc.unary_unary_rpc_method_handler(
                get_topic,
                request_deserializer=pubsub_pb2.GetTopicRequest.FromString,
                response_serializer=pubsub_pb2.Topic.SerializeToString,
            )
        },
    )
    subscriber = grpc.method_handlers_generic_handler(
        "google.pubsub.v1.Subscriber",
        {
            "Pull": grpc.unary_unary_rpc_method_handler(
                pull,
                request_deserializer=pubsub_pb2.PullRequest.FromString,
                response_serializer=pubsub_pb2.PullResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler, subscriber))
    if certificates is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        credentials = grpc.ssl_server_credentials(
            [(certificates.server.key, certificates.server.chain)],
            root_certificates=certificates.ca if require_client_certificate else None,
            require_client_auth=require_client_certificate,
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
    recorder.address = f"127.0.0.1:{port}"
    await server.start()
    try:
        yield recorder
    finally:
        # A grace, not None: stop(None) twice hung in C on a loaded machine, holding the GIL
        # (no test timeout fired). None also cancels every call at once; with no call left,
        # a grace ends the shutdown without that step. Whether that step was the hang is not
        # known: this only takes the one path that never hung here.
        await server.stop(1.0)
