"""Resource settings the reference server cannot honour are refused, never stored and ignored.

The service exports subscriptions to Bigtable, which does not exist here; accepting such a
subscription and then never doing what it says is worse than refusing it (nothing is
accepted that is then ignored): a test that passes against this server would not mean
what it says in production. So a create, or an update whose mask names one of these
fields, that sets one is UNIMPLEMENTED, naming the field. An empty config (every field at
its default, as some tools send) counts as unset, as do a subscription's and a topic's
other fields, which the server honours or keeps as metadata only (labels,
``kms_key_name``, ``message_storage_policy``: nothing to enforce on one machine).

Everything else the service does with a topic or subscription has a room of its own here:
Cloud Storage and BigQuery exports (``exports/``, ``bigquery/``), message transforms
(``transforms/``), topic ingestion (``ingestion/``; sources this server cannot reach are
kept, with the state the service shows for them).
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import Message

from eoclient._proto import pubsub_pb2
from eoclient.errors import Unimplemented

# field -> what it would make the service do (for the error message).
_SUBSCRIPTION_FIELDS = {
    "bigtable_config": "export messages to Bigtable",
}


def _is_set(resource: Message, field: str) -> bool:
    value = getattr(resource, field)
    if isinstance(value, Message):
        return resource.HasField(field) and value.ByteSize() > 0
    return len(value) > 0  # repeated


def _refuse(
    kind: str, resource: Message, fields: dict[str, str], only: Iterable[str] | None
) -> None:
    names = fields if only is None else [f for f in fields if f in set(only)]
    for field in names:
        if _is_set(resource, field):
            raise Unimplemented(
                f"{kind}.{field} is not supported by eoclient's reference server: it does not "
                f"{fields[field]}. Leave {field} unset (a resource that would silently not "
                "do it is refused rather than stored)."
            )


def check_subscription(
    subscription: pubsub_pb2.Subscription, update_paths: Iterable[str] | None = None
) -> None:
    """UNIMPLEMENTED if ``subscription`` sets an export this server lacks;
    for an update, only the fields named by the mask (top-level names) count."""
    _refuse("subscription", subscription, _SUBSCRIPTION_FIELDS, update_paths)
