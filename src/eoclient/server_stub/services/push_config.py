"""Push configs as a request brings them: refused before anything is stored when the
server would not honour them (``push/`` delivers the ones it accepts).

Exactly-once delivery is refused for push subscriptions: a push is acknowledged by the
endpoint's HTTP status, so there is no ack id whose outcome could be confirmed.
"""

from __future__ import annotations

import urllib.parse

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument

VERSION_ATTRIBUTE = "x-goog-version"
# The v1 payload (``push/payload.py`` builds it); v1beta1's older one is not built.
SUPPORTED_VERSIONS = ("v1", "v1beta2")


def check_push_config(config: pubsub_pb2.PushConfig, *, exactly_once: bool) -> None:
    """Refuse a push config the server would not honour (nothing is stored then)."""
    # Attributes, a wrapper or a token without an endpoint are kept (a pull subscription
    # until an endpoint is set), so they are checked the same way.
    if config.push_endpoint:
        url = urllib.parse.urlsplit(config.push_endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InvalidArgument(
                f"Invalid push_endpoint given (endpoint={config.push_endpoint}): it must be "
                "an http:// or https:// URL."
            )
        if exactly_once:
            raise InvalidArgument(
                "Exactly once delivery is not supported for push subscriptions: they are "
                "acknowledged by the endpoint's HTTP status (use a pull subscription)."
            )
    for key, value in config.attributes.items():
        if key != VERSION_ATTRIBUTE:
            raise InvalidArgument(
                f"Unsupported push_config attribute {key!r}: the only one is {VERSION_ATTRIBUTE}."
            )
        if value not in SUPPORTED_VERSIONS:
            raise InvalidArgument(
                f"Unsupported {VERSION_ATTRIBUTE} {value!r}: the reference server pushes the "
                f"{' / '.join(SUPPORTED_VERSIONS)} format."
            )
    if config.HasField("oidc_token") and not config.oidc_token.service_account_email:
        raise InvalidArgument("oidc_token.service_account_email is required.")
