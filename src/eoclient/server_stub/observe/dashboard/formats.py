"""Numbers and times as the dashboard prints them: each with its unit, one time format.

Times are RFC 3339 in UTC with a ``Z``, to the second (``2026-01-01T12:00:00Z``): what the
``eoclient`` command prints and reads back (``seek --time``), so a time copied from a page
works on the command line. Durations use the command's spelling too (``7d``, ``1h30m``,
``45s``); counts carry their unit (``3 messages``) and thousands separators; sizes are in
binary units (``91.8 KiB``). Pure functions.
"""

from __future__ import annotations

import datetime

NONE = "–"  # shown where a value does not apply (no retention, no message waiting)

_DURATION_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_SIZE_UNITS = ("KiB", "MiB", "GiB", "TiB")


def when(seconds: float) -> str:
    """``2026-01-01T12:00:00Z``: the instant ``seconds`` after the epoch, in UTC."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    """A span as the command spells one: ``7d``, ``1h30m``, ``45s``, ``0.5s``; the largest
    unit and the one below it (7 days and 1 second reads ``7d``: what matters is its size)."""
    if seconds < 1:
        return f"{seconds:g}s"
    whole = round(seconds)
    for index, (unit, size) in enumerate(_DURATION_UNITS):
        if whole >= size:
            count, rest = divmod(whole, size)
            shown = f"{count}{unit}"
            if index + 1 < len(_DURATION_UNITS):
                below, below_size = _DURATION_UNITS[index + 1]
                if rest // below_size:
                    shown += f"{rest // below_size}{below}"
            return shown
    raise AssertionError("unreachable: whole >= 1")  # pragma: no cover


def age(seconds: float) -> str:
    """How old something is (``45s``, ``12m``, ``3h10m``); ``–`` for nothing (0)."""
    return NONE if seconds <= 0 else duration(seconds)


def count(value: int, unit: str, plural: str | None = None) -> str:
    """``1 message``, ``1,107 messages``."""
    word = unit if value == 1 else (plural or unit + "s")
    return f"{value:,} {word}"


def size(value: int) -> str:
    """``512 B``, ``91.8 KiB``, ``3.0 MiB``."""
    if value < 1024:
        return f"{value:,} B"
    amount = float(value)
    for unit in _SIZE_UNITS:
        amount /= 1024
        if amount < 1024 or unit == _SIZE_UNITS[-1]:
            return f"{amount:,.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def rate(per_second: float, unit: str = "msg/s") -> str:
    """``12.5 msg/s``."""
    return f"{per_second:,.1f} {unit}"
