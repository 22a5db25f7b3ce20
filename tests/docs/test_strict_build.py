"""The documentation build is strict: what it must refuse, it refuses.

``./dev docs`` (and ``./dev test``) build the real site with every warning an error. These
tests build small sites with the same extension (docs/_ext/eoclient_sphinx.py) and check
that a reference to nothing, a public name no page documents and an undocumented fixture
each produce the warning that fails that build, and that names written the way users write
them (``eoclient.AckResult`` for a class documented elsewhere) resolve.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed")

DOCS = Path(__file__).resolve().parents[2] / "docs"

SPHINX_BUILD = (sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html")
CONF = f"""
import sys
sys.path.insert(0, {str(DOCS / "_ext")!r})
extensions = ["eoclient_sphinx"]
nitpicky = True
autodoc_default_options = {{"members": True, "undoc-members": True}}
eoclient_public_modules = ("eoclient.errors",)
eoclient_fixture_modules = ()
"""


def build(tmp_path: Path, page: str, **conf: object) -> tuple[str, Path]:
    """Build a one-page site as ``./dev docs`` builds the real one (a process of its own,
    every warning an error); its warnings (empty when it succeeded) and its output."""
    source = tmp_path / "src"
    source.mkdir()
    extra = "".join(f"{key} = {value!r}\n" for key, value in conf.items())
    (source / "conf.py").write_text(CONF + extra)
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
    return result.stderr, out


ERRORS_PAGE = """
Errors
======

.. automodule:: eoclient.errors
"""


def test_a_reference_to_a_name_that_does_not_exist_fails(tmp_path: Path) -> None:
    warnings, _ = build(tmp_path, ERRORS_PAGE + "\nSee :class:`eoclient.errors.NoSuchError`.\n")
    assert "reference target not found: eoclient.errors.NoSuchError" in warnings


def test_names_resolve_by_the_object_they_denote(tmp_path: Path) -> None:
    page = (
        ERRORS_PAGE
        + "\n.. autoclass:: eoclient.AckResult\n"
        + "\nBy their paths: :class:`eoclient.subscriber.AckResult`,"
        " :class:`eoclient.subscriber.ack_results.AckResult`, :exc:`eoclient.errors.NotFound`;"
        " another project's: :class:`datetime.timedelta`; an internal one:"
        " :func:`eoclient._transport.rpc_error_from_grpc`.\n"
    )
    warnings, out = build(tmp_path, page, eoclient_public_modules=("eoclient.errors",))
    assert warnings == ""
    html = (out / "index.html").read_text()
    # Both spellings of AckResult link to the one place it is documented.
    assert html.count('href="#eoclient.AckResult"') >= 2
    assert 'href="#eoclient.errors.NotFound"' in html


def test_a_public_name_no_page_documents_fails(tmp_path: Path) -> None:
    page = "Errors\n======\n\n.. automodule:: eoclient.errors\n   :exclude-members: NotFound\n"
    warnings, _ = build(tmp_path, page)
    assert "eoclient.errors.NotFound is public" in warnings
    assert "AlreadyExists" not in warnings  # the others are there


def test_every_fixture_is_documented_or_the_build_fails(tmp_path: Path) -> None:
    page = ERRORS_PAGE + "\n.. fixtures:: eoclient.pytest_plugin\n"
    warnings, out = build(
        tmp_path,
        page,
        eoclient_fixture_modules=(
            "eoclient.pytest_plugin",
            "eoclient.pytest_plugin._asyncio_fixtures",
        ),
    )
    assert "pubsub_server" not in warnings  # documented by the directive
    assert "the pytest fixture pubsub_admin" in warnings  # the other module's: not on the page
    html = (out / "index.html").read_text()
    assert 'id="fixture-pubsub_server"' in html
    assert "PubSubServer" in html  # what the test gets


def test_a_class_shows_only_bases_a_reader_can_follow(tmp_path: Path) -> None:
    # EoclientError's only base is Exception (another project's: listed); AdminClient's are
    # its internal parts and Endpoint's only object: no "Bases:" line at all, not an empty one.
    page = (
        ERRORS_PAGE
        + "\n.. autoclass:: eoclient.admin.AdminClient\n   :show-inheritance:\n"
        + "\n.. autoclass:: eoclient.Endpoint\n   :show-inheritance:\n"
    )
    warnings, out = build(
        tmp_path,
        page,
        eoclient_public_modules=("eoclient.errors",),
        autodoc_default_options={"members": True, "undoc-members": True, "show-inheritance": True},
        # As docs/conf.py: a client's constructor signature (with names imported for type
        # checking only, such as grpc's Channel) is not rendered with the class.
        autodoc_class_signature="separated",
    )
    assert warnings == ""
    html = (out / "index.html").read_text()
    assert "Bases: <code" in html  # the exceptions' bases
    assert "Bases:</p>" not in html
