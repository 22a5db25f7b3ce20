"""The sections that show the server's edge rooms (``edges.py`` gathers them): a
subscription's export, a topic's or a subscription's message transforms, a topic's
ingestion, and the overview's list of export subscriptions and import topics.

Each function takes its panel (None: the resource has none) and gives a section; a
resource without one gets an empty section, which the page leaves out. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from eoclient.server_stub.exports.status import ACTIVE, CLOUD_STORAGE, ExportStatus
from eoclient.server_stub.observe.dashboard import formats
from eoclient.server_stub.observe.dashboard.edges import (
    SOURCE_NAMES,
    EdgeRow,
    ExportPanel,
    IngestionPanel,
    TransformsPanel,
)
from eoclient.server_stub.observe.dashboard.frame import (
    Column,
    Section,
    e,
    empty,
    facts,
    name_link,
    table,
    tags,
)

NOTHING = Section("", "")  # a section the page leaves out


def _state(state: str) -> str:
    return tags([state], warn=[] if state == ACTIVE else [state]) if state else formats.NONE


# ------------------------------------------------------------------ exports


def export_section(panel: ExportPanel | None) -> Section:
    if panel is None:
        return NOTHING
    storage = panel.kind == CLOUD_STORAGE
    settings = [(what, e(value)) for what, value in panel.settings]
    settings.append(("options", tags(panel.flags) or "none"))
    html = facts("export-settings", settings)
    status = panel.status
    if status is None:
        text = (
            "The export has not started yet: the server looks for new export subscriptions "
            "every second."
            if panel.runs
            else "This server runs no exports (a broker without its export runner): the "
            "settings are kept and nothing is written."
        )
        html += empty("export-state", text)
    else:
        html += facts("export-state", _status_rows(status, storage))
        html += _written(status, storage)
    if panel.table is not None:
        writes = panel.table
        last = formats.when(writes.last_write) if writes.last_write else formats.NONE
        html += facts(
            "export-table",
            [
                (
                    f"table {writes.table}",
                    e(
                        f"{formats.count(writes.messages, 'row')} written in "
                        f"{formats.count(writes.writes, 'write')} by "
                        f"{formats.count(writes.subscriptions, 'subscription')}, "
                        f"{writes.unwritable:,} refused; the last at {last}"
                    ),
                )
            ],
        )
    return Section(
        "Cloud Storage export" if storage else "BigQuery export",
        html,
        id="export",
        live=True,
        note="The server delivers this subscription itself: "
        + (
            "each batch of messages becomes one object in the bucket, and its messages are "
            "acknowledged once the object is complete."
            if storage
            else "each message becomes a row of the table (the BigQuery stand-in), "
            "acknowledged once the row is committed."
        ),
    )


def _status_rows(status: ExportStatus, storage: bool) -> list[tuple[str, ...]]:
    state = _state(status.state)
    if status.reason:
        state += " " + e(status.reason)
    written = (
        formats.count(status.objects, "object") if storage else formats.count(status.rows, "row")
    )
    rows: list[tuple[str, ...]] = [
        ("state", state),
        (
            "destination checked",
            e(formats.when(status.checked_at)) if status.checked_at else formats.NONE,
        ),
        (
            "exported (since start)",
            e(
                f"{formats.count(status.messages, 'message')} in {written}, "
                f"{formats.size(status.bytes)}"
            ),
        ),
        (
            "being written now",
            e(
                f"{formats.count(status.open_messages, 'message')}, "
                f"{formats.size(status.open_bytes)}"
                if storage
                else formats.count(status.open_messages, "message")
            ),
        ),
        (
            "could not be written",
            e(
                f"{formats.count(status.unwritable, 'message')} (nacked: each counts a "
                "delivery attempt, so a dead-letter policy takes them in the end)"
            ),
        ),
        ("failed writes", e(f"{formats.count(status.write_failures, 'write')}, tried again")),
    ]
    if status.last_error:
        rows.append(("last failure", f"<code>{e(status.last_error)}</code>"))
    return rows


def _written(status: ExportStatus, storage: bool) -> str:
    last = list(reversed(status.last_written))  # the newest first
    if not last:
        return empty(
            "export-written",
            "Nothing written since the server started"
            + (
                ": the messages wait in the subscription until the destination exists."
                if status.state != ACTIVE
                else "."
            ),
        )
    rows = [
        [
            f"<code>{e(w.target)}</code>",
            f"{w.messages:,}",
            e(formats.size(w.bytes)),
            e(formats.when(w.at)),
        ]
        for w in last
    ]
    columns = [
        Column("object" if storage else "table"),
        Column("messages" if storage else "rows", numeric=True),
        Column("size" if storage else "data", numeric=True),
        Column("written"),
    ]
    caption = (
        "<p class=muted>The last objects written, the newest first:</p>"
        if storage
        else "<p class=muted>The last batches of rows committed, the newest first:</p>"
    )
    return caption + table("export-written", columns, rows)


# --------------------------------------------------------------- transforms


def transforms_section(panel: TransformsPanel | None) -> Section:
    if panel is None:
        return NOTHING
    topic = panel.kind == "topic"
    rows = [
        [
            f"{index}",
            f"<code>{e(udf.function_name)}</code>",
            tags(["disabled"], warn=["disabled"]) if udf.disabled else "applied",
            f"<details><summary>{e(formats.size(len(udf.code.encode())))}</summary>"
            f"<pre><code>{e(udf.code)}</code></pre></details>",
        ]
        for index, udf in enumerate(panel.udfs, start=1)
    ]
    columns = [Column("#", numeric=True), Column("function"), Column("state"), Column("code")]
    html = (
        table("transforms", columns, rows)
        if rows
        else empty("transforms", "No transform now (the counts are of earlier ones).")
    )
    counts = panel.counts
    failed = (
        "each refused its whole Publish (INVALID_ARGUMENT)"
        if topic
        else "each nacked, a failed delivery attempt"
    )
    html += (
        "<div id=live-transform-counts data-live>"
        + facts(
            "transform-counts",
            [
                ("transformed (since start)", e(formats.count(counts.transformed, "message"))),
                ("filtered out", e(formats.count(counts.filtered, "message"))),
                ("failed", e(f"{formats.count(counts.failed, 'message')}: {failed}")),
            ],
        )
        + "</div>"
    )
    return Section(
        "Message transforms",
        html,
        id="transforms",
        note=(
            "JavaScript UDFs applied in this order to each message published, before it is stored"
            if topic
            else "JavaScript UDFs applied in this order to each message as it is delivered"
        )
        + "; a UDF that returns <code>null</code> filters the message out.",
    )


# ---------------------------------------------------------------- ingestion


def ingestion_section(panel: IngestionPanel | None) -> Section:
    if panel is None:
        return NOTHING
    source = SOURCE_NAMES.get(panel.source, panel.source)
    settings = [("source", e(source))] + [(k, e(v)) for k, v in panel.settings]
    html = facts("ingestion-settings", settings)
    if not panel.state:
        html += empty(
            "ingestion-state",
            "This server runs no ingestion (a broker without its ingestion loop): the "
            "settings are kept and nothing is ingested.",
        )
        return Section("Ingestion", html, id="ingestion")
    status = panel.status
    rows: list[tuple[str, ...]] = [
        ("state", _state(panel.state)),
        ("topic state", _state(panel.topic_state)),
    ]
    if status is not None and status.detail and panel.source != "cloud_storage":
        rows.append(("why", e(status.detail)))
    if status is not None and panel.source == "cloud_storage":
        counters = status.counters
        rows.append(
            (
                "ingested (since start)",
                e(
                    f"{formats.count(counters.messages, 'message')} from "
                    f"{formats.count(counters.objects, 'object')}, "
                    f"{formats.size(counters.bytes)}"
                ),
            )
        )
        if counters.last_object:
            when = (
                f" at {formats.when(counters.last_ingest_time)}"
                if counters.last_ingest_time
                else ""
            )
            rows.append(("last object", f"<code>{e(counters.last_object)}</code>{e(when)}"))
        failures = ", ".join(f"{n:,} {reason}" for reason, n in sorted(counters.failures.items()))
        rows.append(("failures", e(failures) if failures else "none"))
    html += facts("ingestion-state", rows)
    if status is not None and status.recent_failures:
        items = "".join(f"<li><code>{e(f)}</code></li>" for f in reversed(status.recent_failures))
        html += f"<p class=muted>The last failures, the newest first:</p><ul>{items}</ul>"
    return Section(
        "Ingestion",
        html,
        id="ingestion",
        live=True,
        note="The server publishes to this topic what it reads from the source, as a "
        "publisher would (its schema and transforms apply).",
    )


# ----------------------------------------------------------------- overview


def edges_section(rows: Sequence[EdgeRow], token: str | None) -> Section:
    if not rows:
        return NOTHING
    cells = [
        [
            name_link(row.name, row.kind, token),
            e(row.what),
            f"<code>{e(row.where)}</code>" if row.where else formats.NONE,
            _state(row.state),
            e(row.done) if row.done else formats.NONE,
        ]
        for row in rows
    ]
    columns = [
        Column("resource"),
        Column("kind"),
        Column("bucket, table or source"),
        Column("state"),
        Column("since start"),
    ]
    return Section(
        "Exports and ingestion",
        table("edges", columns, cells, row_names=[row.name for row in rows]),
        id="edges",
        live=True,
        note="Subscriptions the server delivers to Cloud Storage or BigQuery itself, and "
        "topics it feeds from a source.",
    )
