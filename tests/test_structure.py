"""Structural rules of ``src/eoclient``, read from the source (docs/architecture.md).

* a module holds at most ``MAX_MODULE_LINES`` lines, a class at most ``MAX_CLASS_CODE_LINES``
  lines of code (its docstrings, comments and blank lines not counted);
* no class has more than ``MAX_FORWARDERS`` methods that only pass their own arguments on
  to ``self.<part>.<method>`` (a part's methods are reached as the part's: ``x.part.m()``);
* tasks are started only in a TaskGroup or by ``eoclient._tasks``: no ``asyncio.create_task``,
  ``loop.create_task`` or ``ensure_future`` anywhere else
  (docs/architecture.md#every-background-task-belongs-to-one-taskgroup);
* no ``__init__`` of the reference server takes more than ``MAX_SERVER_INIT_PARAMETERS``
  parameters (``self`` not counted): a constructor that needs more is holding parts that
  belong together in a value of their own;
* the server's doors translate and never decide: nothing in ``server_stub/doors/`` names
  the broker (docs/architecture.md#what-each-layer-keeps);
* the Spark connector is built on the SDK's public names: it imports no private module of
  the SDK (``_tasks``, ``_clock`` and ``_proto`` are shared infrastructure);
* outside the reference server, only the transport modules (``_transport``, ``_endpoint``)
  import grpc when they run; the others name its types for the type checker only (under
  ``if TYPE_CHECKING:``).

``KNOWN_EXCEPTIONS`` lists what the server's redesign is still to fix, by rule and module;
the list must shrink to empty, and ``test_no_stale_exceptions`` fails while an entry names
something that now keeps the rule. Never add one for new code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import eoclient

SOURCE = Path(eoclient.__file__).parent

MAX_MODULE_LINES = 500
MAX_CLASS_CODE_LINES = 300
MAX_FORWARDERS = 3
MAX_SERVER_INIT_PARAMETERS = 7

# (rule, module relative to src/eoclient, class or "" for the module).
KNOWN_EXCEPTIONS: frozenset[tuple[str, str, str]] = frozenset()

# A task started outside a TaskGroup: asyncio.create_task(...), <loop>.create_task(...),
# asyncio.ensure_future(...). ``<group>.create_task`` on a TaskGroup is the owned way.
_LOOSE_TASK = re.compile(
    r"\basyncio\.create_task\(|\bensure_future\(|loop\(\)\.create_task\(|\bloop\.create_task\("
)

# What the Spark connector may import of the SDK besides its public packages.
_SHARED_PRIVATE = {"eoclient._tasks", "eoclient._clock", "eoclient._proto"}
_PUBLIC = {
    "eoclient",
    "eoclient.admin",
    "eoclient.errors",
    "eoclient.publisher",
    "eoclient.subscriber",
}


# The SDK's modules that talk to grpc itself.
_TRANSPORT_MODULES = {"_transport.py", "_endpoint.py"}


def _runtime_imports(tree: ast.Module) -> Iterator[str]:
    """What a module imports when it runs: not under ``if TYPE_CHECKING:``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(SOURCE.rglob("*.py")):
        if "_proto" not in path.parts:
            yield path.relative_to(SOURCE).as_posix(), path


def _code_lines(node: ast.ClassDef, source_lines: list[str]) -> int:
    """Lines of ``node`` that hold code: not blank, not a comment, not in a docstring."""
    docstrings: set[int] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = inner.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                end = body[0].end_lineno or body[0].lineno
                docstrings.update(range(body[0].lineno, end + 1))
    end = node.end_lineno or node.lineno
    count = 0
    for number in range(node.lineno, end + 1):
        text = source_lines[number - 1].strip()
        if text and not text.startswith("#") and number not in docstrings:
            count += 1
    return count


