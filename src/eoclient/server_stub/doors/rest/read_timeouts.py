"""How long the REST door waits for a request that stops half-way
(docs/protocol.md#rest-request-timeouts).

aiohttp waits for a request's head and body as long as the connection stays open (its
keep-alive timer, an hour in 3.14, is the only bound), so a client that sends headers
without the blank line, a body shorter than its Content-Length or a chunked body without
its last chunk holds a connection, and a descriptor, with no answer. The door bounds each:

* the head (request line and headers, to the blank line): :data:`HEAD_TIMEOUT` from its
  first byte, or from the connection's opening for the first request; then ``408 Request
  Timeout`` in Google's JSON error format, and the connection is closed;
* the body: :data:`BODY_IDLE_TIMEOUT` without a byte of it, and :data:`BODY_TIMEOUT` for
  the whole of it; then the read the handler waits on fails with
  :class:`RequestReadTimeout`, which the door answers 408 (``door.py``), and the
  connection is closed.

What is not a request being read is not bounded here: a handler that takes long (a Pull
waiting for messages, a publish held by a backlog quota) and a keep-alive connection idle
between requests (aiohttp's keep-alive timer).

:class:`ReadWatch` is the pure clock of one connection; :class:`TimedRequestHandler` is
aiohttp's connection protocol (with the door's JSON errors, ``malformed.py``) driving it
from the bytes that arrive and the messages aiohttp's parser makes of them.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any

from aiohttp import web
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader

from eoclient.server_stub.doors.rest.errors import error_body
from eoclient.server_stub.doors.rest.malformed import JsonErrorRequestHandler

logger = logging.getLogger("eoclient.server_stub.doors.rest")

# A request's head is a few hundred bytes, sent in one write by every client: 5 s is
# ample on any network, as Go servers' usual ReadHeaderTimeout (5-10 s) and nginx's
# client_header_timeout (60 s, for slow mobile links) bracket it.
HEAD_TIMEOUT = 5.0
# A body arrives as fast as the network carries it: 5 s without a byte is a client that
# stopped, as nginx's client_body_timeout (between two reads) judges it.
BODY_IDLE_TIMEOUT = 5.0
# The whole body (at most 10 MB, the publish limit) at 170 KB/s or better.
BODY_TIMEOUT = 60.0

TIMEOUT_MESSAGE = (
    "The request was not received in time: {what} ({seconds:g} s); the connection is closed."
)


class RequestReadTimeout(Exception):
    """A request's body stopped arriving (the door answers 408 and closes)."""


class Reading(enum.Enum):
    IDLE = "idle"  # between requests: aiohttp's keep-alive timer applies
    HEAD = "head"
    BODY = "body"


class ReadWatch:
    """One connection's deadline for the request it is receiving. Pure: ``now`` is given."""

    def __init__(
        self,
        now: float,
        *,
        head_timeout: float = HEAD_TIMEOUT,
        body_idle_timeout: float = BODY_IDLE_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
    ) -> None:
        self.head_timeout = head_timeout
        self.body_idle_timeout = body_idle_timeout
        self.body_timeout = body_timeout
        # A new connection is about to send its first request's head.
        self.reading = Reading.HEAD
        self.deadline: float | None = now + head_timeout
        self._body_ends_by = 0.0

    def bytes_arrived(self, now: float) -> None:
        """Bytes came in (before the parser saw them)."""
        if self.reading is Reading.IDLE:
            self.reading = Reading.HEAD
            self.deadline = now + self.head_timeout
        elif self.reading is Reading.BODY:
            self.deadline = min(now + self.body_idle_timeout, self._body_ends_by)

    def body_expected(self, now: float) -> None:
        """A head was parsed and its body is still to come."""
        self.reading = Reading.BODY
        self._body_ends_by = now + self.body_timeout
        self.deadline = min(now + self.body_idle_timeout, self._body_ends_by)

    def request_read(self) -> None:
        """The request is read whole (head, and body if any)."""
        self.reading = Reading.IDLE
        self.deadline = None

    def expired(self, now: float) -> Reading | None:
        """What was being read when the deadline passed (None: nothing is late)."""
        if self.deadline is None or now < self.deadline:
            return None
        return self.reading

    def what_is_late(self, reading: Reading) -> tuple[str, float]:
        if reading is Reading.HEAD:
            return "its head, to the blank line after the headers", self.head_timeout
        return "its body stopped arriving", self.body_idle_timeout


class TimedRequestHandler(JsonErrorRequestHandler):
    """aiohttp's connection protocol with the door's JSON errors and read deadlines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watch: ReadWatch | None = None
        self._watch_handle: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._watch = ReadWatch(self._loop.time())
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._watch_handle is not None:
            self._watch_handle.cancel()
            self._watch_handle = None
        self._watch = None
        self._body = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        watch = self._watch
        if watch is None or not data:
            super().data_received(data)
            return
        now = self._loop.time()
        watch.bytes_arrived(now)
        # aiohttp's parser appends each request whose head it completes (with its body's
        # stream) to this queue; the handler task takes them later, not during this call.
        queued = len(self._messages)
        super().data_received(data)
        for _message, payload in list(self._messages)[queued:]:
            if payload is EMPTY_PAYLOAD or payload.is_eof():
                watch.request_read()
                self._body = None
            else:
                watch.body_expected(now)
                self._body = payload
                payload.on_eof(self._body_read)
        self._arm()

    def _body_read(self) -> None:
        if self._watch is not None and self._watch.reading is Reading.BODY:
            self._watch.request_read()
            self._body = None
            self._arm()

    def _arm(self) -> None:
        if self._watch_handle is not None:
            self._watch_handle.cancel()
            self._watch_handle = None
        if self._watch is not None and self._watch.deadline is not None:
            self._watch_handle = self._loop.call_at(self._watch.deadline, self._check)

    def _check(self) -> None:
        self._watch_handle = None
        watch = self._watch
        if watch is None:
            return
        late = watch.expired(self._loop.time())
        if late is None:
            self._arm()
            return
        what, seconds = watch.what_is_late(late)
        message = TIMEOUT_MESSAGE.format(what=what, seconds=seconds)
        peer = self.transport.get_extra_info("peername") if self.transport else None
        logger.info("REST request from %s timed out: %s", peer, what)
        watch.request_read()
        if late is Reading.BODY and self._body is not None:
            # The handler waits on this body: its read fails, the door answers 408.
            self._body.set_exception(RequestReadTimeout(message))
            self._body = None
            return
        # No handler runs yet (the head is incomplete): answer here, then close.
        self._write_408(message)

    def _write_408(self, message: str) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        body = error_body(408, "DEADLINE_EXCEEDED", message).encode()
        transport.write(
            b"HTTP/1.1 408 Request Timeout\r\n"
            b"Content-Type: application/json; charset=UTF-8\r\n"
            b"Connection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        self.force_close()
        transport.close()


class TimedServer(web.Server):
    """aiohttp's server, with connections of :class:`TimedRequestHandler`."""

    def __call__(self) -> web.RequestHandler:
        return TimedRequestHandler(self, loop=self._loop, **self._kwargs)


class TimedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server bounds reading a request and answers what it cannot
    parse in JSON."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The same server, with connections of the subclass (it adds no state).
        server.__class__ = TimedServer
        return server
