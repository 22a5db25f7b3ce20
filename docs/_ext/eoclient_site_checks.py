"""Checks of the built pages: what a reader copies or follows must work.

Run when the HTML build has written every page (``build-finished``); each finding is a
warning, so ``./dev docs`` (every warning an error) fails:

* a flag printed with an en or em dash (``–project``, as docutils' "smart quotes" print
  ``--project``): copied into a shell, it is a wrong flag;
* a repository path to a page of these docs (``docs/protocol.md#...``) printed as text
  rather than as a link: the site has the page (docstrings get their links from
  ``eoclient_page_links``; a Markdown page links with ``[...](page.md#anchor)``);
* a line of a code block longer than 88 characters (:data:`MAX_CODE_COLUMNS`): the theme
  shows about that many beside the navigation before the block scrolls sideways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

# A dash that is not a hyphen, straight before a lowercase word, not inside a word: a flag
# whose "--" became "–" (or "—"). Prose dashes stand between words or numbers.
DASHED_FLAG = re.compile(r"(?<![\w\-–—])[–—]{1,2}[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
PAGE_PATH = re.compile(r"(?<![\w/])docs/[\w/-]+\.md(?:#[\w-]+)?")
# ruff format's and black's default line length; furo's content column shows about as
# many characters of a code block at its default font size.
MAX_CODE_COLUMNS = 88


@dataclass(frozen=True)
class Finding:
    page: str
    what: str
    text: str


class _TextOutsideLinks(HTMLParser):
    """The text of a page: outside ``<a>`` (for paths), and all of it (for dashes); the
    contents of ``<script>`` and ``<style>`` are not text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links = 0
        self.skipped = 0
        self.preformatted = 0
        self.outside_links: list[str] = []
        self.everywhere: list[str] = []
        self.code_blocks: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links += 1
        elif tag in ("script", "style"):
            self.skipped += 1
        elif tag == "pre":
            self.preformatted += 1
            self.code_blocks.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self.links = max(0, self.links - 1)
        elif tag in ("script", "style"):
            self.skipped = max(0, self.skipped - 1)
        elif tag == "pre":
            self.preformatted = max(0, self.preformatted - 1)

    def handle_data(self, data: str) -> None:
        if self.skipped:
            return
        self.everywhere.append(data)
        if not self.links:
            self.outside_links.append(data)
        if self.preformatted:
            self.code_blocks[-1].append(data)


def check_page(html: str, page: str) -> list[Finding]:
    """What is wrong with one built page (empty: nothing)."""
    parser = _TextOutsideLinks()
    parser.feed(html)
    parser.close()
    findings = [
        Finding(page, "a flag printed with a dash that is not a hyphen", match[0])
        for match in DASHED_FLAG.finditer("\n".join(parser.everywhere))
    ]
    findings += [
        Finding(page, "a path of the repository printed as text, not as a link", match[0])
        for match in PAGE_PATH.finditer("\n".join(parser.outside_links))
    ]
    findings += [
        Finding(page, f"a code block's line longer than {MAX_CODE_COLUMNS} characters", line)
        for block in parser.code_blocks
        for line in "".join(block).splitlines()
        if len(line) > MAX_CODE_COLUMNS
    ]
    return findings


def check_site(outdir: Path) -> list[Finding]:
    findings: list[Finding] = []
    for path in sorted(outdir.rglob("*.html")):
        if "_static" in path.parts or "_sources" in path.parts:
            continue
        findings += check_page(path.read_text(encoding="utf-8"), str(path.relative_to(outdir)))
    return findings


def _on_build_finished(app: Sphinx, exception: BaseException | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for finding in check_site(Path(app.outdir)):
        logger.warning("%s: %s: %r", finding.page, finding.what, finding.text)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", _on_build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
