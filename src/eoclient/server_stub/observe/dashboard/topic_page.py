"""A topic's page (``/dashboard/topic?name=...``): what was published, how long it is kept
and what limits its backlog, the publish rate, its subscriptions and snapshots.

One section per concern (:data:`SECTIONS`), each a function of :class:`TopicData`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eoclient.server_stub.core.model import TopicView
from eoclient.server_stub.core.policies import QuotaAction, RetentionPolicy
from eoclient.server_stub.core.stats import SubscriptionStats, TopicStats
from eoclient.server_stub.observe.dashboard import edge_sections, formats
from eoclient.server_stub.observe.dashboard.charts import PER_SECOND, Series, line_chart
from eoclient.server_stub.observe.dashboard.edges import IngestionPanel, TransformsPanel
from eoclient.server_stub.observe.dashboard.frame import (
    Column,
    Section,
    e,
    empty,
    facts,
    name,
    name_link,
    page,
    plain_name,
    table,
    tags,
)
from eoclient.server_stub.observe.dashboard.stats_history import Point


@dataclass(frozen=True)
class TopicData:
    stats: TopicStats
    view: TopicView
    subscriptions: Sequence[SubscriptionStats]
    snapshots: Sequence[str]
    publish_rate: float
    rate_series: list[Point]
    token: str | None
    ingestion: IngestionPanel | None = None  # an import topic's
    transforms: TransformsPanel | None = None


def numbers_section(data: TopicData) -> Section:
    stats, config = data.stats, data.view.config
    labels = tags([f"{k}={v}" for k, v in sorted(config.labels.items())])
    rows = [
        ("published (since start)", e(formats.count(stats.published_messages, "message"))),
        ("publish rate", e(formats.rate(data.publish_rate))),
        ("publish requests", e(formats.count(stats.publish_requests, "request"))),
        ("published data", e(formats.size(stats.published_bytes))),
        ("labels", labels or formats.NONE),
    ]
    body = f"<p class=name>{name(stats.name)}</p>" + facts("numbers", rows)
    return Section("", body, id="numbers", live=True)


def policies_section(data: TopicData) -> Section:
    """How long the topic keeps its messages and what limits its subscriptions' backlogs:
    the topic's own ``message_retention_duration`` and the broker policies
    (docs/policies.md)."""
    stats, config = data.stats, data.view.config
    policies = config.policies
    retention = config.message_retention_duration
    rows = [
        (
            "message retention",
            e(formats.duration(retention))
            if retention
            else "not set: acknowledged messages are not kept (subscriptions may keep theirs)",
        ),
        ("retention policy", e(_retention(policies.retention))),
    ]
    if stats.retained_messages is not None:
        retained = (
            f"{formats.count(stats.retained_messages, 'message')}, "
            f"{formats.size(stats.retained_bytes or 0)}"
        )
        if stats.oldest_retained_age:
            retained += f", the oldest {formats.age(stats.oldest_retained_age)} old"
        rows.append(("retained now", e(retained)))
    quota = policies.backlog_quota
    if quota is None:
        rows.append(("backlog quota", "none"))
    else:
        limits = []
        if quota.limit_bytes is not None:
            limits.append(formats.size(quota.limit_bytes))
        if quota.limit_age is not None:
            limits.append(f"{formats.duration(quota.limit_age)} old")
        action = _QUOTA_ACTIONS[quota.action]
        if quota.action is QuotaAction.HOLD:
            action += f" (up to {formats.duration(quota.hold_timeout)})"
        rows.append(("backlog quota", e(f"{' or '.join(limits)} per subscription: {action}")))
        rows.append(
            (
                "quota outcomes (since start)",
                e(
                    f"{formats.count(stats.held_publishes, 'publish', 'publishes')} held, "
                    f"{stats.held_then_refused:,} of them then refused, "
                    f"{formats.count(stats.refused_publishes, 'publish', 'publishes')} refused"
                ),
            )
        )
    ttl = policies.message_ttl
    rows.append(
        (
            "message TTL",
            e(f"{formats.duration(ttl)} (then acknowledged for every subscription)")
            if ttl
            else "none",
        )
    )
    return Section(
        "Retention and backlog policies",
        facts("policies", rows),
        id="policies",
        live=True,
        note="Set with <code>eoclient topics update --message-retention-duration</code>, "
        "<code>set-retention</code>, <code>set-backlog-quota</code> and "
        "<code>set-message-ttl</code>.",
    )


_QUOTA_ACTIONS = {
    QuotaAction.HOLD: "publishes wait",
    QuotaAction.EXCEPTION: "publishes are refused",
    QuotaAction.EVICTION: "the oldest messages are acknowledged",
}


def _retention(policy: RetentionPolicy | None) -> str:
    if policy is None or (policy.time == 0 and policy.size == 0):
        return "none"
    time = "forever" if policy.time == -1 else formats.duration(policy.time)
    size = "no size limit" if policy.size == -1 else f"up to {formats.size(policy.size)}"
    return f"every message, acknowledged or not, for {time}, {size}"


def ingestion_section(data: TopicData) -> Section:
    """An import topic's source, its state and what it ingested."""
    return edge_sections.ingestion_section(data.ingestion)


def transforms_section(data: TopicData) -> Section:
    return edge_sections.transforms_section(data.transforms)


def chart_section(data: TopicData) -> Section:
    chart = line_chart(
        "Published", PER_SECOND, [Series("published", data.rate_series)], chart_id="chart-published"
    )
    return Section("The last hour", chart, id="charts", live=True)


def subscriptions_section(data: TopicData) -> Section:
    rows = [
        [
            name_link(s.name, "subscription", data.token),
            f"{s.undelivered_messages:,}",
            e(formats.age(s.oldest_unacked_age)),
        ]
        for s in data.subscriptions
    ]
    columns = [
        Column("subscription"),
        Column("backlog (messages)", numeric=True),
        Column("oldest unacked", numeric=True),
    ]
    html = (
        table(
            "subscriptions",
            columns,
            rows,
            row_names=[s.name for s in data.subscriptions],
            cell_classes=["", "backlog", ""],
        )
        if rows
        else empty(
            "no-subscriptions",
            "No subscription on this topic: what is published now reaches nobody.",
        )
    )
    return Section("Subscriptions", html, id="subscriptions", live=True)


def snapshots_section(data: TopicData) -> Section:
    if not data.snapshots:
        return Section(
            "Snapshots",
            "<p class=muted id=topic-snapshots>No snapshot of this topic.</p>",
            id="snapshots",
        )
    rows = [[plain_name(s)] for s in data.snapshots]
    return Section(
        "Snapshots", table("topic-snapshots", [Column("snapshot")], rows), id="snapshots"
    )


def publish_section(data: TopicData) -> Section:
    form = (
        f"<form data-action=publish id=publish>"
        f"<input type=hidden name=topic value='{e(data.stats.name)}'>"
        "<label>data <input name=data size=40></label> "
        "<label>ordering key <input name=ordering_key size=12></label> "
        "<button>Publish</button></form>"
    )
    return Section("Publish", form, id="publish")


# The topic page's sections, in order: a new concern adds its function here.
SECTIONS: tuple[Callable[[TopicData], Section], ...] = (
    numbers_section,
    ingestion_section,
    transforms_section,
    policies_section,
    chart_section,
    subscriptions_section,
    snapshots_section,
    publish_section,
)


def render(data: TopicData) -> str:
    return page("Topic", [s(data) for s in SECTIONS], data.token)
