"""google-cloud-pubsub's own clients against a reference server, for the tests that check
the server through them over either door.

The official clients are blocking: an async test runs each call with :func:`in_thread`,
so the server, on the test's event loop, keeps answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import grpc
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1
from google.pubsub_v1 import SchemaServiceClient
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.schema_service.transports import SchemaServiceGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from eoclient.server_stub.server import ReferenceServer

T = TypeVar("T")

Transport = Literal["grpc", "rest"]


async def in_thread(call: Callable[[], T]) -> T:
    return await asyncio.to_thread(call)


class OfficialClients:
    """google-cloud-pubsub's publisher, subscriber and schema clients on one transport:
    ``"grpc"``, one plain-text channel (what ``PUBSUB_EMULATOR_HOST`` makes the client
    do), or ``"rest"``, the server's REST door with anonymous credentials."""

    def __init__(self, server: ReferenceServer, transport: Transport) -> None:
        self._channel: grpc.Channel | None = None
        if transport == "rest":
            kwargs: dict[str, Any] = {
                "transport": "rest",
                "client_options": {"api_endpoint": server.rest_url},
                "credentials": AnonymousCredentials(),
            }
            self.schemas = SchemaServiceClient(**kwargs)
            self.publisher = pubsub_v1.PublisherClient(**kwargs)
            self.subscriber = pubsub_v1.SubscriberClient(**kwargs)
        elif transport == "grpc":
            self._channel = channel = grpc.insecure_channel(server.address)
            self.schemas = SchemaServiceClient(
                transport=SchemaServiceGrpcTransport(channel=channel)
            )
            self.publisher = pubsub_v1.PublisherClient(
                transport=PublisherGrpcTransport(channel=channel)
            )
            self.subscriber = pubsub_v1.SubscriberClient(
                transport=SubscriberGrpcTransport(channel=channel)
            )
        else:
            raise ValueError(f"transport is 'grpc' or 'rest', not {transport!r}")

    def close(self) -> None:
        """Stop the publisher (it commits what it batched) and close the connections."""
        self.publisher.stop()
        if self._channel is not None:
            self._channel.close()
        else:
            # SubscriberClient.close() knows only gRPC: each REST transport closes its
            # own HTTP session.
            for client in (self.schemas, self.publisher, self.subscriber):
                client.transport.close()
