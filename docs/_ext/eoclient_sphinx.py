"""What the documentation build adds to Sphinx to keep the API reference whole and strict.

* Every reference resolves or the build fails (``nitpicky`` with ``-W``), but a name may be
  written the way users write it: ``eoclient.SubscriberClient`` finds the class documented as
  ``eoclient.subscriber.SubscriberClient`` because both are the same Python object. A name
  that imports to something outside eoclient (``datetime.timedelta``, pyspark's types) is
  shown as plain text: this build runs offline, so other projects' inventories cannot be
  fetched, and linking only half of them would be worse than linking none.
* Each public object is documented once, on the page of the most specific public module
  that exports it (``AdminClient`` on the ``eoclient.admin`` page although ``eoclient``
  exports it too), and a name in a public ``__all__`` that no page documents fails the
  build, so a new public name cannot go missing from the reference.
* ``.. fixtures:: module`` documents a pytest plugin's fixtures (a ``fixture`` object type
  with a ``:fixture:`` role), read from the module so the list cannot drift.
* Napoleon reads a Google-style docstring's first ``word: text`` line as a type; the
  docstrings of enum members and properties here are sentences ("Not pending there: ..."),
  so those are left as written.
"""

from __future__ import annotations

import builtins
import enum
import functools
import importlib
import inspect
import re
import sys
import typing
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from docutils import nodes  # type: ignore[import-untyped]
from docutils.statemachine import StringList  # type: ignore[import-untyped]
from sphinx.application import Sphinx
from sphinx.domains.python import PythonDomain
from sphinx.domains.std import StandardDomain
from sphinx.environment import BuildEnvironment
from sphinx.errors import PycodeError
from sphinx.ext.napoleon import _process_docstring
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

# The public modules, most general first. A name exported by several of them is documented
# on the page of the LAST (most specific) one that exports it.
PUBLIC_MODULES = (
    "eoclient",
    "eoclient.subscriber",
    "eoclient.publisher",
    "eoclient.admin",
    "eoclient.errors",
    "eoclient.delayed_delivery",
    "eoclient.server_stub",
    "eoclient.spark",
    "eoclient.pytest_plugin",
)
# The plugin modules whose fixtures the reference must list.
FIXTURE_MODULES = (
    "eoclient.pytest_plugin",
    "eoclient.pytest_plugin._asyncio_fixtures",
)


