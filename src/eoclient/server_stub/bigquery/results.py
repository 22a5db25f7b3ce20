"""What the BigQuery stand-in answers: a target's state, a write's outcome, the tables'
activity (what a dashboard shows) and a query's result, with the values a query returns
made JSON-ready (``jsonable``)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIVE",
    "NOT_FOUND",
    "SCHEMA_MISMATCH",
    "QueryResult",
    "TableActivity",
    "TargetStatus",
    "WriteResult",
    "jsonable",
]

# BigQueryConfig.State names the stand-in reports.
ACTIVE = "ACTIVE"
NOT_FOUND = "NOT_FOUND"
SCHEMA_MISMATCH = "SCHEMA_MISMATCH"


@dataclass(frozen=True)
class TargetStatus:
    """A target's state (ACTIVE, NOT_FOUND, SCHEMA_MISMATCH) and why, when not ACTIVE."""

    state: str
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.state == ACTIVE


@dataclass(frozen=True)
class WriteResult:
    """What one ``write`` did. Acknowledge ``written``; ``unwritable`` (id -> reason) were not
    written (nack them: each counts a delivery attempt, so a dead-letter policy takes them
    in the end). When ``state`` is not ACTIVE because the table is missing or does not fit,
    nothing was tried: both are empty and every message stays."""

    state: str
    reason: str
    written: tuple[str, ...]
    unwritable: dict[str, str]


@dataclass
class TableActivity:
    """What the subscriptions wrote to one table (``dataset.table``)."""

    table: str
    messages_written: int = 0
    unwritable: int = 0
    writes: int = 0
    last_write: float | None = None  # seconds since the epoch
    subscriptions: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class QueryResult:
    """A query's columns (name, DuckDB type) and rows (JSON-ready values)."""

    columns: tuple[tuple[str, str], ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": [{"name": n, "type": t} for n, t in self.columns],
            "rows": [list(r) for r in self.rows],
            "truncated": self.truncated,
        }


def jsonable(value: Any) -> Any:
    """A query value as JSON can hold it: decimals and big integers as text, bytes as
    base64, times as ISO 8601, structs and lists recursively."""
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        return value if -(2**53) <= value <= 2**53 else str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta | uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)
