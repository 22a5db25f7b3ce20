"""StreamingPull's rules, without I/O: one session per call, driven by a door.

The door decodes each request and hands it here, and writes what the session says to
send; everything StreamingPull decides is decided here
(docs/protocol.md#streamingpull-requests):

* ``StreamingPullService.open``: injected faults, the caller's grant, the first request's
  rules (subscription, stream ack deadline, the modack lists), the limits on open streams
  (``open_streams``), the stream on the broker with the request's flow-control limits;
  then the first request's own acks and modacks.
* ``StreamingPullSession.receive``: a later request's rules, its acks and modacks
  (``ack_settling``: a bad ack id fails alone and never ends the stream), the
  confirmations of an exactly-once subscription and the answer to a keep-alive
  (``stream_confirmations``).
* ``StreamingPullSession.next_step``: what to send next and when the call ends. Responses
  that report something the store must hold first (confirmations: the acks they confirm;
  exactly-once deliveries: their leases) wait in order for the commit holding it
  (docs/architecture.md#a-streamingpull-with-exactly-once-acks), while the stream goes on
  leasing what flow control allows, through the subscription's message transforms, cut
  into responses of bounded size. The call ends when the client half-closes (OK), a
  request is refused, the subscription goes away, or the server drops the stream (fault
  injection, shutdown): then the confirmations of acks already applied go out first.

The session never reads or writes the stream: it waits only for its wake-up (the handle's
event: news for the subscription, a request applied, a commit done, a drop) and for the
commits and transforms its responses need.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import Message

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument, RpcError, rpc_error_class
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.core import Broker, Delivery
from eoclient.server_stub.group_commit import GroupCommit
from eoclient.server_stub.services import ack_settling, request_checks, stream_confirmations
from eoclient.server_stub.services.faults import RpcFaults
from eoclient.server_stub.services.open_streams import StreamHandle, StreamRegistry
from eoclient.server_stub.transforms import MessageTransforms

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


@dataclass(frozen=True, slots=True)
class DeliveryBatch:
    """Deliveries to send as one response (the door encodes them), with the
    subscription's properties every response carries."""

    deliveries: Sequence[Delivery]
    exactly_once: bool
    ordering: bool


# One response to write: a protobuf (confirmations, keep-alive answers) or deliveries.
Response = pubsub_pb2.StreamingPullResponse | DeliveryBatch


@dataclass(frozen=True, slots=True)
class Step:
    """What the door does next: write ``responses`` in order, then end the call with
    ``end``'s status, or with OK if ``finished``; otherwise ask for the next step."""

    responses: list[Response] = field(default_factory=list)
    end: RpcError | None = None
    finished: bool = False


def check_first(request: pubsub_pb2.StreamingPullRequest) -> None:
    """The rules of the first request (the broker checks the deadline's range)."""
    if not request.subscription:
        raise InvalidArgument("The first StreamingPullRequest must set subscription.")
    if request.stream_ack_deadline_seconds == 0:
        raise InvalidArgument(
            "The first StreamingPullRequest must set stream_ack_deadline_seconds "
            "(between 10 and 600)."
        )
    _check_modify_lists(request)


def check_later(request: pubsub_pb2.StreamingPullRequest) -> None:
    """The rules of every request after the first."""
    _check_modify_lists(request)
    if request.subscription or request.max_outstanding_messages or request.max_outstanding_bytes:
        raise InvalidArgument(
            "subscription, max_outstanding_messages and max_outstanding_bytes may only "
            "be set on the first StreamingPullRequest of a stream."
        )


def _check_modify_lists(request: pubsub_pb2.StreamingPullRequest) -> None:
    if len(request.modify_deadline_seconds) != len(request.modify_deadline_ack_ids):
        raise InvalidArgument(
            "modify_deadline_seconds and modify_deadline_ack_ids must have the same length "
            f"(got {len(request.modify_deadline_seconds)} and "
            f"{len(request.modify_deadline_ack_ids)})."
        )
    # The whole request is checked before any id of it is applied: a refused request
    # applies nothing.
    for index, seconds in enumerate(request.modify_deadline_seconds):
        request_checks.check_modack_seconds(f"modify_deadline_seconds[{index}]", seconds)


def cut(deliveries: Sequence[Delivery], exactly_once: bool, ordering: bool) -> list[Response]:
    """``deliveries`` as responses of at most ``MAX_BYTES_PER_RESPONSE`` of message data
    each (a message larger than that goes alone): everything leased is sent, the budget
    only decides where one response ends and the next begins."""
    batches: list[Response] = []
    start = 0
    size = 0
    for index, delivery in enumerate(deliveries):
        message_size = delivery.message.size
        if index > start and size + message_size > MAX_BYTES_PER_RESPONSE:
            batches.append(DeliveryBatch(deliveries[start:index], exactly_once, ordering))
            start, size = index, 0
        size += message_size
    batches.append(DeliveryBatch(deliveries[start:], exactly_once, ordering))
    return batches


