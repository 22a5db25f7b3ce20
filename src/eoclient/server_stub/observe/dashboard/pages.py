"""The dashboard's HTML: server-rendered pages, every value escaped, charts as inline SVG.

No template engine and no JavaScript library: two pages of tables, a chart drawn as an SVG
polyline on the server, and one small script (``ACTIONS_SCRIPT``) that sends the action
buttons' requests as JSON ``fetch`` calls — same-origin, ``Content-Type:
application/json``, so they pass the REST door's browser policy (``security.py``), which
refuses what a cross-site page could send. Message data and attributes are user data:
everything goes through ``html.escape`` (``_e``), including attribute values.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote

from eoclient.server_stub.core.model import StoredMessage, SubscriptionView
from eoclient.server_stub.core.stats import SubscriptionStats, TopicStats
from eoclient.server_stub.observe.dashboard.history import Rates, Sample

PEEK_DATA_CHARS = 200  # of a message's data shown in the peek table

STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px}.muted{color:#777}form,.actions{margin:.4em 0}
#status{padding:.4em;margin:.5em 0;background:#eef6ee;display:none}
#status.error{background:#fbeaea}
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


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, body: str, token: str | None) -> str:
    home = _link("/", token)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)} · eoclient</title><style>{STYLE}</style></head><body>"
        f"<p><a href='{_e(home)}'>eoclient reference server</a></p>"
        f"<h1>{_e(title)}</h1><div id=status role=status></div>{body}"
        f"<script>{ACTIONS_SCRIPT}</script></body></html>"
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


def chart(samples: Sequence[Sample], width: int = 160, height: int = 32) -> str:
    """Backlog over time as an SVG polyline (newest on the right)."""
    if len(samples) < 2:
        return "<span class=muted>collecting…</span>"
    start, end = samples[0].at, samples[-1].at
    top = max(s.backlog for s in samples) or 1
    span = (end - start) or 1.0
    points = " ".join(
        f"{(s.at - start) / span * width:.1f},{height - s.backlog / top * (height - 2) - 1:.1f}"
        for s in samples
    )
    label = f"backlog over the last {_age(end - start)}, peak {top}"
    return (
        f"<svg width={width} height={height} role=img aria-label='{_e(label)}'>"
        f"<title>{_e(label)}</title><polyline fill=none stroke='#2a6' stroke-width=1.5 "
        f"points='{points}'/></svg>"
    )


def overview(
    topics: Iterable[tuple[TopicStats, float]],
    subscriptions: Iterable[tuple[SubscriptionStats, SubscriptionView, Rates, list[Sample]]],
    token: str | None,
) -> str:
    topic_rows = "".join(
        f"<tr><td><code>{_e(t.name)}</code></td><td class=n>{t.published_messages}</td>"
        f"<td class=n>{rate:.1f}</td></tr>"
        for t, rate in topics
    )
    sub_rows = "".join(
        f"<tr><td><a href='{_e(_link('/dashboard/subscription', token, name=s.name))}'>"
        f"<code>{_e(s.name)}</code></a></td><td><code>{_e(s.topic)}</code></td>"
        f"<td>{_e(_properties(view))}</td><td class='n backlog'>{s.undelivered_messages}</td>"
        f"<td class=n>{_e(_age(s.oldest_unacked_age))}</td><td class=n>{rates.acked:.1f}</td>"
        f"<td>{chart(samples)}</td></tr>"
        for s, view, rates, samples in subscriptions
    )
    body = (
        f"{_CREATE_FORMS}<h2>Topics</h2><table id=topics><tr><th>topic</th><th>published</th>"
        f"<th>published/s</th></tr>{topic_rows}</table>"
        "<h2>Subscriptions</h2><table id=subscriptions><tr><th>subscription</th><th>topic</th>"
        "<th>properties</th><th>backlog</th><th>oldest unacked</th><th>acked/s</th>"
        f"<th>backlog, last hour</th></tr>{sub_rows}</table>"
        "<p class=muted>Sampled every 5 s; rates over the last minute. "
        "<a href='/metrics'>/metrics</a> has the same numbers for Prometheus.</p>"
    )
    return _page("Topics and subscriptions", body, token)


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


def _properties(view: SubscriptionView) -> str:
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
    return ", ".join(shown)


def when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


def subscription_page(
    stats: SubscriptionStats,
    view: SubscriptionView,
    rates: Rates,
    samples: list[Sample],
    peeked: Sequence[tuple[StoredMessage, bool]],
    snapshots: Sequence[str],
    token: str | None,
) -> str:
    name = stats.name
    numbers = (
        f"<table id=numbers><tr><th>backlog</th><td class='n backlog'>"
        f"{stats.undelivered_messages}</td></tr>"
        f"<tr><th>oldest unacked</th><td class=n>{_e(_age(stats.oldest_unacked_age))}</td></tr>"
        f"<tr><th>leased now</th><td class=n>{stats.outstanding_messages}</td></tr>"
        f"<tr><th>delivered / acked per second</th><td class=n>{rates.delivered:.1f} / "
        f"{rates.acked:.1f}</td></tr>"
        f"<tr><th>delivered, acked, nacked, expired (since start)</th><td class=n>"
        f"{stats.delivered}, {stats.acked}, {stats.nacked}, {stats.expired}</td></tr>"
        f"<tr><th>properties</th><td>{_e(_properties(view))}</td></tr></table>"
    )
    peek_rows = "".join(
        f"<tr><td><code>{_e(m.message_id)}</code></td><td>{_e(when(m.publish_time))}</td>"
        f"<td>{_e(m.ordering_key)}</td>"
        f"<td>{_e(', '.join(f'{k}={v}' for k, v in sorted(m.attributes.items())))}</td>"
        f"<td><code>{_e(_preview(m.data))}</code></td><td>{'leased' if leased else ''}</td></tr>"
        for m, leased in peeked
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
        f"<p><code>{_e(name)}</code> on <code>{_e(stats.topic)}</code></p>{numbers}"
        f"<h2>Backlog, last hour</h2>{chart(samples, 640, 120)}"
        f"<h2>Next messages</h2><p class=muted>The oldest unacknowledged, read without "
        f"taking leases.</p><table id=peek><tr><th>id</th><th>published</th><th>ordering key"
        f"</th><th>attributes</th><th>data</th><th></th></tr>{peek_rows}</table>{actions}"
    )
    return _page("Subscription", body, token)


def _preview(data: bytes) -> str:
    text = data[: PEEK_DATA_CHARS * 4].decode("utf-8", errors="replace")
    return text if len(text) <= PEEK_DATA_CHARS else text[:PEEK_DATA_CHARS] + "…"
