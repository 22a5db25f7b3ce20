"""The Pulsar-shaped skip route of the REST door (PIP-423, docs/protocol.md#skip-by-message-id)::

    POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}/skipByMessageIds

Pulsar's shapes, not Google's: the three body formats (``pulsar_ids``), 204 with no body
on success, and errors as Pulsar's admin API writes them, ``{"reason": "..."}``: 400 with
Pulsar's "Invalid skipByMessageIds payload: ..." texts for a malformed body, 404 "Topic
persistent://t/n/x not found" / "Subscription s not found for topic ..." for an unknown
topic or subscription. The body is checked first, as Pulsar's JAX-RS deserializes it
before the handler runs.

What the names mean, whether they exist and the skip itself are the services'
(``services/pulsar_skip.py``); this door reads the path and the body and writes Pulsar's
answer. The per-id outcomes the skip reports are not part of Pulsar's answer (use
``:skipMessages``).
"""

from __future__ import annotations

import json
import re

from aiohttp import web

from eoclient.errors import RpcError
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.doors.rest import parsing
from eoclient.server_stub.doors.rest.errors import HTTP_STATUS
from eoclient.server_stub.doors.rest.pulsar_ids import (
    PulsarPayloadError,
    message_id_of,
    parse_skip_body,
)
from eoclient.server_stub.services.pulsar_skip import PulsarSubscription
from eoclient.server_stub.services.table import Services

PATH = re.compile(
    r"/admin/v2/persistent/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)/(?P<topic>[^/]+)"
    r"/subscription/(?P<subscription>[^/]+)/skipByMessageIds"
)


def matches(path: str) -> bool:
    return PATH.fullmatch(path) is not None


def _pulsar_error(http: int, reason: str, headers: dict[str, str]) -> web.Response:
    # Pulsar's admin API error body (org.apache.pulsar.common.policies.data.ErrorData).
    return web.Response(
        text=json.dumps({"reason": reason}),
        status=http,
        content_type="application/json",
        charset="utf-8",
        headers=headers,
    )


async def answer(
    services: Services, request: web.Request, cors: dict[str, str], grant: Grant | None
) -> web.Response:
    """Answer one request to the alias path (``matches``), in Pulsar's shapes, for the
    caller ``grant`` authenticated (the door did; its projects are checked here)."""
    found = PATH.fullmatch(request.path)
    assert found is not None
    if request.method != "POST":
        headers = {**cors, "Allow": "POST"}
        return _pulsar_error(405, f"HTTP method {request.method} is not allowed here.", headers)
    try:
        items = parse_skip_body(await parsing.read_body(request))
        message_ids = list(dict.fromkeys(message_id_of(item) for item in items))
    except PulsarPayloadError as error:
        return _pulsar_error(400, str(error), cors)
    except RpcError as error:  # the body's encoding or size (parsing)
        return _pulsar_error(HTTP_STATUS.get(error.code, 400), error.message, cors)

    target = PulsarSubscription(
        found["tenant"], found["namespace"], found["topic"], found["subscription"]
    )
    try:
        await services.pulsar_skip.skip(target, message_ids, grant)
    except RpcError as error:
        return _pulsar_error(HTTP_STATUS.get(error.code, 500), error.message, cors)
    return web.Response(status=204, headers=cors)
