"""The frame of every dashboard page, and the parts its sections are made of.

A page is a title and a list of sections (:class:`Section`), one per concern (a resource's numbers,
its policies, its charts, the exactly-once acks, ...): a page module lists the sections it
shows, each a function of the page's data, so a new concern is a new section function in
that list, not an edit of the others. A section marked ``live`` is refreshed in place every
``REFRESH_SECONDS`` (``LIVE_SCRIPT``).

Every table is made by :func:`table`, which takes a header for each column and refuses a
row of another width, so no column goes without one. Everything shown goes through
``html.escape`` (:func:`e`): resource names, message data and attributes are user data,
attribute values included. One inline stylesheet and two small scripts: ``ACTIONS_SCRIPT``
sends the action forms as JSON ``fetch`` calls — same-origin, ``Content-Type:
application/json``, so they pass the REST door's browser policy, which refuses what a
cross-site page could send — and ``LIVE_SCRIPT`` refreshes the live sections.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

HOME = "/dashboard"
REFRESH_SECONDS = 5  # the sampler's period: a faster refresh would show nothing new

# The one stylesheet, inline (nothing is fetched from anywhere). Long resource names wrap
# only after a "/" (``name`` puts <wbr> there); numbers are right-aligned in tabular
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
pre{margin:.3em 0;padding:.5em;background:var(--bg);white-space:pre-wrap;max-width:70em}
summary{cursor:pointer}
.muted{color:var(--muted)}
section{margin:0}
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


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Section:
    """A part of a page: a heading (``""``: none), its HTML, and whether it refreshes."""

    title: str
    html: str
    id: str = ""
    live: bool = False
    note: str = ""  # a line under the heading, in muted text

    def render(self) -> str:
        heading = f"<h2>{e(self.title)}</h2>" if self.title else ""
        note = f"<p class=muted>{self.note}</p>" if self.note else ""
        if self.live:
            body = f"<div id=live-{e(self.id)} data-live>{self.html}</div>"
        else:
            body = self.html
        section_id = f" id=section-{e(self.id)}" if self.id else ""
        return f"<section{section_id}>{heading}{note}{body}</section>"


@dataclass(frozen=True)
class Column:
    """A table column: its header, and whether it holds numbers (right-aligned)."""

    header: str
    numeric: bool = False


def table(
    table_id: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    row_names: Sequence[str] | None = None,
    cell_classes: Sequence[str] | None = None,
) -> str:
    """A table whose every column has a header; cells are HTML (escape what is data).

    ``row_names`` marks each row with ``data-name`` (what tests and scripts find a row by);
    ``cell_classes`` adds classes to a column's cells (``backlog``)."""
    extra = list(cell_classes or [""] * len(columns))
    head = "".join(
        f"<th class=n>{e(c.header)}</th>" if c.numeric else f"<th>{e(c.header)}</th>"
        for c in columns
    )
    body = []
    for index, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(
                f"table {table_id}: a row of {len(row)} cells under {len(columns)} headers"
            )
        cells = "".join(
            f"<td{_classes(column, extra[i])}>{cell}</td>"
            for i, (column, cell) in enumerate(zip(columns, row, strict=True))
        )
        name = f" data-name='{e(row_names[index])}'" if row_names is not None else ""
        body.append(f"<tr{name}>{cells}</tr>")
    return f"<table id={e(table_id)}><tr>{head}</tr>{''.join(body)}</table>"


def _classes(column: Column, extra: str) -> str:
    names = " ".join(n for n in ("n" if column.numeric else "", extra) if n)
    if not names:
        return ""
    return f" class='{names}'" if " " in names else f" class={names}"


def facts(table_id: str, rows: Sequence[tuple[str, ...]]) -> str:
    """A two-column table of ``(what, value HTML[, the value cell's extra class])``: the
    header is on each row."""
    body = "".join(
        f"<tr><th>{e(row[0])}</th><td{_classes(Column('', numeric=True), ''.join(row[2:]))}>"
        f"{row[1]}</td></tr>"
        for row in rows
    )
    return f"<table id={e(table_id)} class=facts>{body}</table>"


def empty(element_id: str, text: str) -> str:
    """The empty state: what is not there yet and how to make it (``text`` is HTML)."""
    return f"<p class=empty-state id={e(element_id)}>{text}</p>"


def page(title: str, sections: Sequence[Section], token: str | None) -> str:
    home = link(HOME, token)
    # A section with nothing to show (an export's, on a subscription without one) is left out.
    body = "".join(section.render() for section in sections if section.html)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>{e(title)} · eoclient</title><style>{STYLE}</style></head><body>"
        f"<header><a href='{e(home)}'>eoclient reference server</a>"
        f"<span class=refresh><label><input type=checkbox id=live checked> refresh every "
        f"{REFRESH_SECONDS} s</label> <span id=updated></span></span></header>"
        f"<main><h1>{e(title)}</h1><div id=status role=status></div>{body}</main>"
        f"<script>{ACTIONS_SCRIPT}{LIVE_SCRIPT}</script></body></html>"
    )


def name(resource: str) -> str:
    """A resource name that wraps only after a "/", its last segment (the id) in bold."""
    path, _, last = resource.rpartition("/")
    wrapped = "/<wbr>".join(e(part) for part in path.split("/")) + "/<wbr>" if path else ""
    return f"<span class=path>{wrapped}</span><b>{e(last)}</b>"


def name_link(resource: str, kind: str, token: str | None) -> str:
    """A link to the page of a topic or a subscription (``kind``), titled with its name."""
    href = link(f"{HOME}/{kind}", token, name=resource)
    return (
        f"<a class=name href='{e(href)}' title='{e(resource)}' data-name='{e(resource)}'>"
        f"{name(resource)}</a>"
    )


def plain_name(resource: str) -> str:
    """A resource name without a page of its own (a snapshot, a schema)."""
    return f"<span class=name title='{e(resource)}'>{name(resource)}</span>"


def link(path: str, token: str | None, **query: str) -> str:
    params = {**query, **({"access_token": token} if token else {})}
    if not params:
        return path
    return path + "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())


def tags(values: Sequence[str], warn: Sequence[str] = ()) -> str:
    return "".join(
        f"<span class='{'tag warn' if v in warn else 'tag'}'>{e(v)}</span>" for v in values
    )
