"""Raw ``eoclient.broker.v1.BrokerPolicies`` calls for the policy integration tests.

``PolicyWire(wire)`` calls the extension service by method name over a ``Wire``'s
channel (``await policies.SkipMessages(request)``), from eoclient's own generated
descriptors, as ``support.wire.Wire`` does for google.pubsub.v1. No tests here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf import json_format, message_factory
from support.wire import Wire

from eoclient._proto import broker_policies_pb2 as bp
from eoclient._proto import pubsub_pb2 as pb

SERVICE = bp.DESCRIPTOR.services_by_name["BrokerPolicies"]


class PolicyWire:
    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = SERVICE.methods_by_name.get(name)
        if method is None:
            raise AttributeError(name)
        response = message_factory.GetMessageClass(method.output_type)
        return self.wire.channel.unary_unary(
            f"/{SERVICE.full_name}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )

    async def skip(self, subscription: str, *ids: str) -> dict[str, str]:
        """SkipMessages; outcome name per id."""
        response = await self.SkipMessages(
            bp.SkipMessagesRequest(subscription=subscription, message_ids=ids)
        )
        return {r.message_id: bp.SkippedMessage.Outcome.Name(r.outcome) for r in response.results}

    async def set_topic(
        self, topic: str, policies: dict[str, Any], *paths: str
    ) -> bp.TopicPolicies:
        """SetTopicPolicies with ``policies`` in proto3 JSON (``{"messageTtl": "60s"}``)."""
        request = bp.SetTopicPoliciesRequest(topic=topic)
        json_format.ParseDict(policies, request.policies)
        request.update_mask.paths.extend(paths)
        return await self.SetTopicPolicies(request)

    async def set_subscription(
        self, subscription: str, policies: dict[str, Any], *paths: str
    ) -> bp.SubscriptionPolicies:
        request = bp.SetSubscriptionPoliciesRequest(subscription=subscription)
        json_format.ParseDict(policies, request.policies)
        request.update_mask.paths.extend(paths)
        return await self.SetSubscriptionPolicies(request)

    async def topic_policies(self, topic: str) -> dict[str, Any]:
        """GetTopicPolicies in proto3 JSON."""
        response = await self.GetTopicPolicies(bp.GetTopicPoliciesRequest(topic=topic))
        return json_format.MessageToDict(response)

    async def sub_counters(self, subscription: str) -> bp.SubscriptionPolicyCounters:
        return await self.GetSubscriptionPolicyCounters(
            bp.GetSubscriptionPolicyCountersRequest(subscription=subscription)
        )

    async def topic_counters(self, topic: str) -> bp.TopicPolicyCounters:
        return await self.GetTopicPolicyCounters(bp.GetTopicPolicyCountersRequest(topic=topic))


def message(data: bytes = b"m", ordering_key: str = "", **attributes: str) -> pb.PubsubMessage:
    return pb.PubsubMessage(data=data, ordering_key=ordering_key, attributes=attributes)


async def publish(wire: Wire, topic: str, *messages: pb.PubsubMessage) -> list[str]:
    response = await wire.Publish(pb.PublishRequest(topic=topic, messages=messages))
    return list(response.message_ids)
