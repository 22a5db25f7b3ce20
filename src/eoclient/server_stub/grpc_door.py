"""gRPC door of the reference server: google.pubsub.v1 Publisher and Subscriber on grpc.aio.

Generic handlers (no generated servicer classes): every unary method runs through the
transport-neutral ``PubSubService.call`` (``service``), whose ``RpcError`` becomes the
call's status here; exactly-once ack failures add their rich ``google.rpc.Status`` in
``grpc-status-details-bin``. Pull answers bytes encoded by ``wire_encoding`` rather than
a protobuf; StreamingPull has a session of its own (``streaming_pull``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError
from eoclient.server_stub import wire_encoding
from eoclient.server_stub.grpc_status import abort
from eoclient.server_stub.service import PubSubService
from eoclient.server_stub.streaming_pull import serve_streaming_pull

GrpcHandler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


class GrpcDoor:
    """The grpc.aio handlers of one ``PubSubService``."""

    def __init__(self, service: PubSubService) -> None:
        self.service = service

    def generic_handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        handlers = []
        for service in ("Publisher", "Subscriber"):
            methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
                rpc.name: grpc.unary_unary_rpc_method_handler(
                    self._unary(rpc.name),
                    request_deserializer=rpc.request.FromString,
                    response_serializer=rpc.response.SerializeToString,
                )
                for rpc in self.service.methods.values()
                if rpc.service == service
            }
            if service == "Subscriber":
                methods["Pull"] = grpc.unary_unary_rpc_method_handler(
                    self._unary("Pull", self.pull_encoded),
                    request_deserializer=pubsub_pb2.PullRequest.FromString,
                    response_serializer=serialize_response,
                )
                methods["StreamingPull"] = grpc.stream_stream_rpc_method_handler(
                    self.streaming_pull,
                    request_deserializer=pubsub_pb2.StreamingPullRequest.FromString,
                    response_serializer=serialize_response,
                )
            handlers.append(
                grpc.method_handlers_generic_handler(f"google.pubsub.v1.{service}", methods)
            )
        return handlers

    def _unary(
        self, method: str, door_handler: Callable[[Any], Awaitable[Any]] | None = None
    ) -> GrpcHandler:
        async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                return await self.service.call(method, request, door_handler)
            except RpcError as error:
                await abort(context, error)

        return handler

    async def pull_encoded(self, request: pubsub_pb2.PullRequest) -> bytes:
        """Pull for this door: the PullResponse encoded straight to bytes, as StreamingPull
        deliveries are (wire_encoding; the REST door needs the protobuf)."""
        deliveries = await self.service.pull_deliveries(request)
        return wire_encoding.encode_pull_response(
            wire_encoding.encode_received_message(d.ack_id, d.message, d.delivery_attempt)
            for d in deliveries
        )

    async def streaming_pull(
        self, requests: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        await serve_streaming_pull(self.service, requests, context)


def serialize_response(response: Message | bytes) -> bytes:
    # Deliveries (StreamingPull's and Pull's) arrive already encoded (wire_encoding);
    # confirmations are protobufs.
    if isinstance(response, bytes):
        return response
    return response.SerializeToString()
