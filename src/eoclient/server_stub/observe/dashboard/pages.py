"""The dashboard's HTML: server-rendered pages, every value escaped, charts as inline SVG.

No template engine and no JavaScript library: three kinds of page (the overview, a topic, a
subscription) of tables and charts drawn on the server (``charts.py``), one inline
stylesheet, and two small scripts: ``ACTIONS_SCRIPT`` sends the action buttons' requests as
JSON ``fetch`` calls — same-origin, ``Content-Type: application/json``, so they pass the
REST door's browser policy, which refuses what a cross-site page could send — and
``LIVE_SCRIPT`` refreshes the numbers and charts in place. Resource names, message data and
attributes are user data: everything goes through ``html.escape`` (``_e``), including
attribute values.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote

from eoclient.server_stub.core.model import (
    DELETED_TOPIC,
    StoredMessage,
    SubscriptionView,
    TopicView,
)
from eoclient.server_stub.core.stats import SubscriptionStats, TopicStats
from eoclient.server_stub.observe.dashboard.charts import (
    AGE,
    MESSAGES,
    PER_SECOND,
    Series,
    line_chart,
    sparkline,
)
from eoclient.server_stub.observe.dashboard.stats_history import Point, Rates, Sample

PEEK_DATA_CHARS = 200  # of a message's data shown in the peek table
REFRESH_SECONDS = 5  # the sampler's period: a faster refresh would show nothing new

# The one stylesheet, inline (nothing is fetched from anywhere). Long resource names wrap
# only after a "/" (``_name`` puts <wbr> there); numbers are right-aligned in tabular
# figures; the charts' colours are the lines' classes.
STYLE = """
:root{--fg:#1d2330;--muted:#667085;--line:#d0d5dd;--bg:#f7f8fa;--accent:#1769aa;
--ok:#e8f5ec;--bad:#fdecec;--l1:#1769aa;--l2:#d9480f}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:var(--fg);
background:#fff}
header{display:flex;gap:1.5em;align-items:center;padding:.6em 1.5em;background:var(--fg);
color:#fff}
header a{color:#fff;text-decoration:none;font-weight:600}
header .refresh{margin-left:auto;font-size:12px;color:#cfd4dc}
main{padding:0 1.5em 2em;max-width:1200px}
h1{font-size:1.35em;margin:.9em 0 .2em}h2{font-size:1.05em;margin:1.6em 0 .4em}
a{color:var(--accent)}
table{border-collapse:collapse;margin:.4em 0;width:100%}
td,th{border-bottom:1px solid var(--line);padding:.35em .6em;text-align:left;vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase;
letter-spacing:.03em;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.facts{width:auto}table.facts th{text-transform:none;font-size:13px;letter-spacing:0}
.name{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px;
overflow-wrap:normal;word-break:normal}
.name .path{color:var(--muted)}.name b{font-weight:600;color:var(--fg);white-space:nowrap}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.muted{color:var(--muted)}
.empty-state{padding:1em;border:1px dashed var(--line);background:var(--bg);color:var(--muted)}
.tag{display:inline-block;padding:0 .45em;margin:0 .25em .15em 0;border-radius:3px;
background:var(--bg);border:1px solid var(--line);font-size:12px;white-space:nowrap}
.tag.warn{background:var(--bad);border-color:#f5b5b5}
.charts{display:flex;flex-wrap:wrap;gap:1em}
figure.chart{display:inline-block;margin:0;padding:.5em .6em;border:1px solid var(--line);
border-radius:4px}
figure.chart figcaption{font-weight:600;font-size:13px}
figure.chart svg{display:block;max-width:100%;height:auto}
svg .plot{fill:var(--bg);stroke:var(--line)}svg .grid{stroke:#e4e7ec;stroke-width:1}
svg .tick,svg .legend{font-size:11px;fill:var(--muted)}svg .tick.y{text-anchor:end}
svg .tick.x{text-anchor:middle}
svg .axis-label{font-size:11px;fill:var(--fg);text-anchor:middle}
svg polyline{fill:none;stroke-width:1.8}svg .line1{stroke:var(--l1)}svg .line2{stroke:var(--l2)}
svg circle.line1{fill:var(--l1)}svg circle.line2{fill:var(--l2)}
svg rect.key.line1{fill:var(--l1)}svg rect.key.line2{fill:var(--l2)}
svg.spark polyline{stroke-width:1.5}
form,.actions{margin:.5em 0}
input,select,button{font:inherit}
input[type=text],input:not([type]),select{padding:.2em .4em;border:1px solid var(--line);
border-radius:3px}
button{padding:.25em .8em;border:1px solid var(--accent);background:var(--accent);color:#fff;
border-radius:3px;cursor:pointer}
#status{padding:.5em .8em;margin:.8em 0;background:var(--ok);display:none;border-radius:3px}
#status.error{background:var(--bad)}
"""

# Sends each action form as JSON to the dashboard's action endpoint, then reloads. The
# access token (``?access_token=``, for servers with --auth-token-file) is forwarded.
ACTIONS_SCRIPT = """
const token = new URLSearchParams(location.search).get('access_token');
for (const form of document.querySelectorAll('form[data-action]')) {
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = Object.fromEntries(new FormData(form));
    body.action = form.dataset.action;
    if (form.dataset.confirm && !confirm(form.dataset.confirm)) return;
    const headers = {'Content-Type': 'application/json'};
    if (token) headers['Authorization'] = 'Bearer ' + token;
    const answer = await fetch('/dashboard/action', {
      method: 'POST', headers, body: JSON.stringify(body)});
    const result = await answer.json();
    const status = document.getElementById('status');
    status.textContent = result.message || (result.error && result.error.message);
    status.className = answer.ok ? '' : 'error';
    status.style.display = 'block';
    if (answer.ok) setTimeout(() => location.reload(), 800);
  });
}
"""

# Refreshes the page's numbers, tables and charts (the elements marked data-live) every
# REFRESH_SECONDS by fetching the same page and swapping only their contents: what the
# user typed in a form, the scroll position and the focus stay as they were. The switch is
# remembered for the browser tab (sessionStorage); a hidden tab does not refresh.
LIVE_SCRIPT = """
const live = document.getElementById('live');
const updated = document.getElementById('updated');
live.checked = sessionStorage.getItem('eoclient-live') !== 'off';
live.addEventListener('change', () =>
  sessionStorage.setItem('eoclient-live', live.checked ? 'on' : 'off'));
async function refresh() {
  if (!live.checked || document.hidden) return;
  try {
    const headers = token ? {'Authorization': 'Bearer ' + token} : {};
    const answer = await fetch(location.href, {headers, cache: 'no-store'});
    if (!answer.ok) throw new Error('HTTP ' + answer.status);
    const fresh = new DOMParser().parseFromString(await answer.text(), 'text/html');
    for (const region of document.querySelectorAll('[data-live]')) {
      const next = fresh.getElementById(region.id);
      if (next && next.innerHTML !== region.innerHTML) region.innerHTML = next.innerHTML;
    }
    updated.textContent = 'updated ' + new Date().toLocaleTimeString();
    updated.className = '';
  } catch (error) {
    updated.textContent = 'not updated: ' + error.message;
    updated.className = 'error';
  }
}
setInterval(refresh, REFRESH_MS);
""".replace("REFRESH_MS", str(REFRESH_SECONDS * 1000))


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, body: str, token: str | None) -> str:
    home = _link("/", token)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)} · eoclient</title><style>{STYLE}</style></head><body>"
        f"<header><a href='{_e(home)}'>eoclient reference server</a>"
        f"<span class=refresh><label><input type=checkbox id=live checked> refresh every "
        f"{REFRESH_SECONDS} s</label> <span id=updated></span></span></header>"
        f"<main><h1>{_e(title)}</h1><div id=status role=status></div>{body}</main>"
        f"<script>{ACTIONS_SCRIPT}{LIVE_SCRIPT}</script></body></html>"
    )


def _name(name: str) -> str:
    """A resource name that wraps only after a "/", its last segment (the id) in bold."""
    path, _, last = name.rpartition("/")
    wrapped = "/<wbr>".join(_e(part) for part in path.split("/")) + "/<wbr>" if path else ""
    return f"<span class=path>{wrapped}</span><b>{_e(last)}</b>"


def _name_link(name: str, kind: str, token: str | None) -> str:
    """A link to the page of a topic or a subscription (``kind``), titled with its name."""
    href = _link(f"/dashboard/{kind}", token, name=name)
    return (
        f"<a class=name href='{_e(href)}' title='{_e(name)}' data-name='{_e(name)}'>"
        f"{_name(name)}</a>"
    )


def _link(path: str, token: str | None, **query: str) -> str:
    params = {**query, **({"access_token": token} if token else {})}
    if not params:
        return path
    return path + "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())


def _age(seconds: float) -> str:
    if seconds <= 0:
        return "–"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def overview(
    topics: Iterable[tuple[TopicStats, float, int]],
    subscriptions: Iterable[tuple[SubscriptionStats, SubscriptionView, Rates, list[Sample]]],
    token: str | None,
) -> str:
    """``/``: every topic (with its publish rate and number of subscriptions) and every
    subscription (properties, backlog, oldest unacked age, ack rate, the last hour)."""
    topic_rows = "".join(
        f"<tr data-name='{_e(t.name)}'><td>{_name_link(t.name, 'topic', token)}</td>"
        f"<td class=n>{t.published_messages}</td><td class=n>{rate:.1f}</td>"
        f"<td class=n>{subscription_count}</td></tr>"
        for t, rate, subscription_count in topics
    )
    sub_rows = "".join(
        f"<tr data-name='{_e(s.name)}'><td>{_name_link(s.name, 'subscription', token)}</td>"
        f"<td>{_topic_cell(s.topic, token)}</td>"
        f"<td>{_tags(view)}</td><td class='n backlog'>{s.undelivered_messages}</td>"
        f"<td class=n>{_e(_age(s.oldest_unacked_age))}</td><td class=n>{rates.acked:.1f}</td>"
        f"<td>{sparkline([(x.at, x.backlog) for x in samples], 'backlog (messages)')}</td></tr>"
        for s, view, rates, samples in subscriptions
    )
    topics_table = (
        "<table id=topics><tr><th>topic</th><th class=n>published</th>"
        f"<th class=n>published/s</th><th class=n>subscriptions</th></tr>{topic_rows}</table>"
        if topic_rows
        else "<p class=empty-state id=no-topics>No topics yet. Create one below, or with "
        "<code>eoclient topics create ID</code> or any client.</p>"
    )
    subscriptions_table = (
        "<table id=subscriptions><tr><th>subscription</th><th>topic</th>"
        "<th>properties</th><th class=n>backlog</th><th class=n>oldest unacked</th>"
        f"<th class=n>acked/s</th><th>backlog, last hour</th></tr>{sub_rows}</table>"
        if sub_rows
        else "<p class=empty-state id=no-subscriptions>No subscriptions yet. Create one "
        "on a topic below, or with <code>eoclient subscriptions create ID --topic TOPIC"
        "</code>.</p>"
    )
    body = (
        f"<h2>Topics</h2><div id=live-topics data-live>{topics_table}</div>"
        f"<h2>Subscriptions</h2><div id=live-subscriptions data-live>{subscriptions_table}"
        "</div><p class=muted>Counts since the server started; rates over the last minute; "
        "the server samples every 5 s. <a href='/metrics'>/metrics</a> has the same numbers "
        f"for Prometheus.</p>{_CREATE_FORMS}"
    )
    return _page("Topics and subscriptions", body, token)


def _topic_cell(topic: str, token: str | None) -> str:
    if topic == DELETED_TOPIC:
        return "<span class='tag warn'>topic deleted</span>"
    return _name_link(topic, "topic", token)


_CREATE_FORMS = (
    "<h2>Try it</h2>"
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


def _properties(view: SubscriptionView) -> list[str]:
    config = view.config
    shown = [f"ack deadline {config.ack_deadline_seconds} s"]
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


def _tags(view: SubscriptionView) -> str:
    return "".join(
        f"<span class='{'tag warn' if p == 'DETACHED' else 'tag'}'>{_e(p)}</span>"
        for p in _properties(view)
    )


def when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


def subscription_page(
    stats: SubscriptionStats,
    view: SubscriptionView,
    rates: Rates,
    samples: list[Sample],
    rate_series: tuple[list[Point], list[Point]],
    peeked: Sequence[tuple[StoredMessage, bool]],
    snapshots: Sequence[str],
    token: str | None,
) -> str:
    """``/dashboard/subscription``: its numbers, three charts, the next messages, actions."""
    name = stats.name
    numbers = (
        f"<table id=numbers class=facts><tr><th>backlog</th><td class='n backlog'>"
        f"{stats.undelivered_messages}</td></tr>"
        f"<tr><th>oldest unacked</th><td class=n>{_e(_age(stats.oldest_unacked_age))}</td></tr>"
        f"<tr><th>leased now</th><td class=n>{stats.outstanding_messages}</td></tr>"
        f"<tr><th>delivered / acked per second</th><td class=n>{rates.delivered:.1f} / "
        f"{rates.acked:.1f}</td></tr>"
        f"<tr><th>delivered, acked, nacked, expired (since start)</th><td class=n>"
        f"{stats.delivered}, {stats.acked}, {stats.nacked}, {stats.expired}</td></tr>"
        f"<tr><th>properties</th><td>{_tags(view)}</td></tr></table>"
    )
    delivered, acked = rate_series
    charts_html = (
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
    peek_rows = "".join(
        f"<tr><td><code>{_e(m.message_id)}</code></td><td>{_e(when(m.publish_time))}</td>"
        f"<td>{_e(m.ordering_key)}</td>"
        f"<td>{_e(', '.join(f'{k}={v}' for k, v in sorted(m.attributes.items())))}</td>"
        f"<td><code>{_e(_preview(m.data))}</code></td><td>{'leased' if leased else ''}</td></tr>"
        for m, leased in peeked
    )
    peek = (
        "<table id=peek><tr><th>id</th><th>published</th><th>ordering key</th>"
        f"<th>attributes</th><th>data</th><th></th></tr>{peek_rows}</table>"
        if peek_rows
        else "<p class=empty-state id=peek>Nothing to deliver: every message is acknowledged.</p>"
    )
    snapshot_options = "".join(f"<option>{_e(s)}</option>" for s in snapshots)
    hidden = f"<input type=hidden name=subscription value='{_e(name)}'>"
    actions = (
        "<h2>Actions</h2>"
        f"<form data-action=seek-time id=seek-time>{hidden}<label>Seek to time "
        "<input name=time type=datetime-local step=1 required></label> (UTC) "
        "<button>Seek</button></form>"
        + (
            f"<form data-action=seek-snapshot id=seek-snapshot>{hidden}<label>Seek to snapshot "
            f"<select name=snapshot>{snapshot_options}</select></label> "
            "<button>Seek</button></form>"
            if snapshots
            else "<p class=muted>No snapshot of this topic to seek to.</p>"
        )
        + "<form data-action=purge id=purge "
        f"data-confirm='Acknowledge every message of {_e(name)}?'>{hidden}"
        "<button>Purge (seek to now)</button></form>"
        f"<form data-action=skip id=skip>{hidden}<label>Skip messages by id "
        "<input name=message_ids placeholder='1, 2, 3' required></label> <button>Skip</button>"
        "</form>"
        "<form data-action=detach id=detach "
        f"data-confirm='Detach {_e(name)} from its topic?'>{hidden}<button>Detach</button></form>"
    )
    body = (
        f"<p class=name>{_name(name)}</p><p>on {_topic_cell(stats.topic, token)}</p>"
        f"<div id=live-numbers data-live>{numbers}</div>"
        f"<h2>The last hour</h2><div id=live-charts data-live>{charts_html}</div>"
        "<h2>Next messages</h2><p class=muted>The oldest unacknowledged, read without "
        f"taking leases.</p><div id=live-peek data-live>{peek}</div>{actions}"
    )
    return _page("Subscription", body, token)


def topic_page(
    stats: TopicStats,
    view: TopicView,
    subscriptions: Sequence[SubscriptionStats],
    publish_rate: float,
    rate_series: list[Point],
    token: str | None,
) -> str:
    """``/dashboard/topic``: what was published, its publish rate over time, its
    subscriptions' backlogs, and a form to publish to it."""
    config = view.config
    retention = (
        _age(config.message_retention_duration) if config.message_retention_duration else "–"
    )
    labels = "".join(
        f"<span class=tag>{_e(k)}={_e(v)}</span>" for k, v in sorted(config.labels.items())
    )
    rows = [
        ("published (since start)", f"{stats.published_messages}"),
        ("published per second", f"{publish_rate:.1f}"),
        ("publish requests, bytes", f"{stats.publish_requests}, {stats.published_bytes}"),
    ]
    if stats.retained_messages is not None:
        rows.append(("retained by its policy", f"{stats.retained_messages} messages"))
    if stats.held_publishes or stats.refused_publishes:
        rows.append(
            ("backlog quota: held, refused", f"{stats.held_publishes}, {stats.refused_publishes}")
        )
    numbers = (
        "<table id=numbers class=facts>"
        + "".join(f"<tr><th>{_e(k)}</th><td class=n>{_e(v)}</td></tr>" for k, v in rows)
        + f"<tr><th>message retention</th><td class=n>{_e(retention)}</td></tr>"
        + f"<tr><th>labels</th><td>{labels or '–'}</td></tr></table>"
    )
    sub_rows = "".join(
        f"<tr data-name='{_e(s.name)}'><td>{_name_link(s.name, 'subscription', token)}</td>"
        f"<td class='n backlog'>{s.undelivered_messages}</td>"
        f"<td class=n>{_e(_age(s.oldest_unacked_age))}</td></tr>"
        for s in subscriptions
    )
    subscriptions_table = (
        "<table id=subscriptions><tr><th>subscription</th><th class=n>backlog</th>"
        f"<th class=n>oldest unacked</th></tr>{sub_rows}</table>"
        if sub_rows
        else "<p class=empty-state id=no-subscriptions>No subscription on this topic: "
        "what is published now reaches nobody.</p>"
    )
    chart_html = line_chart(
        "Published", PER_SECOND, [Series("published", rate_series)], chart_id="chart-published"
    )
    publish_form = (
        f"<h2>Publish</h2><form data-action=publish id=publish>"
        f"<input type=hidden name=topic value='{_e(stats.name)}'>"
        "<label>data <input name=data size=40></label> "
        "<label>ordering key <input name=ordering_key size=12></label> "
        "<button>Publish</button></form>"
    )
    body = (
        f"<p class=name>{_name(stats.name)}</p>"
        f"<div id=live-numbers data-live>{numbers}</div>"
        f"<h2>The last hour</h2><div id=live-charts data-live>{chart_html}</div>"
        f"<h2>Subscriptions</h2><div id=live-subscriptions data-live>{subscriptions_table}"
        f"</div>{publish_form}"
    )
    return _page("Topic", body, token)


def _preview(data: bytes) -> str:
    text = data[: PEEK_DATA_CHARS * 4].decode("utf-8", errors="replace")
    return text if len(text) <= PEEK_DATA_CHARS else text[:PEEK_DATA_CHARS] + "…"