class StreamingPullService:
    """Opens the StreamingPull sessions of one broker."""

    def __init__(
        self,
        broker: Broker,
        group_commit: GroupCommit,
        transforms: MessageTransforms,
        streams: StreamRegistry,
        faults: RpcFaults,
        authorize: Callable[[Grant | None, Message], None],
    ) -> None:
        self.broker = broker
        self.group_commit = group_commit
        self.transforms = transforms
        self.streams = streams
        self.faults = faults
        self._authorize = authorize

    def check_fault(self) -> None:
        """Fail the call now if a test injected a status for StreamingPull."""
        injected = self.faults.take("StreamingPull")
        if injected is not None:
            raise rpc_error_class(injected.code)(injected.message)

    def open(
        self, first: pubsub_pb2.StreamingPullRequest, grant: Grant | None, connection: str
    ) -> StreamingPullSession:
        """A session for a call whose first request is ``first``, from ``connection`` (the
        peer); the caller must ``close()`` it. Raises ``RpcError`` for a refused call,
        having left nothing open."""
        self._authorize(grant, first)
        check_first(first)
        handle = self.streams.open(first.subscription, connection)
        try:
            stream_id = self.broker.leasing.open_stream(
                first.subscription,
                stream_ack_deadline=first.stream_ack_deadline_seconds,
                max_outstanding_messages=first.max_outstanding_messages,
                max_outstanding_bytes=first.max_outstanding_bytes,
            )
        except BaseException:
            self.streams.close(handle)
            raise
        session = StreamingPullSession(self, handle, stream_id, first.protocol_version)
        try:
            session.apply(first, first=True)
        except BaseException:
            session.close()
            raise
        return session