def import_path(dotted: str) -> Any:
    """The object a dotted name denotes (``eoclient.admin.Topic``, ``collections.abc.Mapping``),
    importing the longest module prefix; ``LookupError`` when there is none."""
    dotted = dotted.split("[", 1)[0].strip()  # a generic alias: Mapping[str, str]
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        except Exception:  # a module that fails to import is not what was meant either
            continue
        try:
            for attribute in parts[split:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            continue
        return obj
    raise LookupError(dotted)


def public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return list(names)


def _identity_kind(obj: Any) -> bool:
    """Objects whose identity names them (a class, a function, a module); constants such
    as small ints and strings are shared and say nothing."""
    return inspect.isclass(obj) or inspect.isroutine(obj) or isinstance(obj, ModuleType)


def _py(env: BuildEnvironment) -> PythonDomain:
    return typing.cast(PythonDomain, env.get_domain("py"))


@functools.cache
def _owners(public_modules: tuple[str, ...]) -> dict[int, str]:
    """id(public object) -> its owner module (the last of the modules exporting it)."""
    owners: dict[int, str] = {}
    for module_name in public_modules:
        module = importlib.import_module(module_name)
        for name in public_names(module_name):
            owners[id(getattr(module, name))] = module_name
    return owners


# The build's eoclient_public_modules (PUBLIC_MODULES unless a test builds a smaller site).
_public_modules = PUBLIC_MODULES


def owner_module(obj: Any) -> str | None:
    """The public module whose page documents ``obj``: the most specific one exporting it."""
    return _owners(tuple(_public_modules)).get(id(obj))


def _configure(app: Sphinx) -> None:
    global _public_modules
    _public_modules = tuple(app.config.eoclient_public_modules)


def _has_attribute_docstring(cls: type, name: str) -> bool:
    """Whether ``name`` has a docstring or ``#:`` comment of its own in ``cls``'s source."""
    for klass in cls.__mro__:
        module = getattr(klass, "__module__", "")
        if not module.startswith("eoclient"):
            continue
        try:
            attr_docs = ModuleAnalyzer.for_module(module).find_attr_docs()
        except PycodeError:
            continue
        if (klass.__qualname__, name) in attr_docs:
            return True
    return False


def skip_member(
    app: Sphinx, what: str, name: str, obj: Any, skip: bool, options: Any
) -> bool | None:
    """Which members autodoc leaves out (``None``: its own decision)."""
    if type(obj).__name__ == "FixtureFunctionDefinition":
        return True  # documented by ``.. fixtures::``, with what the test gets
    if what == "module" and _identity_kind(obj) and not isinstance(obj, ModuleType):
        # A re-exported object is documented only on its owner's page.
        owner = owner_module(obj)
        current = app.env.temp_data.get("autodoc:module")
        if owner is not None and current is not None and owner != current:
            return True
        return None
    if what in ("class", "exception") and not skip:
        cls = _current_class(app)
        if name == "__init__" and cls is not None and _qualified(cls) in MADE_FOR_YOU:
            return True
        if cls is not None and not _defined_by_eoclient(cls, name):
            return True  # what another project's base class (pyspark's DataSource) gives
        plain_attribute = not (
            inspect.isroutine(obj)
            or isinstance(obj, (property, enum.Enum, type))
            or (inspect.isdatadescriptor(obj) and type(obj).__name__ != "member_descriptor")
        )
        # A field documented in the class docstring's Attributes section (napoleon lists
        # it there) would otherwise appear twice; one with a docstring of its own stays.
        if plain_attribute and cls is not None and not _has_attribute_docstring(cls, name):
            return True
    return None


# Classes whose objects eoclient makes and hands to you, never the other way round: their
# constructors take internal parts (a session's sink, the wire message, a page fetcher), so
# the reference shows what you do with them, not how they are built.
MADE_FOR_YOU = frozenset(
    {
        "eoclient.subscriber.message.Message",
        "eoclient.subscriber.batch.MessageBatch",
        "eoclient.subscriber.session.StreamingSession",
        "eoclient.admin.calls.AsyncPager",
    }
)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _defined_by_eoclient(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if name in vars(klass):
            return getattr(klass, "__module__", "").startswith("eoclient")
    return True  # an instance attribute (a slot, a dataclass field): the class's own


def _current_class(app: Sphinx) -> type | None:
    name = app.env.temp_data.get("autodoc:class")
    module = app.env.temp_data.get("autodoc:module")
    if not name or not module:
        return None
    try:
        cls = import_path(f"{module}.{name}")
    except LookupError:
        return None
    return cls if inspect.isclass(cls) else None


def _documented_objects(env: BuildEnvironment) -> dict[int, str]:
    """id(python object) -> the name it is documented under (built once per build)."""
    cache: dict[int, str] | None = getattr(env, "_eoclient_documented", None)
    if cache is None:
        cache = {}
        for name, entry in _py(env).objects.items():
            if entry.aliased:
                continue
            try:
                obj = import_path(name)
            except LookupError:
                continue
            if _identity_kind(obj):
                cache.setdefault(id(obj), name)
        env._eoclient_documented = cache  # type: ignore[attr-defined]
    return cache


def _documented_constant(env: BuildEnvironment, obj: Any, short_name: str) -> str | None:
    """The documented name of a constant (``UNSET``, ``SCHEMA``): same last name, same object."""
    for name in _py(env).objects:
        if name.rpartition(".")[2] == short_name:
            try:
                if import_path(name) is obj:
                    return str(name)
            except LookupError:
                continue
    return None


def _candidates(target: str, module: str | None, klass: str | None) -> Iterator[str]:
    """Where a relative name may live: in the class, the module that defines the class
    (its docstring was written there), the module, each enclosing package."""
    if module and klass:
        yield f"{module}.{klass}.{target}"
        try:
            mro = import_path(f"{module}.{klass.partition('.')[0]}").__mro__
        except (LookupError, AttributeError):
            mro = ()
        for base in mro:  # an inherited docstring was written in its base's module
            yield f"{base.__module__}.{target}"
    while module:
        yield f"{module}.{target}"
        module = module.rpartition(".")[0]
    yield target
    yield f"builtins.{target}"


def _parts(target: str) -> list[str]:
    """Napoleon's ``Raises: A / B / C:`` and ``A, B`` name several exceptions at once."""
    return [p.strip() for p in re.split(r"\s*(?:/|,|\bor\b)\s*", target) if p.strip()]


def _resolve_one(
    app: Sphinx, env: BuildEnvironment, node: Any, target: str, contnode: nodes.Element
) -> nodes.Element | None:
    for candidate in _candidates(target, node.get("py:module"), node.get("py:class")):
        try:
            obj = import_path(candidate)
        except LookupError:
            continue
        documented = (
            _documented_objects(env).get(id(obj))
            if _identity_kind(obj)
            else _documented_constant(env, obj, candidate.rpartition(".")[2])
        )
        if documented is None:
            # It exists, but no page documents it: another project's name (this build is
            # offline), a TypeVar, or eoclient's internals (the reference documents the
            # public API; every public name is checked to be there). Plain text.
            return contnode
        py = _py(env)
        return py.resolve_xref(env, node["refdoc"], app.builder, "obj", documented, node, contnode)
    # Last, as Sphinx does for ``.Name``: the one documented object of that last name.
    short = target.rpartition(".")[2]
    matches = [n for n in _py(env).objects if n.rpartition(".")[2] == short]
    if len(matches) == 1:
        py = _py(env)
        return py.resolve_xref(env, node["refdoc"], app.builder, "obj", matches[0], node, contnode)
    return None


def resolve_by_identity(
    app: Sphinx, env: BuildEnvironment, node: Any, contnode: nodes.Element
) -> nodes.Element | None:
    """``missing-reference``: a Python name resolves by the object it denotes (see the
    module docstring); a name that denotes nothing stays missing and fails the build."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    parts = _parts(target)
    if len(parts) > 1:
        resolved = [_resolve_one(app, env, node, part, contnode) for part in parts]
        return contnode if all(r is not None for r in resolved) else None
    return _resolve_one(app, env, node, target, contnode)


def hide_internal_bases(app: Sphinx, name: str, obj: Any, options: Any, bases: list[Any]) -> None:
    """``autodoc-process-bases``: an internal mixin (``AdminClient``'s ``PolicyCalls``) is
    not shown as a base (its methods are documented on the class: ``inherited-members``),
    nor is ``object``."""
    bases[:] = [
        base
        for base in bases
        if base is not object  # "Bases: object" says nothing
        and (
            not getattr(base, "__module__", "").startswith("eoclient")
            or owner_module(base) is not None
        )
    ]


def drop_empty_bases(app: Sphinx, doctree: nodes.document) -> None:
    """``doctree-read``: autodoc writes a "Bases:" line even when ``hide_internal_bases``
    left nothing to list (a class whose only bases are ``object`` or internal parts); such an
    empty line is dropped."""
    for paragraph in list(doctree.findall(nodes.paragraph)):
        if paragraph.astext().strip() == "Bases:":
            paragraph.parent.remove(paragraph)


def check_every_public_name(app: Sphinx, env: BuildEnvironment) -> None:
    """``env-check-consistency``: each name in a public ``__all__`` is documented."""
    documented = _documented_objects(env)
    py_objects = _py(env).objects
    std = typing.cast(StandardDomain, env.get_domain("std"))
    fixtures = {name for (kind, name) in std.objects if kind == "fixture"}
    for module_name in app.config.eoclient_public_modules:
        if module_name not in py_objects:
            logger.warning("the API reference has no page for the module %s", module_name)
        module = importlib.import_module(module_name)
        for name in public_names(module_name):
            obj = getattr(module, name)
            if isinstance(obj, ModuleType):
                found = obj.__name__ in py_objects
            elif _identity_kind(obj):
                found = id(obj) in documented
            else:
                owner = owner_module(obj) or module_name
                found = f"{owner}.{name}" in py_objects or f"{module_name}.{name}" in py_objects
            if not found:
                logger.warning(
                    "%s.%s is public (in __all__) but no page of the API reference documents "
                    "it: add it to the page of %s under docs/reference/",
                    module_name,
                    name,
                    owner_module(obj) or module_name,
                )
    for module_name in app.config.eoclient_fixture_modules:
        for name in fixture_names(importlib.import_module(module_name)):
            if name not in fixtures:
                logger.warning("the pytest fixture %s (%s) is not documented", name, module_name)


# -- pytest fixtures ----------------------------------------------------------------------


def fixture_names(module: ModuleType) -> list[str]:
    return [
        name
        for name, value in vars(module).items()
        if type(value).__name__ == "FixtureFunctionDefinition"
        or hasattr(value, "_pytestfixturefunction")
    ]


_YIELDED = re.compile(
    r"^(?:typing\.|collections\.abc\.)?(?:Async)?(?:Iterator|Generator)\[(.*?)(?:,.*)?\]$"
)


def fixture_value_type(function: Any) -> str | None:
    """What a test receives: the return annotation, or what a generator fixture yields."""
    annotation = inspect.signature(function).return_annotation
    if annotation is inspect.Signature.empty:
        return None
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    yielded = _YIELDED.match(text)
    return yielded.group(1) if yielded else text


class FixturesDirective(SphinxDirective):
    """``.. fixtures:: module`` — every fixture the module defines, in source order."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module_name = self.arguments[0]
        module = importlib.import_module(module_name)
        self.env.note_dependency(inspect.getfile(module))
        lines: list[str] = []
        for name in fixture_names(module):
            function = inspect.unwrap(getattr(module, name))
            parameters = [
                p for p in inspect.signature(function).parameters if p not in ("request",)
            ]
            lines += [f".. fixture:: {name}", ""]
            facts = []
            value = fixture_value_type(function)
            if value:
                target = value if hasattr(builtins, value) else f"~{module_name}.{value}"
                facts.append(f"**Gives** :py:class:`{target}`")
            if parameters:
                facts.append("**Uses** " + ", ".join(f"``{p}``" for p in parameters))
            if facts:
                lines += ["   " + " · ".join(facts), ""]
            doc = inspect.getdoc(function) or ""
            lines += ["   " + line if line else "" for line in doc.splitlines()]
            lines.append("")
        container = nodes.section()
        self.state.nested_parse(StringList(lines, module_name), self.content_offset, container)
        return list(container.children)


# -- napoleon -----------------------------------------------------------------------------


def napoleon_except_sentences(
    app: Sphinx, what: Any, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Napoleon for functions, classes and modules; attribute and property docstrings here
    are prose (see the module docstring)."""
    if what in ("attribute", "data", "property"):
        return
    _process_docstring(app, what, name, obj, options, lines)


def _replace_napoleon(app: Sphinx) -> None:
    listeners = app.events.listeners["autodoc-process-docstring"]
    for listener in list(listeners):
        if listener.handler is _process_docstring:
            app.disconnect(listener.id)
    app.connect("autodoc-process-docstring", napoleon_except_sentences)


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.autodoc")
    app.setup_extension("sphinx.ext.napoleon")
    _replace_napoleon(app)
    app.add_config_value("eoclient_public_modules", PUBLIC_MODULES, "env")
    app.add_config_value("eoclient_fixture_modules", FIXTURE_MODULES, "env")
    app.add_object_type("fixture", "fixture", indextemplate="pair: %s; pytest fixture")
    app.add_directive("fixtures", FixturesDirective)
    app.connect("builder-inited", _configure)
    app.connect("autodoc-skip-member", skip_member)
    app.connect("missing-reference", resolve_by_identity)
    app.connect("autodoc-process-bases", hide_internal_bases)
    app.connect("doctree-read", drop_empty_bases)
    app.connect("env-check-consistency", check_every_public_name)
    sys.modules.setdefault("eoclient_sphinx", sys.modules[__name__])
    return {"parallel_read_safe": True, "parallel_write_safe": True}
