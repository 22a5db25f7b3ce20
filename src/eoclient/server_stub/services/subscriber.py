"""google.pubsub.v1.Subscriber: subscriptions, delivery and acks, snapshots and seek.

Thin: each handler turns the request proto into the core's values (``translate``), calls
the broker, and turns the result into the response proto, or raises ``RpcError``. A
handler refuses what the core does not model before the broker sees the request, so a
refused request changes nothing: settings the server cannot honour
(``unsupported_settings``), push configs it would not deliver (``push_config``;
``push/`` delivers the ones it accepts, and ModifyPushConfig switches a subscription
between push and pull) and export configs that break their rules (``export_configs``;
``exports/`` delivers the ones it accepts). An export's output-only ``state`` is filled by
the hook the server passes (``export_states``: the export runner's).

Acks and modacks settle through ``ack_settling``, shared with StreamingPull; an
exactly-once failure raises ``ExactlyOnceAckFailure`` (``errors``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace

from google.protobuf import empty_pb2

from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError
from eoclient.server_stub.bigquery import BigQueryStandIn
from eoclient.server_stub.core import Broker, Delivery, SubscriptionView
from eoclient.server_stub.core.validation import MAX_PULL_MESSAGES
from eoclient.server_stub.group_commit import GroupCommit
from eoclient.server_stub.services import (
    ack_settling,
    bigquery_config,
    export_configs,
    translate,
    unsupported_settings,
)
from eoclient.server_stub.services.errors import ExactlyOnceAckFailure
from eoclient.server_stub.services.push_config import check_push_config
from eoclient.server_stub.services.rpc import RpcMethod, rpc_methods
from eoclient.server_stub.transforms import MessageTransforms

SERVICE = "google.pubsub.v1.Subscriber"

# Unary Pull with return_immediately=false waits this long for a first message.
PULL_WAIT_SECONDS = 1.0
# Top-level fields that say how a subscription delivers (at most one may be set).
_DELIVERY_FIELDS = frozenset({"push_config", "bigquery_config", "cloud_storage_config"})

# The delivery methods whose answers wait for their commit only with exactly-once.
_SETTLED_BY_AT_LEAST_ONCE = frozenset({"Pull", "Acknowledge", "ModifyAckDeadline"})
_DeliveryRequest = (
    pubsub_pb2.PullRequest | pubsub_pb2.AcknowledgeRequest | pubsub_pb2.ModifyAckDeadlineRequest
)

# Sets the output-only state of a subscription's export config in an answer.
ExportStates = Callable[[pubsub_pb2.Subscription], Awaitable[None]]


async def _no_export_states(_subscription: pubsub_pb2.Subscription) -> None:
    return None


class SubscriberService:
    """The Subscriber methods over one broker (StreamingPull is the gRPC door's own)."""

    def __init__(
        self,
        broker: Broker,
        transforms: MessageTransforms | None = None,
        export_states: ExportStates | None = None,
        bigquery: BigQueryStandIn | None = None,
        group_commit: GroupCommit | None = None,
    ) -> None:
        self.broker = broker
        # An exactly-once Pull begins its leases' commit before its answer is encoded.
        self._group_commit = group_commit
        # Where BigQuery subscriptions write (``bigquery_config`` checks them against it).
        self.bigquery = bigquery
        # A subscription's transforms run on what leaves it (``transforms/``).
        self.transforms = transforms or MessageTransforms(broker)
        self._pull_waiters: dict[str, set[asyncio.Event]] = {}
        self._export_states = export_states or _no_export_states

    async def _answer(self, view: SubscriptionView) -> pubsub_pb2.Subscription:
        subscription = translate.subscription_to_pb(view)
        await self._export_states(subscription)
        return subscription

    def methods(self) -> list[RpcMethod]:
        # A Pull, Acknowledge or ModifyAckDeadline on a subscription without exactly-once
        # promises nothing a crash could break, so its answer does not wait for the commit
        # (a StreamingPull's deliveries and acks do not either): a lost lease is a
        # redelivery, a lost ack or nack one more delivery, both within at-least-once
        # (docs/protocol.md#ack-ids-across-a-restart). With
        # exactly-once the lease (the ack id a client holds) and the ack's SUCCESS are
        # promises: those answers wait (group_commit.py).
        methods = [
            replace(rpc, answer_after_commit=self._exactly_once)
            if rpc.name in _SETTLED_BY_AT_LEAST_ONCE
            else rpc
            for rpc in self._methods()
        ]
        if self.broker.store.window is not None:  # a window the store bounds: refills
            methods = [
                replace(rpc, after_answer=self._top_up) if rpc.name == "Pull" else rpc
                for rpc in methods
            ]
        return methods

    def _exactly_once(self, request: _DeliveryRequest) -> bool:
        try:
            exactly_once, _ = self.broker.subscriptions.properties(request.subscription)
        except RpcError:  # deleted meanwhile: answered after the commit, as ever
            return True
        return exactly_once

    def _methods(self) -> list[RpcMethod]:
        P = pubsub_pb2
        E = empty_pb2.Empty
        return rpc_methods(
            SERVICE,
            {
                "CreateSubscription": (self.create_subscription, P.Subscription, P.Subscription),
                "GetSubscription": (
                    self.get_subscription,
                    P.GetSubscriptionRequest,
                    P.Subscription,
                ),
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
                "ModifyPushConfig": (self.modify_push_config, P.ModifyPushConfigRequest, E),
                "GetSnapshot": (self.get_snapshot, P.GetSnapshotRequest, P.Snapshot),
                "ListSnapshots": (
                    self.list_snapshots,
                    P.ListSnapshotsRequest,
                    P.ListSnapshotsResponse,
                ),
                "CreateSnapshot": (self.create_snapshot, P.CreateSnapshotRequest, P.Snapshot),
                "UpdateSnapshot": (self.update_snapshot, P.UpdateSnapshotRequest, P.Snapshot),
                "DeleteSnapshot": (self.delete_snapshot, P.DeleteSnapshotRequest, E),
                "Seek": (self.seek, P.SeekRequest, P.SeekResponse),
            },
        )

    def notify(self, subscription: str) -> None:
        """Wake the unary Pulls waiting for ``subscription`` (it may have messages)."""
        for event in self._pull_waiters.get(subscription, ()):
            event.set()

    # ------------------------------------------------------ subscriptions

    async def create_subscription(
        self, request: pubsub_pb2.Subscription
    ) -> pubsub_pb2.Subscription:
        check_push_config(request.push_config, exactly_once=request.enable_exactly_once_delivery)
        export_configs.check_exports(request)
        unsupported_settings.check_subscription(request)
        bigquery_config.check_subscription(self.broker, request, self.bigquery)
        await self.transforms.check("subscription", request.message_transforms)
        view = self.broker.subscriptions.create(translate.subscription_from_pb(request))
        return await self._answer(view)

    async def get_subscription(
        self, request: pubsub_pb2.GetSubscriptionRequest
    ) -> pubsub_pb2.Subscription:
        return await self._answer(self.broker.subscriptions.get(request.subscription))

    async def update_subscription(
        self, request: pubsub_pb2.UpdateSubscriptionRequest
    ) -> pubsub_pb2.Subscription:
        fields = translate.top_level_fields(request.update_mask.paths)
        if {"push_config", "enable_exactly_once_delivery"} & set(fields):
            # The push config and exactly-once as they will be, the stored value where
            # the mask leaves one unchanged.
            current = self.broker.subscriptions.get(request.subscription.name).config
            stored = pubsub_pb2.Subscription.FromString(current.extras)
            push = request.subscription if "push_config" in fields else stored
            exactly_once = (
                request.subscription.enable_exactly_once_delivery
                if "enable_exactly_once_delivery" in fields
                else current.enable_exactly_once_delivery
            )
            check_push_config(push.push_config, exactly_once=exactly_once)
        if _DELIVERY_FIELDS & set(fields):
            self._check_delivery_update(request)
        unsupported_settings.check_subscription(request.subscription, fields)
        bigquery_config.check_subscription(self.broker, request.subscription, self.bigquery, fields)
        if "message_transforms" in fields:
            await self.transforms.check("subscription", request.subscription.message_transforms)
        view = self.broker.subscriptions.update(
            translate.subscription_from_pb(request.subscription),
            list(request.update_mask.paths),
            translate.merge_subscription_extras,
        )
        return await self._answer(view)

    def _check_delivery_update(self, request: pubsub_pb2.UpdateSubscriptionRequest) -> None:
        """The export configs as the update leaves them (the stored ones where the mask
        keeps them) keep their rules."""
        export_configs.clear_output_only(request.subscription)
        current = self.broker.subscriptions.get(request.subscription.name).config
        paths = [
            path for path in request.update_mask.paths if path.split(".", 1)[0] in _DELIVERY_FIELDS
        ]
        merged = translate.merge_subscription_extras(
            current.extras, translate.subscription_from_pb(request.subscription).extras, paths
        )
        export_configs.check_exports(pubsub_pb2.Subscription.FromString(merged))

    async def modify_push_config(
        self, request: pubsub_pb2.ModifyPushConfigRequest
    ) -> empty_pb2.Empty:
        current = self.broker.subscriptions.get(request.subscription).config
        check_push_config(request.push_config, exactly_once=current.enable_exactly_once_delivery)
        stored = pubsub_pb2.Subscription.FromString(current.extras)
        stored.push_config.CopyFrom(request.push_config)
        export_configs.check_exports(stored)
        update = pubsub_pb2.Subscription(name=request.subscription, push_config=request.push_config)
        self.broker.subscriptions.update(
            translate.subscription_from_pb(update),
            ["push_config"],
            translate.merge_subscription_extras,
        )
        return empty_pb2.Empty()

    async def list_subscriptions(
        self, request: pubsub_pb2.ListSubscriptionsRequest
    ) -> pubsub_pb2.ListSubscriptionsResponse:
        page = self.broker.subscriptions.list(
            request.project, request.page_size, request.page_token
        )
        return pubsub_pb2.ListSubscriptionsResponse(
            subscriptions=[await self._answer(s) for s in page.items],
            next_page_token=page.next_page_token,
        )

    async def delete_subscription(
        self, request: pubsub_pb2.DeleteSubscriptionRequest
    ) -> empty_pb2.Empty:
        self.broker.subscriptions.delete(request.subscription)
        return empty_pb2.Empty()

    # ------------------------------------------------------------ delivery

    async def pull(self, request: pubsub_pb2.PullRequest) -> pubsub_pb2.PullResponse:
        deliveries = await self.pull_deliveries(request)
        return pubsub_pb2.PullResponse(
            received_messages=[translate.received_message(d) for d in deliveries]
        )

    async def pull_deliveries(self, request: pubsub_pb2.PullRequest) -> list[Delivery]:
        """Lease up to ``max_messages``; unless ``return_immediately``, wait up to
        ``PULL_WAIT_SECONDS`` for a first message (each door encodes the result)."""
        deliveries = self.broker.leasing.pull(request.subscription, request.max_messages)
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
            deliveries = self.broker.leasing.pull(request.subscription, request.max_messages)
        delivered = await self.transforms.deliver(request.subscription, deliveries)
        if deliveries and self._group_commit is not None and self._exactly_once(request):
            # The answer waits for the commit of these leases: begun now, so that its
            # fsync runs in the commit's thread while the door encodes the answer.
            self._group_commit.start()
        return delivered

    def _top_up(self, request: pubsub_pb2.PullRequest) -> None:
        """After a Pull's answer, while its client reads it: load the window back up by
        what one Pull takes at most (``SubscriptionDelivery.top_up``), so that the next
        Pull or Acknowledge does not stop to refill it (10,000 rows at once, ~10 ms, the
        request's client waiting). A unary puller then finds a full window every time:
        measured, 1,000 rows take 0.8 ms, and the benchmark's client takes 1.4 ms
        between a Pull's answer and its Acknowledge (benchmarks/server_pull_ack.py)."""
        with contextlib.suppress(RpcError):  # deleted or detached meanwhile: nothing to do
            self.broker.delivery_state(request.subscription).top_up(MAX_PULL_MESSAGES)

    async def acknowledge(self, request: pubsub_pb2.AcknowledgeRequest) -> empty_pb2.Empty:
        return _answer(ack_settling.acknowledge(self.broker, request.subscription, request.ack_ids))

    async def modify_ack_deadline(
        self, request: pubsub_pb2.ModifyAckDeadlineRequest
    ) -> empty_pb2.Empty:
        settled = ack_settling.modify_ack_deadline(
            self.broker, request.subscription, request.ack_ids, request.ack_deadline_seconds
        )
        return _answer(settled)

    # ------------------------------------------------------ snapshots, seek

    async def create_snapshot(
        self, request: pubsub_pb2.CreateSnapshotRequest
    ) -> pubsub_pb2.Snapshot:
        view = self.broker.snapshots.create(
            request.name, request.subscription, dict(request.labels)
        )
        return translate.snapshot_to_pb(view)

    async def get_snapshot(self, request: pubsub_pb2.GetSnapshotRequest) -> pubsub_pb2.Snapshot:
        return translate.snapshot_to_pb(self.broker.snapshots.get(request.snapshot))

    async def list_snapshots(
        self, request: pubsub_pb2.ListSnapshotsRequest
    ) -> pubsub_pb2.ListSnapshotsResponse:
        page = self.broker.snapshots.list(request.project, request.page_size, request.page_token)
        return pubsub_pb2.ListSnapshotsResponse(
            snapshots=[translate.snapshot_to_pb(s) for s in page.items],
            next_page_token=page.next_page_token,
        )

    async def update_snapshot(
        self, request: pubsub_pb2.UpdateSnapshotRequest
    ) -> pubsub_pb2.Snapshot:
        view = self.broker.snapshots.update(
            translate.snapshot_from_pb(request.snapshot), list(request.update_mask.paths)
        )
        return translate.snapshot_to_pb(view)

    async def delete_snapshot(self, request: pubsub_pb2.DeleteSnapshotRequest) -> empty_pb2.Empty:
        self.broker.snapshots.delete(request.snapshot)
        return empty_pb2.Empty()

    async def seek(self, request: pubsub_pb2.SeekRequest) -> pubsub_pb2.SeekResponse:
        target = request.WhichOneof("target")
        if target == "time":
            self.broker.snapshots.seek(
                request.subscription, time=translate.seconds_of_timestamp(request.time)
            )
        else:
            self.broker.snapshots.seek(request.subscription, snapshot=request.snapshot)
        return pubsub_pb2.SeekResponse()


def _answer(settled: ack_settling.Settled) -> empty_pb2.Empty:
    """A unary ack/modack's answer: per-id failures (exactly-once) or refused ids."""
    if not settled.reply.ok:
        raise ExactlyOnceAckFailure(settled.reply)
    refusal = settled.refusal()
    if refusal is not None:
        raise refusal
    return empty_pb2.Empty()
