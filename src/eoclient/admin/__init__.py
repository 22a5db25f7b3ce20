"""Typed admin API: topics, subscriptions, snapshots, schemas and IAM policies (no
protobuf types in it).

::

    from eoclient.admin import AdminClient, topic_path, subscription_path

    async with AdminClient() as admin:
        await admin.create_topic(topic_path("my-project", "orders"))
"""

from eoclient._retrying import DEFAULT, RetrySettings
from eoclient.admin.calls import AsyncPager
from eoclient.admin.client import AdminClient
from eoclient.admin.export_configs import (
    BigQueryConfig,
    CloudStorageConfig,
    CloudStorageOutputFormat,
    ExportState,
)
from eoclient.admin.iam import Binding, Condition, Policy
from eoclient.admin.ingestion import (
    AwsKinesisSource,
    AwsMskSource,
    AzureEventHubsSource,
    CloudStorageFormat,
    CloudStorageSource,
    CloudStorageState,
    ConfluentCloudSource,
    ConfluentCloudState,
    EventHubsState,
    IngestionLogSeverity,
    IngestionSettings,
    KinesisState,
    MskState,
)
from eoclient.admin.paths import (
    project_path,
    schema_path,
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
from eoclient.admin.schemas import Encoding, Schema, SchemaSettings, SchemaType, SchemaView
from eoclient.admin.transforms import JavaScriptUdf, MessageTransform
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
    "DEFAULT",
    "UNSET",
    "AdminClient",
    "AsyncPager",
    "AwsKinesisSource",
    "AwsMskSource",
    "AzureEventHubsSource",
    "BacklogQuota",
    "BacklogQuotaAction",
    "BigQueryConfig",
    "Binding",
    "CloudStorageConfig",
    "CloudStorageFormat",
    "CloudStorageOutputFormat",
    "CloudStorageSource",
    "CloudStorageState",
    "Condition",
    "ConfluentCloudSource",
    "ConfluentCloudState",
    "DeadLetterPolicy",
    "Encoding",
    "EventHubsState",
    "ExpirationPolicy",
    "ExportState",
    "IngestionLogSeverity",
    "IngestionSettings",
    "JavaScriptUdf",
    "KinesisState",
    "MessageTransform",
    "MskState",
    "Policy",
    "PushConfig",
    "RetentionPolicy",
    "RetryPolicy",
    "RetrySettings",
    "Schema",
    "SchemaSettings",
    "SchemaType",
    "SchemaView",
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
    "schema_path",
    "snapshot_path",
    "subscription_path",
    "topic_path",
]
