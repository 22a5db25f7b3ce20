import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SkipMessagesRequest(_message.Message):
    __slots__ = ("subscription", "message_ids")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscription: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SkippedMessage(_message.Message):
    __slots__ = ("message_id", "outcome")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[SkippedMessage.Outcome]
        SKIPPED: _ClassVar[SkippedMessage.Outcome]
        ALREADY_ACKNOWLEDGED: _ClassVar[SkippedMessage.Outcome]
        NOT_FOUND: _ClassVar[SkippedMessage.Outcome]
    OUTCOME_UNSPECIFIED: SkippedMessage.Outcome
    SKIPPED: SkippedMessage.Outcome
    ALREADY_ACKNOWLEDGED: SkippedMessage.Outcome
    NOT_FOUND: SkippedMessage.Outcome
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    outcome: SkippedMessage.Outcome
    def __init__(self, message_id: _Optional[str] = ..., outcome: _Optional[_Union[SkippedMessage.Outcome, str]] = ...) -> None: ...

class SkipMessagesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SkippedMessage]
    def __init__(self, results: _Optional[_Iterable[_Union[SkippedMessage, _Mapping]]] = ...) -> None: ...

class RetentionPolicy(_message.Message):
    __slots__ = ("time_seconds", "size_bytes")
    TIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    time_seconds: int
    size_bytes: int
    def __init__(self, time_seconds: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class BacklogQuota(_message.Message):
    __slots__ = ("limit_bytes", "limit_age", "action", "hold_timeout")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[BacklogQuota.Action]
        PRODUCER_REQUEST_HOLD: _ClassVar[BacklogQuota.Action]
        PRODUCER_EXCEPTION: _ClassVar[BacklogQuota.Action]
        CONSUMER_BACKLOG_EVICTION: _ClassVar[BacklogQuota.Action]
    ACTION_UNSPECIFIED: BacklogQuota.Action
    PRODUCER_REQUEST_HOLD: BacklogQuota.Action
    PRODUCER_EXCEPTION: BacklogQuota.Action
    CONSUMER_BACKLOG_EVICTION: BacklogQuota.Action
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_AGE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    HOLD_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    limit_bytes: int
    limit_age: _duration_pb2.Duration
    action: BacklogQuota.Action
    hold_timeout: _duration_pb2.Duration
    def __init__(self, limit_bytes: _Optional[int] = ..., limit_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., action: _Optional[_Union[BacklogQuota.Action, str]] = ..., hold_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TopicPolicies(_message.Message):
    __slots__ = ("topic", "retention", "backlog_quota", "message_ttl")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_QUOTA_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TTL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    retention: RetentionPolicy
    backlog_quota: BacklogQuota
    message_ttl: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., retention: _Optional[_Union[RetentionPolicy, _Mapping]] = ..., backlog_quota: _Optional[_Union[BacklogQuota, _Mapping]] = ..., message_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SubscriptionPolicies(_message.Message):
    __slots__ = ("subscription", "message_ttl", "effective_message_ttl")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TTL_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_MESSAGE_TTL_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    message_ttl: _duration_pb2.Duration
    effective_message_ttl: _duration_pb2.Duration
    def __init__(self, subscription: _Optional[str] = ..., message_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., effective_message_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetTopicPoliciesRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class SetTopicPoliciesRequest(_message.Message):
    __slots__ = ("topic", "policies", "update_mask")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    topic: str
    policies: TopicPolicies
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, topic: _Optional[str] = ..., policies: _Optional[_Union[TopicPolicies, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetSubscriptionPoliciesRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    def __init__(self, subscription: _Optional[str] = ...) -> None: ...

class SetSubscriptionPoliciesRequest(_message.Message):
    __slots__ = ("subscription", "policies", "update_mask")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    policies: SubscriptionPolicies
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, subscription: _Optional[str] = ..., policies: _Optional[_Union[SubscriptionPolicies, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetTopicPolicyCountersRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class TopicPolicyCounters(_message.Message):
    __slots__ = ("topic", "held_publishes", "held_then_refused", "refused_publishes", "retained_messages", "retained_bytes", "oldest_retained_publish_time")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    HELD_PUBLISHES_FIELD_NUMBER: _ClassVar[int]
    HELD_THEN_REFUSED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_PUBLISHES_FIELD_NUMBER: _ClassVar[int]
    RETAINED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RETAINED_BYTES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_RETAINED_PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    held_publishes: int
    held_then_refused: int
    refused_publishes: int
    retained_messages: int
    retained_bytes: int
    oldest_retained_publish_time: _timestamp_pb2.Timestamp
    def __init__(self, topic: _Optional[str] = ..., held_publishes: _Optional[int] = ..., held_then_refused: _Optional[int] = ..., refused_publishes: _Optional[int] = ..., retained_messages: _Optional[int] = ..., retained_bytes: _Optional[int] = ..., oldest_retained_publish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetSubscriptionPolicyCountersRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    def __init__(self, subscription: _Optional[str] = ...) -> None: ...

class SubscriptionPolicyCounters(_message.Message):
    __slots__ = ("subscription", "skipped", "evicted", "expired_by_ttl", "delayed_pending", "backlog_messages", "backlog_bytes", "oldest_unacked_publish_time")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_BY_TTL_FIELD_NUMBER: _ClassVar[int]
    DELAYED_PENDING_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    skipped: int
    evicted: int
    expired_by_ttl: int
    delayed_pending: int
    backlog_messages: int
    backlog_bytes: int
    oldest_unacked_publish_time: _timestamp_pb2.Timestamp
    def __init__(self, subscription: _Optional[str] = ..., skipped: _Optional[int] = ..., evicted: _Optional[int] = ..., expired_by_ttl: _Optional[int] = ..., delayed_pending: _Optional[int] = ..., backlog_messages: _Optional[int] = ..., backlog_bytes: _Optional[int] = ..., oldest_unacked_publish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SeekWithOutcomeRequest(_message.Message):
    __slots__ = ("subscription", "time", "snapshot")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    time: _timestamp_pb2.Timestamp
    snapshot: str
    def __init__(self, subscription: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., snapshot: _Optional[str] = ...) -> None: ...

class SeekOutcome(_message.Message):
    __slots__ = ("replayable_from", "complete")
    REPLAYABLE_FROM_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    replayable_from: _timestamp_pb2.Timestamp
    complete: bool
    def __init__(self, replayable_from: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete: _Optional[bool] = ...) -> None: ...
