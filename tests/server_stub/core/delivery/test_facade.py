"""The delivery engine is entered only through its façade: no module outside
``server_stub/core/delivery/`` imports one of the package's modules, only the package
(docs/architecture.md#the-delivery-engine)."""

from __future__ import annotations

import ast
from pathlib import Path

import eoclient

SOURCE = Path(eoclient.__file__).parent
PACKAGE = "eoclient.server_stub.core.delivery"
INSIDE = SOURCE / "server_stub" / "core" / "delivery"


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            if node.module == PACKAGE:  # ``from ...core.delivery import window``
                names.update(f"{PACKAGE}.{alias.name}" for alias in node.names)
    return names


def _inner_modules() -> set[str]:
    return {f"{PACKAGE}.{path.stem}" for path in INSIDE.glob("*.py") if path.stem != "__init__"}


def test_only_the_facade_is_imported_from_outside() -> None:
    inner = _inner_modules()
    assert inner, "the package has modules"
    reached: list[str] = []
    for path in sorted(SOURCE.rglob("*.py")):
        if INSIDE in path.parents or "_proto" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for name in sorted(_imported(tree) & inner):
            reached.append(f"{path.relative_to(SOURCE)} imports {name}")
    assert not reached, "\n".join(reached)


def test_the_check_sees_an_inner_import() -> None:
    tree = ast.parse(f"from {PACKAGE}.lease_table import LeaseTable\nfrom {PACKAGE} import window")
    assert {f"{PACKAGE}.lease_table", f"{PACKAGE}.window"} <= _imported(tree) & _inner_modules()
