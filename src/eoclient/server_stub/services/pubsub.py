"""The transport-neutral google.pubsub.v1 service both doors of the reference server run.

Thin: each handler turns the request proto into domain values (``translate``), calls the
broker core, and turns the result into the response proto, or raises ``RpcError``.
Nothing here knows gRPC or HTTP: ``PubSubService.call(method, request)`` runs one unary
RPC (injected faults first) for either door; the gRPC door (``grpc_door``) turns the
``RpcError`` into a status, the REST door (``rest``) into Google's JSON error.

Exactly-once ack failures raise ``ExactlyOnceAckFailure`` with the real service's shape
(wire-contract §2.2): INVALID_ARGUMENT, the real message text, and a
``google.rpc.Status`` (sent in ``grpc-status-details-bin`` / the JSON error's
``details``) whose first detail is an ErrorInfo with reason EXACTLY_ONCE_ACKID_FAILURE,
domain pubsub.googleapis.com and ack id → failure metadata; the Status repeats the
call's code and message exactly, because the official client ignores details otherwise
(wire-contract §1.6).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import any_pb2, empty_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from eoclient._proto import pubsub_pb2
from eoclient.errors import (
    InvalidArgument,
    RpcError,
    Unauthenticated,
    Unimplemented,
    rpc_error_class,
)
from eoclient.server_stub.access.tokens import Grant, TokenTable, request_projects
from eoclient.server_stub.core import AckReply, Broker, Delivery
from eoclient.server_stub.core.policies import BacklogQuotaHeld
from eoclient.server_stub.doors.grpc.streams import StreamHandle, StreamRegistry
from eoclient.server_stub.group_commit import GroupCommit
from eoclient.server_stub.services import (
    ack_settling,
    request_checks,
    translate,
    unsupported_settings,
)
from eoclient.server_stub.services.faults import RpcFaults
from eoclient.server_stub.services.publish_hold import publish_held

__all__ = ["ExactlyOnceAckFailure", "PubSubService", "StreamHandle", "StreamRegistry"]

ERROR_INFO_REASON = "EXACTLY_ONCE_ACKID_FAILURE"
ERROR_INFO_DOMAIN = "pubsub.googleapis.com"
# The real service's texts (wire-contract §2.2; java-pubsub#1974 for "out of order").
INVALID_ACK_IDS_MESSAGE = (
    "Some acknowledgement ids in the request were invalid. This could be because the "
    "acknowledgement ids have expired or the acknowledgement ids were malformed."
)
UNORDERED_ACK_IDS_MESSAGE = "Some acknowledgement ids in the request were sent out of order"
TRANSIENT_ACK_IDS_MESSAGE = (
    "Some acknowledgement ids in the request failed temporarily; retry them."
)

# What either door answers (INTERNAL) when a request meets a bug, which is logged.
INTERNAL_ERROR_MESSAGE = "Internal error in the reference server (its log has the details)."
# Unary Pull with return_immediately=false waits this long for a first message.
PULL_WAIT_SECONDS = 1.0

_RPC_CODE_BY_NAME: dict[str, int] = dict(code_pb2.Code.items())


def exactly_once_failure_status(reply: AckReply) -> tuple[str, status_pb2.Status]:
    """The message and rich status for an exactly-once Acknowledge/ModifyAckDeadline failure."""
    values = set(reply.failures.values())
    if any(v.startswith("PERMANENT_") for v in values):
        message = INVALID_ACK_IDS_MESSAGE
    elif values == {"TRANSIENT_FAILURE_UNORDERED_ACK_ID"}:
        message = UNORDERED_ACK_IDS_MESSAGE
    else:
        message = TRANSIENT_ACK_IDS_MESSAGE
    info = error_details_pb2.ErrorInfo(
        reason=ERROR_INFO_REASON, domain=ERROR_INFO_DOMAIN, metadata=dict(reply.failures)
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message, details=[detail])
    return message, status


class ExactlyOnceAckFailure(InvalidArgument):
    """Some ack ids of an Acknowledge/ModifyAckDeadline failed on an exactly-once subscription.

    ``status`` is the rich ``google.rpc.Status`` (ErrorInfo first) both doors send; the
    other ids of the request were applied.
    """

    def __init__(self, reply: AckReply) -> None:
        message, status = exactly_once_failure_status(reply)
        super().__init__(message, reason=ERROR_INFO_REASON, error_info=reply.failures)
        self.status = status


def rich_status(error: RpcError) -> status_pb2.Status:
    """The ``google.rpc.Status`` for ``error`` (with its details, if it has any)."""
    if isinstance(error, ExactlyOnceAckFailure):
        return error.status
    code = _RPC_CODE_BY_NAME.get(error.code, code_pb2.UNKNOWN)
    return status_pb2.Status(code=code, message=error.message)


Handler = Callable[[Any], Awaitable[Message]]


@dataclass(frozen=True)
class RpcMethod:
    """One unary google.pubsub.v1 RPC: its service, handler and message classes."""

    service: str  # "Publisher", "Subscriber", or a full name ("google.iam.v1.IAMPolicy")
    name: str
    handler: Handler
    request: type[Message]
    response: type[Message]


class PubSubService:
    """Both google.pubsub.v1 services over one broker."""

    def __init__(
        self,
        broker: Broker,
        faults: RpcFaults,
        streams: StreamRegistry,
        group_commit: GroupCommit | None = None,
        tokens: TokenTable | None = None,
    ) -> None:
        self.broker = broker
        self.faults = faults
        self.streams = streams
        self.group_commit = group_commit or GroupCommit(broker.store)
        self.tokens = tokens
        self._pull_waiters: dict[str, set[asyncio.Event]] = {}
        self.methods: dict[str, RpcMethod] = self._method_table()
        # issue 14: IAM, SchemaService, schema-checked Publish, push (service_extensions)
        from eoclient.server_stub.services import service_extensions

        service_extensions.install(self)

    def notify(self, subscription: str) -> None:
        self.streams.notify(subscription)
        for event in self._pull_waiters.get(subscription, ()):
            event.set()

    # ------------------------------------------------------------ plumbing

    def authenticate(self, authorization: str | None) -> Grant | None:
        """The caller's grant, from its ``authorization`` value (UNAUTHENTICATED without
        a known bearer token); None when the server takes no tokens."""
        if self.tokens is None:
            return None
        return self.tokens.authenticate(authorization)

    def authorize(self, grant: Grant | None, request: Message) -> None:
        """PERMISSION_DENIED unless ``grant`` covers every project the request names."""
        if self.tokens is not None:
            if grant is None:  # a door that did not authenticate: never let it through
                raise Unauthenticated("Request is missing required authentication credential.")
            grant.authorize(request_projects(request))

    async def call(
        self,
        method: str,
        request: Message,
        handler: Callable[[Any], Awaitable[Any]] | None = None,
        grant: Grant | None = None,
    ) -> Any:
        """Run the unary RPC ``method`` (e.g. ``"Publish"``) for either door.

        The caller's ``grant`` (``authenticate``) is checked first, then injected
        faults for ``method``, then the request; failures raise ``RpcError`` (an
        ``ExactlyOnceAckFailure`` for exactly-once ack failures). ``handler`` replaces
        the method's own for one door (the gRPC door's pre-encoded Pull).
        """
        rpc = self.methods.get(method)
        if rpc is None:
            raise Unimplemented(f"Method google.pubsub.v1 {method} is not implemented.")
        self.authorize(grant, request)
        injected = self.faults.take(method)
        if injected is not None:
            raise rpc_error_class(injected.code)(injected.message)
        request_checks.check_renderable(request)
        # Nothing leaves before the store has it (group_commit.py): not the result, and
        # not an exactly-once failure either, which reports the request's other ids done.
        try:
            result = await (handler or rpc.handler)(request)
        except RpcError:
            await self.group_commit.durable()
            raise
        await self.group_commit.durable()
        return result

    def _method_table(self) -> dict[str, RpcMethod]:
        P = pubsub_pb2
        E = empty_pb2.Empty
        publisher: dict[str, tuple[Handler, Any, Any]] = {
            "CreateTopic": (self.create_topic, P.Topic, P.Topic),
            "UpdateTopic": (self.update_topic, P.UpdateTopicRequest, P.Topic),
            "Publish": (self.publish, P.PublishRequest, P.PublishResponse),
            "GetTopic": (self.get_topic, P.GetTopicRequest, P.Topic),
            "ListTopics": (self.list_topics, P.ListTopicsRequest, P.ListTopicsResponse),
            "ListTopicSubscriptions": (
                self.list_topic_subscriptions,
                P.ListTopicSubscriptionsRequest,
                P.ListTopicSubscriptionsResponse,
            ),
            "ListTopicSnapshots": (
                self.list_topic_snapshots,
                P.ListTopicSnapshotsRequest,
                P.ListTopicSnapshotsResponse,
            ),
            "DeleteTopic": (self.delete_topic, P.DeleteTopicRequest, E),
            "DetachSubscription": (
                self.detach_subscription,
                P.DetachSubscriptionRequest,
                P.DetachSubscriptionResponse,
            ),
        }
        subscriber: dict[str, tuple[Handler, Any, Any]] = {
            "CreateSubscription": (self.create_subscription, P.Subscription, P.Subscription),
            "GetSubscription": (self.get_subscription, P.GetSubscriptionRequest, P.Subscription),
            "UpdateSubscription": (
                self.update_subscription,
                P.UpdateSubscriptionRequest,
                P.Subscription,
            ),
            "ListSubscriptions": (
                self.list_subscriptions,
                P.ListSubscriptionsRequest,
                P.ListSubscriptionsResponse,
            ),
            "DeleteSubscription": (self.delete_subscription, P.DeleteSubscriptionRequest, E),
            "ModifyAckDeadline": (self.modify_ack_deadline, P.ModifyAckDeadlineRequest, E),
            "Acknowledge": (self.acknowledge, P.AcknowledgeRequest, E),
            "Pull": (self.pull, P.PullRequest, P.PullResponse),
            "ModifyPushConfig": (
                self._unimplemented("ModifyPushConfig", "push subscriptions"),
                P.ModifyPushConfigRequest,
                E,
            ),
            "GetSnapshot": (
                self.get_snapshot,
                P.GetSnapshotRequest,
                P.Snapshot,
            ),
            "ListSnapshots": (
                self.list_snapshots,
                P.ListSnapshotsRequest,
                P.ListSnapshotsResponse,
            ),
            "CreateSnapshot": (
                self.create_snapshot,
                P.CreateSnapshotRequest,
                P.Snapshot,
            ),
            "UpdateSnapshot": (
                self.update_snapshot,
                P.UpdateSnapshotRequest,
                P.Snapshot,
            ),
            "DeleteSnapshot": (
                self.delete_snapshot,
                P.DeleteSnapshotRequest,
                E,
            ),
            "Seek": (self.seek, P.SeekRequest, P.SeekResponse),
        }
        return {
            name: RpcMethod(service, name, fn, request, response)
            for service, table in (("Publisher", publisher), ("Subscriber", subscriber))
            for name, (fn, request, response) in table.items()
        }

    @staticmethod
    def _unimplemented(method: str, feature: str) -> Handler:
        async def handler(request: Any) -> Message:
            raise Unimplemented(
                f"google.pubsub.v1 {method} is not implemented by the eoclient reference server "
                f"yet ({feature} are planned)."
            )

        return handler

    # ------------------------------------------------------------- topics

    async def create_topic(self, request: pubsub_pb2.Topic) -> pubsub_pb2.Topic:
        unsupported_settings.check_topic(request)
        return translate.topic_to_pb(self.broker.create_topic(translate.topic_from_pb(request)))

    async def update_topic(self, request: pubsub_pb2.UpdateTopicRequest) -> pubsub_pb2.Topic:
        unsupported_settings.check_topic(request.topic, _top_level(request.update_mask.paths))
        view = self.broker.update_topic(
            translate.topic_from_pb(request.topic),
            list(request.update_mask.paths),
            translate.merge_topic_extras,
        )
        return translate.topic_to_pb(view)

    async def publish(self, request: pubsub_pb2.PublishRequest) -> pubsub_pb2.PublishResponse:
        messages = translate.new_messages(request)
        try:
            ids = self.broker.publish(request.topic, messages, request.ByteSize())
        except BacklogQuotaHeld as held:  # issue 12: a HOLD backlog quota (publish_hold)
            ids = await publish_held(self.broker, request.topic, messages, request.ByteSize(), held)
        return pubsub_pb2.PublishResponse(message_ids=ids)

    async def get_topic(self, request: pubsub_pb2.GetTopicRequest) -> pubsub_pb2.Topic:
        return translate.topic_to_pb(self.broker.get_topic(request.topic))

    async def list_topics(
        self, request: pubsub_pb2.ListTopicsRequest
    ) -> pubsub_pb2.ListTopicsResponse:
        page = self.broker.list_topics(request.project, request.page_size, request.page_token)
        return pubsub_pb2.ListTopicsResponse(
            topics=[translate.topic_to_pb(t) for t in page.items],
            next_page_token=page.next_page_token,
        )

    async def list_topic_subscriptions(
        self, request: pubsub_pb2.ListTopicSubscriptionsRequest
    ) -> pubsub_pb2.ListTopicSubscriptionsResponse:
        page = self.broker.list_topic_subscriptions(
            request.topic, request.page_size, request.page_token
        )
        return pubsub_pb2.ListTopicSubscriptionsResponse(
            subscriptions=list(page.items), next_page_token=page.next_page_token
        )

    async def delete_topic(self, request: pubsub_pb2.DeleteTopicRequest) -> empty_pb2.Empty:
        self.broker.delete_topic(request.topic)
        return empty_pb2.Empty()

    async def detach_subscription(
        self, request: pubsub_pb2.DetachSubscriptionRequest
    ) -> pubsub_pb2.DetachSubscriptionResponse:
        self.broker.detach_subscription(request.subscription)
        return pubsub_pb2.DetachSubscriptionResponse()

    # ------------------------------------------------------ subscriptions

    async def create_subscription(
        self, request: pubsub_pb2.Subscription
    ) -> pubsub_pb2.Subscription:
        unsupported_settings.check_subscription(request)
        view = self.broker.create_subscription(translate.subscription_from_pb(request))
        return translate.subscription_to_pb(view)

    async def get_subscription(
        self, request: pubsub_pb2.GetSubscriptionRequest
    ) -> pubsub_pb2.Subscription:
        return translate.subscription_to_pb(self.broker.get_subscription(request.subscription))

    async def update_subscription(
        self, request: pubsub_pb2.UpdateSubscriptionRequest
    ) -> pubsub_pb2.Subscription:
        unsupported_settings.check_subscription(
            request.subscription, _top_level(request.update_mask.paths)
        )
        view = self.broker.update_subscription(
            translate.subscription_from_pb(request.subscription),
            list(request.update_mask.paths),
            translate.merge_subscription_extras,
        )
        return translate.subscription_to_pb(view)

    async def list_subscriptions(
        self, request: pubsub_pb2.ListSubscriptionsRequest
    ) -> pubsub_pb2.ListSubscriptionsResponse:
        page = self.broker.list_subscriptions(
            request.project, request.page_size, request.page_token
        )
        return pubsub_pb2.ListSubscriptionsResponse(
            subscriptions=[translate.subscription_to_pb(s) for s in page.items],
            next_page_token=page.next_page_token,
        )

    async def delete_subscription(
        self, request: pubsub_pb2.DeleteSubscriptionRequest
    ) -> empty_pb2.Empty:
        self.broker.delete_subscription(request.subscription)
        return empty_pb2.Empty()

    # ------------------------------------------------------ snapshots, seek

    async def create_snapshot(
        self, request: pubsub_pb2.CreateSnapshotRequest
    ) -> pubsub_pb2.Snapshot:
        view = self.broker.create_snapshot(request.name, request.subscription, dict(request.labels))
        return translate.snapshot_to_pb(view)

    async def get_snapshot(self, request: pubsub_pb2.GetSnapshotRequest) -> pubsub_pb2.Snapshot:
        return translate.snapshot_to_pb(self.broker.get_snapshot(request.snapshot))

    async def list_snapshots(
        self, request: pubsub_pb2.ListSnapshotsRequest
    ) -> pubsub_pb2.ListSnapshotsResponse:
        page = self.broker.list_snapshots(request.project, request.page_size, request.page_token)
        return pubsub_pb2.ListSnapshotsResponse(
            snapshots=[translate.snapshot_to_pb(s) for s in page.items],
            next_page_token=page.next_page_token,
        )

    async def list_topic_snapshots(
        self, request: pubsub_pb2.ListTopicSnapshotsRequest
    ) -> pubsub_pb2.ListTopicSnapshotsResponse:
        page = self.broker.list_topic_snapshots(
            request.topic, request.page_size, request.page_token
        )
        return pubsub_pb2.ListTopicSnapshotsResponse(
            snapshots=list(page.items), next_page_token=page.next_page_token
        )

    async def update_snapshot(
        self, request: pubsub_pb2.UpdateSnapshotRequest
    ) -> pubsub_pb2.Snapshot:
        view = self.broker.update_snapshot(
            translate.snapshot_from_pb(request.snapshot), list(request.update_mask.paths)
        )
        return translate.snapshot_to_pb(view)

    async def delete_snapshot(self, request: pubsub_pb2.DeleteSnapshotRequest) -> empty_pb2.Empty:
        self.broker.delete_snapshot(request.snapshot)
        return empty_pb2.Empty()

    async def seek(self, request: pubsub_pb2.SeekRequest) -> pubsub_pb2.SeekResponse:
        target = request.WhichOneof("target")
        if target == "time":
            self.broker.seek(
                request.subscription, time=translate.seconds_of_timestamp(request.time)
            )
        else:
            self.broker.seek(request.subscription, snapshot=request.snapshot)
        return pubsub_pb2.SeekResponse()

    # ------------------------------------------------------------ delivery

    async def pull(self, request: pubsub_pb2.PullRequest) -> pubsub_pb2.PullResponse:
        deliveries = await self.pull_deliveries(request)
        return pubsub_pb2.PullResponse(
            received_messages=[translate.received_message(d) for d in deliveries]
        )

    async def pull_deliveries(self, request: pubsub_pb2.PullRequest) -> list[Delivery]:
        """Lease up to ``max_messages``; unless ``return_immediately``, wait up to
        ``PULL_WAIT_SECONDS`` for a first message (each door encodes the result)."""
        deliveries = self.broker.pull(request.subscription, request.max_messages)
        if not deliveries and not request.return_immediately:
            event = asyncio.Event()
            waiters = self._pull_waiters.setdefault(request.subscription, set())
            waiters.add(event)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), PULL_WAIT_SECONDS)
            finally:
                waiters.discard(event)
                if not waiters:
                    self._pull_waiters.pop(request.subscription, None)
            deliveries = self.broker.pull(request.subscription, request.max_messages)
        return deliveries

    async def acknowledge(self, request: pubsub_pb2.AcknowledgeRequest) -> empty_pb2.Empty:
        return _answer(ack_settling.acknowledge(self.broker, request.subscription, request.ack_ids))

    async def modify_ack_deadline(
        self, request: pubsub_pb2.ModifyAckDeadlineRequest
    ) -> empty_pb2.Empty:
        settled = ack_settling.modify_ack_deadline(
            self.broker, request.subscription, request.ack_ids, request.ack_deadline_seconds
        )
        return _answer(settled)


def _answer(settled: ack_settling.Settled) -> empty_pb2.Empty:
    """A unary ack/modack's answer: per-id failures (exactly-once) or refused ids."""
    if not settled.reply.ok:
        raise ExactlyOnceAckFailure(settled.reply)
    refusal = settled.refusal()
    if refusal is not None:
        raise refusal
    return empty_pb2.Empty()


def _top_level(paths: Sequence[str]) -> list[str]:
    """The top-level field names an update mask touches ("a.b" touches "a")."""
    return [path.split(".", 1)[0] for path in paths]
