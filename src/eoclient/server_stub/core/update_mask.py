"""UpdateTopic / UpdateSubscription: one field-mask routine for both.

A field mask names the fields the request changes, in snake_case, dotted for one field of
a policy (``retry_policy.maximum_backoff``). Each resource's ``MaskRules`` say which
top-level fields may change, which never may (with a hint), which the core keeps opaque
for the adapter (``extras``: push, BigQuery, schema settings, ...) and which policies take
dotted paths. Texts follow the real service's ("Invalid update_mask provided in the
UpdateSubscriptionRequest: ...", docs/protocol.md#update-masks); the emulator says "labels is not a
known Topic field" for what it cannot update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from eoclient.errors import InvalidArgument

Config = TypeVar("Config")
# merge_extras(old, new, paths) -> merged: the adapter updates the opaque fields it keeps.
MergeExtras = Callable[[bytes, bytes, Sequence[str]], bytes]


@dataclass(frozen=True)
class MaskRules:
    resource: str  # "Topic", "Subscription"
    mutable: frozenset[str]
    immutable: Mapping[str, str] = field(default_factory=dict)  # field -> hint ("" for none)
    opaque: frozenset[str] = frozenset()
    policies: Mapping[str, Any] = field(default_factory=dict)  # dotted: field -> default
    # value_of(field, request value, config so far) -> the value to store (defaults).
    value_of: Callable[[str, Any, Any], Any] = lambda _field, value, _config: value

    def _invalid(self, text: str) -> InvalidArgument:
        return InvalidArgument(
            f"Invalid update_mask provided in the Update{self.resource}Request: {text}"
        )


def apply_update_mask(
    current: Config,
    request: Config,
    paths: Sequence[str],
    rules: MaskRules,
    merge_extras: MergeExtras | None = None,
) -> Config:
    """``current`` with the fields ``paths`` name taken from ``request``."""
    if not paths:
        raise InvalidArgument(f"The update_mask in the Update{rules.resource}Request must be set.")
    updated = current
    for path in paths:
        top, _, rest = path.partition(".")
        if top in rules.immutable:
            raise rules._invalid(
                f"the {top} field in the {rules.resource} is not mutable.{rules.immutable[top]}"
            )
        if top in rules.opaque:
            if merge_extras is not None:
                extras = merge_extras(updated.extras, request.extras, [path])  # type: ignore[attr-defined]
                updated = replace(updated, extras=extras)  # type: ignore[type-var]
            continue
        if top not in rules.mutable:
            raise rules._invalid(f"{path!r} is not a known {rules.resource} field.")
        if rest:
            updated = replace(updated, **{top: _merged_policy(updated, request, path, rules)})  # type: ignore[type-var]
            continue
        value = rules.value_of(top, getattr(request, top), updated)
        updated = replace(updated, **{top: value})  # type: ignore[type-var]
    return updated


def _merged_policy(current: Any, request: Any, path: str, rules: MaskRules) -> Any:
    """A dotted mask path: change one field of a policy, keep its others."""
    top, _, field_name = path.partition(".")
    default = rules.policies.get(top)
    if default is None or field_name not in {f.name for f in fields(default)}:
        raise rules._invalid(f"{path!r} is not a known {rules.resource} field.")
    base = getattr(current, top) or default
    source = getattr(request, top)
    value = getattr(source if source is not None else default, field_name)
    return replace(base, **{field_name: value})
