"""Flag values as gcloud spells them: durations, instants and labels (parse and print).

Pure functions; each raises :class:`~eoclient.cli.errors.CliError` with an example of
the right form, so a mistyped flag is one clear line.

* Durations (``--ack-deadline`` aside, which is whole seconds): ``600``, ``600s``,
  ``10m``, ``7d``, ``1h30m``, ``2.5s`` — gcloud's ``INTEGER[UNIT]`` form with units s, m,
  h, d (seconds when no unit), also chained and with decimals.
* Instants (``seek --time``, ``--expire-time``): ISO 8601 / RFC 3339
  (``2026-01-01T12:00:00Z``; without an offset, the local time zone, as gcloud), ``now``,
  or a duration before now: ``-10m``.
* Labels: ``KEY=VALUE[,KEY=VALUE...]``, the flag repeatable.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable

from eoclient.cli.errors import CliError

_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([dhms])")
_BARE_SECONDS = re.compile(r"\d+(?:\.\d*)?|\.\d+")
DURATION_EXAMPLES = "600s, 10m, 7d or 1h30m"


def parse_duration(text: str) -> datetime.timedelta:
    """``"10m"`` → 10 minutes; a bare number is seconds."""
    value = text.strip().lower()
    if _BARE_SECONDS.fullmatch(value):
        return datetime.timedelta(seconds=float(value))
    position, total = 0, 0.0
    for part in _PART.finditer(value):
        if part.start() != position:
            break
        total += float(part.group(1)) * _UNITS[part.group(2)]
        position = part.end()
    if not value or position != len(value):
        raise CliError(
            f"invalid duration {text!r}: a number with a unit s, m, h or d "
            f"(e.g. {DURATION_EXAMPLES})"
        )
    return datetime.timedelta(seconds=total)


def parse_time(text: str, now: datetime.datetime) -> datetime.datetime:
    """An instant, timezone-aware: ISO 8601, ``now``, or ``-DURATION`` (before ``now``)."""
    value = text.strip()
    if value.lower() == "now":
        return now
    if value.startswith("-"):
        return now - parse_duration(value[1:])
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise CliError(
            f"invalid time {text!r}: ISO 8601 such as 2026-01-01T12:00:00Z, 'now', "
            "or a duration ago such as -10m"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # local time, as gcloud reads a time without offset
    return parsed


def parse_labels(values: Iterable[str]) -> dict[str, str]:
    """``["a=1,b=2", "c=3"]`` → ``{"a": "1", "b": "2", "c": "3"}``."""
    labels: dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            key, equals, label = item.partition("=")
            if not equals or not key.strip():
                raise CliError(f"invalid label {item!r}: expected KEY=VALUE (e.g. team=payments)")
            labels[key.strip()] = label.strip()
    return labels


def parse_keys(values: Iterable[str]) -> list[str]:
    """``--remove-labels a,b --remove-labels c`` → ``["a", "b", "c"]``."""
    keys = [key.strip() for value in values for key in value.split(",")]
    if any(not key for key in keys):
        raise CliError(f"invalid label keys {list(values)!r}: expected KEY[,KEY...]")
    return keys


def format_duration(value: datetime.timedelta) -> str:
    """For people: ``7d``, ``1h30m``, ``10.5s`` (a form :func:`parse_duration` reads)."""
    micros = round(value.total_seconds() * 1_000_000)
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    seconds, micros = divmod(abs(micros), 1_000_000)
    parts = []
    for unit, size in _UNITS.items():
        if unit == "s":
            break
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    if seconds or micros:
        fraction = f".{micros:06d}".rstrip("0") if micros else ""
        parts.append(f"{seconds}{fraction}s")
    return sign + "".join(parts)


def wire_duration(value: datetime.timedelta) -> str:
    """As the REST/JSON mapping writes a ``google.protobuf.Duration``: ``"600s"``, ``"1.500s"``."""
    micros = round(value.total_seconds() * 1_000_000)
    seconds, micros = divmod(abs(micros), 1_000_000)
    sign = "-" if value < datetime.timedelta(0) else ""
    if micros == 0:
        return f"{sign}{seconds}s"
    if micros % 1000 == 0:
        return f"{sign}{seconds}.{micros // 1000:03d}s"
    return f"{sign}{seconds}.{micros:06d}s"


def wire_time(value: datetime.datetime) -> str:
    """As the REST/JSON mapping writes a ``Timestamp``: RFC 3339 in UTC, ``Z``."""
    utc = value.astimezone(datetime.UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond % 1000:
        text += f".{utc.microsecond:06d}"
    elif utc.microsecond:
        text += f".{utc.microsecond // 1000:03d}"
    return text + "Z"
