"""IAM policies of topics, subscriptions, snapshots and schemas (google.iam.v1 mixin).

Pure: the broker facade passes in whether a resource exists; this room keeps one policy
per resource name, checks what SetIamPolicy may store, and answers TestIamPermissions
from the bindings. Policies are kept whole through the store's documents (kind
``"iam"``, the body is this module's JSON) and read back at start-up.

Rules (IAM reference, "Policy" and "Policy versions"; Pub/Sub access-control page):

* A resource that never had a policy set has an empty one whose etag is ``ACAB``
  (bytes 00 20 01), as the real service answers.
* SetIamPolicy with an etag that is not the current one is ABORTED (a concurrent
  read-modify-write); without an etag it overwrites. Every stored policy gets a new
  etag (a digest of the resource, its revision and its content).
* ``version`` is 0, 1 or 3; a binding with a condition needs version 3. GetIamPolicy
  asking for a version below 3 of a conditional policy gets the conditional bindings
  with ``_withcond_<digest>`` appended to their role and no condition (IAM's documented
  downgrade), so a version-1 reader cannot mistake them for unconditional grants.
* Roles are the Pub/Sub predefined roles, the basic roles, or custom roles
  (``projects/*/roles/*``, ``organizations/*/roles/*``: their permissions are not
  known here, so they grant none). Members are ``user:``, ``serviceAccount:``,
  ``group:``, ``domain:``, ``deleted:...``, ``principal://``, ``principalSet://``,
  ``allUsers`` or ``allAuthenticatedUsers``. Bindings of one role and condition are
  merged, duplicate members dropped, bindings left without members removed.
* TestIamPermissions takes only permissions that apply to the resource's kind (no
  wildcards) and answers the subset the caller holds; a caller with no identity (the
  server has no token auth) is the local administrator and holds all of them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from eoclient.errors import Aborted, InvalidArgument, NotFound
from eoclient.server_stub.core.store import Store

DOCUMENT_KIND = "iam"
EMPTY_POLICY_ETAG = b"\x00\x20\x01"  # "ACAB" in base64: the etag of a never-set policy
SUPPORTED_VERSIONS = (0, 1, 3)
CONDITIONAL_VERSION = 3
# A policy's size limit in IAM ("up to 1,500 principals"): more is refused, not stored.
MAX_MEMBERS = 1500

# Permissions that apply to each kind of resource (Pub/Sub access-control page).
RESOURCE_PERMISSIONS: Mapping[str, frozenset[str]] = {
    "topics": frozenset(
        f"pubsub.topics.{p}"
        for p in (
            "attachSubscription",
            "delete",
            "detachSubscription",
            "get",
            "getIamPolicy",
            "publish",
            "setIamPolicy",
            "update",
            "updateTag",
        )
    ),
    "subscriptions": frozenset(
        f"pubsub.subscriptions.{p}"
        for p in ("consume", "delete", "get", "getIamPolicy", "setIamPolicy", "update")
    ),
    "snapshots": frozenset(
        f"pubsub.snapshots.{p}"
        for p in ("delete", "get", "getIamPolicy", "seek", "setIamPolicy", "update")
    ),
    "schemas": frozenset(
        f"pubsub.schemas.{p}"
        for p in (
            "attach",
            "commit",
            "delete",
            "get",
            "getIamPolicy",
            "listRevisions",
            "setIamPolicy",
            "validate",
        )
    ),
}
_ALL = frozenset().union(*RESOURCE_PERMISSIONS.values())
_VIEWER = frozenset(p for p in _ALL if p.rsplit(".", 1)[1] in ("get", "listRevisions", "validate"))
_EDITOR = _ALL - {p for p in _ALL if p.endswith(("IamPolicy",))}
# Predefined roles and what they grant on these resources (Pub/Sub roles reference).
ROLE_PERMISSIONS: Mapping[str, frozenset[str]] = {
    "roles/pubsub.publisher": frozenset({"pubsub.topics.publish"}),
    "roles/pubsub.subscriber": frozenset(
        {
            "pubsub.snapshots.seek",
            "pubsub.subscriptions.consume",
            "pubsub.topics.attachSubscription",
        }
    ),
    "roles/pubsub.viewer": _VIEWER,
    "roles/pubsub.editor": _EDITOR,
    "roles/pubsub.admin": _ALL,
    "roles/viewer": _VIEWER,
    "roles/editor": _EDITOR,
    "roles/owner": _ALL,
}
_CUSTOM_ROLE = re.compile(r"(projects|organizations)/[^/]+/roles/[A-Za-z0-9_.]{3,64}")
_MEMBER_PREFIXES = (
    "user:",
    "serviceAccount:",
    "group:",
    "domain:",
    "deleted:",
    "principal://",
    "principalSet://",
)
_PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")


@dataclass(frozen=True)
class Condition:
    """A binding's condition (google.type.Expr): CEL text and its descriptions."""

    expression: str
    title: str = ""
    description: str = ""
    location: str = ""


