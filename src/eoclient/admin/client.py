"""``AdminClient``: topics, subscriptions and snapshots, as typed asyncio calls.

::

    async with AdminClient() as admin:
        topic = await admin.create_topic(topic_path("my-project", "orders"))
        await admin.create_subscription(
            subscription_path("my-project", "orders-service"),
            topic.name,
            enable_exactly_once_delivery=True,
            dead_letter_policy=DeadLetterPolicy(topic_path("my-project", "orders-dead")),
        )
        await admin.update_subscription(name, ack_deadline_seconds=30, labels={"team": "a"})
        async for subscription in admin.list_subscriptions("my-project"):
            print(subscription.name, subscription.ack_deadline_seconds)

Every call is one google.pubsub.v1 RPC, retried where the official client retries it
(and, on DEADLINE_EXCEEDED, where a repeat cannot change the answer: the table in
:mod:`eoclient.admin.calls`); ``retry=`` and ``timeout=`` change that for one call. Failures
raise the
:class:`~eoclient.errors.RpcError` subclass of the server's status, carrying the
server's message unchanged (``NotFound``, ``AlreadyExists``, ``InvalidArgument``,
``FailedPrecondition``, ``PermissionDenied``, ``Unimplemented``, ...); arguments the
client can reject by itself raise ``ValueError`` before anything is sent.

``update_*`` methods build the update mask from the keyword arguments the caller
passed: ``update_subscription(name, ack_deadline_seconds=30, labels={...})`` sends the
mask ``["ack_deadline_seconds", "labels"]`` and nothing else changes. Passing ``None``
for an optional property clears it (the server then applies its default).
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Mapping
from typing import Any

import grpc

from eoclient._clock import AsyncClock, MonotonicClock
from eoclient._retrying import DEFAULT, check_timeout
from eoclient._transport import Endpoint, PubSubTransport
from eoclient.admin import convert
from eoclient.admin.calls import AsyncPager, Retry, Timeout, check_retry
from eoclient.admin.iam import IamAdmin
from eoclient.admin.paths import (
    project_of,
    project_path,
    snapshot_path,
    subscription_path,
    topic_path,
)
from eoclient.admin.policy_calls import PolicyCalls
from eoclient.admin.schemas import SchemaAdmin, SchemaSettings
from eoclient.admin.types import (
    UNSET,
    DeadLetterPolicy,
    ExpirationPolicy,
    PushConfig,
    RetryPolicy,
    Snapshot,
    Subscription,
    Topic,
    Unset,
)
from eoclient.errors import ClosedError

__all__ = ["AdminClient"]


class AdminClient(SchemaAdmin, IamAdmin, PolicyCalls):
    """Administers topics, subscriptions, snapshots, schemas and IAM policies at ``endpoint``.

    The Pulsar-style policy methods (``skip_messages``, ``set_topic_retention``, ...,
    eoclient's reference server only) come from :class:`~eoclient.admin.policy_calls.PolicyCalls`.

    Args:
        endpoint: where to connect (:class:`~eoclient.Endpoint`): a string is TLS with
            Application Default Credentials unless it is a loopback address or
            ``PUBSUB_EMULATOR_HOST``'s value (plain text); ``None`` =
            ``PUBSUB_EMULATOR_HOST`` if set, else the service.
        channel: a ``grpc.aio.Channel`` to use instead of opening one; the AdminClient
            never closes it.
        transport: the same, as a ``PubSubTransport`` another client already wraps.
        timeout: each call's time budget, seconds, retries included (``None`` = none);
            a call's ``timeout=`` replaces it.
        retry: the retry of every call that passes none: ``DEFAULT`` (each method's own,
            below), ``None`` (never retry: a tool that reports an unreachable server at
            once rather than after its timeout), or settings.
        clock: what retry backoffs wait on (tests pass a ``FakeClock``).
        rng: the random source of the backoffs' jitter.

    Every method also takes ``retry=`` (:class:`~eoclient.admin.RetrySettings`; ``None`` = one
    attempt; by default the method's GAPIC retry: :mod:`eoclient.admin.calls`) and
    ``timeout=``.

    Use ``async with AdminClient() as admin:`` (or call :meth:`aclose`); the channel
    opens on the first call. After ``aclose`` every call raises ``ClosedError``.
    """

    def __init__(
        self,
        endpoint: str | Endpoint | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        transport: PubSubTransport | None = None,
        timeout: float | None = 60.0,
        retry: Retry = DEFAULT,
        clock: AsyncClock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if sum(given is not None for given in (endpoint, channel, transport)) > 1:
            raise ValueError("pass only one of endpoint=, channel= and transport=")
        if channel is not None:
            transport = PubSubTransport(channel, owns_channel=False)
        self._endpoint = Endpoint.resolve(endpoint) if transport is None else None
        self._transport = transport
        self._owns_transport = transport is None
        self._timeout = check_timeout(timeout)
        self._retry = check_retry(retry)
        self._clock = clock or MonotonicClock()
        self._rng = rng or random.Random()
        self._closed = False

    def __repr__(self) -> str:
        where = self._endpoint.target if self._endpoint is not None else "shared transport"
        return f"<AdminClient {where}{' closed' if self._closed else ''}>"

    async def __aenter__(self) -> AdminClient:
        self._get_transport()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the channel (unless it was passed in). Idempotent."""
        self._closed = True
        transport, self._transport = self._transport, None
        if transport is not None and self._owns_transport:
            await transport.close()

    def _get_transport(self) -> PubSubTransport:
        if self._closed:
            raise ClosedError("the AdminClient is closed")
        if self._transport is None:
            assert self._endpoint is not None
            self._transport = PubSubTransport(self._endpoint.create_channel())
        return self._transport

    # The official client's path helpers, also as static methods.
    project_path = staticmethod(project_path)
    topic_path = staticmethod(topic_path)
    subscription_path = staticmethod(subscription_path)
    snapshot_path = staticmethod(snapshot_path)

    # ================================================================ topics

    async def create_topic(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        message_retention_duration: datetime.timedelta | None = None,
        kms_key_name: str = "",
        schema_settings: SchemaSettings | None = None,
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
        )
        return convert.topic_from_pb(await self._call(convert.create_topic(topic), retry, timeout))

    async def get_topic(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Topic:
        return convert.topic_from_pb(await self._call(convert.get_topic(name), retry, timeout))

    async def update_topic(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | Unset = UNSET,
        message_retention_duration: datetime.timedelta | Unset | None = UNSET,
        kms_key_name: str | Unset = UNSET,
        schema_settings: SchemaSettings | Unset | None = UNSET,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Topic:
        """Change the given properties (the update mask names exactly those)."""
        changes = _changes(
            labels=labels,
            message_retention_duration=message_retention_duration,
            kms_key_name=kms_key_name,
            schema_settings=schema_settings,
        )
        return convert.topic_from_pb(
            await self._call(convert.update_topic(name, changes), retry, timeout)
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
            convert.list_topics, convert.topics_page, project_of(project), page_size, retry, timeout
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
            convert.list_topic_subscriptions, convert.names_page, topic, page_size, retry, timeout
        )

    def list_topic_snapshots(
        self,
        topic: str,
        *,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[str]:
        """Names of the snapshots taken from the topic's subscriptions."""
        return self._pager(
            convert.list_topic_snapshots, convert.names_page, topic, page_size, retry, timeout
        )

    async def delete_topic(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        """Delete a topic; its subscriptions remain, their topic reads ``_deleted-topic_``."""
        await self._call(convert.delete_topic(name), retry, timeout)

    async def detach_subscription(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        """Detach a subscription from its topic: it stops receiving and pulls fail."""
        await self._call(convert.detach_subscription(name), retry, timeout)

    # ================================================================ subscriptions

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
        )
        return convert.subscription_from_pb(
            await self._call(convert.create_subscription(subscription), retry, timeout)
        )

    async def get_subscription(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Subscription:
        return convert.subscription_from_pb(
            await self._call(convert.get_subscription(name), retry, timeout)
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
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Subscription:
        """Change the given properties (the update mask names exactly those).

        ``filter`` and ``enable_message_ordering`` cannot change after creation (the
        service refuses), so they are not parameters; ``push_config=None`` turns a
        push subscription into a pull one.
        """
        changes = _changes(
            ack_deadline_seconds=ack_deadline_seconds,
            retain_acked_messages=retain_acked_messages,
            message_retention_duration=message_retention_duration,
            labels=labels,
            expiration_policy=expiration_policy,
            dead_letter_policy=dead_letter_policy,
            retry_policy=retry_policy,
            enable_exactly_once_delivery=enable_exactly_once_delivery,
            push_config=push_config,
        )
        return convert.subscription_from_pb(
            await self._call(convert.update_subscription(name, changes), retry, timeout)
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
            convert.list_subscriptions,
            convert.subscriptions_page,
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
        await self._call(convert.modify_push_config(name, push_config), retry, timeout)

    async def delete_subscription(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        await self._call(convert.delete_subscription(name), retry, timeout)

    async def seek(
        self,
        subscription: str,
        *,
        time: datetime.datetime | None = None,
        snapshot: str | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """Move the subscription's ack state to a point in time or to a snapshot.

        ``time`` (timezone-aware): retained messages published before it become
        acked, later ones unacked (acked messages come back only if the subscription
        retains them, ``retain_acked_messages``). ``snapshot``: the subscription's ack
        state becomes the snapshot's (same topic required). Exactly one of the two.
        """
        await self._call(convert.seek(subscription, time=time, snapshot=snapshot), retry, timeout)

    # ================================================================ snapshots

    async def create_snapshot(
        self,
        name: str,
        subscription: str,
        *,
        labels: Mapping[str, str] | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Snapshot:
        """Snapshot ``subscription``'s unacked backlog (and everything published after)."""
        return convert.snapshot_from_pb(
            await self._call(
                convert.create_snapshot(name, subscription, labels or {}), retry, timeout
            )
        )

    async def get_snapshot(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Snapshot:
        return convert.snapshot_from_pb(
            await self._call(convert.get_snapshot(name), retry, timeout)
        )

    async def update_snapshot(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | Unset = UNSET,
        expire_time: datetime.datetime | Unset | None = UNSET,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Snapshot:
        """Change the given properties (the update mask names exactly those)."""
        changes = _changes(labels=labels, expire_time=expire_time)
        return convert.snapshot_from_pb(
            await self._call(convert.update_snapshot(name, changes), retry, timeout)
        )

    def list_snapshots(
        self,
        project: str,
        *,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[Snapshot]:
        return self._pager(
            convert.list_snapshots,
            convert.snapshots_page,
            project_of(project),
            page_size,
            retry,
            timeout,
        )

    async def delete_snapshot(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        await self._call(convert.delete_snapshot(name), retry, timeout)


def _changes(**fields: Any) -> dict[str, Any]:
    """The arguments the caller passed (those not UNSET): the update mask's fields."""
    return {name: value for name, value in fields.items() if value is not UNSET}
