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
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from eoclient._proto import iam_policy_pb2, policy_pb2
from eoclient.server_stub.iam_service import SERVICE as IAM_SERVICE
from eoclient.server_stub.iam_service import IamService

if TYPE_CHECKING:
    from eoclient.server_stub.service import PubSubService, RpcMethod

Handler = Callable[[Any], Awaitable[Message]]


def install(service: PubSubService) -> None:
    """Add issue 14's methods to ``service.methods`` and wrap the handlers it extends."""
    from eoclient.server_stub.service import RpcMethod

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
    service.methods.update(methods)


def full_service_name(service: str) -> str:
    """The gRPC service name of a method table entry ("Publisher" is google.pubsub.v1's)."""
    return service if "." in service else f"google.pubsub.v1.{service}"
