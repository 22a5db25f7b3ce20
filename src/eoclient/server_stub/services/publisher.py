"""google.pubsub.v1.Publisher: topics, and publishing to them.

Thin: each handler turns the request proto into the core's values (``translate``), calls
the broker, and turns the result into the response proto, or raises ``RpcError``. A
handler refuses what the core does not model before the broker sees the request, so a
refused request changes nothing:

* ingestion settings the service would refuse (``ingestion_settings``; the states are
  output only, filled from the ingestion room on the way out);
* a topic's ``schema_settings`` naming no schema, an unknown one, or revisions it does not
  have, and a Publish whose messages do not match the topic's schema (``schemas``: the
  core keeps those settings opaque, in the topic's ``extras``);
* ``message_transforms`` whose code does not load (``transforms/``, which also runs a
  topic's transforms on each Publish before anything is stored).

A Publish refused by a backlog quota that holds the producer waits here for room
(``publish_hold``): waiting is the service's part, the core never awaits.
"""

from __future__ import annotations

from google.protobuf import empty_pb2

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.core import Broker
from eoclient.server_stub.core.policies import BacklogQuotaHeld
from eoclient.server_stub.core.topics import TOPIC_MASK
from eoclient.server_stub.services import ingestion_settings, schemas, translate
from eoclient.server_stub.services.ingestion_settings import IngestionStates
from eoclient.server_stub.services.publish_hold import publish_held
from eoclient.server_stub.services.rpc import RpcMethod, rpc_methods
from eoclient.server_stub.transforms import MessageTransforms

SERVICE = "google.pubsub.v1.Publisher"


