"""A subscription's page (``/dashboard/subscription?name=...``): its numbers, the
exactly-once acks that failed and the redeliveries, charts of the last hour, the next
messages (read without taking a lease) and the operator's actions.

One section per concern (:data:`SECTIONS`), each a function of :class:`SubscriptionData`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eoclient.server_stub.core.model import StoredMessage, SubscriptionView
from eoclient.server_stub.core.stats import SubscriptionStats
from eoclient.server_stub.observe.dashboard import edge_sections, formats
from eoclient.server_stub.observe.dashboard.charts import (
    AGE,
    MESSAGES,
    PER_SECOND,
    Series,
    line_chart,
)
from eoclient.server_stub.observe.dashboard.edges import ExportPanel, TransformsPanel
from eoclient.server_stub.observe.dashboard.frame import (
    Column,
    Section,
    e,
    empty,
    facts,
    name,
    page,
    table,
    tags,
)
from eoclient.server_stub.observe.dashboard.overview import properties, topic_cell
from eoclient.server_stub.observe.dashboard.stats_history import Point, Rates, Sample

PEEK_DATA_CHARS = 200  # of a message's data shown in the peek table

# What each failure reason of an exactly-once ack means, for the operator reading them
# (the reasons: docs/protocol.md#exactly-once-error-details).
REASONS = {
    "PERMANENT_FAILURE_INVALID_ACK_ID": "the ack id is no longer current: the lease ran "
    "out, the message was delivered again, or it was already acknowledged",
    "TRANSIENT_FAILURE_UNORDERED_ACK_ID": "an earlier message of the same ordering key is "
    "not acknowledged yet (the client retries)",
    "PERMANENT_FAILURE_OTHER": "refused for another reason",
    "TRANSIENT_FAILURE_OTHER": "a transient failure (the client retries)",
}


@dataclass(frozen=True)
class SubscriptionData:
    stats: SubscriptionStats
    view: SubscriptionView
    rates: Rates
    samples: list[Sample]
    rate_series: tuple[list[Point], list[Point]]  # delivered, acked
    peeked: Sequence[tuple[StoredMessage, bool]]  # the next messages; leased or not
    snapshots: Sequence[str]  # of its topic: what it can seek to
    token: str | None
    export: ExportPanel | None = None  # a Cloud Storage or BigQuery subscription's
    transforms: TransformsPanel | None = None


def numbers_section(data: SubscriptionData) -> Section:
    stats, rates = data.stats, data.rates
    rows = [
        ("backlog (messages)", f"{stats.undelivered_messages:,}", "backlog"),
        ("backlog size", e(formats.size(stats.backlog_bytes))),
        ("oldest unacked", e(formats.age(stats.oldest_unacked_age))),
        ("leased now", e(formats.count(stats.outstanding_messages, "message"))),
        ("delivery rate", e(formats.rate(rates.delivered))),
        ("ack rate", e(formats.rate(rates.acked))),
        (
            "since start",
            e(
                f"{stats.delivered:,} delivered, {stats.acked:,} acked, {stats.nacked:,} "
                f"nacked, {stats.expired:,} leases ran out, {stats.dead_lettered:,} dead-lettered"
            ),
        ),
        ("properties", tags(properties(data.view), warn=["DETACHED"])),
    ]
    body = (
        f"<p class=name>{name(stats.name)}</p><p>on {topic_cell(stats.topic, data.token)}</p>"
        + facts("numbers", rows)
    )
    return Section("", body, id="numbers", live=True)


def acks_section(data: SubscriptionData) -> Section:
    """Failed exactly-once acks by reason (what Cloud Monitoring's
    subscription/exactly_once_warning_count counts) and the redeliveries."""
    stats = data.stats
    exactly_once = data.view.config.enable_exactly_once_delivery
    failures = sorted(stats.ack_failures.items(), key=lambda item: (-item[1], item[0]))
    redelivered = facts(
        "redeliveries",
        [
            (
                "redelivered (since start)",
                e(
                    f"{formats.count(stats.redelivered, 'delivery', 'deliveries')} of a "
                    "message delivered before (after a nack or a lease that ran out)"
                ),
            )
        ],
    )
    if failures:
        rows = [
            [
                e("Acknowledge" if operation == "ack" else "ModifyAckDeadline"),
                f"<code>{e(reason)}</code>",
                e(REASONS.get(reason, "")),
                f"{count:,}",
            ]
            for (operation, reason), count in failures
        ]
        columns = [
            Column("request"),
            Column("reason"),
            Column("meaning"),
            Column("ack ids", numeric=True),
        ]
        failed = table("ack-failures", columns, rows)
    elif exactly_once:
        failed = empty("ack-failures", "No ack has failed since the server started.")
    else:
        failed = empty(
            "ack-failures",
            "Exactly-once delivery is off: the server does not check acks, so none fails; "
            "a message may still be delivered again.",
        )
    return Section(
        "Exactly-once acks and redeliveries",
        failed + redelivered,
        id="acks",
        live=True,
        note="Acks and deadline changes the server refused, by reason, since it started.",
    )


def charts_section(data: SubscriptionData) -> Section:
    samples = data.samples
    delivered, acked = data.rate_series
    html = (
        "<div class=charts>"
        + line_chart(
            "Backlog",
            MESSAGES,
            [Series("backlog", [(x.at, x.backlog) for x in samples])],
            chart_id="chart-backlog",
        )
        + line_chart(
            "Oldest unacknowledged message",
            AGE,
            [Series("age", [(x.at, x.oldest_age) for x in samples])],
            chart_id="chart-age",
        )
        + line_chart(
            "Delivered and acked",
            PER_SECOND,
            [Series("delivered", delivered), Series("acked", acked, "line2")],
            chart_id="chart-rates",
        )
        + "</div>"
    )
    return Section("The last hour", html, id="charts", live=True)


def peek_section(data: SubscriptionData) -> Section:
    rows = [
        [
            f"<code>{e(m.message_id)}</code>",
            e(formats.when(m.publish_time)),
            e(m.ordering_key),
            e(", ".join(f"{k}={v}" for k, v in sorted(m.attributes.items()))),
            f"<code>{e(_preview(m.data))}</code>",
            e(formats.size(m.size)),
            "leased" if leased else "waiting",
        ]
        for m, leased in data.peeked
    ]
    columns = [
        Column("id"),
        Column("published"),
        Column("ordering key"),
        Column("attributes"),
        Column("data"),
        Column("size", numeric=True),
        Column("state"),
    ]
    html = (
        table("peek", columns, rows)
        if rows
        else empty("peek", "Nothing to deliver: every message is acknowledged.")
    )
    return Section(
        "Next messages",
        html,
        id="peek",
        live=True,
        note="The oldest unacknowledged, read without taking leases.",
    )


def actions_section(data: SubscriptionData) -> Section:
    subscription = data.stats.name
    snapshot_options = "".join(f"<option>{e(s)}</option>" for s in data.snapshots)
    hidden = f"<input type=hidden name=subscription value='{e(subscription)}'>"
    html = (
        f"<form data-action=seek-time id=seek-time>{hidden}<label>Seek to time "
        "<input name=time type=datetime-local step=1 required></label> (UTC) "
        "<button>Seek</button></form>"
        + (
            f"<form data-action=seek-snapshot id=seek-snapshot>{hidden}<label>Seek to snapshot "
            f"<select name=snapshot>{snapshot_options}</select></label> "
            "<button>Seek</button></form>"
            if data.snapshots
            else "<p class=muted>No snapshot of this topic to seek to.</p>"
        )
        + "<form data-action=purge id=purge "
        f"data-confirm='Acknowledge every message of {e(subscription)}?'>{hidden}"
        "<button>Purge (seek to now)</button></form>"
        f"<form data-action=skip id=skip>{hidden}<label>Skip messages by id "
        "<input name=message_ids placeholder='1, 2, 3' required></label> <button>Skip</button>"
        "</form>"
        "<form data-action=detach id=detach "
        f"data-confirm='Detach {e(subscription)} from its topic?'>{hidden}"
        "<button>Detach</button></form>"
    )
    return Section("Actions", html, id="actions")


def export_section(data: SubscriptionData) -> Section:
    """Its export (Cloud Storage or BigQuery): settings, state, what it wrote."""
    return edge_sections.export_section(data.export)


def transforms_section(data: SubscriptionData) -> Section:
    return edge_sections.transforms_section(data.transforms)


def _preview(data: bytes) -> str:
    text = data[: PEEK_DATA_CHARS * 4].decode("utf-8", errors="replace")
    return text if len(text) <= PEEK_DATA_CHARS else text[:PEEK_DATA_CHARS] + "…"


# The subscription page's sections, in order: a new concern adds its function here.
SECTIONS: tuple[Callable[[SubscriptionData], Section], ...] = (
    numbers_section,
    export_section,
    acks_section,
    transforms_section,
    charts_section,
    peek_section,
    actions_section,
)


def render(data: SubscriptionData) -> str:
    return page("Subscription", [s(data) for s in SECTIONS], data.token)
