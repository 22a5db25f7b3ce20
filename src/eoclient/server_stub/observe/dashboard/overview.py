"""The overview (``/dashboard``, and ``/``): every topic, subscription, snapshot and schema.

One section per kind of resource (:data:`SECTIONS`), each a function of
:class:`OverviewData`; the forms to create a topic or a subscription and to publish come
last, for a server with nothing on it yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eoclient.server_stub.core.model import DELETED_TOPIC, SnapshotView, SubscriptionView
from eoclient.server_stub.core.schemas import SchemaRevision
from eoclient.server_stub.core.stats import SubscriptionStats, TopicStats
from eoclient.server_stub.observe.dashboard import edge_sections, formats
from eoclient.server_stub.observe.dashboard.charts import sparkline
from eoclient.server_stub.observe.dashboard.edges import EdgeRow
from eoclient.server_stub.observe.dashboard.frame import (
    Column,
    Section,
    e,
    empty,
    name_link,
    page,
    plain_name,
    table,
    tags,
)
from eoclient.server_stub.observe.dashboard.stats_history import Rates, Sample


@dataclass(frozen=True)
class TopicRow:
    stats: TopicStats
    publish_rate: float  # messages per second, over the last minute
    subscriptions: int


@dataclass(frozen=True)
class SubscriptionRow:
    stats: SubscriptionStats
    view: SubscriptionView
    rates: Rates
    samples: list[Sample]


@dataclass(frozen=True)
class OverviewData:
    topics: Sequence[TopicRow]
    subscriptions: Sequence[SubscriptionRow]
    snapshots: Sequence[SnapshotView]
    schemas: Sequence[SchemaRevision]
    token: str | None
    edges: Sequence[EdgeRow] = ()  # the export subscriptions and import topics


def topics_section(data: OverviewData) -> Section:
    rows = [
        [
            name_link(row.stats.name, "topic", data.token),
            f"{row.stats.published_messages:,}",
            e(formats.rate(row.publish_rate)),
            f"{row.subscriptions:,}",
        ]
        for row in data.topics
    ]
    columns = [
        Column("topic"),
        Column("published (messages)", numeric=True),
        Column("publish rate", numeric=True),
        Column("subscriptions", numeric=True),
    ]
    html = (
        table("topics", columns, rows, row_names=[r.stats.name for r in data.topics])
        if rows
        else empty(
            "no-topics",
            "No topics yet. Create one below, or with <code>eoclient topics create ID</code> "
            "or any client.",
        )
    )
    return Section("Topics", html, id="topics", live=True)


def subscriptions_section(data: OverviewData) -> Section:
    rows = [
        [
            name_link(row.stats.name, "subscription", data.token),
            topic_cell(row.stats.topic, data.token),
            tags(properties(row.view), warn=["DETACHED"]),
            f"{row.stats.undelivered_messages:,}",
            e(formats.age(row.stats.oldest_unacked_age)),
            e(formats.rate(row.rates.acked)),
            sparkline([(x.at, x.backlog) for x in row.samples], "backlog (messages)"),
        ]
        for row in data.subscriptions
    ]
    columns = [
        Column("subscription"),
        Column("topic"),
        Column("properties"),
        Column("backlog (messages)", numeric=True),
        Column("oldest unacked", numeric=True),
        Column("ack rate", numeric=True),
        Column("backlog, last hour"),
    ]
    classes = ["", "", "", "backlog", "", "", ""]
    html = (
        table(
            "subscriptions",
            columns,
            rows,
            row_names=[r.stats.name for r in data.subscriptions],
            cell_classes=classes,
        )
        if rows
        else empty(
            "no-subscriptions",
            "No subscriptions yet. Create one on a topic below, or with "
            "<code>eoclient subscriptions create ID --topic TOPIC</code>.",
        )
    )
    return Section("Subscriptions", html, id="subscriptions", live=True)


def edges_section(data: OverviewData) -> Section:
    """Export subscriptions and import topics, with their state (none: left out)."""
    return edge_sections.edges_section(data.edges, data.token)


def snapshots_section(data: OverviewData) -> Section:
    rows = [
        [
            plain_name(s.name),
            name_link(s.topic, "topic", data.token),
            e(formats.when(s.expire_time)),
            tags([f"{k}={v}" for k, v in sorted(s.labels.items())]) or formats.NONE,
        ]
        for s in data.snapshots
    ]
    columns = [Column("snapshot"), Column("topic"), Column("expires"), Column("labels")]
    html = (
        table("snapshots", columns, rows, row_names=[s.name for s in data.snapshots])
        if rows
        else empty(
            "no-snapshots",
            "No snapshots. <code>eoclient snapshots create ID --subscription SUB</code> "
            "keeps a subscription's acknowledgement state to seek back to.",
        )
    )
    return Section("Snapshots", html, id="snapshots", live=True)


def schemas_section(data: OverviewData) -> Section:
    rows = [
        [
            plain_name(s.name),
            e(s.type),
            f"<code>{e(s.revision_id)}</code>",
            e(formats.when(s.revision_create_time)),
        ]
        for s in data.schemas
    ]
    columns = [
        Column("schema"),
        Column("type"),
        Column("latest revision"),
        Column("revision created"),
    ]
    html = (
        table("schemas", columns, rows, row_names=[s.name for s in data.schemas])
        if rows
        else empty(
            "no-schemas",
            "No schemas. A topic with a schema (Avro or Protocol Buffers) refuses messages "
            "that do not match it; create one with any client's CreateSchema.",
        )
    )
    return Section("Schemas", html, id="schemas", live=True)


def notes_section(data: OverviewData) -> Section:
    return Section(
        "",
        "<p class=muted>Counts since the server started; rates over the last minute; the "
        "server samples every 5 s; times in UTC. <a href='/metrics'>/metrics</a> has the "
        "same numbers for Prometheus.</p>",
    )


def try_it_section(data: OverviewData) -> Section:
    return Section("Try it", _CREATE_FORMS, id="try-it")


_CREATE_FORMS = (
    "<form data-action=create-topic id=create-topic><label>Topic <input name=topic required "
    "size=40 placeholder='projects/my-project/topics/orders'></label> "
    "<button>Create topic</button></form>"
    "<form data-action=create-subscription id=create-subscription><label>Subscription "
    "<input name=subscription required size=40 "
    "placeholder='projects/my-project/subscriptions/billing'></label> "
    "<label>on topic <input name=topic required size=32></label> "
    "<label><input type=checkbox name=exactly_once value=1> exactly-once</label> "
    "<label><input type=checkbox name=ordering value=1> ordered</label> "
    "<label><input type=checkbox name=retain_acked value=1> retains acked</label> "
    "<button>Create subscription</button></form>"
    "<form data-action=publish id=publish><label>Publish to topic <input name=topic required "
    "size=32></label> <label>data <input name=data size=24></label> "
    "<label>ordering key <input name=ordering_key size=10></label> "
    "<button>Publish</button></form>"
)

# The overview's sections, in order: a new concern adds its function here.
SECTIONS: tuple[Callable[[OverviewData], Section], ...] = (
    topics_section,
    subscriptions_section,
    edges_section,
    snapshots_section,
    schemas_section,
    notes_section,
    try_it_section,
)


def render(data: OverviewData) -> str:
    return page("Topics and subscriptions", [s(data) for s in SECTIONS], data.token)


# ------------------------------------------------------------- shared with the other pages


def topic_cell(topic: str, token: str | None) -> str:
    if topic == DELETED_TOPIC:
        return "<span class='tag warn'>topic deleted</span>"
    return name_link(topic, "topic", token)


def properties(view: SubscriptionView) -> list[str]:
    """A subscription's settings that change how it delivers, as short tags."""
    config = view.config
    shown = [f"ack deadline {formats.duration(config.ack_deadline_seconds)}"]
    if config.enable_exactly_once_delivery:
        shown.append("exactly-once")
    if config.enable_message_ordering:
        shown.append("ordered")
    if config.filter:
        shown.append(f"filter: {config.filter}")
    if config.dead_letter_policy is not None:
        shown.append(f"dead letters → {config.dead_letter_policy.dead_letter_topic}")
    if config.retain_acked_messages:
        shown.append("retains acked")
    if config.detached:
        shown.append("DETACHED")
    return shown
