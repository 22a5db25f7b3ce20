"""The Pulsar-shaped skip route of the REST door (PIP-423, docs/protocol.md#skip-by-message-id)::

    POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}/skipByMessageIds

Pulsar's shapes, not Google's: the three body formats (``pulsar_ids``), 204 with no body
on success, and errors as Pulsar's admin API writes them, ``{"reason": "..."}``: 400 with
Pulsar's "Invalid skipByMessageIds payload: ..." texts for a malformed body, 404 "Topic
persistent://t/n/x not found" / "Subscription s not found for topic ..." for an unknown
topic or subscription. The body is checked first, as Pulsar's JAX-RS deserializes it
before the handler runs.

Names: the tenant is the project and the namespace must be ``default`` (any other is
404), so ``persistent://my-project/default/orders`` is ``projects/my-project/topics/
orders`` and its subscription ``s`` is ``projects/my-project/subscriptions/s`` (which
must be attached to that topic). The skip itself is the ``SkipMessages`` RPC of
``services/broker_policies.py``, run through ``Services.call`` like every other call; the
per-id outcomes it reports are not part of Pulsar's answer (use ``:skipMessages``).
"""

from __future__ import annotations

import json
import re

from aiohttp import web

from eoclient._proto import broker_policies_pb2 as pb
from eoclient.errors import NotFound, RpcError
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.doors.rest import parsing
from eoclient.server_stub.doors.rest.errors import HTTP_STATUS
from eoclient.server_stub.doors.rest.pulsar_ids import (
    PulsarPayloadError,
    message_id_of,
    parse_skip_body,
)
from eoclient.server_stub.services.table import Services

PATH = re.compile(
    r"/admin/v2/persistent/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)/(?P<topic>[^/]+)"
    r"/subscription/(?P<subscription>[^/]+)/skipByMessageIds"
)
# The one namespace of a project: Pulsar's default namespace name.
NAMESPACE = "default"


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

    tenant, namespace = found["tenant"], found["namespace"]
    pulsar_topic = f"persistent://{tenant}/{namespace}/{found['topic']}"
    if namespace != NAMESPACE:
        return _pulsar_error(
            404,
            f"Namespace {tenant}/{namespace} not found: eoclient maps project {tenant} to "
            f"the namespace {tenant}/{NAMESPACE}.",
            cors,
        )
    topic = f"projects/{tenant}/topics/{found['topic']}"
    subscription = f"projects/{tenant}/subscriptions/{found['subscription']}"
    skip = pb.SkipMessagesRequest(subscription=subscription, message_ids=message_ids)
    try:
        services.authorize(grant, skip)  # before anything is looked up (existence leaks)
    except RpcError as error:
        return _pulsar_error(HTTP_STATUS.get(error.code, 403), error.message, cors)
    broker = services.broker
    try:
        broker.topics.get(topic)
    except RpcError:  # NOT_FOUND, or a name that cannot exist
        return _pulsar_error(404, f"Topic {pulsar_topic} not found", cors)
    try:
        attached = broker.subscriptions.get(subscription).config.topic == topic
    except RpcError:
        attached = False
    if not attached:
        return _pulsar_error(
            404, f"Subscription {found['subscription']} not found for topic {pulsar_topic}", cors
        )
    if message_ids:
        try:
            await services.call("SkipMessages", skip, grant=grant)
        except NotFound as error:  # deleted meanwhile
            return _pulsar_error(404, error.message, cors)
        except RpcError as error:
            return _pulsar_error(HTTP_STATUS.get(error.code, 500), error.message, cors)
    return web.Response(status=204, headers=cors)