class PublisherService:
    """The nine Publisher methods over one broker."""

    def __init__(
        self,
        broker: Broker,
        transforms: MessageTransforms | None = None,
        ingestion: IngestionStates | None = None,
    ) -> None:
        self.broker = broker
        self.transforms = transforms or MessageTransforms(broker)
        # The ingestion room's states (output only) and its news of changed topics.
        self.ingestion = ingestion

    def methods(self) -> list[RpcMethod]:
        P = pubsub_pb2
        return rpc_methods(
            SERVICE,
            {
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
                "DeleteTopic": (self.delete_topic, P.DeleteTopicRequest, empty_pb2.Empty),
                "DetachSubscription": (
                    self.detach_subscription,
                    P.DetachSubscriptionRequest,
                    P.DetachSubscriptionResponse,
                ),
            },
        )

    def _topic_answer(self, topic: pubsub_pb2.Topic) -> pubsub_pb2.Topic:
        if self.ingestion is not None:
            self.ingestion.fill(topic)
        return schemas.show_deleted_schema(self.broker, topic)

    def _changed(self, name: str) -> None:
        if self.ingestion is not None:
            self.ingestion.changed(name)

    async def create_topic(self, request: pubsub_pb2.Topic) -> pubsub_pb2.Topic:
        if request.HasField("schema_settings"):
            schemas.check_schema_settings(self.broker, request.schema_settings)
        if ingestion_settings.is_set(request):
            ingestion_settings.check(request.ingestion_data_source_settings)
        await self.transforms.check("topic", request.message_transforms)
        ingestion_settings.stored(request)
        view = self.broker.topics.create(translate.topic_from_pb(request))
        self._changed(view.config.name)
        return self._topic_answer(translate.topic_to_pb(view))

    async def update_topic(self, request: pubsub_pb2.UpdateTopicRequest) -> pubsub_pb2.Topic:
        fields = translate.top_level_fields(request.update_mask.paths)
        ingestion_settings.check_mask(request.update_mask.paths)
        if "schema_settings" in fields or ingestion_settings.FIELD in fields:
            # A mask names what changes: the stored settings with the masked paths merged
            # in are what must hold (docs/protocol.md#update-masks), not the request's part.
            merged = self._merged_topic(request)
            if "schema_settings" in fields and merged.HasField("schema_settings"):
                schemas.check_schema_settings(self.broker, merged.schema_settings)
            if ingestion_settings.FIELD in fields and ingestion_settings.is_set(merged):
                ingestion_settings.check(merged.ingestion_data_source_settings)
        if "message_transforms" in fields:
            await self.transforms.check("topic", request.topic.message_transforms)
        ingestion_settings.stored(request.topic)
        view = self.broker.topics.update(
            translate.topic_from_pb(request.topic),
            list(request.update_mask.paths),
            translate.merge_topic_extras,
        )
        if ingestion_settings.FIELD in fields:
            self._changed(view.config.name)
        return self._topic_answer(translate.topic_to_pb(view))

    def _merged_topic(self, request: pubsub_pb2.UpdateTopicRequest) -> pubsub_pb2.Topic:
        """The topic's opaque settings as the update would leave them (nothing stored)."""
        stored = self.broker.topics.get(request.topic.name).config.extras
        requested = translate.topic_from_pb(request.topic).extras
        paths = [
            path for path in request.update_mask.paths if path.split(".", 1)[0] in TOPIC_MASK.opaque
        ]
        return pubsub_pb2.Topic.FromString(translate.merge_topic_extras(stored, requested, paths))

    async def publish(self, request: pubsub_pb2.PublishRequest) -> pubsub_pb2.PublishResponse:
        # The topic's transforms first: what they return is what is checked and stored.
        staged = await self.transforms.publish(request)
        request = staged.request
        ids: list[str] = []
        if request.messages or not staged.filtered:
            # Checked against the topic's schema; the schema attributes are added to
            # ``request``'s messages, so they are part of what is stored.
            schemas.check_publish(self.broker, request)
            messages = translate.new_messages(request)
            size = request.ByteSize()
            try:
                ids = self.broker.publishing.publish(request.topic, messages, size)
            except BacklogQuotaHeld as held:
                ids = await publish_held(self.broker, request.topic, messages, size, held)
        ids = staged.message_ids(ids, self.broker.publishing.reserve_ids)
        return pubsub_pb2.PublishResponse(message_ids=ids)

    async def get_topic(self, request: pubsub_pb2.GetTopicRequest) -> pubsub_pb2.Topic:
        return self._topic_answer(translate.topic_to_pb(self.broker.topics.get(request.topic)))

    async def list_topics(
        self, request: pubsub_pb2.ListTopicsRequest
    ) -> pubsub_pb2.ListTopicsResponse:
        page = self.broker.topics.list(request.project, request.page_size, request.page_token)
        return pubsub_pb2.ListTopicsResponse(
            topics=[self._topic_answer(translate.topic_to_pb(t)) for t in page.items],
            next_page_token=page.next_page_token,
        )

    async def list_topic_subscriptions(
        self, request: pubsub_pb2.ListTopicSubscriptionsRequest
    ) -> pubsub_pb2.ListTopicSubscriptionsResponse:
        page = self.broker.topics.list_subscriptions(
            request.topic, request.page_size, request.page_token
        )
        return pubsub_pb2.ListTopicSubscriptionsResponse(
            subscriptions=list(page.items), next_page_token=page.next_page_token
        )

    async def list_topic_snapshots(
        self, request: pubsub_pb2.ListTopicSnapshotsRequest
    ) -> pubsub_pb2.ListTopicSnapshotsResponse:
        page = self.broker.snapshots.list_for_topic(
            request.topic, request.page_size, request.page_token
        )
        return pubsub_pb2.ListTopicSnapshotsResponse(
            snapshots=list(page.items), next_page_token=page.next_page_token
        )

    async def delete_topic(self, request: pubsub_pb2.DeleteTopicRequest) -> empty_pb2.Empty:
        self.broker.topics.delete(request.topic)
        self._changed(request.topic)
        return empty_pb2.Empty()

    async def detach_subscription(
        self, request: pubsub_pb2.DetachSubscriptionRequest
    ) -> pubsub_pb2.DetachSubscriptionResponse:
        self.broker.subscriptions.detach(request.subscription)
        return pubsub_pb2.DetachSubscriptionResponse()