@dataclass(frozen=True)
class Binding:
    role: str
    members: tuple[str, ...]
    condition: Condition | None = None


@dataclass(frozen=True)
class AuditLogConfig:
    log_type: int  # google.iam.v1.AuditLogConfig.LogType
    exempted_members: tuple[str, ...] = ()


@dataclass(frozen=True)
class AuditConfig:
    service: str
    audit_log_configs: tuple[AuditLogConfig, ...] = ()


@dataclass(frozen=True)
class Policy:
    version: int = 0
    bindings: tuple[Binding, ...] = ()
    audit_configs: tuple[AuditConfig, ...] = ()
    etag: bytes = b""


EMPTY_POLICY = Policy(etag=EMPTY_POLICY_ETAG)
# SetIamPolicy's update_mask: the fields it may replace ("bindings, etag" when unset).
MASKABLE_FIELDS = ("bindings", "etag", "audit_configs", "version")
DEFAULT_MASK = ("bindings", "etag")


def resource_kind(resource: str) -> str:
    """``topics``, ``subscriptions``, ``snapshots`` or ``schemas`` (InvalidArgument else)."""
    parts = resource.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] not in RESOURCE_PERMISSIONS:
        raise InvalidArgument(
            f"Invalid resource name given (name={resource}). IAM policies are kept for "
            "projects/*/topics/*, projects/*/subscriptions/*, projects/*/snapshots/* "
            "and projects/*/schemas/*."
        )
    return parts[2]