def _forwards(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``method`` only hands its own arguments to ``self.<part>.<method>``."""
    body = list(method.body)
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if len(body) != 1:
        return False
    statement = body[0]
    if isinstance(statement, ast.Return | ast.Expr) and statement.value is not None:
        call = statement.value
    else:
        return False
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    target = call.func.value
    if not (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    ):
        return False
    arguments = method.args
    own = [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]][1:]
    passed = [a.id for a in call.args if isinstance(a, ast.Name)]
    passed += [k.value.id for k in call.keywords if isinstance(k.value, ast.Name)]
    return len(passed) == len(call.args) + len(call.keywords) and passed == own


def _parameters(method: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    arguments = method.args
    named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return len(named) - 1 + (arguments.vararg is not None) + (arguments.kwarg is not None)


def _names_the_broker(tree: ast.Module) -> bool:
    """Whether a module reaches the broker: a name or attribute ``broker`` / ``Broker``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in {"broker", "Broker"}:
            return True
        if isinstance(node, ast.Attribute) and node.attr in {"broker", "Broker"}:
            return True
        if isinstance(node, ast.alias) and node.name.rpartition(".")[2] == "Broker":
            return True
    return False


def violations() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for name, path in _modules():
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MAX_MODULE_LINES:
            found.add(("module lines", name, ""))
        if name != "_tasks.py" and _LOOSE_TASK.search(text):
            found.add(("loose task", name, ""))
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if _code_lines(node, lines) > MAX_CLASS_CODE_LINES:
                found.add(("class lines", name, node.name))
            methods = [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            if sum(_forwards(method) for method in methods) > MAX_FORWARDERS:
                found.add(("forwarders", name, node.name))
            if name.startswith("server_stub/") and any(
                method.name == "__init__" and _parameters(method) > MAX_SERVER_INIT_PARAMETERS
                for method in methods
            ):
                found.add(("init parameters", name, node.name))
        if name.startswith("server_stub/doors/") and _names_the_broker(tree):
            found.add(("door uses broker", name, ""))
        transport = name.startswith("server_stub/") or name in _TRANSPORT_MODULES
        grpc_imported = any(m == "grpc" or m.startswith("grpc.") for m in _runtime_imports(tree))
        if grpc_imported and not transport:
            found.add(("grpc at run time", name, ""))
        if name.startswith("spark/"):
            for imported in _imports(tree):
                if imported.startswith("eoclient.") and not _spark_may_import(imported):
                    found.add(("private import", name, imported))
    return found


def _imports(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                yield f"{node.module}.{alias.name}"


def _spark_may_import(name: str) -> bool:
    if name.startswith("eoclient.spark") or name in _PUBLIC:
        return True
    if any(name == shared or name.startswith(shared + ".") for shared in _SHARED_PRIVATE):
        return True
    # ``from eoclient.subscriber import AckResult``: a public package's name.
    package, _, attribute = name.rpartition(".")
    return (
        package in _PUBLIC
        and not (
            SOURCE / package.removeprefix("eoclient.").replace(".", "/") / f"{attribute}.py"
        ).exists()
    )


def test_the_structure_holds() -> None:
    unexpected = sorted(violations() - KNOWN_EXCEPTIONS)
    assert not unexpected, "\n".join(map(str, unexpected))


def test_no_stale_exceptions() -> None:
    stale = sorted(KNOWN_EXCEPTIONS - violations())
    assert not stale, f"these keep the rule now; remove them from KNOWN_EXCEPTIONS: {stale}"


@pytest.mark.parametrize(
    ("source", "forwards"),
    [
        ("def f(self, a, b):\n    return self.part.f(a, b)", True),
        ("async def f(self, a, *, b):\n    '''doc'''\n    await self.part.g(a, b=b)", True),
        ("def f(self, a):\n    return self.part.f(a + 1)", False),
        ("def f(self, a):\n    return self.f(a)", False),
        ("def f(self, a):\n    x = 1\n    return self.part.f(a)", False),
        ("def f(self):\n    return self.part.f(self)", False),
    ],
)
def test_a_forwarder_is_recognized(source: str, forwards: bool) -> None:
    method = ast.parse(source).body[0]
    assert isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef)
    assert _forwards(method) is forwards


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("services.broker.leasing.pull(name, 1)", True),
        ("broker = services.broker_of(name)", True),
        ("from eoclient.server_stub.core import Broker", True),
        ("services.streaming_pull.open(first, grant, peer)", False),
        ("# eoclient.broker.v1 in a comment", False),
    ],
)
def test_a_door_naming_the_broker_is_recognized(source: str, names: bool) -> None:
    assert _names_the_broker(ast.parse(source)) is names


def test_init_parameters_are_counted_without_self() -> None:
    method = ast.parse("def __init__(self, a, b=1, *, c, **d): pass").body[0]
    assert isinstance(method, ast.FunctionDef)
    assert _parameters(method) == 4


def test_a_loose_task_is_recognized() -> None:
    assert _LOOSE_TASK.search("task = asyncio.create_task(work())")
    assert _LOOSE_TASK.search("asyncio.get_running_loop().create_task(work())")
    assert _LOOSE_TASK.search("call = asyncio.ensure_future(work())")
    assert not _LOOSE_TASK.search("group.create_task(work())")
