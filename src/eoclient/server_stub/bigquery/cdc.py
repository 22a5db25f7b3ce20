"""Change data capture: which change of a row wins (pure).

The rules are docs/protocol.md#bigquery-change-data-capture. A message's ``_CHANGE_TYPE``
(UPSERT or DELETE, any case) says what to do with the row its primary-key columns name;
``_CHANGE_SEQUENCE_NUMBER`` (optional) orders the changes of one key: up to four sections
of up to 16 hexadecimal digits each, separated by ``/`` (``"A1/3F"``), compared section by
section as numbers, a missing section lower than any present one. A change whose number is
lower than the one the key last took is stale and changes nothing (it still counts as
written: BigQuery accepts and ignores it); an equal number falls back to arrival order, the
later change winning. A change without a number is applied in the order changes arrive and
takes no number, so any numbered change after it wins over it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UPSERT = "UPSERT"
DELETE = "DELETE"
CHANGE_TYPES = (UPSERT, DELETE)
MAX_SECTIONS = 4
MAX_SECTION_DIGITS = 16
_SECTION = re.compile(r"^[0-9A-Fa-f]{1,16}$")


class ChangeError(ValueError):
    """A change type or sequence number that is not one."""


def change_type(value: object) -> str:
    if not isinstance(value, str) or value.upper() not in CHANGE_TYPES:
        raise ChangeError(
            f"_CHANGE_TYPE is {value!r}: it must be UPSERT or DELETE for change data capture"
        )
    return value.upper()


def sequence(value: object) -> tuple[int, ...] | None:
    """``_CHANGE_SEQUENCE_NUMBER`` as comparable numbers (None when absent)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ChangeError(
            f"_CHANGE_SEQUENCE_NUMBER is {value!r}: it is a string of hexadecimal sections "
            "separated by '/'"
        )
    sections = value.split("/")
    if len(sections) > MAX_SECTIONS or not all(_SECTION.match(s) for s in sections):
        raise ChangeError(
            f"_CHANGE_SEQUENCE_NUMBER {value!r} is not up to {MAX_SECTIONS} sections of 1 to "
            f"{MAX_SECTION_DIGITS} hexadecimal digits separated by '/'"
        )
    return tuple(int(s, 16) for s in sections)


def encode(numbers: tuple[int, ...]) -> str:
    """The canonical text kept for a key's last number (zero-padded, so text order is
    number order within one count of sections)."""
    return "/".join(f"{n:016X}" for n in numbers)


def decode(text: str) -> tuple[int, ...]:
    return tuple(int(s, 16) for s in text.split("/"))


@dataclass(frozen=True)
class Change:
    """One message's change of one row."""

    message_id: str
    kind: str  # UPSERT or DELETE
    key: tuple[object, ...]  # the primary-key values
    number: tuple[int, ...] | None
    row: dict[str, object]  # the converted columns (an UPSERT's whole row)


@dataclass(frozen=True)
class Outcome:
    """What a batch of changes does to the table: per key the change that wins, and the
    number each key keeps from now on (None: forget it)."""

    final: dict[tuple[object, ...], Change]
    numbers: dict[tuple[object, ...], tuple[int, ...] | None]
    stale: tuple[str, ...]  # message ids whose change lost to a greater number


def resolve(changes: list[Change], known: dict[tuple[object, ...], tuple[int, ...]]) -> Outcome:
    """Apply ``changes`` in arrival order against the numbers ``known`` per key."""
    numbers: dict[tuple[object, ...], tuple[int, ...] | None] = {}
    final: dict[tuple[object, ...], Change] = {}
    stale: list[str] = []
    for change in changes:
        current = numbers[change.key] if change.key in numbers else known.get(change.key)
        if change.number is not None and current is not None and change.number < current:
            stale.append(change.message_id)
            continue
        numbers[change.key] = change.number
        final[change.key] = change
    return Outcome(final, numbers, tuple(stale))
