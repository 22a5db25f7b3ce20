"""Labels checked as the service checks them (core/labels.py; docs/protocol.md#labels)."""

from __future__ import annotations

import pytest

from eoclient.errors import InvalidArgument
from eoclient.server_stub.core import labels

VALID = [
    {},
    {"team": "payments", "env": ""},  # a value may be empty
    {"k" * 63: "v" * 63},
    {"équipe": "café", "チケット": "値", "كود": "٣"},  # letters without case, other digits
    {"a-b_c9": "x-y_z0"},
    {f"k{i}": "v" for i in range(64)},
]


@pytest.mark.parametrize("given", VALID)
def test_what_the_service_accepts_is_accepted(given: dict[str, str]) -> None:
    labels.check(given)


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        (
            {"Team": "x"},
            'key "Team" does not conform to regular expression '
            '"[\\p{Ll}\\p{Lo}][\\p{Ll}\\p{Lo}\\p{N}_-]{0,62}"; first character "T" is not a '
            "non-uppercased letter (Unicode character class Ll or Lo)",
        ),
        ({"": "x"}, 'key "" does not conform'),
        ({"1team": "x"}, 'first character "1" is not a non-uppercased letter'),
        ({"-team": "x"}, 'first character "-" is not'),
        ({"k" * 64: "x"}, "it is 64 characters long"),
        ({"te.am": "x"}, 'character "." is not a non-uppercased letter, a digit, _ or -'),
        ({"Équipe": "x"}, 'first character "É"'),
        ({"チーム": "x"}, 'character "ー"'),  # a modifier letter (Lm)
        (
            {"team": "X"},
            'value "X" of key "team" does not conform to regular expression '
            '"[\\p{Ll}\\p{Lo}\\p{N}_-]{0,63}"; character "X"',
        ),
        ({"team": "a b"}, 'character " "'),
        ({"team": "v" * 64}, "it is 64 characters long"),
        ({"team": "v" * 2**20}, "it is 1048576 characters long"),
        ({f"k{i}": "v" for i in range(65)}, "65 labels, more than the 64 a resource may have"),
    ],
)
def test_what_the_service_refuses_is_refused_with_the_rule(
    given: dict[str, str], problem: str
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        labels.check(given)
    message = raised.value.message
    assert message.startswith(
        "You have passed an invalid argument to the service (argument=Invalid labels: "
        'Invalid field "labels"; '
    )
    assert problem in message
    assert message.endswith(labels.RULE)
    assert len(message) < 1000  # a megabyte value is not echoed back
