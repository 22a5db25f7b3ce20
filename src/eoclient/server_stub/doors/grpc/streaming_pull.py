"""StreamingPull on the gRPC door: decode, hand to the session, encode and write.

The rules are the session's (``services/streaming_pull.py``); here a call only meets them.
The call's own coroutine is the one writer of its stream: it writes what the session's
``next_step`` says (deliveries encoded straight to bytes by ``wire_encoding``) and ends the
call as the session says. A reader task, owned for the call's duration, decodes each
request and hands it to the session.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from eoclient._proto import pubsub_pb2
from eoclient._tasks import TaskOwner
from eoclient.errors import Internal, RpcError
from eoclient.server_stub.doors.grpc import wire_encoding
from eoclient.server_stub.doors.grpc.status import abort, authorization
from eoclient.server_stub.services import request_checks
from eoclient.server_stub.services.errors import INTERNAL_ERROR_MESSAGE
from eoclient.server_stub.services.streaming_pull import (
    DeliveryBatch,
    Response,
    StreamingPullSession,
)
from eoclient.server_stub.services.table import Services

logger = logging.getLogger("eoclient.server_stub.grpc")

Context = grpc.aio.ServicerContext[Any, Any]


async def serve_streaming_pull(
    services: Services, requests: AsyncIterator[bytes], context: Context
) -> None:
    """Run one StreamingPull call (requests still encoded) to its end."""
    try:
        grant = services.authenticate(authorization(context))
        services.streaming_pull.check_fault()
    except RpcError as error:
        await abort(context, error)
    try:
        raw = await anext(aiter(requests))
    except StopAsyncIteration:
        return
    try:
        session = services.streaming_pull.open(_decode(raw), grant, context.peer())
    except RpcError as error:
        await abort(context, error)
    except Exception:
        logger.exception("StreamingPull failed to open")
        await abort(context, Internal(INTERNAL_ERROR_MESSAGE))
    try:
        await _serve(session, requests, context)
    finally:
        session.close()


def _decode(raw: bytes) -> pubsub_pb2.StreamingPullRequest:
    request = request_checks.decode(pubsub_pb2.StreamingPullRequest, raw)
    assert isinstance(request, pubsub_pb2.StreamingPullRequest)
    return request


async def _serve(
    session: StreamingPullSession, requests: AsyncIterator[bytes], context: Context
) -> None:
    tasks = TaskOwner()
    await tasks.open()
    tasks.spawn(_read(session, requests), name="streaming-pull-reader")
    try:
        await _write(session, context)
    except Exception as error:
        if not _client_gone(context, error):
            raise
        # A client that cancels its stream or drops its connection while a response is
        # on its way makes the write fail: its doing, not the server's — one line.
        logger.info(
            "StreamingPull on %s ended by the client %s",
            session.subscription,
            session.handle.connection or context.peer(),
        )
    finally:
        await tasks.close()


async def _read(session: StreamingPullSession, requests: AsyncIterator[bytes]) -> None:
    try:
        async for raw in requests:
            if session.ending:
                break
            session.receive(_decode(raw))
    except RpcError as error:
        session.fail(error)
    except grpc.aio.AbortError:
        pass  # the writer ended the call (a dropped stream): no more requests
    except Exception:
        logger.exception("StreamingPull on %s failed", session.subscription)
        session.fail(Internal(INTERNAL_ERROR_MESSAGE))
    finally:
        session.client_finished()


async def _write(session: StreamingPullSession, context: Context) -> None:
    while True:
        try:
            step = await session.next_step()
        except RpcError as error:
            await abort(context, error)
        except Exception as error:
            if _client_gone(context, error):
                raise  # _serve says so in one line
            logger.exception("StreamingPull on %s failed", session.subscription)
            await abort(context, Internal(INTERNAL_ERROR_MESSAGE))
        for response in step.responses:
            await context.write(_encoded(response))
        if step.end is not None:
            await abort(context, step.end)
        if step.finished:
            return


def _encoded(response: Response) -> pubsub_pb2.StreamingPullResponse | bytes:
    if not isinstance(response, DeliveryBatch):
        return response  # the door's serializer encodes protobufs
    properties = wire_encoding.encode_properties(response.exactly_once, response.ordering)
    return wire_encoding.encode_streaming_pull(response.deliveries, properties)


# What grpc.aio's server raises when a write meets a call the client has ended (cancelled,
# or its connection gone) before the call is marked so: a send batch the core refused.
# Not part of grpc's public API, hence looked up rather than imported.
_REFUSED_BATCH: type[BaseException] = getattr(
    importlib.import_module("grpc._cython.cygrpc"), "ExecuteBatchError", RuntimeError
)


def _client_gone(context: Context, error: BaseException) -> bool:
    """Did ``error`` come from the client ending the call (cancelled it, or its connection
    is gone) rather than from the server?"""
    return isinstance(error, _REFUSED_BATCH) or context.cancelled() or context.done()
