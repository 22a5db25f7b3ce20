"""The transport-neutral ``eoclient.broker.v1.BrokerPolicies`` service (Pulsar-style policies).

An extension next to google.pubsub.v1 (``proto/eoclient/broker/v1/broker_policies.proto``):
its own proto package and service, so the Google wire stays untouched. Its methods are
in the one method table (``table.Services``) under the full service name, so both doors
run them through the same ``Services.call`` as google.pubsub.v1 calls: injected faults,
request checks, and nothing answered before the store has it. The gRPC door serves them
as ``/eoclient.broker.v1.BrokerPolicies/<Method>``, the REST door at the bindings
``doors/rest/routes.py`` lists (docs/policies.md), and the Pulsar-shaped skip alias
(``pulsar_skip.py``, for the REST door's ``pulsar_alias.py``) calls ``SkipMessages``.

Thin, like every service here: protobuf <-> core values in ``policy_translate``,
semantics in the core (``core/policies.py``). The wait of a Publish held by a backlog
quota is in ``publish_hold`` (the Publish handler of ``publisher`` calls it).
"""

from __future__ import annotations

from eoclient._proto import broker_policies_pb2 as pb
from eoclient.errors import InvalidArgument, NotFound
from eoclient.server_stub.core import Broker
from eoclient.server_stub.services import policy_translate as convert
from eoclient.server_stub.services.rpc import RpcMethod, rpc_methods
from eoclient.server_stub.services.translate import seconds_of_timestamp

SERVICE = "eoclient.broker.v1.BrokerPolicies"
# One SkipMessages names at most this many ids: Pulsar persists at most 10,000
# individually acknowledged ranges a cursor (managedLedgerMaxUnackedRangesToPersist,
# docs/protocol.md#skip-by-message-id); more in one request is a mistake worth a clear error.
MAX_SKIP_IDS = 10_000


class BrokerPoliciesService:
    """The handlers of ``eoclient.broker.v1.BrokerPolicies`` over one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def methods(self) -> list[RpcMethod]:
        return rpc_methods(
            SERVICE,
            {
                "SkipMessages": (
                    self.skip_messages,
                    pb.SkipMessagesRequest,
                    pb.SkipMessagesResponse,
                ),
                "GetTopicPolicies": (
                    self.get_topic_policies,
                    pb.GetTopicPoliciesRequest,
                    pb.TopicPolicies,
                ),
                "SetTopicPolicies": (
                    self.set_topic_policies,
                    pb.SetTopicPoliciesRequest,
                    pb.TopicPolicies,
                ),
                "GetSubscriptionPolicies": (
                    self.get_subscription_policies,
                    pb.GetSubscriptionPoliciesRequest,
                    pb.SubscriptionPolicies,
                ),
                "SetSubscriptionPolicies": (
                    self.set_subscription_policies,
                    pb.SetSubscriptionPoliciesRequest,
                    pb.SubscriptionPolicies,
                ),
                "GetTopicPolicyCounters": (
                    self.get_topic_policy_counters,
                    pb.GetTopicPolicyCountersRequest,
                    pb.TopicPolicyCounters,
                ),
                "GetSubscriptionPolicyCounters": (
                    self.get_subscription_policy_counters,
                    pb.GetSubscriptionPolicyCountersRequest,
                    pb.SubscriptionPolicyCounters,
                ),
                "SeekWithOutcome": (
                    self.seek_with_outcome,
                    pb.SeekWithOutcomeRequest,
                    pb.SeekOutcome,
                ),
            },
        )

    # ------------------------------------------------------------ skip

    async def skip_messages(self, request: pb.SkipMessagesRequest) -> pb.SkipMessagesResponse:
        ids = list(request.message_ids)
        if not ids:
            raise InvalidArgument("No message ids given: name at least one message id to skip.")
        if len(ids) > MAX_SKIP_IDS:
            raise InvalidArgument(
                f"{len(ids)} message ids in one SkipMessages request; at most "
                f"{MAX_SKIP_IDS} are allowed (split the request)."
            )
        return convert.skip_results_to_pb(self.broker.publishing.skip(request.subscription, ids))

    # ------------------------------------------------------------ topics

    async def get_topic_policies(self, request: pb.GetTopicPoliciesRequest) -> pb.TopicPolicies:
        policies = self.broker.topics.policies(request.topic)
        return convert.topic_policies_to_pb(request.topic, policies)

    async def set_topic_policies(self, request: pb.SetTopicPoliciesRequest) -> pb.TopicPolicies:
        # Read, merge and write in one step (no await between): concurrent updates of
        # different policies cannot lose each other.
        current = self.broker.topics.policies(request.topic)
        wanted = convert.merged_topic_policies(
            current, request.policies, list(request.update_mask.paths)
        )
        policies = self.broker.topics.set_policies(request.topic, wanted)
        return convert.topic_policies_to_pb(request.topic, policies)

    async def get_topic_policy_counters(
        self, request: pb.GetTopicPolicyCountersRequest
    ) -> pb.TopicPolicyCounters:
        counters = self.broker.topics.policy_counters(request.topic)
        return convert.topic_counters_to_pb(request.topic, counters)

    # ------------------------------------------------------------ subscriptions

    def _topic_ttl(self, subscription: str) -> float | None:
        topic = self.broker.subscriptions.get(subscription).config.topic
        try:
            return self.broker.topics.policies(topic).message_ttl
        except NotFound:  # the topic was deleted: its TTL went with it
            return None

    async def get_subscription_policies(
        self, request: pb.GetSubscriptionPoliciesRequest
    ) -> pb.SubscriptionPolicies:
        policies = self.broker.subscriptions.policies(request.subscription)
        return convert.subscription_policies_to_pb(
            request.subscription, policies, self._topic_ttl(request.subscription)
        )

    async def set_subscription_policies(
        self, request: pb.SetSubscriptionPoliciesRequest
    ) -> pb.SubscriptionPolicies:
        current = self.broker.subscriptions.policies(request.subscription)
        wanted = convert.merged_subscription_policies(
            current, request.policies, list(request.update_mask.paths)
        )
        policies = self.broker.subscriptions.set_policies(request.subscription, wanted)
        return convert.subscription_policies_to_pb(
            request.subscription, policies, self._topic_ttl(request.subscription)
        )

    async def get_subscription_policy_counters(
        self, request: pb.GetSubscriptionPolicyCountersRequest
    ) -> pb.SubscriptionPolicyCounters:
        counters = self.broker.subscriptions.policy_counters(request.subscription)
        return convert.subscription_counters_to_pb(request.subscription, counters)

    # ------------------------------------------------------------ seek

    async def seek_with_outcome(self, request: pb.SeekWithOutcomeRequest) -> pb.SeekOutcome:
        target = request.WhichOneof("target")
        if target == "time":
            outcome = self.broker.snapshots.seek(
                request.subscription, time=seconds_of_timestamp(request.time)
            )
        elif target == "snapshot":
            outcome = self.broker.snapshots.seek(request.subscription, snapshot=request.snapshot)
        else:
            raise InvalidArgument("The seek target must be set: a time or a snapshot.")
        return convert.seek_outcome_to_pb(outcome)
