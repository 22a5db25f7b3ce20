"""StreamingPull on the gRPC door: one session per call.

A reader task applies each request (acks, modacks, deadline changes) to the broker and
queues exactly-once confirmations; the session's own coroutine is the only writer: it
sends queued responses first, then whatever deliveries flow control allows, and ends the
call on a dropped stream (fault injection, shutdown), a bad request, or the client's
half-close.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import grpc

from eoclient._proto import pubsub_pb2
from eoclient._tasks import cancel_and_wait
from eoclient.errors import Internal, InvalidArgument, RpcError
from eoclient.server_stub.core import AckReply
from eoclient.server_stub.doors.grpc import wire_encoding
from eoclient.server_stub.doors.grpc.status import abort, authorization, status_code
from eoclient.server_stub.doors.grpc.streams import StreamHandle, StreamRegistry
from eoclient.server_stub.services import ack_settling, request_checks
from eoclient.server_stub.services.errors import INTERNAL_ERROR_MESSAGE
from eoclient.server_stub.services.table import Services

# Per streaming response: the official client accepts any size (it sets
# max_receive_message_length=-1), but other clients keep gRPC's 4 MiB default, so
# deliveries are cut into responses of at most ~3 MiB of payload and 1000 messages
# (the rest of the 4 MiB covers per-message framing: ack id, message id, publish time).
MAX_MESSAGES_PER_RESPONSE = 1000
MAX_BYTES_PER_RESPONSE = 3 * 2**20
# Groups of responses a stream holds waiting for commits before it leases more: enough
# to lease into the next commit while one is being made (the fsync takes milliseconds),
# few enough that a slow disk does not pile leases up beyond what flow control meant.
MAX_GROUPS_WAITING = 4

logger = logging.getLogger("eoclient.server_stub.grpc")


async def serve_streaming_pull(
    services: Services,
    streams: StreamRegistry,
    requests: AsyncIterator[bytes],
    context: grpc.aio.ServicerContext[Any, Any],
) -> None:
    """Run one StreamingPull call (requests still encoded) to its end."""
    try:
        grant = services.authenticate(authorization(context))
    except RpcError as error:
        await abort(context, error)
    injected = services.faults.take("StreamingPull")
    if injected is not None:
        await context.abort(status_code(injected.code), injected.message)
    try:
        raw = await anext(aiter(requests))
    except StopAsyncIteration:
        return
    try:
        first = _decode(raw)
        services.authorize(grant, first)
        handle = streams.open(first.subscription, context.peer())
        try:
            stream_id = _open_stream(services, first)
        except BaseException:
            streams.close(handle)
            raise
    except RpcError as error:
        await abort(context, error)
    except Exception:
        logger.exception("StreamingPull failed to open")
        await abort(context, Internal(INTERNAL_ERROR_MESSAGE))
    session = _StreamSession(services, streams, handle, stream_id, first.protocol_version)
    try:
        await session.run(first, requests, context)
    finally:
        session.close()


def _decode(raw: bytes) -> pubsub_pb2.StreamingPullRequest:
    request = request_checks.decode(pubsub_pb2.StreamingPullRequest, raw)
    assert isinstance(request, pubsub_pb2.StreamingPullRequest)
    return request


def _open_stream(services: Services, first: pubsub_pb2.StreamingPullRequest) -> int:
    # The rules of the first request (docs/protocol.md#streamingpull-requests).
    if not first.subscription:
        raise InvalidArgument("The first StreamingPullRequest must set subscription.")
    if first.stream_ack_deadline_seconds == 0:
        raise InvalidArgument(
            "The first StreamingPullRequest must set stream_ack_deadline_seconds "
            "(between 10 and 600)."
        )
    _check_modify_lists(first)
    return services.broker.leasing.open_stream(
        first.subscription,
        stream_ack_deadline=first.stream_ack_deadline_seconds,
        max_outstanding_messages=first.max_outstanding_messages,
        max_outstanding_bytes=first.max_outstanding_bytes,
    )


def _check_modify_lists(request: pubsub_pb2.StreamingPullRequest) -> None:
    if len(request.modify_deadline_seconds) != len(request.modify_deadline_ack_ids):
        raise InvalidArgument(
            "modify_deadline_seconds and modify_deadline_ack_ids must have the same length "
            f"(got {len(request.modify_deadline_seconds)} and "
            f"{len(request.modify_deadline_ack_ids)})."
        )


class _StreamSession:
    """One StreamingPull call: a reader task applies requests; this coroutine alone writes."""

    def __init__(
        self,
        services: Services,
        streams: StreamRegistry,
        handle: StreamHandle,
        stream_id: int,
        protocol_version: int,
    ) -> None:
        self.services = services
        self.streams = streams
        self.broker = services.broker
        self.stream_id = stream_id
        self.protocol_version = protocol_version
        self.handle = handle
        self.outbox: deque[pubsub_pb2.StreamingPullResponse] = deque()
        # Responses waiting for a commit, in groups, in order: confirmations (the commit
        # holding the acks they confirm) and exactly-once deliveries (the commit holding
        # their leases); None: nothing to wait for. A delivery is encoded already.
        self.confirming: deque[
            tuple[asyncio.Future[None] | None, list[pubsub_pb2.StreamingPullResponse | bytes]]
        ] = deque()
        self.failure: RpcError | None = None
        self.client_done = False
        self.closing = False  # the server is ending the call: apply no more requests

    def close(self) -> None:
        self.streams.close(self.handle)
        self.broker.leasing.close_stream(self.stream_id)

    def _properties(self) -> pubsub_pb2.StreamingPullResponse.SubscriptionProperties:
        exactly_once, ordering = self.broker.subscriptions.properties(self.handle.subscription)
        return pubsub_pb2.StreamingPullResponse.SubscriptionProperties(
            exactly_once_delivery_enabled=exactly_once, message_ordering_enabled=ordering
        )

    def apply(self, request: pubsub_pb2.StreamingPullRequest, *, first: bool) -> None:
        """Apply acks, modacks and deadline changes; queue confirmations (exactly-once).

        A request-level error (raised) applies nothing of the request; a bad ack id fails
        alone (``ack_settling``): exactly-once lists it as invalid in the confirmation,
        otherwise it is ignored — it never ends the stream.
        """
        if not first:
            _check_modify_lists(request)
            if (
                request.subscription
                or request.max_outstanding_messages
                or (request.max_outstanding_bytes)
            ):
                raise InvalidArgument(
                    "subscription, max_outstanding_messages and max_outstanding_bytes may only "
                    "be set on the first StreamingPullRequest of a stream."
                )
        for index, seconds in enumerate(request.modify_deadline_seconds):
            request_checks.check_modack_seconds(f"modify_deadline_seconds[{index}]", seconds)
        if not first and request.stream_ack_deadline_seconds:
            self.broker.leasing.set_stream_ack_deadline(
                self.stream_id, request.stream_ack_deadline_seconds
            )
        name = self.handle.subscription
        response = pubsub_pb2.StreamingPullResponse()
        confirm = False
        if request.ack_ids:
            reply = ack_settling.acknowledge(self.broker, name, request.ack_ids).reply
            if reply.exactly_once:
                confirm = True
                _fill_ack_confirmation(response.acknowledge_confirmation, reply)
        by_seconds: dict[int, list[str]] = {}
        for ack_id, seconds in zip(
            request.modify_deadline_ack_ids, request.modify_deadline_seconds, strict=True
        ):
            by_seconds.setdefault(seconds, []).append(ack_id)
        for seconds, ids in by_seconds.items():
            reply = ack_settling.modify_ack_deadline(self.broker, name, ids, seconds).reply
            if reply.exactly_once:
                confirm = True
                _fill_modack_confirmation(response.modify_ack_deadline_confirmation, reply)
        if confirm:
            response.subscription_properties.CopyFrom(self._properties())
            self.outbox.append(response)
        elif (
            not first
            and self.protocol_version >= 1
            and not request.ack_ids
            and not request.modify_deadline_ack_ids
        ):
            # A keep-alive ping under protocol_version >= 1 is answered so the client
            # knows the stream is alive (docs/protocol.md#initial-streamingpull-request).
            keepalive = pubsub_pb2.StreamingPullResponse()
            keepalive.subscription_properties.CopyFrom(self._properties())
            self.outbox.append(keepalive)

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for raw in requests:
                if self.closing:
                    break
                self.apply(_decode(raw), first=False)
                self.handle.wake.set()
        except RpcError as error:
            self.failure = error
        except grpc.aio.AbortError:
            pass  # the writer ended the call (a dropped stream): no more requests
        except Exception:
            logger.exception("StreamingPull on %s failed", self.handle.subscription)
            self.failure = Internal(INTERNAL_ERROR_MESSAGE)
        finally:
            self.client_done = True
            self.handle.wake.set()

    async def run(
        self,
        first: pubsub_pb2.StreamingPullRequest,
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        try:
            self.apply(first, first=True)
        except RpcError as error:
            await abort(context, error)
        except Exception:
            logger.exception("StreamingPull on %s failed", self.handle.subscription)
            await abort(context, Internal(INTERNAL_ERROR_MESSAGE))
        reader = asyncio.create_task(self._read(requests), name="streaming-pull-reader")
        try:
            await self._write_loop(context)
        except Exception as error:
            if not _client_gone(context, error):
                raise
            self._log_client_gone(context)
        finally:
            await cancel_and_wait(reader)

    def _log_client_gone(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        # A client that cancels its stream or drops its connection while a response is
        # on its way makes the write fail: its doing, not the server's — one line.
        logger.info(
            "StreamingPull on %s ended by the client %s",
            self.handle.subscription,
            self.handle.connection or context.peer(),
        )

    async def _write_loop(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        while True:
            self.handle.wake.clear()
            if self.handle.drop is not None or self.failure is not None:
                # The server itself ends the call (a drop, or a request it refused): the
                # confirmations of acks it already applied go out first (once committed).
                # Lost with the stream, those acks would be retried by unary call, found
                # settled, and reported OTHER. Nothing read after this is applied (the
                # client retries it by unary call).
                self.closing = True
                await self._write_confirmations(context, wait=True)
                if self.handle.drop is not None:
                    drop = self.handle.drop
                    await context.abort(status_code(drop.code), drop.message)
                if self.failure is not None:
                    await abort(context, self.failure)
            await self._write_confirmations(context)
            if self.client_done and not self.confirming:
                return  # the client half-closed: end the call with OK
            try:
                sent = await self._send_deliveries(context)
            except RpcError as error:
                await abort(context, error)
            except Exception as error:
                if _client_gone(context, error):
                    raise  # run() says so in one line
                logger.exception("StreamingPull on %s failed", self.handle.subscription)
                await abort(context, Internal(INTERNAL_ERROR_MESSAGE))
            if not sent:
                await self.handle.wake.wait()

    async def _write_confirmations(
        self, context: grpc.aio.ServicerContext[Any, Any], *, wait: bool = False
    ) -> None:
        """Confirmations report acks done: each goes once the store has committed them
        (and an exactly-once delivery once its leases are: ``_send_deliveries``).

        The outbox's responses are taken as a group with the commit that will hold their
        acks; deliveries go on meanwhile, and a group is written once its commit is done
        (its done callback wakes this loop). Acks applied later wait for a later commit.
        ``wait``: the call is ending, so wait for the commits rather than return.
        """
        if self.outbox:
            waiter = self.services.group_commit.pending()
            if waiter is not None:
                waiter.add_done_callback(lambda _: self.handle.wake.set())
            self.confirming.append((waiter, [*self.outbox]))
            self.outbox.clear()
        while self.confirming:
            waiter, responses = self.confirming[0]
            if waiter is not None:
                if not waiter.done():
                    if not wait:
                        return
                    await asyncio.wait({waiter})  # ending the call: the commit first
                error = waiter.exception()
                if error is not None:  # the store could not commit: the acks may be lost
                    assert isinstance(error, RpcError)
                    await abort(context, error)
            self.confirming.popleft()
            for response in responses:
                await context.write(response)

    async def _send_deliveries(self, context: grpc.aio.ServicerContext[Any, Any]) -> bool:
        """Lease what flow control allows and send it, cut into responses of bounded size.

        Everything leased here is sent: the byte budget only decides where one response
        ends and the next begins (a message larger than the budget goes alone).
        """
        if len(self.confirming) >= MAX_GROUPS_WAITING:
            return False  # a commit behind: the loop writes what it holds first
        deliveries = self.broker.leasing.stream_pull(self.stream_id, MAX_MESSAGES_PER_RESPONSE)
        if deliveries and self.services.transforms.active(self.handle.subscription):
            deliveries = await self.services.transforms.deliver(
                self.handle.subscription, deliveries
            )
            if not deliveries:
                return True  # all filtered or failed, settled there: lease again
        if not deliveries:
            return False
        exactly_once, ordering = self.broker.subscriptions.properties(self.handle.subscription)
        properties = wire_encoding.encode_properties(exactly_once, ordering)
        responses: list[pubsub_pb2.StreamingPullResponse | bytes] = []
        batch: list[bytes] = []
        size = 0
        for delivery in deliveries:
            if batch and size + delivery.message.size > MAX_BYTES_PER_RESPONSE:
                responses.append(wire_encoding.encode_streaming_response(batch, properties))
                batch, size = [], 0
            batch.append(
                wire_encoding.encode_received_message(
                    delivery.ack_id, delivery.message, delivery.delivery_attempt
                )
            )
            size += delivery.message.size
        responses.append(wire_encoding.encode_streaming_response(batch, properties))
        # Exactly-once: the leases first, so their ack ids resolve after a crash. The
        # responses wait for the commit holding them, like confirmations, while the loop
        # goes on leasing what flow control allows into the next commit.
        waiter = self.services.group_commit.pending() if exactly_once else None
        if waiter is not None or self.confirming:
            if waiter is not None:
                waiter.add_done_callback(lambda _: self.handle.wake.set())
            self.confirming.append((waiter, responses))
            await asyncio.sleep(0)  # the commit, and the other streams, get their turn
            return True
        for response in responses:
            await context.write(response)
        return True


# What grpc.aio's server raises when a write meets a call the client has ended (cancelled,
# or its connection gone) before the call is marked so: a send batch the core refused.
# Not part of grpc's public API, hence looked up rather than imported.
_REFUSED_BATCH: type[BaseException] = getattr(
    importlib.import_module("grpc._cython.cygrpc"), "ExecuteBatchError", RuntimeError
)


def _client_gone(context: grpc.aio.ServicerContext[Any, Any], error: BaseException) -> bool:
    """Did ``error`` come from the client ending the call (cancelled it, or its connection
    is gone) rather than from the server?"""
    return isinstance(error, _REFUSED_BATCH) or context.cancelled() or context.done()


def _fill_ack_confirmation(
    target: pubsub_pb2.StreamingPullResponse.AcknowledgeConfirmation, reply: AckReply
) -> None:
    target.ack_ids.extend(reply.confirmed)
    for ack_id, failure in reply.failures.items():
        _confirmation_list(target, failure).append(ack_id)


def _fill_modack_confirmation(
    target: pubsub_pb2.StreamingPullResponse.ModifyAckDeadlineConfirmation, reply: AckReply
) -> None:
    target.ack_ids.extend(reply.confirmed)
    for ack_id, failure in reply.failures.items():
        if failure.startswith("PERMANENT_"):
            target.invalid_ack_ids.append(ack_id)
        else:
            target.temporary_failed_ack_ids.append(ack_id)


def _confirmation_list(
    target: pubsub_pb2.StreamingPullResponse.AcknowledgeConfirmation, failure: str
) -> Any:
    # Mapping from ErrorInfo values to confirmation lists
    # (docs/protocol.md#streamingpull-confirmations).
    if failure == "TRANSIENT_FAILURE_UNORDERED_ACK_ID":
        return target.unordered_ack_ids
    if failure.startswith("PERMANENT_"):
        return target.invalid_ack_ids
    return target.temporary_failed_ack_ids
