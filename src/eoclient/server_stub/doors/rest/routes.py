"""The google.pubsub.v1 HTTP rules the REST door serves (docs/protocol.md#rest-mapping),
and routing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from eoclient.server_stub.doors.rest.errors import HttpProblem

_PROJECT = "projects/[^/:]+"
_TOPIC = f"{_PROJECT}/topics/[^/:]+"
_SUBSCRIPTION = f"{_PROJECT}/subscriptions/[^/:]+"
_SNAPSHOT = f"{_PROJECT}/snapshots/[^/:]+"


@dataclass(frozen=True)
class Binding:
    """One HTTP rule: ``http_method`` on a path matching ``pattern`` runs ``rpc``.

    The pattern's one group is a resource name, stored in the request field ``field``
    (dotted for nested fields); ``body`` says whether the JSON body is the request
    (``body: "*"``) or query parameters fill it instead.
    """

    http_method: str
    pattern: re.Pattern[str]
    rpc: str
    field: str
    body: bool
    # The body fills this field of the request (``body: "schema"``), the query
    # the others; empty: the body is the whole request.
    body_field: str = ""


def _bind(
    http_method: str, resource: str, rpc: str, field: str, *, body: bool, suffix: str = ""
) -> Binding:
    return Binding(
        http_method, re.compile(f"/v1/({resource}){re.escape(suffix)}"), rpc, field, body
    )


# docs/protocol.md#rest-mapping, from the 2.44.0 client's rest_base.py transports.
BINDINGS: tuple[Binding, ...] = (
    # Publisher
    _bind("PUT", _TOPIC, "CreateTopic", "name", body=True),
    _bind("PATCH", _TOPIC, "UpdateTopic", "topic.name", body=True),
    _bind("POST", _TOPIC, "Publish", "topic", body=True, suffix=":publish"),
    _bind("GET", _TOPIC, "GetTopic", "topic", body=False),
    _bind("GET", _PROJECT, "ListTopics", "project", body=False, suffix="/topics"),
    _bind("GET", _TOPIC, "ListTopicSubscriptions", "topic", body=False, suffix="/subscriptions"),
    _bind("GET", _TOPIC, "ListTopicSnapshots", "topic", body=False, suffix="/snapshots"),
    _bind("DELETE", _TOPIC, "DeleteTopic", "topic", body=False),
    _bind(
        "POST", _SUBSCRIPTION, "DetachSubscription", "subscription", body=False, suffix=":detach"
    ),
    # Subscriber
    _bind("PUT", _SUBSCRIPTION, "CreateSubscription", "name", body=True),
    _bind("GET", _SUBSCRIPTION, "GetSubscription", "subscription", body=False),
    _bind("PATCH", _SUBSCRIPTION, "UpdateSubscription", "subscription.name", body=True),
    _bind("GET", _PROJECT, "ListSubscriptions", "project", body=False, suffix="/subscriptions"),
    _bind("DELETE", _SUBSCRIPTION, "DeleteSubscription", "subscription", body=False),
    _bind(
        "POST",
        _SUBSCRIPTION,
        "ModifyAckDeadline",
        "subscription",
        body=True,
        suffix=":modifyAckDeadline",
    ),
    _bind("POST", _SUBSCRIPTION, "Acknowledge", "subscription", body=True, suffix=":acknowledge"),
    _bind("POST", _SUBSCRIPTION, "Pull", "subscription", body=True, suffix=":pull"),
    _bind(
        "POST",
        _SUBSCRIPTION,
        "ModifyPushConfig",
        "subscription",
        body=True,
        suffix=":modifyPushConfig",
    ),
    _bind("GET", _SNAPSHOT, "GetSnapshot", "snapshot", body=False),
    _bind("GET", _PROJECT, "ListSnapshots", "project", body=False, suffix="/snapshots"),
    _bind("PUT", _SNAPSHOT, "CreateSnapshot", "name", body=True),
    _bind("PATCH", _SNAPSHOT, "UpdateSnapshot", "snapshot.name", body=True),
    _bind("DELETE", _SNAPSHOT, "DeleteSnapshot", "snapshot", body=False),
    _bind("POST", _SUBSCRIPTION, "Seek", "subscription", body=True, suffix=":seek"),
    # Extension: eoclient.broker.v1.BrokerPolicies (services/broker_policies.py; the
    # Pulsar-shaped alias is pulsar_alias.py). docs/policies.md lists these.
    *(
        _bind(verb, resource, rpc, field, body=verb != "GET", suffix=suffix)
        for verb, resource, field, rpc, suffix in (
            ("POST", _SUBSCRIPTION, "subscription", "SkipMessages", ":skipMessages"),
            ("POST", _SUBSCRIPTION, "subscription", "SeekWithOutcome", ":seekWithOutcome"),
            ("GET", _TOPIC, "topic", "GetTopicPolicies", "/policies"),
            ("PUT", _TOPIC, "topic", "SetTopicPolicies", "/policies"),
            ("PATCH", _TOPIC, "topic", "SetTopicPolicies", "/policies"),
            ("GET", _TOPIC, "topic", "GetTopicPolicyCounters", "/policyCounters"),
            ("GET", _SUBSCRIPTION, "subscription", "GetSubscriptionPolicies", "/policies"),
            ("PUT", _SUBSCRIPTION, "subscription", "SetSubscriptionPolicies", "/policies"),
            ("PATCH", _SUBSCRIPTION, "subscription", "SetSubscriptionPolicies", "/policies"),
            (
                "GET",
                _SUBSCRIPTION,
                "subscription",
                "GetSubscriptionPolicyCounters",
                "/policyCounters",
            ),
        )
    ),
)

# The IAM mixin on every resource kind and SchemaService (the 2.44.0 client's
# rest_base.py transports): getIamPolicy is a GET (options.requestedPolicyVersion in the
# query), the others POST their request.
_SCHEMA = f"{_PROJECT}/schemas/[^/:]+"
BINDINGS += tuple(
    binding
    for resource in (_TOPIC, _SUBSCRIPTION, _SNAPSHOT, _SCHEMA)
    for binding in (
        _bind("GET", resource, "GetIamPolicy", "resource", body=False, suffix=":getIamPolicy"),
        _bind("POST", resource, "SetIamPolicy", "resource", body=True, suffix=":setIamPolicy"),
        _bind(
            "POST",
            resource,
            "TestIamPermissions",
            "resource",
            body=True,
            suffix=":testIamPermissions",
        ),
    )
)

BINDINGS += (
    # SchemaService. CreateSchema's body is the Schema alone (schema_id in the query).
    Binding(
        "POST",
        re.compile(f"/v1/({_PROJECT})/schemas"),
        "CreateSchema",
        "parent",
        body=True,
        body_field="schema",
    ),
    _bind("GET", _SCHEMA, "GetSchema", "name", body=False),
    _bind("GET", _PROJECT, "ListSchemas", "parent", body=False, suffix="/schemas"),
    _bind("GET", _SCHEMA, "ListSchemaRevisions", "name", body=False, suffix=":listRevisions"),
    _bind("POST", _SCHEMA, "CommitSchema", "name", body=True, suffix=":commit"),
    _bind("POST", _SCHEMA, "RollbackSchema", "name", body=True, suffix=":rollback"),
    _bind("DELETE", _SCHEMA, "DeleteSchemaRevision", "name", body=False, suffix=":deleteRevision"),
    _bind("DELETE", _SCHEMA, "DeleteSchema", "name", body=False),
    _bind("POST", _PROJECT, "ValidateSchema", "parent", body=True, suffix="/schemas:validate"),
    _bind(
        "POST", _PROJECT, "ValidateMessage", "parent", body=True, suffix="/schemas:validateMessage"
    ),
)


def route(http_method: str, path: str) -> tuple[Binding, str]:
    """The binding of ``http_method path`` and the resource name in the path; 404 or 405
    (with ``Allow``) otherwise."""
    allowed: list[str] = []
    for binding in BINDINGS:
        found = binding.pattern.fullmatch(path)
        if found is None:
            continue
        if binding.http_method == http_method:
            return binding, found.group(1)
        allowed.append(binding.http_method)
    if allowed:
        raise HttpProblem(
            405,
            "UNIMPLEMENTED",
            f"HTTP method {http_method} is not allowed on {path} (allowed: {', '.join(allowed)}).",
            {"Allow": ", ".join(allowed)},
        )
    raise HttpProblem(
        404, "NOT_FOUND", f"No google.pubsub.v1 HTTP binding matches {http_method} {path}."
    )
