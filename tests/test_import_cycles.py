"""No two modules of ``src/eoclient`` import each other, directly or around a loop.

Read from the source, not from ``sys.modules``: every ``import`` statement anywhere in a
module counts — at the top, inside a function (a "lazy" import), under
``if TYPE_CHECKING:``. A loop hidden by an import inside a function still means neither
module can be read, tested or moved without the other, which is what this is about;
``python -c "import ..."`` succeeding proves nothing about it.

``from package import name`` counts as importing ``package.name`` when that is a module,
and ``package`` (its ``__init__``) otherwise. Running a package's ``__init__`` on the way
to a submodule is not counted: every import of ``a.b.c`` would otherwise depend on
``a/__init__.py`` and ``a/b/__init__.py``, and a package's face that hands names on would
make every one of its modules a member of a loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

import eoclient

SOURCE = Path(eoclient.__file__).parent

# Loops that other work is breaking right now, each as the set of modules it ties. This
# list must shrink to empty: whoever breaks a loop removes its entry, and
# test_no_stale_known_cycles fails while an entry names a loop that is gone. Never add
# one: a new loop is a design to fix, not an exception to record.
KNOWN_CYCLES: tuple[frozenset[str], ...] = ()


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package but the generated protobuf code."""
    return {module_name(p): p for p in sorted(SOURCE.rglob("*.py")) if "_proto" not in p.parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the source of ``name`` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: "." is the package, ".." its parent, ...
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: the graph is a few hundred modules, but recursion limits are not a test's
    business)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            if targets:
                target = targets.pop()
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, sorted(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def describe(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = [
        f"  {source} -> {target}"
        for source in sorted(component)
        for target in sorted(graph[source] & component)
    ]
    return "\n".join([f"{len(component)} modules import each other:", *edges])


def test_the_cycle_finder() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a"},  # a loop through three
        "d": {"e"},
        "e": set(),
    }
    assert cycles(graph) == [frozenset({"a", "b", "c"})]


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A TYPE_CHECKING import, lazy ones (a module named in ``from package import``, a
    dotted ``import``), a relative one, and a name from a package's ``__init__``."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import paths\n"
        "if TYPE_CHECKING:\n    from eoclient.admin.client import AdminClient\n"
        "def f():\n    from eoclient.admin import convert\n    import eoclient.errors\n"
        "def g():\n    from eoclient.publisher import PublisherClient\n"
    )
    known = {
        "eoclient.admin",
        "eoclient.admin.client",
        "eoclient.admin.convert",
        "eoclient.admin.paths",
        "eoclient.errors",
        "eoclient.publisher",
        "eoclient.publisher.client",
    }
    assert imports_of("eoclient.admin.m", source, known) == {
        "eoclient.admin.client",
        "eoclient.admin.convert",
        "eoclient.admin.paths",
        "eoclient.errors",
        "eoclient.publisher",
    }
    # And on the real tree: Broker's default store is imported inside __init__.
    broker = SOURCE / "server_stub" / "core" / "broker.py"
    imported = imports_of("eoclient.server_stub.core.broker", broker, set(modules()))
    assert "eoclient.server_stub.storage.memory" in imported


def test_no_import_cycles() -> None:
    graph = import_graph()
    new = [c for c in cycles(graph) if c not in KNOWN_CYCLES]
    assert not new, "\n\n".join(describe(c, graph) for c in new)


def test_no_stale_known_cycles() -> None:
    found = set(cycles(import_graph()))
    stale = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not stale, f"these loops are broken: remove them from KNOWN_CYCLES: {stale}"
