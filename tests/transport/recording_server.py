"""A small gRPC server that answers ``Publisher/GetTopic`` and ``Subscriber/Pull`` (no
messages) and records what each call carried: its metadata (``authorization``,
``x-goog-user-project``), the client certificate's name (mutual TLS) and the deadline it
came with. The instrument for what a client *sends*, which the reference server does not
expose. ``hold`` makes it answer late (a server slower than the caller's timeout).

It is grpc's threaded server, not grpc.aio's: the tests' clients run on the event loop,
and ``grpc.aio`` servers stopped on that loop hung in C now and then on a loaded machine
(``stop(None)`` and ``stop(1.0)`` both, holding the process so that no test timeout
fired). The threaded server stops from its own threads, whatever the loop is doing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
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
    server = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="recording"))
    recorder = RecordingServer("")
    stopping = threading.Event()  # ends a held answer at once when the server stops

    def record(context: Any) -> None:
        metadata = {
            key: value for key, value in context.invocation_metadata() if isinstance(value, str)
        }
        names = [name.decode() for name in context.auth_context().get("x509_common_name", [])]
        recorder.calls.append(Seen(metadata, names, context.time_remaining()))
        if recorder.hold:
            stopping.wait(recorder.hold)

    def get_topic(request: pubsub_pb2.GetTopicRequest, context: Any) -> pubsub_pb2.Topic:
        record(context)
        return pubsub_pb2.Topic(name=request.topic)

    def pull(request: pubsub_pb2.PullRequest, context: Any) -> pubsub_pb2.PullResponse:
        record(context)
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
    server.start()
    try:
        yield recorder
    finally:
        stopping.set()
        # stop() returns at once; its event is set when every call has ended.
        await asyncio.to_thread(lambda: server.stop(None).wait(10))
