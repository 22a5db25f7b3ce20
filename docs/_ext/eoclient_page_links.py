"""A repository path to a page of these docs, in a docstring, becomes a link to that page.

The code cites its rules as ``docs/<page>.md#<anchor>``
(docs/architecture.md#comments-give-reasons): in an editor or on GitHub that is where the
rule is. On the site the same words would be a
path the reader cannot follow, so the API reference shows the cited heading's title, linked
to its place on the site (``Exactly-once retries`` for ``docs/protocol.md#exactly-once-retries``).

A path to a page that is not part of the site, or an anchor that is no heading of the page,
is a warning (an error under ``./dev docs``): a citation that no longer resolves is found
when the site is built, not by a reader.
"""

from __future__ import annotations

import functools
import posixpath
import re
from pathlib import Path
from typing import Any

from myst_parser.slugs import github_slugify
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

DOCS = Path(__file__).resolve().parent.parent

# docs/<page>.md, optionally #<anchor>, optionally inside ``...`` (the literal goes too).
PAGE_PATH = re.compile(
    r"(?P<open>``)?(?<![\w/])docs/(?P<page>[\w/-]+)\.md(?:#(?P<anchor>[\w-]+))?(?P<close>``)?"
)
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# What reST would read as markup inside a link's text.
MARKUP = re.compile(r"[`*|<>\\]")


@functools.cache
def headings(page: str) -> dict[str, str]:
    """A page's headings: slug (as MyST makes the anchors) -> title; ``""`` -> the page's
    title. Empty when the page does not exist."""
    path = DOCS / f"{page}.md"
    if not path.is_file():
        return {}
    found: dict[str, str] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else ATX_HEADING.match(line)
        if match is None:
            continue
        title = match[2]
        found.setdefault(github_slugify(title), title)
        found.setdefault("", title)
    return found


def link_text(title: str) -> str:
    return MARKUP.sub("", title).strip()


def _replacement(docname: str, where: str, match: re.Match[str]) -> str:
    page, anchor = match["page"], match["anchor"] or ""
    titles = headings(page)
    if anchor not in titles:
        problem = "no page of the site" if not titles else f"no heading #{anchor} in it"
        logger.warning("%s cites docs/%s.md#%s: %s", where, page, anchor, problem)
        return match[0]
    url = posixpath.relpath(page, posixpath.dirname(docname) or ".") + ".html"
    if anchor:
        url += f"#{anchor}"
    # Literal backticks around the path: only the one pair that wrapped it goes.
    before = "" if match["open"] and match["close"] else (match["open"] or "")
    after = "" if match["open"] and match["close"] else (match["close"] or "")
    return f"{before}`{link_text(titles[anchor])} <{url}>`__{after}"


def link_page_paths(
    app: Sphinx, what: Any, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """autodoc-process-docstring: every docs/<page>.md[#anchor] becomes a link."""
    docname = app.env.docname
    for index, line in enumerate(lines):
        if "docs/" in line:
            lines[index] = PAGE_PATH.sub(
                lambda match: _replacement(docname, f"the docstring of {name}", match), line
            )


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.autodoc")
    # After napoleon (priority 500): it reads sections, the links are made in its output.
    app.connect("autodoc-process-docstring", link_page_paths, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
