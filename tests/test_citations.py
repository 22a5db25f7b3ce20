"""The rules the code cites live in the repository, and every citation resolves.

* Every ``docs/<page>.md#<anchor>`` in the code (src, tests, benchmarks, scripts,
  examples), in the README and in ``docs/*.md``, and every relative ``(page.md#anchor)`` /
  ``(#anchor)`` link inside ``docs/*.md``, names an existing page and a heading of it.
* An anchor is the heading's slug. GitHub and mkdocs compute slugs differently at the
  edges (non-ASCII letters, runs of spaces or hyphens, duplicate headings), so a cited
  heading must slug the same under both and be the only heading of its page with that
  slug: the anchor then works wherever the page is read.
* Nothing written here (``src/``, the code directories, the README, every documentation
  page) cites a document outside the repository (the research notes the rules were first
  gathered in) or explains itself by an issue number: someone who picks the project up has
  neither behind those references.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
CODE_DIRS = ("src", "tests", "benchmarks", "scripts", "examples")
# Pages meant to be cited: each heading's slug must be unique and stable on both renderers.
CITED_PAGES = ("protocol.md", "architecture.md")

# Source paths (relative to the repository, "/"-separated; a directory covers everything
# under it) that still carry forbidden citations because the helper who owns them is
# converting them right now. Exempt from the forbidden-pattern check only: their
# docs/...#anchor citations are checked like everyone else's. This list must shrink to
# empty: whoever converts a path removes it here, and test_no_stale_exemptions fails while
# a listed path is already clean (or gone). A file is accounted to the most specific entry
# that covers it, so one owner's file inside another owner's directory has its own entry.
NOT_YET_CONVERTED: tuple[str, ...] = ()

# Case-insensitive. The first five are the research notes outside the repository (by name
# or by their directory); the last catches "issue 14", "issue #14", "issues 12", "Issue 14.2".
FORBIDDEN = re.compile(
    r"wire-contract|client-anchors|architecture principle|spark-notes|/work/shared"
    r"|\bissues? #?\d+",
    re.IGNORECASE,
)

# docs/<page>.md#<anchor> anywhere in a file (code comments, docstrings, Markdown).
DOCS_CITATION = re.compile(r"\bdocs/([\w./-]+?\.md)#([\w-]+)")
# A Markdown link target with an anchor, inside a docs page: (page.md#anchor) or (#anchor).
MARKDOWN_ANCHOR_LINK = re.compile(r"\]\(([^)\s#]*)#([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")


# ------------------------------------------------------------------ slugs


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): lowercase, drop every character that
    is not a letter, digit, mark, underscore, hyphen or space, then each space becomes a
    hyphen (runs are not collapsed)."""
    text = _heading_text(heading).lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in ("L", "N", "M"))
    return kept.replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """mkdocs' anchor (Python-Markdown's toc ``slugify``): non-ASCII dropped, then every
    character but word characters, spaces and hyphens, then runs of spaces and hyphens
    collapse into one hyphen."""
    text = unicodedata.normalize("NFKD", _heading_text(heading))
    text = text.encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _heading_text(heading: str) -> str:
    # Inline code, emphasis and link markup do not reach the rendered text's slug.
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return text.replace("`", "").replace("*", "")


@dataclass(frozen=True)
class Heading:
    line: int
    text: str

    @property
    def slug(self) -> str:
        return github_slug(self.text)


def headings(markdown: str) -> list[Heading]:
    """The ATX headings of a Markdown text, outside fenced code blocks."""
    found: list[Heading] = []
    fence: str | None = None
    for number, line in enumerate(markdown.splitlines(), start=1):
        opening = FENCE.match(line)
        if opening:
            marker = opening.group(1)
            if fence is None:
                fence = marker
            elif marker == fence:
                fence = None
            continue
        if fence is not None:
            continue
        match = ATX_HEADING.match(line)
        if match:
            found.append(Heading(number, match.group(2)))
    return found


# --------------------------------------------------------------- citations


@dataclass(frozen=True)
class Citation:
    source: Path
    line: int
    page: Path
    anchor: str

    def __str__(self) -> str:
        where = self.source.relative_to(REPO) if self.source.is_relative_to(REPO) else self.source
        return f"{where}:{self.line}: {self.page.name}#{self.anchor}"


def citations_in(path: Path, repo: Path) -> Iterator[Citation]:
    """Every anchored reference to a docs page in ``path``."""
    text = path.read_text(encoding="utf-8")
    in_docs = path.parent == repo / "docs" and path.suffix == ".md"
    for number, line in enumerate(text.splitlines(), start=1):
        for match in DOCS_CITATION.finditer(line):
            yield Citation(path, number, repo / "docs" / match.group(1), match.group(2))
        if in_docs:
            for match in MARKDOWN_ANCHOR_LINK.finditer(line):
                target, anchor = match.groups()
                if target.startswith(("http://", "https://")):
                    continue
                page = path if not target else (path.parent / target).resolve()
                yield Citation(path, number, page, anchor)


