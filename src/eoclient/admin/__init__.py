"""Typed admin API: topics, subscriptions and snapshots (no protobuf types in it).

::

    from eoclient.admin import AdminClient, topic_path, subscription_path

    async with AdminClient() as admin:
        await admin.create_topic(topic_path("my-project", "orders"))
"""

from eoclient.admin.client import (
    AdminClient,
    AsyncPager,
    project_path,
    snapshot_path,
    subscription_path,
    topic_path,
)
from eoclient.admin.policies import (
    BacklogQuota,
    BacklogQuotaAction,
    RetentionPolicy,
    SeekOutcome,
    SkipOutcome,
    SubscriptionPolicies,
    SubscriptionPolicyCounters,
    TopicPolicies,
    TopicPolicyCounters,
)
from eoclient.admin.types import (
    UNSET,
    DeadLetterPolicy,
    ExpirationPolicy,
    PushConfig,
    RetryPolicy,
    Snapshot,
    Subscription,
    SubscriptionState,
    Topic,
    TopicState,
    Unset,
)

__all__ = [
    "UNSET",
    "AdminClient",
    "AsyncPager",
    "BacklogQuota",
    "BacklogQuotaAction",
    "DeadLetterPolicy",
    "ExpirationPolicy",
    "PushConfig",
    "RetentionPolicy",
    "RetryPolicy",
    "SeekOutcome",
    "SkipOutcome",
    "Snapshot",
    "Subscription",
    "SubscriptionPolicies",
    "SubscriptionPolicyCounters",
    "SubscriptionState",
    "Topic",
    "TopicPolicies",
    "TopicPolicyCounters",
    "TopicState",
    "Unset",
    "project_path",
    "snapshot_path",
    "subscription_path",
    "topic_path",
]
