"""What the REST door answers to a request aiohttp cannot parse: Google's JSON error, in a
log line at most.

aiohttp rejects some requests before any handler runs — a request line or a header past
8,190 bytes, an unknown method (``FOO``), a malformed Content-Length or chunk size, TLS
bytes on the plain-text port — and by default answers them with a plain-text 400 and logs
an ERROR with a traceback for each. A client's mistake is not the server's error, and
every answer of the door is JSON (``errors.py``): here those rejections are answered 400
INVALID_ARGUMENT in Google's error format, naming what was wrong, and logged in one line
at INFO. A failure aiohttp reports as 500 (a bug beyond the door's own handler, which
catches its own) keeps its traceback in the log, and is answered as JSON too.

The hook is aiohttp's ``RequestHandler.handle_error``, the one place its connection
protocol turns such a failure into a response: a subclass overrides it, and the door's
connections are of a subclass of that (``read_timeouts.TimedRequestHandler``).
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.web_request import BaseRequest

from eoclient.server_stub.doors.rest.errors import error_body, json_response
from eoclient.server_stub.services.errors import INTERNAL_ERROR_MESSAGE

logger = logging.getLogger("eoclient.server_stub.doors.rest")

# How much of aiohttp's description of the problem is repeated (it may quote the
# offending bytes, which can be anything a client sent).
MAX_REASON = 300


def reason_of(exc: BaseException | None, message: str | None) -> str:
    """aiohttp's description of a rejected request, on one line and bounded."""
    text = message or (getattr(exc, "message", None) if exc is not None else None) or ""
    if not text and exc is not None:
        text = str(exc)
    one_line = " ".join(str(text).split()) or "unreadable request"
    return one_line if len(one_line) <= MAX_REASON else one_line[: MAX_REASON - 1] + "…"


class JsonErrorRequestHandler(web.RequestHandler):
    """aiohttp's connection protocol, answering what it rejects itself in Google's JSON."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            body = error_body(500, "INTERNAL", INTERNAL_ERROR_MESSAGE)
            http = 500
        else:
            reason = reason_of(exc, message)
            logger.info("malformed HTTP request from %s: %s", request.remote, reason)
            http = 400
            body = error_body(400, "INVALID_ARGUMENT", f"The request is not valid HTTP: {reason}")
        if request.writer.output_size > 0:  # as aiohttp: a response is already on its way
            raise ConnectionError("Response is sent already, cannot send the error")
        response = json_response(body, http)
        response.force_close()
        return response
