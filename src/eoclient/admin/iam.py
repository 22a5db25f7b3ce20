"""IAM policies in the admin API (google.iam.v1.IAMPolicy), typed: no protobuf in it.

::

    async with AdminClient() as admin:
        policy = await admin.get_iam_policy(topic)
        policy = policy.with_binding("roles/pubsub.publisher", "serviceAccount:app@p.iam...")
        await admin.set_iam_policy(topic, policy)   # Aborted if someone changed it meanwhile

The read-modify-write is safe: ``set_iam_policy`` sends the etag it read, and the server
refuses (``Aborted``, retryable) a write based on an outdated policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from eoclient._proto import expr_pb2, iam_policy_pb2, policy_pb2
from eoclient._retrying import DEFAULT
from eoclient.admin.calls import AdminCalls, Request, Retry, Timeout

SERVICE = "google.iam.v1.IAMPolicy"


@dataclass(frozen=True, slots=True)
class Condition:
    """A binding's condition (``google.type.Expr``, CEL); needs policy version 3."""

    expression: str
    title: str = ""
    description: str = ""
    location: str = ""


@dataclass(frozen=True, slots=True)
class Binding:
    """``role`` granted to ``members`` (``user:...``, ``serviceAccount:...``, ``group:...``,
    ``domain:...``, ``allUsers``, ...), under ``condition`` if one is given."""

    role: str
    members: tuple[str, ...]
    condition: Condition | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """An IAM policy (``google.iam.v1.Policy``; audit configs are kept as they were read).

    Attributes:
        bindings: who holds which role.
        version: 1, or 3 for conditional bindings (0 = unspecified).
        etag: the version read; sent back by ``set_iam_policy`` so that a concurrent
            change is refused instead of overwritten.
    """

    bindings: tuple[Binding, ...] = ()
    version: int = 0
    etag: bytes = b""
    _audit_configs: bytes = field(default=b"", repr=False)  # kept as read, sent back

    def with_binding(self, role: str, *members: str) -> Policy:
        """A copy with ``members`` added to ``role``'s unconditional binding."""
        bindings = list(self.bindings)
        for i, binding in enumerate(bindings):
            if binding.role == role and binding.condition is None:
                merged = binding.members + tuple(m for m in members if m not in binding.members)
                bindings[i] = replace(binding, members=merged)
                break
        else:
            bindings.append(Binding(role, tuple(members)))
        return replace(self, bindings=tuple(bindings))

    def without_member(self, role: str, member: str) -> Policy:
        """A copy with ``member`` removed from ``role``'s bindings."""
        bindings = [
            replace(b, members=tuple(m for m in b.members if m != member)) if b.role == role else b
            for b in self.bindings
        ]
        return replace(self, bindings=tuple(b for b in bindings if b.members))


def policy_from_pb(message: policy_pb2.Policy) -> Policy:
    audit = policy_pb2.Policy(audit_configs=message.audit_configs)
    return Policy(
        bindings=tuple(
            Binding(
                b.role,
                tuple(b.members),
                Condition(
                    b.condition.expression,
                    b.condition.title,
                    b.condition.description,
                    b.condition.location,
                )
                if b.HasField("condition")
                else None,
            )
            for b in message.bindings
        ),
        version=message.version,
        etag=message.etag,
        _audit_configs=audit.SerializeToString(deterministic=True),
    )


def policy_to_pb(policy: Policy) -> policy_pb2.Policy:
    message = policy_pb2.Policy.FromString(policy._audit_configs)
    message.version = policy.version
    message.etag = policy.etag
    for binding in policy.bindings:
        pb = message.bindings.add(role=binding.role, members=binding.members)
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
    return message


def _request(method: str, message: Any, response: Any, resource: str) -> Request[Any]:
    return Request(SERVICE, method, message, response, ("resource", resource))


class IamAdmin(AdminCalls):
    """AdminClient's IAM methods, for topics, subscriptions, snapshots and schemas."""

    async def get_iam_policy(
        self,
        resource: str,
        *,
        requested_policy_version: int = 3,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Policy:
        """The resource's policy (an empty one, etag ``ACAB``, if none was set).
        Version 3 by default so conditional bindings come back as they are."""
        request = iam_policy_pb2.GetIamPolicyRequest(resource=resource)
        request.options.requested_policy_version = requested_policy_version
        return policy_from_pb(
            await self._call(
                _request("GetIamPolicy", request, policy_pb2.Policy, resource), retry, timeout
            )
        )

    async def set_iam_policy(
        self,
        resource: str,
        policy: Policy,
        *,
        update_mask: Sequence[str] | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Policy:
        """Replace the policy (``Aborted`` if ``policy.etag`` is outdated); returns the
        stored policy with its new etag. ``update_mask`` limits what is replaced
        (default: bindings and etag)."""
        request = iam_policy_pb2.SetIamPolicyRequest(resource=resource, policy=policy_to_pb(policy))
        if update_mask:
            request.update_mask.paths.extend(update_mask)
        return policy_from_pb(
            await self._call(
                _request("SetIamPolicy", request, policy_pb2.Policy, resource), retry, timeout
            )
        )

    async def test_iam_permissions(
        self,
        resource: str,
        permissions: Sequence[str],
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> list[str]:
        """The subset of ``permissions`` (e.g. ``pubsub.topics.publish``) the caller holds."""
        request = iam_policy_pb2.TestIamPermissionsRequest(
            resource=resource, permissions=permissions
        )
        response = await self._call(
            _request(
                "TestIamPermissions", request, iam_policy_pb2.TestIamPermissionsResponse, resource
            ),
            retry,
            timeout,
        )
        return list(response.permissions)