class IamPolicies:
    """Every resource's IAM policy, kept through the store's documents.

    ``exists(resource)`` says whether a resource of that name exists now (the broker
    knows every kind): a policy is read, set or tested only on one that does.
    """

    def __init__(self, store: Store, exists: Callable[[str], bool]) -> None:
        self.store = store
        self._exists = exists
        self.policies: dict[str, tuple[int, Policy]] = {}  # resource -> (revision, policy)

    def _existing(self, resource: str) -> None:
        """InvalidArgument for a name no policy is kept for; NotFound for a resource that
        does not exist."""
        resource_kind(resource)
        if not self._exists(resource):
            raise NotFound(f"Resource not found (resource={resource.rsplit('/', 1)[-1]}).")

    def restore(self, documents: Mapping[tuple[str, str], bytes]) -> None:
        for (kind, name), body in documents.items():
            if kind == DOCUMENT_KIND:
                self.policies[name] = decode(body)

    def get(self, resource: str, requested_version: int = 0) -> Policy:
        self._existing(resource)
        if requested_version not in SUPPORTED_VERSIONS:
            raise InvalidArgument(
                f"Invalid requested_policy_version {requested_version}: it must be 0, 1 or 3."
            )
        stored = self.policies.get(resource)
        policy = stored[1] if stored is not None else EMPTY_POLICY
        if requested_version < CONDITIONAL_VERSION and policy.version >= CONDITIONAL_VERSION:
            return _downgraded(policy)
        return policy

    def set(self, resource: str, policy: Policy, update_mask: Sequence[str] = ()) -> Policy:
        self._existing(resource)
        paths = tuple(update_mask) or DEFAULT_MASK
        for path in paths:
            if path not in MASKABLE_FIELDS:
                raise InvalidArgument(
                    f"Invalid update_mask path {path!r}: SetIamPolicy updates "
                    f"{', '.join(MASKABLE_FIELDS)}."
                )
        revision, current = self.policies.get(resource, (0, EMPTY_POLICY))
        if policy.etag and policy.etag != current.etag:
            raise Aborted(
                "There were concurrent policy changes. Please retry the whole "
                "read-modify-write with exponential backoff."
            )
        merged = Policy(
            # The version describes the bindings' syntax: it comes with them (IAM: "set
            # version 3 in the policy you write" with the default mask).
            version=(policy.version if {"version", "bindings"} & set(paths) else current.version),
            bindings=policy.bindings if "bindings" in paths else current.bindings,
            audit_configs=(
                policy.audit_configs if "audit_configs" in paths else current.audit_configs
            ),
        )
        checked = _checked(merged)
        revision += 1
        stored = Policy(
            checked.version,
            checked.bindings,
            checked.audit_configs,
            _etag(resource, revision, checked),
        )
        self.policies[resource] = (revision, stored)
        self.store.resources.put_document(DOCUMENT_KIND, resource, encode(revision, stored))
        return stored

    def forget(self, resource: str) -> None:
        """The resource is gone: a new one of the same name starts with an empty policy."""
        if self.policies.pop(resource, None) is not None:
            self.store.resources.delete_document(DOCUMENT_KIND, resource)

    def forget_missing(self, exists: Iterable[str]) -> None:
        """Forget the policies of every resource not in ``exists``."""
        present = set(exists)
        for resource in [r for r in self.policies if r not in present]:
            self.forget(resource)

    def test(
        self, resource: str, permissions: Sequence[str], member: str | None = None
    ) -> list[str]:
        """The subset of ``permissions`` ``member`` holds on ``resource`` (None: the local
        administrator, who holds every permission of the resource's kind)."""
        self._existing(resource)
        applicable = RESOURCE_PERMISSIONS[resource_kind(resource)]
        for permission in permissions:
            if permission not in applicable:
                raise InvalidArgument(
                    f"Permission {permission!r} is not valid for this resource "
                    f"({resource}); valid permissions: {', '.join(sorted(applicable))}."
                )
        if member is None:
            return list(dict.fromkeys(permissions))
        granted = held_permissions(self.get(resource, CONDITIONAL_VERSION), member)
        return [p for p in dict.fromkeys(permissions) if p in granted]


def held_permissions(policy: Policy, member: str) -> frozenset[str]:
    """What ``member`` is granted by ``policy``'s unconditional bindings (conditions are
    not evaluated here, so a conditional grant counts as not granted)."""
    granted: set[str] = set()
    for binding in policy.bindings:
        if binding.condition is not None:
            continue
        authenticated = member != "allUsers" and "allAuthenticatedUsers" in binding.members
        if member in binding.members or "allUsers" in binding.members or authenticated:
            granted |= ROLE_PERMISSIONS.get(binding.role, frozenset())
    return frozenset(granted)


