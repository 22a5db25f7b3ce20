"""Object names of Cloud Storage exports: ``<prefix><UTC date-time>_<uuid><suffix>``, the
date-time written by ``filename_datetime_format`` (docs/protocol.md#cloud-storage-object-names).

The format's grammar, from the Cloud Storage subscription docs:

* required, each exactly once: the year (``YYYY`` or ``YY``), ``MM``, ``DD``, ``hh``, ``mm``,
  ``ss`` (so ``YY-YYYY`` and ``MMM`` are invalid);
* optional, at most once: the date/time separator ``T`` and the zone (``Z`` or ``+00:00``);
* repeatable: ``-``, ``_``, ``:`` and ``/``.

A format that ends in a separator hands it to the name: it stands between the date-time
and the uuid instead of ``_`` (``YYYY-MM-DDThh_mm_ss-`` gives ``2023-09-25T04_10_00-<uuid>``).
Without a format the date-time is ``YYYY-MM-DDThh:mm:ss+00:00``, as the docs' examples show.
Pure: no clock, no randomness (the caller passes the time and the uuid).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

DEFAULT_FORMAT = "YYYY-MM-DDThh:mm:ss+00:00"
DEFAULT_SEPARATOR = "_"
SEPARATORS = "-_:/"
# token -> (what it is, strftime directive or literal). Longest first where one is a prefix.
_TOKENS: tuple[tuple[str, str, str], ...] = (
    ("YYYY", "year", "%Y"),
    ("YY", "year", "%y"),
    ("MM", "month", "%m"),
    ("DD", "day", "%d"),
    ("hh", "hour", "%H"),
    ("mm", "minute", "%M"),
    ("ss", "second", "%S"),
    ("T", "date/time separator", "T"),
    ("+00:00", "zone", "+00:00"),
    ("Z", "zone", "Z"),
)
REQUIRED = ("year", "month", "day", "hour", "minute", "second")
_NAMES = {"year": "YYYY or YY", "month": "MM", "day": "DD", "hour": "hh", "minute": "mm"}
_NAMES |= {"second": "ss", "date/time separator": "T", "zone": "Z or +00:00"}


class DatetimeFormatError(ValueError):
    """The format breaks the grammar (the message says where)."""


@dataclass(frozen=True)
class DatetimeFormat:
    """A parsed ``filename_datetime_format``: a strftime pattern and the uuid separator."""

    source: str
    pattern: str
    separator: str

    def render(self, when: float) -> str:
        moment = datetime.datetime.fromtimestamp(when, datetime.UTC)
        return moment.strftime(self.pattern)


def parse_datetime_format(text: str) -> DatetimeFormat:
    """The format ``text`` (``""``: the default), or ``DatetimeFormatError``."""
    source = text or DEFAULT_FORMAT
    separator = DEFAULT_SEPARATOR
    body = source
    if text and text[-1] in SEPARATORS:
        separator, body = text[-1], text[:-1]
    seen: dict[str, str] = {}
    pattern: list[str] = []
    position = 0
    while position < len(body):
        char = body[position]
        if char in SEPARATORS:
            pattern.append(char)
            position += 1
            continue
        for token, kind, directive in _TOKENS:
            if body.startswith(token, position):
                if kind in seen:
                    raise DatetimeFormatError(
                        f"{token!r} at position {position + 1} repeats the {kind} "
                        f"({seen[kind]!r} came first): each of YYYY or YY, MM, DD, hh, mm, ss, "
                        "T and Z or +00:00 may appear once"
                    )
                seen[kind] = token
                pattern.append(directive)
                position += len(token)
                break
        else:
            raise DatetimeFormatError(
                f"{body[position : position + 4]!r} at position {position + 1} is not part of "
                "the grammar: YYYY or YY, MM, DD, hh, mm, ss (each once), T and Z or +00:00 "
                "(optional, once), and the separators - _ : /"
            )
    missing = [_NAMES[kind] for kind in REQUIRED if kind not in seen]
    if missing:
        raise DatetimeFormatError(f"the format lacks {', '.join(missing)} (each is required)")
    return DatetimeFormat(source, "".join(pattern), separator)


def object_name(
    prefix: str, datetime_format: DatetimeFormat, when: float, uid: str, suffix: str
) -> str:
    """``<prefix><date-time><separator><uid><suffix>`` for a file started at ``when``."""
    return f"{prefix}{datetime_format.render(when)}{datetime_format.separator}{uid}{suffix}"
