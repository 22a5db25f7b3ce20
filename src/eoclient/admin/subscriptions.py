"""``AdminClient``'s subscription methods: create, get, update, list, delete, switch
between push and pull, and detach (google.pubsub.v1.Subscriber; detaching is a Publisher
RPC, kept here with the resource it changes, as in the reference server's core).

Seeking a subscription is with the snapshots (:mod:`eoclient.admin.snapshots`): both
move its ack state.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from eoclient._retrying import DEFAULT
from eoclient.admin import convert, rpc_requests
from eoclient.admin.calls import AdminCalls, AsyncPager, Retry, Timeout
from eoclient.admin.export_configs import BigQueryConfig, CloudStorageConfig
from eoclient.admin.paths import project_of, subscription_path
from eoclient.admin.transforms import MessageTransform
from eoclient.admin.types import (
    UNSET,
    DeadLetterPolicy,
    ExpirationPolicy,
    PushConfig,
    RetryPolicy,
    Subscription,
    Unset,
)

__all__ = ["SubscriptionAdmin"]


class SubscriptionAdmin(AdminCalls):
    """AdminClient's subscription methods (one of its bases)."""

    subscription_path = staticmethod(subscription_path)

    async def create_subscription(
        self,
        name: str,
        topic: str,
        *,
        ack_deadline_seconds: int = 0,
        retain_acked_messages: bool = False,
        message_retention_duration: datetime.timedelta | None = None,
        labels: Mapping[str, str] | None = None,
        enable_message_ordering: bool = False,
        expiration_policy: ExpirationPolicy | None = None,
        filter: str = "",
        dead_letter_policy: DeadLetterPolicy | None = None,
        retry_policy: RetryPolicy | None = None,
        enable_exactly_once_delivery: bool = False,
        push_config: PushConfig | None = None,
        bigquery_config: BigQueryConfig | None = None,
        cloud_storage_config: CloudStorageConfig | None = None,
        message_transforms: Sequence[MessageTransform] = (),
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Subscription:
        """Create a subscription to ``topic``. Fields and defaults: see :class:`Subscription`."""
        subscription = Subscription(
            name,
            topic,
            ack_deadline_seconds=ack_deadline_seconds,
            retain_acked_messages=retain_acked_messages,
            message_retention_duration=message_retention_duration,
            labels=labels or {},
            enable_message_ordering=enable_message_ordering,
            expiration_policy=expiration_policy,
            filter=filter,
            dead_letter_policy=dead_letter_policy,
            retry_policy=retry_policy,
            enable_exactly_once_delivery=enable_exactly_once_delivery,
            push_config=push_config,
            bigquery_config=bigquery_config,
            cloud_storage_config=cloud_storage_config,
            message_transforms=tuple(message_transforms),
        )
        return convert.subscription_from_pb(
            await self._call(rpc_requests.create_subscription(subscription), retry, timeout)
        )

    async def get_subscription(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Subscription:
        return convert.subscription_from_pb(
            await self._call(rpc_requests.get_subscription(name), retry, timeout)
        )

    async def update_subscription(
        self,
        name: str,
        *,
        ack_deadline_seconds: int | Unset = UNSET,
        retain_acked_messages: bool | Unset = UNSET,
        message_retention_duration: datetime.timedelta | Unset | None = UNSET,
        labels: Mapping[str, str] | Unset = UNSET,
        expiration_policy: ExpirationPolicy | Unset | None = UNSET,
        dead_letter_policy: DeadLetterPolicy | Unset | None = UNSET,
        retry_policy: RetryPolicy | Unset | None = UNSET,
        enable_exactly_once_delivery: bool | Unset = UNSET,
        push_config: PushConfig | Unset | None = UNSET,
        bigquery_config: BigQueryConfig | Unset | None = UNSET,
        cloud_storage_config: CloudStorageConfig | Unset | None = UNSET,
        message_transforms: Sequence[MessageTransform] | Unset = UNSET,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Subscription:
        """Change the given properties (the update mask names exactly those).

        ``filter`` and ``enable_message_ordering`` cannot change after creation (the
        service refuses), so they are not parameters; ``push_config=None`` turns a
        push subscription into a pull one, and so do ``bigquery_config=None`` and
        ``cloud_storage_config=None`` for an export subscription; ``message_transforms=()``
        removes them all.
        """
        changes = {
            "ack_deadline_seconds": ack_deadline_seconds,
            "retain_acked_messages": retain_acked_messages,
            "message_retention_duration": message_retention_duration,
            "labels": labels,
            "expiration_policy": expiration_policy,
            "dead_letter_policy": dead_letter_policy,
            "retry_policy": retry_policy,
            "enable_exactly_once_delivery": enable_exactly_once_delivery,
            "push_config": push_config,
            "bigquery_config": bigquery_config,
            "cloud_storage_config": cloud_storage_config,
            "message_transforms": (
                message_transforms
                if isinstance(message_transforms, Unset)
                else tuple(message_transforms)
            ),
        }
        return convert.subscription_from_pb(
            await self._call(rpc_requests.update_subscription(name, changes), retry, timeout)
        )

    def list_subscriptions(
        self,
        project: str,
        *,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[Subscription]:
        """The project's subscriptions, with all their properties."""
        return self._pager(
            rpc_requests.list_subscriptions,
            rpc_requests.subscriptions_page,
            project_of(project),
            page_size,
            retry,
            timeout,
        )

    async def modify_push_config(
        self,
        name: str,
        push_config: PushConfig | None,
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """Switch a subscription to push (to ``push_config``) or, with ``None``, to pull."""
        await self._call(rpc_requests.modify_push_config(name, push_config), retry, timeout)

    async def delete_subscription(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        await self._call(rpc_requests.delete_subscription(name), retry, timeout)

    async def detach_subscription(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        """Detach a subscription from its topic: it stops receiving and pulls fail."""
        await self._call(rpc_requests.detach_subscription(name), retry, timeout)