def citing_files(repo: Path) -> Iterator[Path]:
    for directory in CODE_DIRS:
        root = repo / directory
        if root.is_dir():
            for path in sorted(root.rglob("*")):
                if path.suffix in (".py", ".md") and "__pycache__" not in path.parts:
                    yield path
    readme = repo / "README.md"
    if readme.is_file():
        yield readme
    yield from sorted((repo / "docs").glob("*.md"))


def citation_problems(citations: Iterable[Citation]) -> list[str]:
    """What is wrong with each citation that does not resolve to one stable heading."""
    problems: list[str] = []
    pages: dict[Path, list[Heading]] = {}
    for citation in citations:
        if not citation.page.is_file():
            problems.append(f"{citation}: no such page")
            continue
        if citation.page not in pages:
            pages[citation.page] = headings(citation.page.read_text(encoding="utf-8"))
        matching = [h for h in pages[citation.page] if h.slug == citation.anchor]
        if not matching:
            problems.append(f"{citation}: no heading has this anchor")
        elif len(matching) > 1:
            lines = ", ".join(str(h.line) for h in matching)
            problems.append(f"{citation}: ambiguous, headings on lines {lines} share it")
        elif mkdocs_slug(matching[0].text) != citation.anchor:
            problems.append(
                f"{citation}: mkdocs makes {mkdocs_slug(matching[0].text)!r} of this heading; "
                "reword it so both renderers agree"
            )
    return problems


# ------------------------------------------------------- forbidden patterns


def written_files(repo: Path) -> Iterator[Path]:
    """What people write and read here: every file under src, the code and Markdown the
    citations are checked in, and every page of the documentation (guides included). Not
    this module, whose patterns and examples are the forbidden words themselves."""
    this = Path(__file__).resolve()
    seen: set[Path] = set()
    candidates = [
        *sorted((repo / "src").rglob("*")),
        *citing_files(repo),
        *sorted((repo / "docs").rglob("*.md")),
    ]
    for path in candidates:
        if path in seen or path.resolve() == this:
            continue
        seen.add(path)
        yield path


def forbidden_hits(repo: Path) -> dict[str, list[str]]:
    """Written file (relative, "/"-separated) -> its lines with a forbidden pattern."""
    hits: dict[str, list[str]] = {}
    for path in written_files(repo):
        if not path.is_file() or _generated(path):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (images and the like)
        lines = [
            f"{number}: {line.strip()}"
            for number, line in enumerate(text.splitlines(), start=1)
            if FORBIDDEN.search(line)
        ]
        if lines:
            hits[path.relative_to(repo).as_posix()] = lines
    return hits


def _generated(path: Path) -> bool:
    # Build by-products (bytecode, the egg-info pip writes into src/) are not sources.
    return any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)


def exempting_entry(path: str, entries: Iterable[str]) -> str | None:
    """The most specific entry covering ``path`` (itself, or a directory above it)."""
    covering = [e for e in entries if path == e or path.startswith(e.rstrip("/") + "/")]
    return max(covering, key=len) if covering else None


# -------------------------------------------------------------------- tests


def test_every_docs_citation_resolves() -> None:
    citations = [c for path in citing_files(REPO) for c in citations_in(path, REPO)]
    problems = citation_problems(citations)
    assert not problems, "citations that do not resolve:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", CITED_PAGES)
def test_cited_pages_have_unique_stable_anchors(page: str) -> None:
    found = headings((DOCS / page).read_text(encoding="utf-8"))
    assert found, f"docs/{page} has no headings"
    duplicates = [slug for slug, n in Counter(h.slug for h in found).items() if n > 1]
    assert not duplicates, f"docs/{page}: headings share anchors {duplicates}"
    unstable = [
        f"line {h.line}: {h.text!r} -> GitHub {h.slug!r}, mkdocs {mkdocs_slug(h.text)!r}"
        for h in found
        if h.slug != mkdocs_slug(h.text)
    ]
    assert not unstable, f"docs/{page}: anchors differ between renderers:\n" + "\n".join(unstable)


def test_nothing_cites_outside_the_repository() -> None:
    offending = {
        path: lines
        for path, lines in forbidden_hits(REPO).items()
        if exempting_entry(path, NOT_YET_CONVERTED) is None
    }
    report = "\n".join(f"{path}\n    " + "\n    ".join(lines) for path, lines in offending.items())
    assert not offending, (
        "cite docs/protocol.md#<anchor> or docs/architecture.md#<anchor> instead of the "
        "research notes, and say what a thing is rather than which issue asked for it:\n" + report
    )


