"""The request of each topic, subscription and snapshot RPC: a :class:`Request` that carries
everything :meth:`PubSubTransport.call` needs (service, method, message, response class,
routing header), so that the topic, subscription and snapshot methods never build or read
a protobuf; the resources themselves convert in ``convert``.

Update requests carry a field mask of top-level, snake_case paths (gRPC ``FieldMask``;
only the REST/JSON mapping uses camelCase: docs/protocol.md#update-masks): the fields
the caller passed, those not ``UNSET``. A path in the mask whose field is unset in the
message clears the field: that is how ``None`` is sent.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Mapping
from typing import Any

from google.protobuf import empty_pb2

from eoclient._proto import pubsub_pb2 as pb
from eoclient.admin.calls import Request
from eoclient.admin.convert import (
    push_config_to_pb,
    set_timestamp,
    snapshot_from_pb,
    subscription_from_pb,
    subscription_to_pb,
    topic_from_pb,
    topic_to_pb,
)
from eoclient.admin.types import UNSET, PushConfig, Snapshot, Subscription, Topic

# Output-only fields: never sent, whatever the dataclass holds.
_TOPIC_OUTPUT_ONLY = frozenset({"state"})
_SUBSCRIPTION_OUTPUT_ONLY = frozenset({"state", "topic_message_retention_duration"})


# ================================================================ field masks


def _passed(changes: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in changes.items() if value is not UNSET}


def _mask_paths(changes: Mapping[str, Any], known: Collection[str], what: str) -> list[str]:
    if not changes:
        raise ValueError(f"{what}: nothing to update; pass at least one field to change")
    unknown = sorted(set(changes) - set(known))
    if unknown:  # the client only passes known names; this guards the converters
        raise ValueError(f"{what}: unknown fields {unknown}")
    # Sorted, so a request's mask does not depend on the caller's argument order.
    return sorted(changes)


def _fields(cls: type[Any], exclude: Collection[str]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.name not in exclude)


TOPIC_UPDATABLE = _fields(Topic, {"name", *_TOPIC_OUTPUT_ONLY})
# enable_message_ordering and filter are immutable after creation
# (docs/protocol.md#subscription-properties-and-defaults);
# detached is changed by DetachSubscription only.
SUBSCRIPTION_UPDATABLE = _fields(
    Subscription,
    {"name", "topic", "enable_message_ordering", "filter", "detached", *_SUBSCRIPTION_OUTPUT_ONLY},
)
SNAPSHOT_UPDATABLE = frozenset({"labels", "expire_time"})


# ================================================================ requests: Publisher


def create_topic(topic: Topic) -> Request[pb.Topic]:
    return Request("Publisher", "CreateTopic", topic_to_pb(topic), pb.Topic, ("name", topic.name))


def get_topic(name: str) -> Request[pb.Topic]:
    return Request(
        "Publisher", "GetTopic", pb.GetTopicRequest(topic=name), pb.Topic, ("topic", name)
    )


def update_topic(name: str, changes: Mapping[str, Any]) -> Request[pb.Topic]:
    changes = _passed(changes)
    paths = _mask_paths(changes, TOPIC_UPDATABLE, "update_topic")
    topic = dataclasses.replace(Topic(name), **changes)
    request = pb.UpdateTopicRequest(topic=topic_to_pb(topic))
    request.update_mask.paths.extend(paths)
    return Request("Publisher", "UpdateTopic", request, pb.Topic, ("topic.name", name))


def list_topics(project: str, page_size: int, token: str) -> Request[pb.ListTopicsResponse]:
    request = pb.ListTopicsRequest(project=project, page_size=page_size, page_token=token)
    return Request("Publisher", "ListTopics", request, pb.ListTopicsResponse, ("project", project))


def topics_page(response: pb.ListTopicsResponse) -> tuple[list[Topic], str]:
    return [topic_from_pb(t) for t in response.topics], response.next_page_token


def delete_topic(name: str) -> Request[empty_pb2.Empty]:
    return Request(
        "Publisher",
        "DeleteTopic",
        pb.DeleteTopicRequest(topic=name),
        empty_pb2.Empty,
        ("topic", name),
    )


def list_topic_subscriptions(
    topic: str, page_size: int, token: str
) -> Request[pb.ListTopicSubscriptionsResponse]:
    request = pb.ListTopicSubscriptionsRequest(topic=topic, page_size=page_size, page_token=token)
    return Request(
        "Publisher",
        "ListTopicSubscriptions",
        request,
        pb.ListTopicSubscriptionsResponse,
        ("topic", topic),
    )


def list_topic_snapshots(
    topic: str, page_size: int, token: str
) -> Request[pb.ListTopicSnapshotsResponse]:
    request = pb.ListTopicSnapshotsRequest(topic=topic, page_size=page_size, page_token=token)
    return Request(
        "Publisher", "ListTopicSnapshots", request, pb.ListTopicSnapshotsResponse, ("topic", topic)
    )


def names_page(
    response: pb.ListTopicSubscriptionsResponse | pb.ListTopicSnapshotsResponse,
) -> tuple[list[str], str]:
    if isinstance(response, pb.ListTopicSubscriptionsResponse):
        return list(response.subscriptions), response.next_page_token
    return list(response.snapshots), response.next_page_token


def detach_subscription(name: str) -> Request[pb.DetachSubscriptionResponse]:
    return Request(
        "Publisher",
        "DetachSubscription",
        pb.DetachSubscriptionRequest(subscription=name),
        pb.DetachSubscriptionResponse,
        ("subscription", name),
    )


# ================================================================ requests: Subscriber


def create_subscription(subscription: Subscription) -> Request[pb.Subscription]:
    return Request(
        "Subscriber",
        "CreateSubscription",
        subscription_to_pb(subscription),
        pb.Subscription,
        ("name", subscription.name),
    )


def get_subscription(name: str) -> Request[pb.Subscription]:
    return Request(
        "Subscriber",
        "GetSubscription",
        pb.GetSubscriptionRequest(subscription=name),
        pb.Subscription,
        ("subscription", name),
    )


def update_subscription(name: str, changes: Mapping[str, Any]) -> Request[pb.Subscription]:
    changes = _passed(changes)
    paths = _mask_paths(changes, SUBSCRIPTION_UPDATABLE, "update_subscription")
    subscription = dataclasses.replace(Subscription(name, ""), **changes)
    request = pb.UpdateSubscriptionRequest(subscription=subscription_to_pb(subscription))
    request.update_mask.paths.extend(paths)
    return Request(
        "Subscriber", "UpdateSubscription", request, pb.Subscription, ("subscription.name", name)
    )


def list_subscriptions(
    project: str, page_size: int, token: str
) -> Request[pb.ListSubscriptionsResponse]:
    request = pb.ListSubscriptionsRequest(project=project, page_size=page_size, page_token=token)
    return Request(
        "Subscriber",
        "ListSubscriptions",
        request,
        pb.ListSubscriptionsResponse,
        ("project", project),
    )


def subscriptions_page(response: pb.ListSubscriptionsResponse) -> tuple[list[Subscription], str]:
    return [subscription_from_pb(s) for s in response.subscriptions], response.next_page_token


def delete_subscription(name: str) -> Request[empty_pb2.Empty]:
    return Request(
        "Subscriber",
        "DeleteSubscription",
        pb.DeleteSubscriptionRequest(subscription=name),
        empty_pb2.Empty,
        ("subscription", name),
    )


def create_snapshot(
    name: str, subscription: str, labels: Mapping[str, str]
) -> Request[pb.Snapshot]:
    request = pb.CreateSnapshotRequest(name=name, subscription=subscription, labels=labels)
    return Request("Subscriber", "CreateSnapshot", request, pb.Snapshot, ("name", name))


def get_snapshot(name: str) -> Request[pb.Snapshot]:
    return Request(
        "Subscriber",
        "GetSnapshot",
        pb.GetSnapshotRequest(snapshot=name),
        pb.Snapshot,
        ("snapshot", name),
    )


def update_snapshot(name: str, changes: Mapping[str, Any]) -> Request[pb.Snapshot]:
    changes = _passed(changes)
    paths = _mask_paths(changes, SNAPSHOT_UPDATABLE, "update_snapshot")
    snapshot = pb.Snapshot(name=name)
    if "labels" in changes:
        snapshot.labels.update(changes["labels"])
    if changes.get("expire_time") is not None:
        set_timestamp(snapshot.expire_time, changes["expire_time"], "expire_time")
    request = pb.UpdateSnapshotRequest(snapshot=snapshot)
    request.update_mask.paths.extend(paths)
    return Request("Subscriber", "UpdateSnapshot", request, pb.Snapshot, ("snapshot.name", name))


def list_snapshots(project: str, page_size: int, token: str) -> Request[pb.ListSnapshotsResponse]:
    request = pb.ListSnapshotsRequest(project=project, page_size=page_size, page_token=token)
    return Request(
        "Subscriber", "ListSnapshots", request, pb.ListSnapshotsResponse, ("project", project)
    )


def snapshots_page(response: pb.ListSnapshotsResponse) -> tuple[list[Snapshot], str]:
    return [snapshot_from_pb(s) for s in response.snapshots], response.next_page_token


def delete_snapshot(name: str) -> Request[empty_pb2.Empty]:
    return Request(
        "Subscriber",
        "DeleteSnapshot",
        pb.DeleteSnapshotRequest(snapshot=name),
        empty_pb2.Empty,
        ("snapshot", name),
    )


def seek(
    subscription: str, *, time: datetime.datetime | None, snapshot: str | None
) -> Request[pb.SeekResponse]:
    """A SeekRequest; exactly one of ``time`` and ``snapshot`` (the proto's ``target`` oneof)."""
    if (time is None) == (snapshot is None):
        raise ValueError("seek: pass exactly one of time= and snapshot=")
    request = pb.SeekRequest(subscription=subscription)
    if time is not None:
        set_timestamp(request.time, time, "seek time")
    else:
        assert snapshot is not None
        if not snapshot:
            raise ValueError("seek: snapshot= must be a snapshot's full name, not ''")
        request.snapshot = snapshot
    return Request("Subscriber", "Seek", request, pb.SeekResponse, ("subscription", subscription))


def modify_push_config(name: str, config: PushConfig | None) -> Request[empty_pb2.Empty]:
    request = pb.ModifyPushConfigRequest(subscription=name)
    if config is not None:
        push_config_to_pb(config, request.push_config)
    return Request(
        "Subscriber", "ModifyPushConfig", request, empty_pb2.Empty, ("subscription", name)
    )
