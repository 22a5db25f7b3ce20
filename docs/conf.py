"""The documentation site: ``./dev docs`` builds it into ``site/``; ``./dev test`` too.

Sphinx, because the docstrings are reStructuredText (``:class:`` roles, ``::`` blocks,
tables) with Google-style sections (napoleon), and ``nitpicky`` with ``-W`` turns every
reference that does not resolve into an error. Pages are Markdown (MyST), as the README is;
the CLI reference is read from the click commands (sphinx-click); ``_ext/eoclient_sphinx.py``
keeps the API reference whole (see its docstring).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "eoclient"
author = "the eoclient authors"
copyright = "the eoclient authors"

extensions = [
    "myst_parser",
    "sphinx_click",
    "eoclient_sphinx",  # autodoc and napoleon, with the checks described in it
    "eoclient_page_links",  # docs/<page>.md#<anchor> in a docstring: a link to the page
    "eoclient_site_checks",  # the built pages: no dashed flags, no paths printed as text
]

# No "smart" typography: docutils would print `--project` as an en dash and quotes as
# curly ones, and text copied from these pages (flags, names, JSON) must be what a shell
# or Python reads. tests/docs/test_built_site.py checks the built pages.
smartquotes = False

# Strict: a reference that does not resolve is a warning, and ./dev docs makes every
# warning an error.
nitpicky = True
# Internal names the public API mentions (a parameter's type, a return type) that are not
# part of it: each is shown as plain text. Anything else that does not resolve fails.
nitpick_ignore: list[tuple[str, str]] = [
    # OpenTelemetry's type in the tracer_provider= parameters, imported only for type
    # checking (the bare SDK never imports opentelemetry), so autodoc sees the bare name.
    ("py:class", "TracerProvider"),
    # The wire message a Message is made from by the subscriber (applications never
    # construct one); generated protobuf types are not part of the public API.
    ("py:class", "ReceivedMessage"),
    # A session's tracing (eoclient.subscriber.spans, which imports opentelemetry), in the
    # signature of the StreamingSession the client makes; imported for type checking only.
    ("py:class", "SessionSpans"),
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# MyST: anchors for headings down to ####, so "page.md#a-heading" links resolve (and are
# checked); ```{directive} fences; $ is never math.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_class_signature = "separated"
autodoc_preserve_defaults = True
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    "show-inheritance": True,
    # Methods from eoclient's own mixins (AdminClient's schema, IAM and policy calls) are
    # the class's API; what builtins and enum.Enum give every class is not repeated.
    # (what other projects' base classes give is left out by _ext/eoclient_sphinx.py).
    "inherited-members": True,
}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "furo"
html_title = "eoclient"
html_static_path: list[str] = []
html_show_sourcelink = False
html_copy_source = False
