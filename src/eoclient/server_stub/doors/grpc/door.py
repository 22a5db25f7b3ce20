"""gRPC door of the reference server: every service of the method table, on grpc.aio.

Generic handlers (no generated servicer classes): every unary method runs through the
transport-neutral ``Services.call`` (``services/table.py``), whose ``RpcError`` becomes the
call's status here; exactly-once ack failures add their rich ``google.rpc.Status`` in
``grpc-status-details-bin``. Pull answers bytes encoded by ``wire_encoding`` rather than
a protobuf; StreamingPull has a session of its own (``services/streaming_pull.py``), met here by
``streaming_pull``.

Requests arrive as bytes and are decoded here (``request_checks.decode``), so undecodable
ones are INVALID_ARGUMENT rather than grpc's UNKNOWN "Unexpected DecodeError" with a
logged traceback. An unexpected exception (a bug) is logged once and answered INTERNAL;
it never escapes to grpc as UNKNOWN.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from eoclient._proto import pubsub_pb2
from eoclient.errors import Internal, RpcError
from eoclient.server_stub.doors.grpc import wire_encoding
from eoclient.server_stub.doors.grpc.status import abort, authorization
from eoclient.server_stub.doors.grpc.streaming_pull import serve_streaming_pull
from eoclient.server_stub.services import request_checks
from eoclient.server_stub.services.errors import INTERNAL_ERROR_MESSAGE
from eoclient.server_stub.services.subscriber import SERVICE as SUBSCRIBER
from eoclient.server_stub.services.table import Services

logger = logging.getLogger("eoclient.server_stub.grpc")

GrpcHandler = Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


class GrpcDoor:
    """The grpc.aio handlers of one ``Services``."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def generic_handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        handlers = []
        for service in dict.fromkeys(rpc.service for rpc in self.services.methods.values()):
            methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
                rpc.name: grpc.unary_unary_rpc_method_handler(
                    self._unary(rpc.name, rpc.request),
                    response_serializer=rpc.response.SerializeToString,
                )
                for rpc in self.services.methods.values()
                if rpc.service == service
            }
            if service == SUBSCRIBER:
                methods["Pull"] = grpc.unary_unary_rpc_method_handler(
                    self._unary("Pull", pubsub_pb2.PullRequest, self.pull_encoded),
                    response_serializer=serialize_response,
                )
                methods["StreamingPull"] = grpc.stream_stream_rpc_method_handler(
                    self.streaming_pull, response_serializer=serialize_response
                )
            handlers.append(grpc.method_handlers_generic_handler(service, methods))
        return handlers

    def _unary(
        self,
        method: str,
        request_type: type[Message],
        door_handler: Callable[[Any], Awaitable[Any]] | None = None,
    ) -> GrpcHandler:
        async def handler(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                grant = self.services.authenticate(authorization(context))
                request = request_checks.decode(request_type, raw)
                return await self.services.call(method, request, door_handler, grant)
            except RpcError as error:
                await abort(context, error)
            except Exception:
                logger.exception("google.pubsub.v1 %s failed", method)
                await abort(context, Internal(INTERNAL_ERROR_MESSAGE))

        return handler

    async def pull_encoded(self, request: pubsub_pb2.PullRequest) -> bytes:
        """Pull for this door: the PullResponse encoded straight to bytes, as StreamingPull
        deliveries are (wire_encoding; the REST door needs the protobuf)."""
        deliveries = await self.services.subscriber.pull_deliveries(request)
        return wire_encoding.encode_pull(deliveries)

    async def streaming_pull(
        self, requests: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        await serve_streaming_pull(self.services, requests, context)


def serialize_response(response: Message | bytes) -> bytes:
    # Deliveries (StreamingPull's and Pull's) arrive already encoded (wire_encoding);
    # confirmations are protobufs.
    if isinstance(response, bytes):
        return response
    return response.SerializeToString()
