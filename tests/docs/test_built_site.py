"""What the built site prints is what a reader can copy and follow.

``./dev docs`` checks every built page (docs/_ext/eoclient_site_checks.py): a flag printed
with an en dash, or a repository path to a page (``docs/protocol.md#...``) printed as text,
fails the build. These tests build one-page sites with the real site's settings and show
each check failing on what it exists to catch, and the docstring citations turned into
links (docs/_ext/eoclient_page_links.py).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed")

DOCS = Path(__file__).resolve().parents[2] / "docs"
SPHINX_BUILD = (sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html")


def real_setting(name: str) -> object:
    """A top-level setting of docs/conf.py, as written there."""
    for node in ast.parse((DOCS / "conf.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(name)


def build(tmp_path: Path, page: str, *, module: str = "", **settings: object) -> tuple[str, str]:
    """Build a one-page site (a process of its own, every warning an error) with the real
    site's extensions for pages, ``module`` as an importable module ``cited``; its
    warnings (empty when it succeeded) and its page."""
    source = tmp_path / "src"
    source.mkdir()
    (tmp_path / "cited.py").write_text(module)
    conf = {"smartquotes": real_setting("smartquotes"), **settings}
    (source / "conf.py").write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(DOCS / '_ext')!r}, {str(tmp_path)!r}]\n"
        'extensions = ["sphinx.ext.autodoc", "eoclient_page_links", "eoclient_site_checks"]\n'
        + "".join(f"{key} = {value!r}\n" for key, value in conf.items())
    )
    (source / "index.rst").write_text(page)
    out = tmp_path / "out"
    result = subprocess.run(
        [*SPHINX_BUILD, str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (result.returncode == 0) == (result.stderr == ""), result.stderr
    html = (out / "index.html").read_text() if (out / "index.html").exists() else ""
    return result.stderr, html


FLAGS_PAGE = """
Flags
=====

Pass --project and --max-messages 10 (prose), or ``--endpoint`` (literal).
"""


def test_the_site_prints_flags_with_two_hyphens(tmp_path: Path) -> None:
    assert real_setting("smartquotes") is False
    warnings, html = build(tmp_path, FLAGS_PAGE)
    assert warnings == ""
    assert "Pass --project and --max-messages 10" in html


def test_a_flag_printed_with_an_en_dash_fails_the_build(tmp_path: Path) -> None:
    # Docutils' smart quotes (Sphinx's default) print "--project" in prose as "–project".
    warnings, _ = build(tmp_path, FLAGS_PAGE, smartquotes=True)
    assert "a flag printed with a dash that is not a hyphen: '–project'" in warnings
    assert "'–max-messages'" in warnings
    assert "–endpoint" not in warnings  # a literal is never smartened


CITED_PAGE = "Cited\n=====\n\n.. automodule:: cited\n"
CITING_MODULE = '''
"""Retried as the official clients retry (docs/protocol.md#exactly-once-retries); the
layers are in ``docs/architecture.md``."""
'''


def test_a_docstring_citation_becomes_a_link_to_its_heading(tmp_path: Path) -> None:
    warnings, html = build(tmp_path, CITED_PAGE, module=CITING_MODULE)
    assert warnings == ""
    assert '<a class="reference external" href="protocol.html#exactly-once-retries">' in html
    assert ">Exactly-once retries</a>" in html
    assert '<a class="reference external" href="architecture.html">Architecture</a>' in html
    assert "docs/protocol.md" not in html
    assert "docs/architecture.md" not in html


def test_a_citation_of_a_heading_that_does_not_exist_fails_the_build(tmp_path: Path) -> None:
    # Put together here: tests/test_citations.py checks every citation written in the repo.
    missing = "docs/protocol.md" + "#no-such-heading"
    module = f'"""See {missing} and docs/nowhere.md."""\n'
    warnings, _ = build(tmp_path, CITED_PAGE, module=module)
    assert f"cites {missing}: no heading #no-such-heading" in warnings
    assert "cites docs/nowhere.md#: no page of the site" in warnings


def test_a_path_printed_as_text_fails_the_build(tmp_path: Path) -> None:
    page = "Paths\n=====\n\nThe rules are in ``docs/protocol.md#publish-limits``.\n"
    warnings, _ = build(tmp_path, page)
    assert (
        "a path of the repository printed as text, not as a link: "
        "'docs/protocol.md#publish-limits'" in warnings
    )
