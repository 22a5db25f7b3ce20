"""The export configs of a subscription as it will be stored (a create, or an update merged
with what is stored): at most one way of delivery, and each export's own checks
(``cloud_storage_config``; BigQuery's where the stand-in's checks are wired). Output-only
fields a client sent are cleared: the server fills them when it answers.
"""

from __future__ import annotations

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument
from eoclient.server_stub.services.cloud_storage_config import check_cloud_storage_config


def delivery_kinds(subscription: pubsub_pb2.Subscription) -> list[str]:
    kinds = []
    if subscription.push_config.push_endpoint:
        kinds.append("push_config")
    if subscription.HasField("bigquery_config") and subscription.bigquery_config.ByteSize():
        kinds.append("bigquery_config")
    if (
        subscription.HasField("cloud_storage_config")
        and subscription.cloud_storage_config.ByteSize()
    ):
        kinds.append("cloud_storage_config")
    return kinds


def check_exports(subscription: pubsub_pb2.Subscription) -> None:
    """INVALID_ARGUMENT unless the subscription's delivery is one of pull, push, BigQuery or
    Cloud Storage and its export config keeps its rules."""
    clear_output_only(subscription)
    kinds = delivery_kinds(subscription)
    if len(kinds) > 1:
        raise InvalidArgument(
            "At most one of push_config, bigquery_config and cloud_storage_config may be set: "
            f"a subscription has one delivery type (this one would have {' and '.join(kinds)})."
        )
    if "cloud_storage_config" in kinds:
        check_cloud_storage_config(subscription.cloud_storage_config)


def clear_output_only(subscription: pubsub_pb2.Subscription) -> None:
    if subscription.HasField("cloud_storage_config"):
        subscription.cloud_storage_config.ClearField("state")
    if subscription.HasField("bigquery_config"):
        subscription.bigquery_config.ClearField("state")
