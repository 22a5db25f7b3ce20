"""google.iam.v1.IAMPolicy for topics, subscriptions, snapshots and schemas.

Thin, like every service here: the request proto becomes the core's ``iam.Policy``, the broker
decides (``core/iam.py``: etags, versions, roles, members), the answer goes back as
``google.iam.v1.Policy``. The generated classes live in eoclient's private pool
(``eoclient._proto.policy_pb2``, ``iam_policy_pb2``) so that grpc-google-iam-v1's copies
in the default pool are not disturbed.

No token auth identifies a caller yet, so TestIamPermissions answers as for the local
administrator (every permission that applies to the resource); the core answers for a
named principal from the policy's bindings (``broker.iam.test(member=...)``).
"""

from __future__ import annotations

from eoclient._proto import expr_pb2, iam_policy_pb2, policy_pb2
from eoclient.server_stub.core import Broker, iam
from eoclient.server_stub.services.rpc import RpcMethod, rpc_methods

SERVICE = "google.iam.v1.IAMPolicy"


def policy_from_pb(policy: policy_pb2.Policy) -> iam.Policy:
    return iam.Policy(
        version=policy.version,
        bindings=tuple(
            iam.Binding(
                b.role,
                tuple(b.members),
                iam.Condition(
                    b.condition.expression,
                    b.condition.title,
                    b.condition.description,
                    b.condition.location,
                )
                if b.HasField("condition")
                else None,
            )
            for b in policy.bindings
        ),
        audit_configs=tuple(
            iam.AuditConfig(
                a.service,
                tuple(
                    iam.AuditLogConfig(c.log_type, tuple(c.exempted_members))
                    for c in a.audit_log_configs
                ),
            )
            for a in policy.audit_configs
        ),
        etag=policy.etag,
    )


def policy_to_pb(policy: iam.Policy) -> policy_pb2.Policy:
    answer = policy_pb2.Policy(version=policy.version, etag=policy.etag)
    for binding in policy.bindings:
        pb = answer.bindings.add(role=binding.role, members=binding.members)
        if binding.condition is not None:
            c = binding.condition
            pb.condition.CopyFrom(
                expr_pb2.Expr(
                    expression=c.expression,
                    title=c.title,
                    description=c.description,
                    location=c.location,
                )
            )
    for audit in policy.audit_configs:
        a = answer.audit_configs.add(service=audit.service)
        for config in audit.audit_log_configs:
            a.audit_log_configs.add(
                log_type=config.log_type,
                exempted_members=config.exempted_members,
            )
    return answer


class IamPolicyService:
    """The three IAMPolicy methods over one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def methods(self) -> list[RpcMethod]:
        I = iam_policy_pb2  # noqa: E741
        return rpc_methods(
            SERVICE,
            {
                "GetIamPolicy": (self.get_iam_policy, I.GetIamPolicyRequest, policy_pb2.Policy),
                "SetIamPolicy": (self.set_iam_policy, I.SetIamPolicyRequest, policy_pb2.Policy),
                "TestIamPermissions": (
                    self.test_iam_permissions,
                    I.TestIamPermissionsRequest,
                    I.TestIamPermissionsResponse,
                ),
            },
        )

    async def get_iam_policy(
        self, request: iam_policy_pb2.GetIamPolicyRequest
    ) -> policy_pb2.Policy:
        policy = self.broker.iam.get(request.resource, request.options.requested_policy_version)
        return policy_to_pb(policy)

    async def set_iam_policy(
        self, request: iam_policy_pb2.SetIamPolicyRequest
    ) -> policy_pb2.Policy:
        policy = self.broker.iam.set(
            request.resource, policy_from_pb(request.policy), list(request.update_mask.paths)
        )
        return policy_to_pb(policy)

    async def test_iam_permissions(
        self, request: iam_policy_pb2.TestIamPermissionsRequest
    ) -> iam_policy_pb2.TestIamPermissionsResponse:
        held = self.broker.iam.test(request.resource, list(request.permissions))
        return iam_policy_pb2.TestIamPermissionsResponse(permissions=held)
