"""REST/JSON door of the reference server: the google.pubsub.v1 HTTP mapping on aiohttp.

One state, two doors: every binding (docs/protocol.md#rest-mapping, ``routes``) becomes the
same request proto the gRPC door receives (JSON body parsed by ``parsing``, the
resource name from the path, query parameters on GET/DELETE), runs through the same
transport-neutral ``Services.call`` (so injected faults, validation and
exactly-once rules are the gRPC door's), and the response proto is answered as proto3
JSON (camelCase, base64 bytes, ``"600s"`` durations, RFC 3339 timestamps, int64 as
strings, default values omitted, as the emulator does).

Every error is Google's JSON error format (``errors``), whatever found it. Exactly-once ack
failures keep their ErrorInfo details (the emulator's REST door drops them,
docs/protocol.md#where-the-emulator-differs). A path no binding matches is a 404 error, a
known path with another HTTP method a 405 (``Allow`` lists the methods), a malformed body a
400 that names the problem. StreamingPull has no REST binding. A request that meets a bug is
logged and answered 500 INTERNAL, still as JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web
from google.protobuf.message import Message

from eoclient.errors import RpcError
from eoclient.server_stub.access.security import (
    CORS_HEADERS,
    CORS_MAX_AGE_SECONDS,
    CORS_METHODS,
    BrowserPolicy,
)
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.doors.rest import parsing, pulsar_alias, system_parameters
from eoclient.server_stub.doors.rest.errors import (
    HTTP_STATUS,
    HttpProblem,
    error_body,
    json_response,
    problem_response,
    rpc_error_response,
)
from eoclient.server_stub.doors.rest.parsing import MAX_BODY_BYTES
from eoclient.server_stub.doors.rest.read_timeouts import RequestReadTimeout, TimedAppRunner
from eoclient.server_stub.doors.rest.routes import route
from eoclient.server_stub.services.errors import INTERNAL_ERROR_MESSAGE
from eoclient.server_stub.services.table import Services

__all__ = ["HTTP_STATUS", "MAX_BODY_BYTES", "MountedPage", "RestDoor"]

logger = logging.getLogger("eoclient.server_stub.doors.rest.door")

_CUT_SHORT = "The connection closed before the request's body was complete."


class MountedPage(Protocol):
    """What else the door serves besides the API (the metrics, the dashboard): each page
    is reached after the browser policy and the bearer token were checked, and says
    itself which paths are its own."""

    def matches(self, path: str) -> bool: ...

    async def response(
        self, request: web.Request, grant: Grant | None, cors: dict[str, str]
    ) -> web.Response: ...


class RestDoor:
    """The aiohttp application of one ``Services``, behind a ``BrowserPolicy``."""

    def __init__(
        self,
        services: Services,
        policy: BrowserPolicy | None = None,
        pages: Sequence[MountedPage] = (),
    ) -> None:
        self.services = services
        self.policy = policy or BrowserPolicy()
        self.pages = tuple(pages)  # behind the same checks as the API

    def runner(self) -> web.AppRunner:
        # aiohttp must not undo Content-Encoding itself (``parsing.read_body`` does,
        # so that a body that lies about its encoding is a 400 in Google's JSON).
        # A request aiohttp cannot parse is answered in JSON as well (``malformed``), and
        # one that stops half-way is answered 408 within seconds (``read_timeouts``).
        return TimedAppRunner(
            self.application(), access_log=None, shutdown_timeout=1.0, auto_decompress=False
        )

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        # Every path, newlines included ("." would not match one, and aiohttp's own
        # answer to an unmatched path is a plain-text 404).
        app.router.add_route("*", r"/{path:[\s\S]*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        cors: dict[str, str] = {}
        try:
            cors = self._browser_check(request)
            if request.method == "OPTIONS" and cors:
                return web.Response(status=204, headers=_preflight(cors))
            system, query = system_parameters.split_query(list(request.query.items()))
            token = f"Bearer {system.access_token}" if system.access_token else None
            grant = self.services.authenticate(request.headers.get("Authorization") or token)
            for page in self.pages:
                if page.matches(request.path):
                    return await page.response(request, grant, cors)
            if pulsar_alias.matches(request.path):  # Pulsar's shapes, not Google's
                return await pulsar_alias.answer(self.services, request, cors, grant)
            response = await self._answer(request, query, grant)
            text = system.render(response)
        except HttpProblem as problem:
            return problem_response(problem, cors)
        except RequestReadTimeout as late:  # the body stopped arriving (read_timeouts.py)
            timed_out = json_response(error_body(408, "DEADLINE_EXCEEDED", str(late)), 408, cors)
            timed_out.force_close()
            return timed_out
        except RpcError as error:
            return rpc_error_response(error, cors)
        except ConnectionError as error:
            # The client went away mid-request (a body shorter than its Content-Length, a
            # reset): its doing, not a failure here, and most likely nobody reads this.
            logger.info(
                "REST %s %s: the client closed the connection (%s)",
                request.method,
                request.path,
                error,
            )
            return json_response(error_body(400, "INVALID_ARGUMENT", _CUT_SHORT), 400, cors)
        except Exception:
            logger.exception("REST %s %s failed", request.method, request.path)
            return json_response(error_body(500, "INTERNAL", INTERNAL_ERROR_MESSAGE), 500, cors)
        return json_response(text, 200, cors)

    def _browser_check(self, request: web.Request) -> dict[str, str]:
        """Apply the browser policy; the CORS headers an allowed cross-origin caller gets."""
        headers = request.headers
        refusal = self.policy.host_refusal(headers.get("Host"))
        if refusal is not None:
            raise HttpProblem(403, "PERMISSION_DENIED", refusal)
        origin = headers.get("Origin")
        own_origin = f"{request.scheme}://{headers.get('Host', '')}"
        refusal = self.policy.origin_refusal(origin, own_origin)
        if refusal is not None:
            raise HttpProblem(403, "PERMISSION_DENIED", refusal)
        cors = {}
        if origin is not None and origin.lower().rstrip("/") != own_origin.lower():
            cors = {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
        if request.method == "OPTIONS" and cors:
            return cors
        refusal = self.policy.content_type_refusal(headers.get("Content-Type"), request.body_exists)
        if refusal is not None:
            raise HttpProblem(415, "INVALID_ARGUMENT", refusal)
        return cors

    async def _answer(
        self, request: web.Request, query: list[tuple[str, str]], grant: Grant | None
    ) -> Message:
        """Route, build the request proto (``query``: without system parameters), and
        run the RPC."""
        binding, name = route(request.method, request.path)
        message = self.services.methods[binding.rpc].request()
        if binding.body_field:  # CreateSchema's body is one field of the request
            parsing.parse_body(
                await parsing.read_body(request), getattr(message, binding.body_field)
            )
            parsing.bind_query(message, query)
        elif binding.body:
            parsing.parse_body(await parsing.read_body(request), message)
            parsing.refuse_query(query)
        else:
            parsing.bind_query(message, query)
        parsing.check_text(name, binding.field)
        parsing.set_field(message, binding.field, name)
        response: Message = await self.services.call(binding.rpc, message, grant=grant)
        return response


def _preflight(cors: dict[str, str]) -> dict[str, str]:
    """The answer to an allowed origin's CORS preflight (Fetch standard §3.2.2)."""
    return {
        **cors,
        "Access-Control-Allow-Methods": CORS_METHODS,
        "Access-Control-Allow-Headers": CORS_HEADERS,
        "Access-Control-Max-Age": str(CORS_MAX_AGE_SECONDS),
    }
