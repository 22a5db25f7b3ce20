"""Flag types and flag groups shared by the verbs (labels, durations, instants).

Values are parsed by click parameter types, so a bad value is a usage error naming
the flag (``Invalid value for '--ack-deadline' ...``), reported on one line.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from eoclient.admin import ExpirationPolicy
from eoclient.cli.errors import CliError
from eoclient.cli.values import (
    DURATION_EXAMPLES,
    parse_duration,
    parse_duration_or_forever,
    parse_keys,
    parse_labels,
    parse_time,
)

F = TypeVar("F", bound=Callable[..., Any])

NEVER = "never"


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]
else:  # generic only in recent click releases; subscripting would fail on older ones
    _ParamType = click.ParamType


class _Parsed(_ParamType):
    """A click type from one of the pure parsers in :mod:`eoclient.cli.values`."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default that is already parsed
        try:
            return self._parse(value)
        except CliError as error:
            self.fail(error.message, param, ctx)


def _expiration(text: str) -> ExpirationPolicy:
    if text.strip().lower() == NEVER:
        return ExpirationPolicy(ttl=None)
    return ExpirationPolicy(ttl=parse_duration_or_forever(text))


DURATION = _Parsed("duration", parse_duration)
# A duration where -1 means forever (values.FOREVER_FLAGS): None.
DURATION_OR_FOREVER = _Parsed("duration|-1", parse_duration_or_forever)
EXPIRATION = _Parsed("duration|never", _expiration)
TIME = _Parsed("time", lambda text: parse_time(text, datetime.datetime.now(datetime.UTC)))
LABELS = _Parsed("KEY=VALUE[,...]", lambda text: parse_labels([text]))


def merged(values: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The labels of a repeated ``--labels`` flag, later ones winning."""
    result: dict[str, str] = {}
    for value in values:
        result.update(value)
    return result


def duration_help(what: str) -> str:
    return f"{what} ({DURATION_EXAMPLES})."


def labels_option(command: F) -> F:
    return click.option(
        "--labels",
        type=LABELS,
        multiple=True,
        help="Labels to set, KEY=VALUE[,KEY=VALUE...]; repeatable.",
    )(command)


def label_update_options(command: F) -> F:
    """``--update-labels``, ``--remove-labels``, ``--clear-labels``, as gcloud."""
    command = click.option(
        "--clear-labels", is_flag=True, help="Remove every label (before --update-labels)."
    )(command)
    command = click.option(
        "--remove-labels",
        multiple=True,
        metavar="KEY[,KEY...]",
        help="Labels to remove; repeatable.",
    )(command)
    command = click.option(
        "--update-labels",
        type=LABELS,
        multiple=True,
        help="Labels to add or change, KEY=VALUE[,...]; repeatable.",
    )(command)
    return command


def label_changes_requested(
    update: Sequence[Mapping[str, str]], remove: Sequence[str], clear: bool
) -> bool:
    return bool(update or remove or clear)


def updated_labels(
    current: Mapping[str, str],
    update: Sequence[Mapping[str, str]],
    remove: Sequence[str],
    clear: bool,
) -> dict[str, str]:
    """The labels after ``--clear-labels``, then ``--remove-labels``, then ``--update-labels``."""
    labels = {} if clear else dict(current)
    for key in parse_keys(remove):
        labels.pop(key, None)
    labels.update(merged(update))
    return labels