def test_no_stale_exemptions() -> None:
    still_needed = {exempting_entry(path, NOT_YET_CONVERTED) for path in forbidden_hits(REPO)}
    stale = [entry for entry in NOT_YET_CONVERTED if entry not in still_needed]
    assert not stale, (
        f"already clean (or gone): remove {stale} from NOT_YET_CONVERTED in {Path(__file__).name}"
    )
    assert len(set(NOT_YET_CONVERTED)) == len(NOT_YET_CONVERTED), "duplicate entries"


# The checks themselves, on planted files: a checker that cannot fail proves nothing.


def test_slugs_follow_both_renderers() -> None:
    assert github_slug("Ack ids and generations") == "ack-ids-and-generations"
    assert github_slug("Exactly-once error details") == "exactly-once-error-details"
    assert github_slug("The `fields` parameter (REST)") == "the-fields-parameter-rest"
    assert mkdocs_slug("The `fields` parameter (REST)") == "the-fields-parameter-rest"
    # Where they part: runs of spaces, and non-ASCII letters.
    assert github_slug("a - b") == "a---b"
    assert mkdocs_slug("a - b") == "a-b"
    assert github_slug("Größe") == "größe"
    assert mkdocs_slug("Größe") == "groe"


def test_headings_inside_code_fences_are_not_headings() -> None:
    text = "# Title\n\n```bash\n# a shell comment\n```\n\n## Real one\n"
    assert [h.text for h in headings(text)] == ["Title", "Real one"]


def _plant(tmp_path: Path, page: str, citing_line: str) -> list[str]:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "rules.md").write_text(page, encoding="utf-8")
    (tmp_path / "src").mkdir()
    source = tmp_path / "src" / "module.py"
    source.write_text(citing_line + "\n", encoding="utf-8")
    return citation_problems(citations_in(source, tmp_path))


def test_a_planted_bad_citation_is_reported(tmp_path: Path) -> None:
    page = "# Rules\n\n## Ack ids and generations\n\n## Twice\n\n## Twice\n\n## Größe\n"
    cite = "docs/" + "rules.md#"  # split so this file holds no citation of its own
    assert _plant(tmp_path, page, f"# ({cite}ack-ids-and-generations)") == []
    for anchor, why in (
        ("ack-id-and-generations", "no heading has this anchor"),
        ("twice", "ambiguous"),
        ("größe", "mkdocs makes"),
    ):
        for child in tmp_path.iterdir():
            for path in sorted(child.iterdir()):
                path.unlink()
            child.rmdir()
        [problem] = _plant(tmp_path, page, f"# ({cite}{anchor})")
        assert why in problem
    other = "docs/" + "missing.md#x"
    source = tmp_path / "src" / "module.py"
    source.write_text(f"# {other}\n", encoding="utf-8")
    [problem] = citation_problems(citations_in(source, tmp_path))
    assert "no such page" in problem


def test_relative_links_inside_docs_are_checked(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "rules.md").write_text("# Rules\n\n## Seek\n", encoding="utf-8")
    guide = tmp_path / "docs" / "guide.md"
    guide.write_text(
        "# Guide\n\nSee [seek](rules.md#seek), [here](#guide), [gone](rules.md#sneak) and "
        "[web](https://example.com/page#frag).\n",
        encoding="utf-8",
    )
    problems = citation_problems(citations_in(guide, tmp_path))
    [problem] = problems
    assert "rules.md#sneak" in problem


def test_forbidden_patterns_and_exemptions(tmp_path: Path) -> None:
    package = tmp_path / "src" / "pkg"
    (package / "inner").mkdir(parents=True)
    notes = "wire-" + "contract"  # split so this file is not itself a hit
    (package / "a.py").write_text(f"# ({notes} §2.4)\n", encoding="utf-8")
    (package / "inner" / "b.py").write_text("# added for " + "Issue 14.2\n", encoding="utf-8")
    (package / "clean.py").write_text("# docs/protocol.md#ack-ids-and-generations\n")
    (tmp_path / "docs" / "guides").mkdir(parents=True)
    (tmp_path / "docs" / "guides" / "page.md").write_text(
        "Sources: [wc §1] is `/work/" + "shared/reference/x.md`.\n", encoding="utf-8"
    )
    (tmp_path / "docs" / "clean.md").write_text("See (protocol.md#seek).\n", encoding="utf-8")
    hits = forbidden_hits(tmp_path)
    assert sorted(hits) == ["docs/guides/page.md", "src/pkg/a.py", "src/pkg/inner/b.py"]
    entries = ("src/pkg", "src/pkg/inner", "src/pkg/clean.py")
    assert exempting_entry("src/pkg/inner/b.py", entries) == "src/pkg/inner"
    assert exempting_entry("src/pkg/a.py", entries) == "src/pkg"
    assert exempting_entry("src/pkgx/a.py", entries) is None
    used = {exempting_entry(path, entries) for path in hits if path.startswith("src/")}
    assert [e for e in entries if e not in used] == ["src/pkg/clean.py"]
