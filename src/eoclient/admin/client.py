"""``AdminClient``: topics, subscriptions, snapshots, schemas and IAM policies, as typed
asyncio calls.

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

import random
from typing import TYPE_CHECKING

from eoclient._clock import AsyncClock, MonotonicClock
from eoclient._retrying import DEFAULT
from eoclient._transport import Endpoint, PubSubTransport
from eoclient.admin.calls import Retry
from eoclient.admin.iam import IamAdmin
from eoclient.admin.paths import project_path
from eoclient.admin.policy_calls import PolicyCalls
from eoclient.admin.schemas import SchemaAdmin
from eoclient.admin.snapshots import SnapshotAdmin
from eoclient.admin.subscriptions import SubscriptionAdmin
from eoclient.admin.topics import TopicAdmin
from eoclient.errors import ClosedError

if TYPE_CHECKING:
    import grpc

__all__ = ["AdminClient"]


class AdminClient(TopicAdmin, SubscriptionAdmin, SnapshotAdmin, SchemaAdmin, IamAdmin, PolicyCalls):
    """Administers topics, subscriptions, snapshots, schemas and IAM policies at ``endpoint``.

    Its methods come from one part per kind of resource, each a subclass of
    :class:`~eoclient.admin.calls.AdminCalls` that makes every call through the client's
    channel, timeout and retry:

    * topics (:mod:`~eoclient.admin.topics`): :meth:`create_topic`, :meth:`get_topic`,
      :meth:`update_topic`, :meth:`list_topics`, :meth:`list_topic_subscriptions`,
      :meth:`delete_topic`;
    * subscriptions (:mod:`~eoclient.admin.subscriptions`): :meth:`create_subscription`,
      :meth:`get_subscription`, :meth:`update_subscription`, :meth:`list_subscriptions`,
      :meth:`modify_push_config`, :meth:`delete_subscription`, :meth:`detach_subscription`;
    * snapshots and seek (:mod:`~eoclient.admin.snapshots`): :meth:`create_snapshot`,
      :meth:`get_snapshot`, :meth:`update_snapshot`, :meth:`list_snapshots`,
      :meth:`list_topic_snapshots`, :meth:`delete_snapshot`, :meth:`seek`;
    * schemas (:mod:`~eoclient.admin.schemas`): :meth:`create_schema`, :meth:`get_schema`,
      :meth:`list_schemas`, :meth:`list_schema_revisions`, :meth:`commit_schema`,
      :meth:`rollback_schema`, :meth:`delete_schema_revision`, :meth:`delete_schema`,
      :meth:`validate_schema`, :meth:`validate_message`;
    * IAM policies of any of those (:mod:`~eoclient.admin.iam`): :meth:`get_iam_policy`,
      :meth:`set_iam_policy`, :meth:`test_iam_permissions`;
    * the Pulsar-style broker policies, on eoclient's reference server only
      (:mod:`~eoclient.admin.policy_calls`): :meth:`skip_messages`,
      :meth:`set_topic_retention`, :meth:`set_topic_backlog_quota`,
      :meth:`set_topic_message_ttl`, :meth:`set_subscription_message_ttl`, their
      ``get_``/``remove_`` siblings and counters, :meth:`seek_with_outcome`.

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
        self._closed = False
        super().__init__(
            self._get_transport,
            timeout=timeout,
            retry=retry,
            clock=clock or MonotonicClock(),
            rng=rng or random.Random(),
        )

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

    # The official client's path helpers, also as static methods (each part has its own:
    # ``topic_path``, ``subscription_path``, ``snapshot_path``, ``schema_path``).
    project_path = staticmethod(project_path)
