"""BigQuery table schemas and how each one is kept in DuckDB.

A table's schema is a tuple of ``Field`` s, read from the JSON schema file ``bq mk --schema``
takes (a list of ``{"name", "type", "mode", "fields", "description"}`` objects, or a table
resource ``{"schema": {"fields": [...]}, "tableConstraints": {"primaryKey": {"columns":
[...]}}}`` that also names the primary key change data capture needs).

The type mapping (docs/server/bigquery.md lists it for users):

| BigQuery (and its aliases) | DuckDB |
|---|---|
| STRING | VARCHAR |
| BYTES | BLOB |
| JSON | JSON |
| INT64 (INTEGER, INT, SMALLINT, BIGINT, TINYINT, BYTEINT) | BIGINT |
| FLOAT64 (FLOAT) | DOUBLE |
| BOOL (BOOLEAN) | BOOLEAN |
| NUMERIC (DECIMAL), precision 38, scale 9 | DECIMAL(38,9), or DECIMAL(P,S) as declared |
| BIGNUMERIC (BIGDECIMAL) | VARCHAR: the exact decimal text (DuckDB's DECIMAL has 38 digits) |
| TIMESTAMP | TIMESTAMPTZ (microseconds, shown in UTC) |
| DATETIME | TIMESTAMP |
| DATE / TIME | DATE / TIME |
| GEOGRAPHY | VARCHAR (the text as given, not checked) |
| RECORD (STRUCT) | STRUCT(...) |
| mode REPEATED | a LIST of the type (``T[]``) |
| mode REQUIRED | NOT NULL on a top-level column; checked by the writer for nested fields |

What DuckDB cannot say itself — JSON is a VARCHAR alias, BIGNUMERIC and GEOGRAPHY are
VARCHARs, a nested field's REQUIRED, descriptions, the primary key BigQuery keeps but does
not enforce — is kept in the stand-in's catalog (``catalog``), and DuckDB stays the truth
for which columns exist: a table made or altered with plain SQL is read back from DuckDB's
own types (``from_duckdb``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from eoclient.errors import InvalidArgument

STRING = "STRING"
BYTES = "BYTES"
JSON_TYPE = "JSON"
INT64 = "INT64"
FLOAT64 = "FLOAT64"
BOOL = "BOOL"
NUMERIC = "NUMERIC"
BIGNUMERIC = "BIGNUMERIC"
TIMESTAMP = "TIMESTAMP"
DATETIME = "DATETIME"
DATE = "DATE"
TIME = "TIME"
GEOGRAPHY = "GEOGRAPHY"
RECORD = "RECORD"

NULLABLE = "NULLABLE"
REQUIRED = "REQUIRED"
REPEATED = "REPEATED"
MODES = (NULLABLE, REQUIRED, REPEATED)

# BigQuery's spellings of each type ("Data types": INT64 and its aliases, DECIMAL, ...).
_ALIASES = {
    "STRING": STRING,
    "BYTES": BYTES,
    "JSON": JSON_TYPE,
    "INT64": INT64,
    "INTEGER": INT64,
    "INT": INT64,
    "SMALLINT": INT64,
    "BIGINT": INT64,
    "TINYINT": INT64,
    "BYTEINT": INT64,
    "FLOAT64": FLOAT64,
    "FLOAT": FLOAT64,
    "BOOL": BOOL,
    "BOOLEAN": BOOL,
    "NUMERIC": NUMERIC,
    "DECIMAL": NUMERIC,
    "BIGNUMERIC": BIGNUMERIC,
    "BIGDECIMAL": BIGNUMERIC,
    "TIMESTAMP": TIMESTAMP,
    "DATETIME": DATETIME,
    "DATE": DATE,
    "TIME": TIME,
    "GEOGRAPHY": GEOGRAPHY,
    "RECORD": RECORD,
    "STRUCT": RECORD,
}
# Types of BigQuery the stand-in does not keep (refused when a table is made).
UNSUPPORTED_TYPES = ("INTERVAL", "RANGE")

# NUMERIC: precision 38, scale 9 (BigQuery "Data types"); DuckDB's DECIMAL tops out at 38.
NUMERIC_PRECISION = 38
NUMERIC_SCALE = 9
MAX_DUCKDB_PRECISION = 38
_DUCKDB_SCALARS = {
    STRING: "VARCHAR",
    BYTES: "BLOB",
    JSON_TYPE: "JSON",
    INT64: "BIGINT",
    FLOAT64: "DOUBLE",
    BOOL: "BOOLEAN",
    BIGNUMERIC: "VARCHAR",
    TIMESTAMP: "TIMESTAMPTZ",
    DATETIME: "TIMESTAMP",
    DATE: "DATE",
    TIME: "TIME",
    GEOGRAPHY: "VARCHAR",
}
# BigQuery column names ("Specifying a schema": column names): a letter or underscore,
# then letters, digits and underscores, at most 300 characters; never these prefixes.
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,299}$")
RESERVED_PREFIXES = (
    "_TABLE_",
    "_FILE_",
    "_PARTITION",
    "_ROW_TIMESTAMP",
    "__ROOT__",
    "_COLIDENTIFIER",
    "_CHANGE_SEQUENCE_NUMBER",
    "_CHANGE_TYPE",
    "_CHANGE_TIMESTAMP",
)
# BigQuery allows up to 16 primary-key columns for change data capture.
MAX_PRIMARY_KEY_COLUMNS = 16


@dataclass(frozen=True)
class Field:
    """One column (or nested field) as BigQuery describes it."""

    name: str
    type: str  # a canonical name above
    mode: str = NULLABLE
    fields: tuple[Field, ...] = ()  # a RECORD's fields
    description: str = ""
    precision: int | None = None  # NUMERIC(P, S) as declared
    scale: int | None = None

    @property
    def repeated(self) -> bool:
        return self.mode == REPEATED

    @property
    def required(self) -> bool:
        return self.mode == REQUIRED

    def child(self, name: str) -> Field | None:
        return find(self.fields, name)

    def to_json(self) -> dict[str, Any]:
        """The field in ``bq``'s JSON schema format."""
        out: dict[str, Any] = {"name": self.name, "type": self.type, "mode": self.mode}
        if self.fields:
            out["fields"] = [f.to_json() for f in self.fields]
        if self.description:
            out["description"] = self.description
        if self.precision is not None:
            out["precision"] = str(self.precision)
        if self.scale is not None:
            out["scale"] = str(self.scale)
        return out

    def describe(self) -> str:
        """``NUMERIC``, ``REPEATED RECORD<a INT64, b STRING>`` ...: for error messages."""
        text = self.type
        if self.type == RECORD:
            text += "<" + ", ".join(f"{f.name} {f.describe()}" for f in self.fields) + ">"
        return f"{self.mode} {text}" if self.mode != NULLABLE else text


