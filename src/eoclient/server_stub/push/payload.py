"""The HTTP requests a push sends, and the target a stored push config names.

Formats (Pub/Sub "Push subscriptions": *Receive messages*, *Payload unwrapping*):

* **Wrapped** (``pubsub_wrapper``, the default): a JSON body ``{"message": {...},
  "subscription": "projects/p/subscriptions/s"}``; the message carries ``data``
  (base64), ``attributes``, ``messageId`` and ``message_id``, ``publishTime`` and
  ``publish_time`` (both spellings, as the service sends them), ``orderingKey``;
  ``deliveryAttempt`` is added when the subscription has a dead-letter policy.
* **Unwrapped** (``no_wrapper``): the body is the message data as it was published;
  with ``write_metadata`` the metadata goes in headers — ``x-goog-pubsub-subscription-name``,
  ``x-goog-pubsub-message-id``, ``x-goog-pubsub-publish-time``,
  ``x-goog-pubsub-ordering-key`` and ``x-goog-ordering-key`` (when set; the documented
  name and the one Google's emulator sends) and each attribute under its own name.
  A header value is percent-encoded when it holds characters HTTP headers cannot carry.
* **Authentication**: with ``oidc_token`` the push carries ``Authorization: Bearer`` and
  a JWT with the service's claims (``iss`` accounts.google.com, ``aud`` the audience or
  the endpoint, ``email`` the service account). It is **unsigned** (``alg: none``):
  nobody here holds Google's keys, so a receiver can read the claims but must not
  verify a signature.

The service acknowledges a push answered 102, 200, 201, 202 or 204; anything else, a
timeout (the subscription's ack deadline) or a refused connection is a failure.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.core import Delivery
from eoclient.server_stub.services import translate

SUCCESS_STATUSES = frozenset({102, 200, 201, 202, 204})
OIDC_ISSUER = "https://accounts.google.com"
OIDC_LIFETIME = 3600  # seconds, as Google-signed ID tokens
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 header field name
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "%")


@dataclass(frozen=True)
class PushTarget:
    """A subscription's push config, checked."""

    endpoint: str
    wrapped: bool = True
    write_metadata: bool = False
    oidc_email: str = ""
    oidc_audience: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


def push_target(config: pubsub_pb2.PushConfig) -> PushTarget | None:
    """The target of a stored push config (None: a pull subscription)."""
    if not config.push_endpoint:
        return None
    oidc = config.oidc_token
    return PushTarget(
        endpoint=config.push_endpoint,
        wrapped=config.WhichOneof("wrapper") != "no_wrapper",
        write_metadata=config.no_wrapper.write_metadata,
        oidc_email=oidc.service_account_email,
        oidc_audience=oidc.audience,
        attributes=dict(config.attributes),
    )


def push_request(
    target: PushTarget, subscription: str, delivery: Delivery, now: float
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of the push of ``delivery``."""
    message = translate.message_to_pb(delivery.message)
    publish_time = message.publish_time.ToJsonString()
    headers: dict[str, str] = {}
    if target.wrapped:
        body: dict[str, Any] = {
            "messageId": message.message_id,
            "message_id": message.message_id,
            "publishTime": publish_time,
            "publish_time": publish_time,
        }
        if message.data:
            body["data"] = base64.b64encode(message.data).decode()
        if message.attributes:
            body["attributes"] = dict(message.attributes)
        if message.ordering_key:
            body["orderingKey"] = message.ordering_key
        wrapper: dict[str, Any] = {"message": body, "subscription": subscription}
        if delivery.delivery_attempt:
            wrapper["deliveryAttempt"] = delivery.delivery_attempt
        payload = json.dumps(wrapper).encode()
        headers["Content-Type"] = "application/json"
    else:
        payload = message.data
        headers["Content-Type"] = "application/octet-stream"
        if target.write_metadata:
            for key, value in message.attributes.items():
                if _TOKEN.fullmatch(key):
                    headers[key] = _header_value(value)
            headers["x-goog-pubsub-subscription-name"] = subscription
            headers["x-goog-pubsub-message-id"] = message.message_id
            headers["x-goog-pubsub-publish-time"] = publish_time
            if message.ordering_key:
                # The documented name, and the one Google's emulator sends.
                key = _header_value(message.ordering_key)
                headers["x-goog-pubsub-ordering-key"] = key
                headers["x-goog-ordering-key"] = key
    if target.oidc_email:
        headers["Authorization"] = f"Bearer {unsigned_id_token(target, now)}"
    return payload, headers


def _header_value(value: str) -> str:
    if all(ch in _HEADER_SAFE for ch in value):
        return value
    return urllib.parse.quote(value, safe=_HEADER_SAFE)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_id_token(target: PushTarget, now: float) -> str:
    """An OIDC ID token with the claims the service puts in a push, unsigned."""
    issued = int(now)
    claims = {
        "iss": OIDC_ISSUER,
        "aud": target.oidc_audience or target.endpoint,
        "azp": target.oidc_email,
        "sub": target.oidc_email,
        "email": target.oidc_email,
        "email_verified": True,
        "iat": issued,
        "exp": issued + OIDC_LIFETIME,
    }
    header = {"alg": "none", "typ": "JWT"}
    parts = (json.dumps(header).encode(), json.dumps(claims).encode())
    return ".".join(_b64url(p) for p in parts) + "."
