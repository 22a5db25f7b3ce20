"""An in-memory fake of the ``PubSubTransport`` surface the subscriber uses (test tier 2).

No tests here. :class:`FakeTransport` stands in for ``eoclient._transport.PubSubTransport``:

* ``streaming_pull(subscription)`` returns a :class:`FakeStreamingPullCall` that behaves
  like a ``grpc.aio.StreamStreamCall`` used reader/writer style: ``await write(req)``,
  ``async for response in call`` / ``await read()``, ``cancel()``, ``done()``,
  ``await done_writing()``. As in grpc.aio, a write to a finished call raises
  ``asyncio.InvalidStateError``; reading a locally cancelled call raises
  ``CancelledError``; a task cancelled while it waits in ``write`` / ``read`` /
  ``done_writing`` cancels the call.
* ``acknowledge`` / ``modify_ack_deadline`` / ``pull`` record each call and return or
  raise what the test's handler says; a handler's ``grpc.aio.AioRpcError`` is turned
  into ``eoclient.errors.RpcError`` by the real ``rpc_error_from_grpc``, as the real
  transport does, so ErrorInfo trailers go through the production decoder.

The test plays the server: it scripts each stream (``respond``, ``fail``, ``end``) or
installs handlers (``on_open``, ``on_write``, ``on_acknowledge``,
``on_modify_ack_deadline``). Any await point can be made to block until released
(:meth:`FakeTransport.block`), which is how the cancellation tests stop the session
at one chosen await.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc.aio import EOF  # type: ignore[attr-defined]  # not in grpc-stubs

from eoclient._proto import pubsub_pb2
from eoclient._transport import rpc_error_from_grpc
from eoclient.subscriber.ack_results import EXACTLY_ONCE_ACKID_FAILURE

Request = pubsub_pb2.StreamingPullRequest
Response = pubsub_pb2.StreamingPullResponse

# The await points of the fake, as passed to FakeTransport.block().
OPEN = "open"  # the first write of a stream (the initial request)
WRITE = "write"  # any later write (acks, modacks, keep-alives)
READ = "read"  # handing the next response (or the end of the stream) to the reader
DONE_WRITING = "done_writing"
ACKNOWLEDGE = "acknowledge"
MODIFY_ACK_DEADLINE = "modify_ack_deadline"
PULL = "pull"
POINTS = frozenset({OPEN, WRITE, READ, DONE_WRITING, ACKNOWLEDGE, MODIFY_ACK_DEADLINE, PULL})


# ------------------------------------------------------------------ gates


class Gate:
    """Makes one await point block until :meth:`release` (for ever if never released)."""

    def __init__(self, point: str, match: Callable[[Any], bool] | None) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown await point {point!r}; one of {sorted(POINTS)}")
        self.point = point
        self.match = match
        self.reached = asyncio.Event()  # something is (or was) blocked here
        self.blocked = 0  # how many awaits are blocked here now
        self.hits = 0
        self._released = asyncio.Event()

    def __repr__(self) -> str:
        state = "released" if self.released else f"{self.blocked} blocked"
        return f"<Gate {self.point} {state}, {self.hits} hits>"

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
        self.blocked += 1
        self.reached.set()
        try:
            await self._released.wait()
        finally:
            self.blocked -= 1


# ------------------------------------------------------------------ stream


class FakeStreamingPullCall:
    """One StreamingPull call: the session's side is grpc.aio's API, the test's side a script."""

    def __init__(self, transport: FakeTransport, index: int, subscription: str) -> None:
        self.transport = transport
        self.index = index
        self.subscription = subscription
        self.opened_at = time.monotonic()
        self.requests: list[Request] = []  # every request written, in order
        self.write_times: list[float] = []
        self.half_closed = False
        self.locally_cancelled = False
        self._writes = 0
        self._responses: deque[Response] = deque()
        self._arrived = asyncio.Event()
        self._code: grpc.StatusCode | None = None  # set once the call has ended
        self._error: grpc.aio.AioRpcError | None = None

    def __repr__(self) -> str:
        return (
            f"<FakeStreamingPullCall #{self.index} {len(self.requests)} written, "
            f"{len(self._responses)} unread, code={self._code}>"
        )

    # --------------------------------------------------------- the server's side

    def respond(self, *responses: Response) -> None:
        """Queue responses for the reader."""
        if self.done():
            raise RuntimeError(f"{self!r} has ended; it cannot respond")
        self._responses.extend(responses)
        self._arrived.set()

    def fail(self, error: grpc.aio.AioRpcError) -> None:
        """End the call with ``error``, read after the responses already queued.

        Failed before the session's first write (from ``on_open``), the call was
        refused outright: that write raises the error, as grpc.aio raises the status
        of a call that ended before its metadata was sent.
        """
        if self.done():
            return
        self._code = error.code()
        self._error = error
        self._arrived.set()

    def end(self) -> None:
        """End the call with status OK (after the responses already queued)."""
        if not self.done():
            self._code = grpc.StatusCode.OK
            self._arrived.set()

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

    # --------------------------------------------------- grpc.aio's call surface

    def done(self) -> bool:
        return self._code is not None

    def cancelled(self) -> bool:
        return self.locally_cancelled

    def cancel(self) -> bool:
        if self.done():
            return False
        self.locally_cancelled = True
        self._code = grpc.StatusCode.CANCELLED
        self._arrived.set()
        return True

    async def write(self, request: Request) -> None:
        first = self._writes == 0
        self._writes += 1
        if first and self.done():
            if self.locally_cancelled:
                raise asyncio.CancelledError()
            if self._error is not None:
                raise self._error
        if self.done():
            raise asyncio.InvalidStateError("RPC already finished.")
        if self.half_closed:
            raise asyncio.InvalidStateError("RPC is half closed after calling done_writing.")
        await self._at(OPEN if first else WRITE, request)
        if self.locally_cancelled:
            raise asyncio.CancelledError()
        if self.done():
            raise asyncio.InvalidStateError("RPC already finished.")
        copy = Request()
        copy.CopyFrom(request)
        self.requests.append(copy)
        self.write_times.append(time.monotonic())
        self.transport.activity += 1
        if self.transport.on_write is not None:
            self.transport.on_write(self, copy)

    async def done_writing(self) -> None:
        if self.done() or self.half_closed:
            return  # idempotent, and a no-op on a finished call, as in grpc.aio
        await self._at(DONE_WRITING, self)
        self.half_closed = True
        self.transport.activity += 1
        if self.transport.on_done_writing is not None:
            self.transport.on_done_writing(self)

    async def read(self) -> Response | Any:
        """The next response, or ``grpc.aio.EOF`` after a stream that ended OK."""
        await self._at(READ, self)
        while not self._responses and not self.done():
            self._arrived.clear()
            try:
                await self._arrived.wait()
            except asyncio.CancelledError:
                self.cancel()
                raise
        if self.locally_cancelled:
            raise asyncio.CancelledError()
        if self._responses:
            return self._responses.popleft()
        if self._error is not None:
            raise self._error
        return EOF

    def __aiter__(self) -> FakeStreamingPullCall:
        return self

    async def __anext__(self) -> Response:
        response = await self.read()
        if response is EOF:
            raise StopAsyncIteration
        assert isinstance(response, Response)
        return response

    async def _at(self, point: str, subject: Any) -> None:
        try:
            await self.transport.pass_gates(point, subject)
        except asyncio.CancelledError:
            # grpc.aio cancels the RPC when the task awaiting it is cancelled.
            self.cancel()
            raise


