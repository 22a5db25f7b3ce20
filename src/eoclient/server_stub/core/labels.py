"""Labels of topics, subscriptions and snapshots, checked as the service checks them
(docs/protocol.md#labels).

Google Cloud's label rules: at most 64 labels a resource; a key is 1 to 63 characters,
starts with a lowercase letter and holds only lowercase letters, digits, ``_`` and ``-``;
a value is the same without the first-letter rule, 0 to 63 characters. "Lowercase
letters" includes international ones: the service checks keys against
``[\\p{Ll}\\p{Lo}][\\p{Ll}\\p{Lo}\\p{N}_-]{0,62}`` and values against
``[\\p{Ll}\\p{Lo}\\p{N}_-]{0,63}`` (its own error text quotes the key's expression), so a
letter with no case (Japanese kana, Chinese) counts, an uppercase one (``É``) does not,
and neither does a modifier letter (Lm, the katakana prolonged sound mark ``ー``).

Python's ``re`` has no ``\\p{...}``: the classes are read from ``unicodedata``. Pure.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from eoclient.errors import InvalidArgument

MAX_LABELS = 64
MAX_LENGTH = 63
KEY_EXPRESSION = r"[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}"
VALUE_EXPRESSION = r"[\p{Ll}\p{Lo}\p{N}_-]{0,63}"
# The rule in words, after the service's own sentence.
RULE = (
    "Labels: at most 64; a key is 1 to 63 lowercase letters, digits, _ or -, starting with "
    "a lowercase letter; a value is 0 to 63 of the same; letters of any script count when "
    "they are not uppercase."
)


def _letter(character: str) -> bool:
    return unicodedata.category(character) in ("Ll", "Lo")


def _allowed(character: str) -> bool:
    return character in "_-" or _letter(character) or unicodedata.category(character)[0] == "N"


def check(labels: Mapping[str, str]) -> None:
    """INVALID_ARGUMENT naming the first label that breaks the rules, and the rules."""
    if len(labels) > MAX_LABELS:
        _refuse(f"{len(labels)} labels, more than the {MAX_LABELS} a resource may have")
    for key, value in labels.items():
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            _refuse(problem)


def key_problem(key: str) -> str:
    """Why ``key`` is no label key (the service's wording), or ``""``."""
    head = f'key "{_shown(key)}" does not conform to regular expression "{KEY_EXPRESSION}"'
    if not key:
        return f"{head}; it is empty"
    if len(key) > MAX_LENGTH:
        return f"{head}; it is {len(key)} characters long"
    if not _letter(key[0]):
        return (
            f'{head}; first character "{key[0]}" is not a non-uppercased letter '
            "(Unicode character class Ll or Lo)"
        )
    bad = next((c for c in key if not _allowed(c)), None)
    if bad is not None:
        return f'{head}; character "{bad}" is not a non-uppercased letter, a digit, _ or -'
    return ""


def value_problem(key: str, value: str) -> str:
    """Why ``value`` is no value of label ``key``, or ``""``."""
    head = (
        f'value "{_shown(value)}" of key "{_shown(key)}" does not conform to regular '
        f'expression "{VALUE_EXPRESSION}"'
    )
    if len(value) > MAX_LENGTH:
        return f"{head}; it is {len(value)} characters long"
    bad = next((c for c in value if not _allowed(c)), None)
    if bad is not None:
        return f'{head}; character "{bad}" is not a non-uppercased letter, a digit, _ or -'
    return ""


def _shown(text: str) -> str:
    """At most 80 characters of ``text`` in a message (a value may be a megabyte)."""
    return text if len(text) <= 80 else text[:77] + "..."


def _refuse(problem: str) -> None:
    # The service's frame: 'You have passed an invalid argument to the service
    # (argument=Invalid labels: Invalid field "labels"; key "Team" does not conform to ...)'
    raise InvalidArgument(
        "You have passed an invalid argument to the service (argument=Invalid labels: "
        f'Invalid field "labels"; {problem}). {RULE}'
    )