@dataclass(frozen=True)
class TableSchema:
    """A table's columns and the primary key change data capture applies changes by."""

    fields: tuple[Field, ...]
    primary_key: tuple[str, ...] = ()

    def column(self, name: str) -> Field | None:
        return find(self.fields, name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": {"fields": [f.to_json() for f in self.fields]}}
        if self.primary_key:
            out["tableConstraints"] = {"primaryKey": {"columns": list(self.primary_key)}}
        return out


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def find(fields: Iterable[N], name: str) -> N | None:
    """The field named ``name``; BigQuery column names are case-insensitive."""
    folded = name.casefold()
    for candidate in fields:
        if candidate.name.casefold() == folded:
            return candidate
    return None


def canonical_type(name: str) -> str:
    """The canonical spelling of a BigQuery type name (InvalidArgument if unknown)."""
    upper = name.strip().upper()
    if upper in _ALIASES:
        return _ALIASES[upper]
    if upper in UNSUPPORTED_TYPES:
        raise InvalidArgument(
            f"The BigQuery type {upper} is not kept by eoclient's BigQuery stand-in "
            "(supported: STRING, BYTES, JSON, INT64, FLOAT64, BOOL, NUMERIC, BIGNUMERIC, "
            "TIMESTAMP, DATETIME, DATE, TIME, GEOGRAPHY, RECORD)."
        )
    raise InvalidArgument(f"Unknown BigQuery type {name!r}.")


# ------------------------------------------------------------ the JSON file


def parse_schema(document: Any, primary_key: Sequence[str] = ()) -> TableSchema:
    """A ``TableSchema`` from ``bq``'s JSON schema (a list of fields), a ``{"fields": [...]}``
    object, or a table resource with ``schema`` and ``tableConstraints``; ``primary_key``
    (column names) adds to, or stands in for, the resource's own."""
    constraints: Any = {}
    if isinstance(document, Mapping):
        constraints = document.get("tableConstraints") or {}
        if "schema" in document:
            document = document["schema"]
        if isinstance(document, Mapping):
            document = document.get("fields")
    if not isinstance(document, list) or not document:
        raise InvalidArgument(
            'A table schema is a non-empty JSON list of fields ({"name": ..., "type": ..., '
            '"mode": ...}), as bq mk --schema takes it.'
        )
    fields = _parse_fields(document, "")
    declared: list[str] = []
    if isinstance(constraints, Mapping):
        key = constraints.get("primaryKey") or {}
        if isinstance(key, Mapping):
            declared = [str(c) for c in key.get("columns") or []]
    return with_primary_key(TableSchema(fields), list(primary_key) or declared)


def with_primary_key(schema: TableSchema, columns: Sequence[str]) -> TableSchema:
    """``schema`` keyed by ``columns`` (top-level, not REPEATED, not RECORD, at most 16)."""
    if not columns:
        return schema
    if len(columns) > MAX_PRIMARY_KEY_COLUMNS:
        raise InvalidArgument(
            f"A primary key has at most {MAX_PRIMARY_KEY_COLUMNS} columns ({len(columns)} given)."
        )
    names: list[str] = []
    for column in columns:
        found = schema.column(column)
        if found is None:
            raise InvalidArgument(
                f"The primary key column {column!r} is not a column of the table."
            )
        if found.repeated or found.type in (RECORD, JSON_TYPE, GEOGRAPHY):
            raise InvalidArgument(
                f"The primary key column {found.name!r} is {found.describe()}: a key column "
                "must be a single value that can be compared (not REPEATED, RECORD, JSON or "
                "GEOGRAPHY)."
            )
        if found.name in names:
            raise InvalidArgument(f"The primary key names {found.name!r} twice.")
        names.append(found.name)
    return replace(schema, primary_key=tuple(names))


def _parse_fields(items: Sequence[Any], path: str) -> tuple[Field, ...]:
    fields: list[Field] = []
    for item in items:
        parsed = _parse_field(item, path)
        if find(fields, parsed.name) is not None:
            raise InvalidArgument(
                f"The column name {path}{parsed.name} appears twice (BigQuery column names "
                "are case-insensitive)."
            )
        fields.append(parsed)
    return tuple(fields)


def _parse_field(item: Any, path: str) -> Field:
    if not isinstance(item, Mapping) or "name" not in item or "type" not in item:
        raise InvalidArgument(
            f"Each field of a table schema is an object with a name and a type (got {item!r})."
        )
    name = str(item["name"])
    check_column_name(path + name)
    kind = canonical_type(str(item["type"]))
    mode = str(item.get("mode") or NULLABLE).upper()
    if mode not in MODES:
        raise InvalidArgument(
            f"The mode of {path}{name} is {mode!r}: one of NULLABLE, REQUIRED, REPEATED."
        )
    children: tuple[Field, ...] = ()
    if kind == RECORD:
        nested = item.get("fields")
        if not isinstance(nested, list) or not nested:
            raise InvalidArgument(f"The RECORD field {path}{name} needs a non-empty fields list.")
        children = _parse_fields(nested, f"{path}{name}.")
    elif item.get("fields"):
        raise InvalidArgument(f"Only a RECORD has fields ({path}{name} is {kind}).")
    precision = scale = None
    if kind == NUMERIC and ("precision" in item or "scale" in item):
        try:
            precision = int(item.get("precision", NUMERIC_PRECISION))
            scale = int(item.get("scale", 0))
        except (TypeError, ValueError):
            raise InvalidArgument(f"The precision and scale of {path}{name} are numbers.") from None
        if not 1 <= precision <= MAX_DUCKDB_PRECISION or not 0 <= scale <= min(precision, 9):
            raise InvalidArgument(
                f"NUMERIC({precision}, {scale}) of {path}{name}: the stand-in keeps a precision "
                f"of 1 to {MAX_DUCKDB_PRECISION} and a scale of 0 to 9 (at most the precision)."
            )
    return Field(
        name=name,
        type=kind,
        mode=mode,
        fields=children,
        description=str(item.get("description") or ""),
        precision=precision,
        scale=scale,
    )


def check_column_name(name: str) -> None:
    leaf = name.rsplit(".", 1)[-1]
    if not _COLUMN_NAME.match(leaf):
        raise InvalidArgument(
            f"Invalid column name {name!r}: a column name starts with a letter or an underscore "
            "and holds only letters, digits and underscores (at most 300 characters)."
        )
    upper = leaf.upper()
    for prefix in RESERVED_PREFIXES:
        if upper.startswith(prefix):
            raise InvalidArgument(f"Invalid column name {name!r}: the prefix {prefix} is reserved.")


# -------------------------------------------------------------- DuckDB types


def quote(identifier: str) -> str:
    """An identifier in double quotes, so that any name (dashes, spaces, keywords) is one."""
    return '"' + identifier.replace('"', '""') + '"'


def duckdb_type(f: Field) -> str:
    """The DuckDB type of a column or nested field (without NOT NULL)."""
    if f.type == RECORD:
        inner = ", ".join(f"{quote(c.name)} {duckdb_type(c)}" for c in f.fields)
        base = f"STRUCT({inner})"
    elif f.type == NUMERIC:
        base = f"DECIMAL({f.precision or NUMERIC_PRECISION},{_scale(f)})"
    else:
        base = _DUCKDB_SCALARS[f.type]
    return base + "[]" if f.repeated else base


def _scale(f: Field) -> int:
    if f.precision is None and f.scale is None:
        return NUMERIC_SCALE
    return f.scale or 0


def column_ddl(f: Field) -> str:
    return f"{quote(f.name)} {duckdb_type(f)}" + (" NOT NULL" if f.required else "")


def from_duckdb(name: str, duck: Any, nullable: bool = True, known: Field | None = None) -> Field:
    """The BigQuery field of a DuckDB column (``duck``: a ``DuckDBPyType``); ``known``, the
    catalog's entry for it, fills in what DuckDB cannot say when the two still agree."""
    text = str(duck)
    mode = NULLABLE if nullable else REQUIRED
    if duck.id == "list":
        child = from_duckdb(name, duck.child, True, _unrepeated(known))
        return replace(child, mode=REPEATED)
    if duck.id == "struct":
        known_children = known.fields if known is not None and known.type == RECORD else ()
        children = tuple(
            from_duckdb(child_name, child_type, True, find(known_children, child_name))
            for child_name, child_type in duck.children
        )
        if known is not None and known.type == RECORD:
            # Nested REQUIRED lives only in the catalog (DuckDB has no NOT NULL inside).
            children = tuple(
                replace(c, mode=k.mode)
                if (k := find(known.fields, c.name)) and not c.repeated and k.mode == REQUIRED
                else c
                for c in children
            )
        return Field(name, RECORD, mode, children, known.description if known else "")
    kind = _bigquery_of(duck.id, text)
    precision = scale = None
    if kind == NUMERIC:
        size = dict(duck.children)
        precision, scale = int(size["precision"]), int(size["scale"])
        if (precision, scale) == (NUMERIC_PRECISION, NUMERIC_SCALE):
            precision = scale = None
    if known is not None and known.type != kind and _DUCKDB_SCALARS.get(known.type) == text:
        kind = known.type  # BIGNUMERIC or GEOGRAPHY kept as VARCHAR
    description = known.description if known is not None else ""
    return Field(name, kind, mode, (), description, precision, scale)


def _unrepeated(known: Field | None) -> Field | None:
    if known is None or not known.repeated:
        return None
    return replace(known, mode=NULLABLE)


def _bigquery_of(duck_id: str, text: str) -> str:
    if text == "JSON":
        return JSON_TYPE
    if duck_id in ("varchar", "uuid", "enum"):
        return STRING
    if duck_id in ("blob", "bit"):
        return BYTES
    if duck_id in (
        "bigint",
        "integer",
        "smallint",
        "tinyint",
        "ubigint",
        "uinteger",
        "usmallint",
        "utinyint",
        "hugeint",
    ):
        return INT64
    if duck_id in ("double", "float"):
        return FLOAT64
    if duck_id == "boolean":
        return BOOL
    if duck_id == "decimal":
        return NUMERIC
    if duck_id.startswith("timestamp with time zone"):
        return TIMESTAMP
    if duck_id.startswith("timestamp"):
        return DATETIME
    if duck_id == "date":
        return DATE
    if duck_id.startswith("time"):
        return TIME
    # A column of a type BigQuery has no word for (MAP, UNION, INTERVAL, ...): shown as
    # its DuckDB type; the writer refuses to fill it.
    return text.upper()


def schema_json(schema: TableSchema) -> str:
    return json.dumps(schema.to_json(), sort_keys=True)
