"""``AdminClient``'s topic methods: create, get, update, list, delete, and a topic's
subscriptions (google.pubsub.v1.Publisher).

A topic's snapshots are listed with the snapshots (:mod:`eoclient.admin.snapshots`), and a
subscription is detached with the subscriptions (:mod:`eoclient.admin.subscriptions`),
although both are Publisher RPCs: each method lives with the resource it reads or
changes, as in the reference server's core.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from eoclient._retrying import DEFAULT
from eoclient.admin import convert, rpc_requests
from eoclient.admin.calls import AdminCalls, AsyncPager, Retry, Timeout
from eoclient.admin.ingestion import IngestionSettings
from eoclient.admin.paths import project_of, topic_path
from eoclient.admin.schemas import SchemaSettings
from eoclient.admin.transforms import MessageTransform
from eoclient.admin.types import UNSET, Topic, Unset

__all__ = ["TopicAdmin"]


class TopicAdmin(AdminCalls):
    """AdminClient's topic methods (one of its bases)."""

    topic_path = staticmethod(topic_path)

    async def create_topic(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        message_retention_duration: datetime.timedelta | None = None,
        kms_key_name: str = "",
        schema_settings: SchemaSettings | None = None,
        message_transforms: Sequence[MessageTransform] = (),
        ingestion_data_source_settings: IngestionSettings | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Topic:
        """Create a topic; ``AlreadyExists`` if it does. Fields: see :class:`Topic`."""
        topic = Topic(
            name,
            labels=labels or {},
            message_retention_duration=message_retention_duration,
            kms_key_name=kms_key_name,
            schema_settings=schema_settings,
            message_transforms=tuple(message_transforms),
            ingestion_data_source_settings=ingestion_data_source_settings,
        )
        return convert.topic_from_pb(
            await self._call(rpc_requests.create_topic(topic), retry, timeout)
        )

    async def get_topic(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Topic:
        return convert.topic_from_pb(await self._call(rpc_requests.get_topic(name), retry, timeout))

    async def update_topic(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | Unset = UNSET,
        message_retention_duration: datetime.timedelta | Unset | None = UNSET,
        kms_key_name: str | Unset = UNSET,
        schema_settings: SchemaSettings | Unset | None = UNSET,
        message_transforms: Sequence[MessageTransform] | Unset = UNSET,
        ingestion_data_source_settings: IngestionSettings | Unset | None = UNSET,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Topic:
        """Change the given properties (the update mask names exactly those;
        ``message_transforms=()`` removes them all;
        ``ingestion_data_source_settings=None`` makes an import topic a plain one)."""
        changes = {
            "labels": labels,
            "message_retention_duration": message_retention_duration,
            "kms_key_name": kms_key_name,
            "schema_settings": schema_settings,
            "message_transforms": (
                message_transforms
                if isinstance(message_transforms, Unset)
                else tuple(message_transforms)
            ),
            "ingestion_data_source_settings": ingestion_data_source_settings,
        }
        return convert.topic_from_pb(
            await self._call(rpc_requests.update_topic(name, changes), retry, timeout)
        )

    def list_topics(
        self,
        project: str,
        *,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[Topic]:
        """The project's topics (``project`` = ``"my-project"`` or ``"projects/my-project"``)."""
        return self._pager(
            rpc_requests.list_topics,
            rpc_requests.topics_page,
            project_of(project),
            page_size,
            retry,
            timeout,
        )

    def list_topic_subscriptions(
        self,
        topic: str,
        *,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[str]:
        """Names of the topic's subscriptions."""
        return self._pager(
            rpc_requests.list_topic_subscriptions,
            rpc_requests.names_page,
            topic,
            page_size,
            retry,
            timeout,
        )

    async def delete_topic(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        """Delete a topic; its subscriptions remain, their topic reads ``_deleted-topic_``."""
        await self._call(rpc_requests.delete_topic(name), retry, timeout)
