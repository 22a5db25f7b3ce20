"""Flag values as gcloud spells them: durations, instants and labels (parse and print).

Pure functions; each raises :class:`~eoclient.cli.errors.CliError` with an example of
the right form, so a mistyped flag is one clear line.

* Durations, one grammar for every flag that takes one (``--ack-deadline`` aside, which
  is whole seconds, as gcloud's): a number with a unit s, m, h, d, w or y (seconds when
  none; a year is 365 days), chained and with decimals: ``600``, ``600s``, ``10m``,
  ``7d``, ``2w``, ``1h30m``, ``2.5s``. gcloud's ``INTEGER[UNIT]`` form (s, m, h, d) and
  ``pulsar-admin``'s (s, m, h, d, w, y) both read as they do there. ``-1`` is "forever"
  only where forever makes sense, decided per flag (:data:`FOREVER_FLAGS`); elsewhere it
  is an error that says so.
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

# Units of a duration, largest first (format_duration prints with s, m, h and d only, so
# what it prints reads the same in gcloud).
_UNITS = {"y": 365 * 86_400, "w": 7 * 86_400, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PRINTED_UNITS = ("d", "h", "m", "s")
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([ywdhms])")
_BARE_SECONDS = re.compile(r"\d+(?:\.\d*)?|\.\d+")
DURATION_EXAMPLES = "600s, 10m, 7d, 2w or 1h30m"
FOREVER = "-1"

# The flags where -1 means forever, and what forever is there; every other duration flag
# refuses -1 (a retention of the service is at most 31 days, a retry delay at most 600 s,
# a backlog quota's age is a limit, a message TTL of forever is no TTL: remove it).
FOREVER_FLAGS = {
    "topics set-retention --time": "keep messages without a time limit (Pulsar's -1)",
    "subscriptions create/update --expiration-period": "never expire (also: never)",
}


def parse_duration_or_forever(text: str) -> datetime.timedelta | None:
    """For the flags of :data:`FOREVER_FLAGS`: ``"-1"`` → ``None`` (forever), else
    :func:`parse_duration`."""
    if text.strip() == FOREVER:
        return None
    return parse_duration(text, forever_allowed=True)


def parse_duration(text: str, *, forever_allowed: bool = False) -> datetime.timedelta:
    """``"10m"`` → 10 minutes; a bare number is seconds."""
    value = text.strip().lower()
    if value == FOREVER:
        raise CliError(
            f"invalid duration {text!r}: -1 (forever) is not allowed here; give a number "
            f"with a unit s, m, h, d, w or y (e.g. {DURATION_EXAMPLES})"
        )
    if _BARE_SECONDS.fullmatch(value):
        return datetime.timedelta(seconds=float(value))
    position, total = 0, 0.0
    for part in _PART.finditer(value):
        if part.start() != position:
            break
        total += float(part.group(1)) * _UNITS[part.group(2)]
        position = part.end()
    if not value or position != len(value):
        also = ", or -1 for forever" if forever_allowed else ""
        raise CliError(
            f"invalid duration {text!r}: a number with a unit s, m, h, d, w or y "
            f"(e.g. {DURATION_EXAMPLES}{also})"
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
    for unit in _PRINTED_UNITS[:-1]:
        count, seconds = divmod(seconds, _UNITS[unit])
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
