"""What issue 14 adds to the transport-neutral service: IAM policies, SchemaService,
and the push side of google.pubsub.v1.

``install(service)`` is the one hook ``PubSubService`` calls: it adds the IAMPolicy and
SchemaService methods to the method table both doors serve, and wraps the google.pubsub.v1
handlers that must know about schemas (topics bound to a schema; Publish validated
against it) and push (push configs checked; ModifyPushConfig). The wrapped handlers
decide before the broker is called, so a refused request changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from google.protobuf import empty_pb2
from google.protobuf.message import Message

from eoclient._proto import iam_policy_pb2, policy_pb2, pubsub_pb2, schema_pb2
from eoclient.server_stub.push.payload import check_push_config
from eoclient.server_stub.services import schemas as schema_service
from eoclient.server_stub.services import translate
from eoclient.server_stub.services.iam_policy import SERVICE as IAM_SERVICE
from eoclient.server_stub.services.iam_policy import IamService
from eoclient.server_stub.services.schemas import SERVICE as SCHEMA_SERVICE
from eoclient.server_stub.services.schemas import SchemaService

if TYPE_CHECKING:
    from eoclient.server_stub.services.pubsub import PubSubService, RpcMethod

Handler = Callable[[Any], Awaitable[Message]]


def install(service: PubSubService) -> None:
    """Add issue 14's methods to ``service.methods`` and wrap the handlers it extends."""
    from eoclient.server_stub.services.pubsub import RpcMethod

    methods: dict[str, RpcMethod] = {}

    def add(
        full_service: str,
        name: str,
        handler: Handler,
        request: type[Message],
        response: type[Message],
    ) -> None:
        methods[name] = RpcMethod(full_service, name, handler, request, response)

    iam_methods = IamService(service)
    add(
        IAM_SERVICE,
        "GetIamPolicy",
        iam_methods.get_iam_policy,
        iam_policy_pb2.GetIamPolicyRequest,
        policy_pb2.Policy,
    )
    add(
        IAM_SERVICE,
        "SetIamPolicy",
        iam_methods.set_iam_policy,
        iam_policy_pb2.SetIamPolicyRequest,
        policy_pb2.Policy,
    )
    add(
        IAM_SERVICE,
        "TestIamPermissions",
        iam_methods.test_iam_permissions,
        iam_policy_pb2.TestIamPermissionsRequest,
        iam_policy_pb2.TestIamPermissionsResponse,
    )

    schemas = SchemaService(service)
    S = schema_pb2
    for name, handler, request, response in (
        ("CreateSchema", schemas.create_schema, S.CreateSchemaRequest, S.Schema),
        ("GetSchema", schemas.get_schema, S.GetSchemaRequest, S.Schema),
        ("ListSchemas", schemas.list_schemas, S.ListSchemasRequest, S.ListSchemasResponse),
        (
            "ListSchemaRevisions",
            schemas.list_schema_revisions,
            S.ListSchemaRevisionsRequest,
            S.ListSchemaRevisionsResponse,
        ),
        ("CommitSchema", schemas.commit_schema, S.CommitSchemaRequest, S.Schema),
        ("RollbackSchema", schemas.rollback_schema, S.RollbackSchemaRequest, S.Schema),
        (
            "DeleteSchemaRevision",
            schemas.delete_schema_revision,
            S.DeleteSchemaRevisionRequest,
            S.Schema,
        ),
        ("DeleteSchema", schemas.delete_schema, S.DeleteSchemaRequest, empty_pb2.Empty),
        (
            "ValidateSchema",
            schemas.validate_schema,
            S.ValidateSchemaRequest,
            S.ValidateSchemaResponse,
        ),
        (
            "ValidateMessage",
            schemas.validate_message,
            S.ValidateMessageRequest,
            S.ValidateMessageResponse,
        ),
    ):
        add(SCHEMA_SERVICE, name, handler, request, response)
    service.methods.update(methods)
    _wrap_topics(service)
    _wrap_push(service)


