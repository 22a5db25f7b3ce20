"""An in-memory ``SubscriberTransport`` (``eoclient.subscriber.transport``) for tier-2 tests.

No tests here. Like httpx's ``MockTransport``, it implements the protocol the code
under test uses, and nothing about gRPC: statuses are ``eoclient.errors`` exceptions,
as the real transport raises them (its gRPC mapping is tested against real gRPC).

The test plays the server: it scripts each stream (:meth:`FakeStream.respond`,
``fail``, ``end``) or installs handlers (``on_open``, ``on_write``, ``on_acknowledge``,
``on_modify_ack_deadline``). Any await point can be made to block until released
(:meth:`FakeTransport.block`), which is how the cancellation tests stop the session at
one chosen await. As with gRPC, a task cancelled while it waits in ``send`` /
``receive`` / ``done_writing`` cancels the call.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError, StreamClosedError, rpc_error_class
from eoclient.subscriber.ack_results import EXACTLY_ONCE_ACKID_FAILURE

Request = pubsub_pb2.StreamingPullRequest
Response = pubsub_pb2.StreamingPullResponse

# The await points, as passed to FakeTransport.block().
OPEN = "open"  # the first send of a stream (the initial request)
WRITE = "write"  # any later send (acks, modacks, keep-alives)
READ = "read"  # handing the next response (or the end of the stream) to the reader
DONE_WRITING = "done_writing"
ACKNOWLEDGE = "acknowledge"
MODIFY_ACK_DEADLINE = "modify_ack_deadline"
PULL = "pull"
POINTS = frozenset({OPEN, WRITE, READ, DONE_WRITING, ACKNOWLEDGE, MODIFY_ACK_DEADLINE, PULL})


class Gate:
    """Makes one await point block until :meth:`release` (for ever if never released)."""

    def __init__(self, point: str, match: Callable[[Any], bool] | None) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown await point {point!r}; one of {sorted(POINTS)}")
        self.point = point
        self.match = match
        self.reached = asyncio.Event()  # something is (or was) blocked here
        self.hits = 0
        self._released = asyncio.Event()

    def __repr__(self) -> str:
        return f"<Gate {self.point} {'released' if self.released else 'closed'}, {self.hits} hits>"

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def applies(self, point: str, subject: Any) -> bool:
        return (
            point == self.point
            and not self.released
            and (self.match is None or self.match(subject))
        )

    async def wait_reached(self, timeout: float = 2.0) -> None:
        async with asyncio.timeout(timeout):
            await self.reached.wait()

    def release(self) -> None:
        self._released.set()

    async def pass_through(self) -> None:
        self.hits += 1
        self.reached.set()
        await self._released.wait()


class FakeStream:
    """One StreamingPull call: ``PullStream`` for the session, a script for the test."""

    def __init__(self, transport: FakeTransport, index: int, subscription: str) -> None:
        self.transport = transport
        self.index = index
        self.subscription = subscription
        self.opened_at = time.monotonic()
        self.requests: list[Request] = []  # every request sent, in order
        self.write_times: list[float] = []
        self.half_closed = False
        self.locally_cancelled = False
        self._responses: deque[Response] = deque()
        self._arrived = asyncio.Event()
        self._ended = False
        self._error: RpcError | None = None

    def __repr__(self) -> str:
        return f"<FakeStream #{self.index} {len(self.requests)} sent, ended={self._ended}>"

    # --------------------------------------------------------- the server's side

    def respond(self, *responses: Response) -> None:
        if self._ended:
            raise RuntimeError(f"{self!r} has ended; it cannot respond")
        self._responses.extend(responses)
        self._arrived.set()

    def fail(self, error: RpcError) -> None:
        """End the call with ``error``, read after the responses already queued."""
        if not self._ended:
            self._ended, self._error = True, error
            self._arrived.set()

    def end(self) -> None:
        """End the call with status OK (after the responses already queued)."""
        if not self._ended:
            self._ended = True
            self._arrived.set()

    def done(self) -> bool:
        return self._ended

    @property
    def initial_request(self) -> Request:
        return self.requests[0]

    @property
    def later_requests(self) -> list[Request]:
        return self.requests[1:]

    def keepalives(self) -> int:
        return sum(1 for r in self.later_requests if is_keepalive(r))

    def acked_ids(self) -> list[str]:
        return [i for r in self.later_requests for i in r.ack_ids]

    def modacks(self) -> list[tuple[str, int]]:
        return [
            (i, s)
            for r in self.later_requests
            for i, s in zip(r.modify_deadline_ack_ids, r.modify_deadline_seconds, strict=True)
        ]

    # ------------------------------------------------------------- PullStream

    def cancel(self) -> None:
        if not self._ended:
            self.locally_cancelled = True
            self.end()

    async def send(self, request: Request) -> None:
        if self._ended and not self.requests and self._error is not None:
            raise self._error  # refused outright (failed from on_open)
        if self._ended or self.half_closed:
            raise StreamClosedError(f"{self!r} cannot send")
        await self._at(OPEN if not self.requests else WRITE, request)
        if self._ended:
            raise StreamClosedError(f"{self!r} ended during the send")
        copy = Request()
        copy.CopyFrom(request)
        self.requests.append(copy)
        self.write_times.append(time.monotonic())
        if self.transport.on_write is not None:
            self.transport.on_write(self, copy)

    async def done_writing(self) -> None:
        if self._ended or self.half_closed:
            return
        await self._at(DONE_WRITING, self)
        self.half_closed = True
        self.end()  # like the servers we know: end the call once the client half-closes

    async def receive(self) -> Response | None:
        await self._at(READ, self)
        while not self._responses and not self._ended:
            self._arrived.clear()
            try:
                await self._arrived.wait()
            except asyncio.CancelledError:
                self.cancel()
                raise
        if self._responses and not self.locally_cancelled:
            return self._responses.popleft()
        if self._error is not None:
            raise self._error
        return None

    async def _at(self, point: str, subject: Any) -> None:
        try:
            await self.transport.pass_gates(point, subject)
        except asyncio.CancelledError:
            self.cancel()  # as gRPC: cancelling the awaiting task cancels the call
            raise


@dataclass
class UnaryCall:
    """One recorded Acknowledge / ModifyAckDeadline / Pull call."""

    method: str  # ACKNOWLEDGE, MODIFY_ACK_DEADLINE or PULL
    subscription: str
    ack_ids: list[str] = field(default_factory=list)
    seconds: int | None = None  # ModifyAckDeadline only
    max_messages: int | None = None  # Pull only
    finished: bool = False


# A handler returns None (OK) or the error the call ends with.
UnaryHandler = Callable[[UnaryCall], "RpcError | None"]


class FakeTransport:
    """A ``SubscriberTransport`` in memory; the test is its server."""

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []
        self.unary_calls: list[UnaryCall] = []
        self.gates: list[Gate] = []
        self.on_open: Callable[[FakeStream], None] | None = None
        self.on_write: Callable[[FakeStream, Request], None] | None = None
        self.on_acknowledge: UnaryHandler | None = None
        self.on_modify_ack_deadline: UnaryHandler | None = None
        self.on_pull: Callable[[UnaryCall], pubsub_pb2.PullResponse] | None = None

    def block(self, point: str, match: Callable[[Any], bool] | None = None) -> Gate:
        """Make the next awaits at ``point`` (whose subject ``match`` accepts) block.

        The subject is the request for OPEN / WRITE, the stream for READ / DONE_WRITING,
        and the :class:`UnaryCall` for the unary methods.
        """
        gate = Gate(point, match)
        self.gates.append(gate)
        return gate

    def release_all(self) -> None:
        for gate in self.gates:
            gate.release()

    async def pass_gates(self, point: str, subject: Any) -> None:
        for gate in list(self.gates):
            if gate.applies(point, subject):
                await gate.pass_through()

    @property
    def stream(self) -> FakeStream:
        """The latest stream."""
        return self.streams[-1]

    def calls(self, method: str) -> list[UnaryCall]:
        return [c for c in self.unary_calls if c.method == method]

    async def wait_for_stream(self, index: int, *, timeout: float = 2.0) -> FakeStream:
        """Stream number ``index`` once its initial request is sent."""
        await until(
            lambda: len(self.streams) > index and bool(self.streams[index].requests),
            timeout=timeout,
            what=f"stream {index} opened",
        )
        return self.streams[index]

    # ----------------------------------------------------- SubscriberTransport

    def open_stream(self, subscription: str) -> FakeStream:
        stream = FakeStream(self, len(self.streams), subscription)
        self.streams.append(stream)
        if self.on_open is not None:
            self.on_open(stream)
        return stream

    async def acknowledge(self, subscription: str, ack_ids: Sequence[str]) -> None:
        await self._unary(UnaryCall(ACKNOWLEDGE, subscription, list(ack_ids)), self.on_acknowledge)

    async def modify_ack_deadline(
        self, subscription: str, ack_ids: Sequence[str], seconds: int
    ) -> None:
        call = UnaryCall(MODIFY_ACK_DEADLINE, subscription, list(ack_ids), seconds)
        await self._unary(call, self.on_modify_ack_deadline)

    async def pull(self, subscription: str, max_messages: int) -> pubsub_pb2.PullResponse:
        call = UnaryCall(PULL, subscription, max_messages=max_messages)
        await self._unary(call, None)
        return self.on_pull(call) if self.on_pull is not None else pubsub_pb2.PullResponse()

    async def _unary(self, call: UnaryCall, handler: UnaryHandler | None) -> None:
        self.unary_calls.append(call)
        await self.pass_gates(call.method, call)
        call.finished = True
        error = handler(call) if handler is not None else None
        if error is not None:
            raise error


# ------------------------------------------------------------------ builders


def is_keepalive(request: Request) -> bool:
    return request == Request()


def has_acks(request: Request) -> bool:
    return bool(request.ack_ids)


def has_modacks(request: Request) -> bool:
    return bool(request.modify_deadline_ack_ids)


def received(
    ack_id: str, data: bytes = b"payload", *, ordering_key: str = ""
) -> pubsub_pb2.ReceivedMessage:
    return pubsub_pb2.ReceivedMessage(
        ack_id=ack_id,
        message=pubsub_pb2.PubsubMessage(
            data=data, message_id=f"id-{ack_id}", ordering_key=ordering_key
        ),
    )


def deliver(*ack_ids: str, exactly_once: bool | None = None, data: bytes = b"payload") -> Response:
    """A response delivering one message per ack id (with subscription properties if given)."""
    response = Response(received_messages=[received(a, data) for a in ack_ids])
    if exactly_once is not None:
        response.subscription_properties.exactly_once_delivery_enabled = exactly_once
    return response


def confirm_on_stream(stream: FakeStream, request: Request) -> None:
    """``on_write`` handler of an exactly-once server that confirms everything on the stream."""
    response = Response()
    if request.ack_ids:
        response.acknowledge_confirmation.ack_ids.extend(request.ack_ids)
    if request.modify_deadline_ack_ids:
        response.modify_ack_deadline_confirmation.ack_ids.extend(request.modify_deadline_ack_ids)
    if request.ack_ids or request.modify_deadline_ack_ids:
        stream.respond(response)


def rpc_error(
    code: str, message: str = "", *, reason: str = "", error_info: Mapping[str, str] | None = None
) -> RpcError:
    """The error the real transport raises for a status (and its ErrorInfo, if any)."""
    return rpc_error_class(code, message)(message, reason=reason, error_info=error_info)


def eod_ack_failure(failures: Mapping[str, str]) -> RpcError:
    """The service's exactly-once failure: INVALID_ARGUMENT listing only the failed ids."""
    return rpc_error(
        "INVALID_ARGUMENT",
        "Some acknowledgement ids in the request were invalid. This could be because the "
        "acknowledgement ids have expired or the acknowledgement ids were malformed.",
        reason=EXACTLY_ONCE_ACKID_FAILURE,
        error_info=failures,
    )


async def until(predicate: Callable[[], bool], *, timeout: float = 2.0, what: str = "") -> None:
    """Wait (polling) until ``predicate()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what or 'condition'} not reached in {timeout} s"
        await asyncio.sleep(0.001)