def _checked(policy: Policy) -> Policy:
    """Validate and normalise a policy about to be stored."""
    if policy.version not in SUPPORTED_VERSIONS:
        raise InvalidArgument(
            f"Invalid policy version {policy.version}: it must be 0, 1 or 3 "
            "(https://cloud.google.com/iam/help/policies/versions)."
        )
    merged: dict[tuple[str, Condition | None], list[str]] = {}
    total = 0
    for binding in policy.bindings:
        _check_role(binding.role)
        if binding.condition is not None:
            if policy.version < CONDITIONAL_VERSION:
                raise InvalidArgument(
                    "A binding with a condition needs policy version 3 "
                    f"(role {binding.role} has one, the policy is version {policy.version})."
                )
            if not binding.condition.expression.strip():
                raise InvalidArgument(
                    f"The condition of the binding for {binding.role} has no expression."
                )
        members = merged.setdefault((binding.role, binding.condition), [])
        for member in binding.members:
            _check_member(member)
            if member not in members:
                members.append(member)
                total += 1
    if total > MAX_MEMBERS:
        raise InvalidArgument(
            f"The policy has {total} principals; a policy holds at most {MAX_MEMBERS}."
        )
    bindings = tuple(
        Binding(role, tuple(members), condition)
        for (role, condition), members in merged.items()
        if members
    )
    version = policy.version or 1
    if any(b.condition is not None for b in bindings):
        version = CONDITIONAL_VERSION
    return Policy(version, bindings, policy.audit_configs)


def _check_role(role: str) -> None:
    if role in ROLE_PERMISSIONS or _CUSTOM_ROLE.fullmatch(role):
        return
    raise InvalidArgument(
        f"Role {role} is not supported for this resource (Pub/Sub resources take the "
        "roles/pubsub.* roles, roles/viewer, roles/editor, roles/owner and custom roles)."
    )


def _check_member(member: str) -> None:
    if member in _PUBLIC_MEMBERS:
        return
    for prefix in _MEMBER_PREFIXES:
        if member.startswith(prefix) and len(member) > len(prefix):
            return
    raise InvalidArgument(
        f"Invalid principal {member!r}: expected user:, serviceAccount:, group:, domain:, "
        "deleted:, principal:// or principalSet:// followed by an identifier, allUsers or "
        "allAuthenticatedUsers."
    )


def _etag(resource: str, revision: int, policy: Policy) -> bytes:
    digest = hashlib.sha256(f"{resource}\0{revision}\0".encode())
    digest.update(_canonical(policy).encode())
    return b"\x07" + digest.digest()[:7]  # 8 bytes, like the service's "BwX..." etags


def _downgraded(policy: Policy) -> Policy:
    bindings = []
    for binding in policy.bindings:
        if binding.condition is None:
            bindings.append(binding)
            continue
        tag = hashlib.sha256(repr(binding.condition).encode()).hexdigest()[:16]
        bindings.append(Binding(f"{binding.role}_withcond_{tag}", binding.members))
    return Policy(1, tuple(bindings), policy.audit_configs, policy.etag)


# ------------------------------------------------------------------ encoding


def _canonical(policy: Policy) -> str:
    return json.dumps(_to_json(policy), sort_keys=True, separators=(",", ":"))


def _to_json(policy: Policy) -> dict[str, object]:
    return {
        "version": policy.version,
        "etag": policy.etag.hex(),
        "bindings": [
            {
                "role": b.role,
                "members": list(b.members),
                "condition": None
                if b.condition is None
                else [
                    b.condition.expression,
                    b.condition.title,
                    b.condition.description,
                    b.condition.location,
                ],
            }
            for b in policy.bindings
        ],
        "audit_configs": [
            {
                "service": a.service,
                "configs": [[c.log_type, list(c.exempted_members)] for c in a.audit_log_configs],
            }
            for a in policy.audit_configs
        ],
    }


def encode(revision: int, policy: Policy) -> bytes:
    return json.dumps({"revision": revision, "policy": _to_json(policy)}).encode()


def decode(body: bytes) -> tuple[int, Policy]:
    document = json.loads(body)
    raw = document["policy"]
    bindings = tuple(
        Binding(
            b["role"],
            tuple(b["members"]),
            None if b["condition"] is None else Condition(*b["condition"]),
        )
        for b in raw["bindings"]
    )
    audit = tuple(
        AuditConfig(
            a["service"],
            tuple(AuditLogConfig(int(t), tuple(m)) for t, m in a["configs"]),
        )
        for a in raw["audit_configs"]
    )
    return int(document["revision"]), Policy(
        int(raw["version"]), bindings, audit, bytes.fromhex(raw["etag"])
    )
