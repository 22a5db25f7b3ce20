"""The SDK's modules import each other without cycles, lazy imports included.

Read from the source (every ``import`` statement anywhere in a module: at the top, in a
function, under ``if TYPE_CHECKING:``), not from ``sys.modules``: a cycle hidden by an
import inside a function still makes two modules impossible to understand one without
the other, which is what this test is about.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

import eoclient

SOURCE = Path(eoclient.__file__).parent

# The SDK's public clients and what they share. (The reference server and the subscriber
# are checked by their own owners.)
CHECKED = (
    "eoclient.admin",
    "eoclient.publisher",
    "eoclient._transport",
    "eoclient._endpoint",
    "eoclient._retrying",
    "eoclient.errors",
    "eoclient.tracing",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in SOURCE.rglob("*.py") if "_proto" not in path.parts}


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The eoclient modules ``name`` imports; ``from package import module`` counts as
    importing the module, not the package's ``__init__``."""
    modules = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    found.add(f"{base}.{alias.name}")
                elif base in modules:
                    found.add(base)
    found.discard(name)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that ends where it starts), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def checked(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in CHECKED)


def test_the_sdk_modules_have_no_import_cycle() -> None:
    modules = all_modules()
    graph = {
        name: {target for target in imports_of(name, path, modules) if checked(target)}
        for name, path in modules.items()
        if checked(name)
    }
    assert graph["eoclient.admin.client"], "the import reader found nothing: it is broken"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"b"}}, ["b", "b"]),
    ],
)
def test_the_cycle_finder(graph: dict[str, set[str]], expected: list[str] | None) -> None:
    assert find_cycle(graph) == expected


def test_lazy_and_type_checking_imports_are_read(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from eoclient.admin.client import AdminClient\n"
        "def f():\n    from eoclient.admin import convert\n    import eoclient.errors\n"
    )
    known = {"eoclient.admin", "eoclient.admin.client", "eoclient.admin.convert", "eoclient.errors"}
    assert imports_of("eoclient.admin.m", source, known) == {
        "eoclient.admin.client",
        "eoclient.admin.convert",
        "eoclient.errors",
    }