def _wrap(service: PubSubService, name: str, wrapper: Callable[[Handler], Handler]) -> None:
    rpc = service.methods[name]
    service.methods[name] = replace(rpc, handler=wrapper(rpc.handler))


def _wrap_topics(service: PubSubService) -> None:
    """Topics bound to a schema: settings checked, Publish validated, deletions shown."""
    broker = service.broker

    def publish(inner: Handler) -> Handler:
        async def handler(request: pubsub_pb2.PublishRequest) -> Message:
            schema_service.check_publish(broker, request)
            return await inner(request)

        return handler

    def create_topic(inner: Handler) -> Handler:
        async def handler(request: pubsub_pb2.Topic) -> Message:
            if request.HasField("schema_settings"):
                schema_service.check_schema_settings(broker, request.schema_settings)
            return await inner(request)

        return handler

    def update_topic(inner: Handler) -> Handler:
        async def handler(request: pubsub_pb2.UpdateTopicRequest) -> Message:
            paths = [p.split(".", 1)[0] for p in request.update_mask.paths]
            if "schema_settings" in paths and request.topic.HasField("schema_settings"):
                schema_service.check_schema_settings(broker, request.topic.schema_settings)
            return await inner(request)

        return handler

    def topic_answer(inner: Handler) -> Handler:
        async def handler(request: Any) -> Message:
            answer = await inner(request)
            if isinstance(answer, pubsub_pb2.Topic):
                schema_service.show_deleted_schema(broker, answer)
            elif isinstance(answer, pubsub_pb2.ListTopicsResponse):
                for topic in answer.topics:
                    schema_service.show_deleted_schema(broker, topic)
            return answer

        return handler

    _wrap(service, "Publish", publish)
    _wrap(service, "CreateTopic", create_topic)
    _wrap(service, "UpdateTopic", update_topic)
    for name in ("CreateTopic", "UpdateTopic", "GetTopic", "ListTopics"):
        _wrap(service, name, topic_answer)


def full_service_name(service: str) -> str:
    """The gRPC service name of a method table entry ("Publisher" is google.pubsub.v1's)."""
    return service if "." in service else f"google.pubsub.v1.{service}"


def _wrap_push(service: PubSubService) -> None:
    """Push configs are checked (exactly-once refused for push), and ModifyPushConfig
    switches a subscription between push and pull (``push/`` delivers)."""
    broker = service.broker

    def create_subscription(inner: Handler) -> Handler:
        async def handler(request: pubsub_pb2.Subscription) -> Message:
            check_push_config(
                request.push_config, exactly_once=request.enable_exactly_once_delivery
            )
            return await inner(request)

        return handler

    def update_subscription(inner: Handler) -> Handler:
        async def handler(request: pubsub_pb2.UpdateSubscriptionRequest) -> Message:
            paths = {p.split(".", 1)[0] for p in request.update_mask.paths}
            if paths & {"push_config", "enable_exactly_once_delivery"}:
                current = broker.get_subscription(request.subscription.name).config
                stored = pubsub_pb2.Subscription.FromString(current.extras)
                push = request.subscription if "push_config" in paths else stored
                exactly_once = (
                    request.subscription.enable_exactly_once_delivery
                    if "enable_exactly_once_delivery" in paths
                    else current.enable_exactly_once_delivery
                )
                check_push_config(push.push_config, exactly_once=exactly_once)
            return await inner(request)

        return handler

    async def modify_push_config(request: pubsub_pb2.ModifyPushConfigRequest) -> Message:
        current = broker.get_subscription(request.subscription).config
        check_push_config(request.push_config, exactly_once=current.enable_exactly_once_delivery)
        update = pubsub_pb2.Subscription(name=request.subscription, push_config=request.push_config)
        broker.update_subscription(
            translate.subscription_from_pb(update),
            ["push_config"],
            translate.merge_subscription_extras,
        )
        return empty_pb2.Empty()

    _wrap(service, "CreateSubscription", create_subscription)
    _wrap(service, "UpdateSubscription", update_subscription)
    _wrap(service, "ModifyPushConfig", lambda _unimplemented: modify_push_config)
