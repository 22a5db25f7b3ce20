"""``AdminClient`` is its parts (topics, subscriptions, snapshots, schemas, IAM, broker
policies) plus the channel's lifecycle. Each part is a subclass of ``AdminCalls`` whose
contract is its public methods: it keeps no state, reads none of the client's, and names
no method another part names (else the method resolution order would silently pick one).
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from eoclient.admin import AdminClient
from eoclient.admin.calls import AdminCalls

PARTS = [
    base
    for base in AdminClient.__mro__
    if issubclass(base, AdminCalls) and base not in (AdminClient, AdminCalls)
]
# What AdminCalls gives a part.
CALL_MACHINERY = {"_call", "_pager"}


def test_the_client_is_six_parts() -> None:
    assert [part.__name__ for part in PARTS] == [
        "TopicAdmin",
        "SubscriptionAdmin",
        "SnapshotAdmin",
        "SchemaAdmin",
        "IamAdmin",
        "PolicyCalls",
    ]


def test_each_name_comes_from_one_part_or_the_client() -> None:
    owners: dict[str, str] = {}
    for owner in [AdminClient, *PARTS]:
        for name in vars(owner):
            if name.startswith("__"):  # __module__, __doc__, the client's dunders
                continue
            assert name not in owners, f"{name} is in both {owners[name]} and {owner.__name__}"
            owners[name] = owner.__name__
    assert not CALL_MACHINERY & owners.keys()


def test_a_part_uses_only_the_call_machinery_and_its_own_methods() -> None:
    for part in PARTS:
        allowed = CALL_MACHINERY | set(vars(part))
        tree = ast.parse(textwrap.dedent(inspect.getsource(part)))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.name != "__init__", f"{part.__name__} has state of its own"
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                assert node.attr in allowed, f"{part.__name__} reaches for self.{node.attr}"