class StreamingPullSession:
    """One StreamingPull call: ``receive`` each later request, write what ``next_step``
    says, ``close`` at the end (docs/protocol.md#streamingpull-requests)."""

    def __init__(
        self,
        service: StreamingPullService,
        handle: StreamHandle,
        stream_id: int,
        protocol_version: int,
    ) -> None:
        self._broker = service.broker
        self._group_commit = service.group_commit
        self._transforms = service.transforms
        self._streams = service.streams
        self.handle = handle
        self.stream_id = stream_id
        self.protocol_version = protocol_version
        # Confirmations and keep-alive answers of the requests applied since the last step.
        self._outbox: list[Response] = []
        # Responses waiting for a commit, in groups, in order: confirmations (the commit
        # holding the acks they confirm) and exactly-once deliveries (the commit holding
        # their leases); None: nothing to wait for.
        self._waiting: deque[tuple[asyncio.Future[None] | None, list[Response]]] = deque()
        self._failure: RpcError | None = None
        self._client_done = False
        self._closed = False
        self.ending = False  # the server is ending the call: apply no more requests

    @property
    def subscription(self) -> str:
        return self.handle.subscription

    def close(self) -> None:
        """Leave the stream (its leases stay until acked, nacked or expired); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._streams.close(self.handle)
        self._broker.leasing.close_stream(self.stream_id)

    # ------------------------------------------------------------ requests

    def receive(self, request: pubsub_pb2.StreamingPullRequest) -> None:
        """Apply a later request; ``RpcError`` if it is refused (nothing of it applied),
        which the door reports with ``fail``. Ignored once the call is ending."""
        if self.ending:
            return
        check_later(request)
        self.apply(request, first=False)
        self.handle.wake.set()

    def fail(self, error: RpcError) -> None:
        """A request was refused (or could not be decoded): the call ends with ``error``
        once the confirmations already decided are sent; no later request is applied."""
        self._failure = error
        self.ending = True
        self.handle.wake.set()

    def client_finished(self) -> None:
        """The client half-closed (or its requests ended otherwise): no more requests."""
        self._client_done = True
        self.handle.wake.set()

    def apply(self, request: pubsub_pb2.StreamingPullRequest, *, first: bool) -> None:
        """Apply acks, modacks and deadline changes; queue confirmations (exactly-once)
        and keep-alive answers. The request passed its rules (``check_first`` /
        ``check_later``)."""
        name = self.handle.subscription
        if not first and request.stream_ack_deadline_seconds:
            self._broker.leasing.set_stream_ack_deadline(
                self.stream_id, request.stream_ack_deadline_seconds
            )
        acks = None
        if request.ack_ids:
            acks = ack_settling.acknowledge(self._broker, name, request.ack_ids).reply
        by_seconds: dict[int, list[str]] = {}
        for ack_id, seconds in zip(
            request.modify_deadline_ack_ids, request.modify_deadline_seconds, strict=True
        ):
            by_seconds.setdefault(seconds, []).append(ack_id)
        modacks = [
            ack_settling.modify_ack_deadline(self._broker, name, ids, seconds).reply
            for seconds, ids in by_seconds.items()
        ]
        if acks is not None or modacks:
            confirmation = stream_confirmations.confirmation(acks, modacks, self._properties())
            if confirmation is not None:
                self._outbox.append(confirmation)
        elif not first and self.protocol_version >= 1:
            # A keep-alive ping under protocol_version >= 1 is answered so the client
            # knows the stream is alive (docs/protocol.md#initial-streamingpull-request).
            self._outbox.append(stream_confirmations.keepalive(self._properties()))

    def _properties(self) -> stream_confirmations.Properties:
        return stream_confirmations.properties(
            *self._broker.subscriptions.properties(self.handle.subscription)
        )

    # ------------------------------------------------------------ responses

    async def next_step(self) -> Step:
        """Wait until there is something to write or the call ends; ``RpcError`` if the
        stream can lease no more (its subscription deleted or detached)."""
        while True:
            self.handle.wake.clear()
            drop = self.handle.drop
            if drop is not None or self._failure is not None:
                # The server itself ends the call (a drop, or a request it refused): the
                # confirmations of acks it already applied go out first (once committed).
                # Lost with the stream, those acks would be retried by unary call, found
                # settled, and reported OTHER. Nothing read after this is applied (the
                # client retries it by unary call).
                self.ending = True
                responses, error = await self._committed_all()
                if error is None and drop is not None:
                    error = rpc_error_class(drop.code)(drop.message)
                return Step(responses, end=error or self._failure)
            responses, error = self._committed()
            if error is not None:
                return Step(responses, end=error)
            if self._client_done and not self._waiting:
                return Step(responses, finished=True)  # the client half-closed
            leased = await self._lease(responses)
            if responses:
                return Step(responses)
            if not leased:
                self._top_up()
                await self.handle.wake.wait()

    def _top_up(self) -> None:
        """The stream idles, what it was given written (flow control, or an empty window,
        holds the next lease back): load the window back up by one response's worth
        (``SubscriptionDelivery.top_up``) while the client reads it, so that the lease its
        acks let through does not stop to refill the window (10,000 rows at once), as a
        unary Pull's answer does (``SubscriberService._top_up``). Only on a store that
        bounds the window; not before the responses waiting for a commit are written (an
        exactly-once answer would wait for the top-up), nor while a commit runs: the
        store's reads would wait for its thread, and the loop with them (the top-up is an
        optimisation only)."""
        if self._waiting or self._broker.store.window is None or self._group_commit.in_flight:
            return
        with contextlib.suppress(RpcError):  # deleted or detached meanwhile: nothing to do
            self._broker.delivery_state(self.handle.subscription).top_up(MAX_MESSAGES_PER_RESPONSE)

    def _wake_up(self, _: object = None) -> None:
        self.handle.wake.set()

    def _hold(self, responses: list[Response], waiter: asyncio.Future[None] | None) -> None:
        if waiter is not None:
            waiter.add_done_callback(self._wake_up)
        self._waiting.append((waiter, responses))

    def _take_outbox(self) -> None:
        """The outbox's responses become a group waiting for the commit that will hold
        their acks; acks applied later wait for a later commit."""
        if self._outbox:
            self._hold(self._outbox, self._group_commit.pending())
            self._outbox = []

    def _committed(self) -> tuple[list[Response], RpcError | None]:
        """The responses whose commits are done, in order, up to the first group still
        waiting; the error of a commit that failed (the store may have lost what those
        responses report: the call ends with it)."""
        self._take_outbox()
        ready: list[Response] = []
        while self._waiting:
            waiter, responses = self._waiting[0]
            if waiter is not None:
                if not waiter.done():
                    break
                error = waiter.exception()
                if error is not None:
                    assert isinstance(error, RpcError)
                    return ready, error
            self._waiting.popleft()
            ready.extend(responses)
        return ready, None

    async def _committed_all(self) -> tuple[list[Response], RpcError | None]:
        """Every waiting response, once its commit is done (the call is ending)."""
        self._take_outbox()
        for waiter, _ in list(self._waiting):
            if waiter is not None and not waiter.done():
                await asyncio.wait({waiter})
        return self._committed()

    async def _lease(self, ready: list[Response]) -> bool:
        """Lease what flow control allows: its responses join ``ready``, or wait behind
        the groups already waiting (and, on an exactly-once subscription, for the commit
        holding their leases, so their ack ids resolve after a crash). False: nothing
        was leased."""
        if len(self._waiting) >= MAX_GROUPS_WAITING:
            return False  # a commit behind: what is held goes first
        name = self.handle.subscription
        deliveries = self._broker.leasing.stream_pull(self.stream_id, MAX_MESSAGES_PER_RESPONSE)
        if deliveries and self._transforms.active(name):
            deliveries = await self._transforms.deliver(name, deliveries)
            if not deliveries:
                return True  # all filtered or failed, settled there: lease again
        if not deliveries:
            return False
        exactly_once, ordering = self._broker.subscriptions.properties(name)
        responses = cut(deliveries, exactly_once, ordering)
        waiter = self._group_commit.pending() if exactly_once else None
        if waiter is None and not self._waiting:
            ready.extend(responses)
            return True
        self._hold(responses, waiter)
        await asyncio.sleep(0)  # the commit, and the other streams, get their turn
        return True