# ------------------------------------------------------------------ transport


@dataclass
class UnaryCall:
    """One recorded Acknowledge / ModifyAckDeadline / Pull call."""

    method: str  # ACKNOWLEDGE, MODIFY_ACK_DEADLINE or PULL
    subscription: str
    ack_ids: list[str] = field(default_factory=list)
    seconds: int | None = None  # ModifyAckDeadline only
    max_messages: int | None = None  # Pull only
    finished: bool = False
    error: grpc.aio.AioRpcError | None = None


# A handler returns None (OK) or the error the call ends with; it may also raise.
UnaryHandler = Callable[[UnaryCall], "grpc.aio.AioRpcError | None"]


class FakeTransport:
    """The ``PubSubTransport`` methods the subscriber calls, in memory."""

    def __init__(self) -> None:
        self.streams: list[FakeStreamingPullCall] = []
        self.unary_calls: list[UnaryCall] = []
        self.gates: list[Gate] = []
        self.activity = 0  # bumped on every write and call; tests may wait on it
        self.closed = False
        # Handlers (the test's server). on_open runs when a stream is created, before
        # the session writes to it; on_write after each write is recorded.
        self.on_open: Callable[[FakeStreamingPullCall], None] | None = None
        self.on_write: Callable[[FakeStreamingPullCall, Request], None] | None = None
        # Like the servers we know, end the stream OK once the client half-closes.
        self.on_done_writing: Callable[[FakeStreamingPullCall], None] | None = (
            FakeStreamingPullCall.end
        )
        self.on_acknowledge: UnaryHandler | None = None
        self.on_modify_ack_deadline: UnaryHandler | None = None
        self.on_pull: Callable[[UnaryCall], pubsub_pb2.PullResponse] | None = None

    def __repr__(self) -> str:
        return (
            f"<FakeTransport {len(self.streams)} streams, {len(self.unary_calls)} unary calls, "
            f"gates={self.gates}>"
        )

    # ------------------------------------------------------------ test controls

    def block(self, point: str, match: Callable[[Any], bool] | None = None) -> Gate:
        """Make the next awaits at ``point`` (whose subject ``match`` accepts) block.

        The subject is the request for OPEN / WRITE, the call for READ / DONE_WRITING,
        and the :class:`UnaryCall` for the unary methods. Blocks until released.
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
    def stream(self) -> FakeStreamingPullCall:
        """The latest stream."""
        return self.streams[-1]

    def calls(self, method: str) -> list[UnaryCall]:
        return [c for c in self.unary_calls if c.method == method]

    async def wait_for_stream(self, index: int, *, timeout: float = 2.0) -> FakeStreamingPullCall:
        """Stream number ``index`` once its initial request is written."""
        await until(
            lambda: len(self.streams) > index and bool(self.streams[index].requests),
            timeout=timeout,
            what=f"stream {index} opened",
        )
        return self.streams[index]

    # ------------------------------------------------------- PubSubTransport API

    def streaming_pull(self, subscription: str) -> FakeStreamingPullCall:
        call = FakeStreamingPullCall(self, len(self.streams), subscription)
        self.streams.append(call)
        self.activity += 1
        if self.on_open is not None:
            self.on_open(call)
        return call

    async def acknowledge(
        self, subscription: str, ack_ids: Sequence[str], *, timeout: float | None = 60.0
    ) -> None:
        await self._unary(UnaryCall(ACKNOWLEDGE, subscription, list(ack_ids)), self.on_acknowledge)

    async def modify_ack_deadline(
        self,
        subscription: str,
        ack_ids: Sequence[str],
        seconds: int,
        *,
        timeout: float | None = 60.0,
    ) -> None:
        await self._unary(
            UnaryCall(MODIFY_ACK_DEADLINE, subscription, list(ack_ids), seconds),
            self.on_modify_ack_deadline,
        )

    async def pull(
        self, subscription: str, max_messages: int, *, timeout: float | None = 60.0
    ) -> pubsub_pb2.PullResponse:
        call = UnaryCall(PULL, subscription, max_messages=max_messages)
        self.unary_calls.append(call)
        self.activity += 1
        await self.pass_gates(PULL, call)
        call.finished = True
        return self.on_pull(call) if self.on_pull is not None else pubsub_pb2.PullResponse()

    async def close(self) -> None:
        self.closed = True

    async def _unary(self, call: UnaryCall, handler: UnaryHandler | None) -> None:
        self.unary_calls.append(call)
        self.activity += 1
        await self.pass_gates(call.method, call)
        error = handler(call) if handler is not None else None
        call.finished = True
        if error is not None:
            call.error = error
            raise rpc_error_from_grpc(error) from error


# ------------------------------------------------------------------ builders


def is_keepalive(request: Request) -> bool:
    return request == Request()


def has_acks(request: Request) -> bool:
    return bool(request.ack_ids)


def has_modacks(request: Request) -> bool:
    return bool(request.modify_deadline_ack_ids)


def received(
    ack_id: str,
    data: bytes = b"payload",
    *,
    message_id: str | None = None,
    ordering_key: str = "",
    delivery_attempt: int = 0,
) -> pubsub_pb2.ReceivedMessage:
    return pubsub_pb2.ReceivedMessage(
        ack_id=ack_id,
        message=pubsub_pb2.PubsubMessage(
            data=data, message_id=message_id or f"id-{ack_id}", ordering_key=ordering_key
        ),
        delivery_attempt=delivery_attempt,
    )


def deliver(*ack_ids: str, exactly_once: bool | None = None, data: bytes = b"payload") -> Response:
    """A response delivering one message per ack id (with subscription properties if given)."""
    response = Response(received_messages=[received(a, data) for a in ack_ids])
    if exactly_once is not None:
        response.subscription_properties.exactly_once_delivery_enabled = exactly_once
    return response


def properties(*, exactly_once: bool) -> Response:
    response = Response()
    response.subscription_properties.exactly_once_delivery_enabled = exactly_once
    return response


def confirm_on_stream(call: FakeStreamingPullCall, request: Request) -> None:
    """``on_write`` handler of an exactly-once server that confirms everything on the stream."""
    response = Response()
    if request.ack_ids:
        response.acknowledge_confirmation.ack_ids.extend(request.ack_ids)
    if request.modify_deadline_ack_ids:
        response.modify_ack_deadline_confirmation.ack_ids.extend(request.modify_deadline_ack_ids)
    if request.ack_ids or request.modify_deadline_ack_ids:
        call.respond(response)


def rpc_error(
    code: grpc.StatusCode,
    details: str = "",
    *,
    reason: str = "",
    error_info: Mapping[str, str] | None = None,
) -> grpc.aio.AioRpcError:
    """A real ``AioRpcError``; with ``reason`` / ``error_info``, an ErrorInfo status trailer."""
    trailing = grpc.aio.Metadata()
    if reason or error_info:
        detail = any_pb2.Any()
        detail.Pack(
            error_details_pb2.ErrorInfo(
                reason=reason, domain="pubsub.googleapis.com", metadata=dict(error_info or {})
            )
        )
        status = status_pb2.Status(code=code.value[0], message=details, details=[detail])
        trailing.add("grpc-status-details-bin", status.SerializeToString())
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details, "")


def eod_ack_failure(failures: Mapping[str, str]) -> grpc.aio.AioRpcError:
    """The service's exactly-once failure: INVALID_ARGUMENT listing only the failed ids."""
    return rpc_error(
        grpc.StatusCode.INVALID_ARGUMENT,
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
