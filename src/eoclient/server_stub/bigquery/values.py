"""One message field's value made into the value of a BigQuery column (pure).

The rules are docs/protocol.md#bigquery-value-conversions. ``convert`` takes what a message
holds after decoding — a JSON value (``use_table_schema``) or a value of the topic's Avro or
protobuf schema (``use_topic_schema``) — and returns what the DuckDB column of the field
keeps (``table_schema``'s mapping), or raises ``ConversionError`` naming the field.

Beyond the obvious (a string to STRING, an integer to INT64, an object to a RECORD, an
array to a REPEATED field, any value to JSON), what BigQuery subscriptions convert:

* a string to NUMERIC / BIGNUMERIC is a human-readable number ("123.124"); if it is not,
  it is read as the base64 of the bytes Google's ``BigDecimalByteStringEncoder`` writes
  (the unscaled value, little-endian two's complement; scale 9 for NUMERIC, 38 for
  BIGNUMERIC). A number to NUMERIC / BIGNUMERIC goes through its IEEE 754 double.
* a string to DATE / TIME / DATETIME / TIMESTAMP is the type's canonical text
  (``2024-05-01``, ``12:30:00.25``, ``2024-05-01T12:30:00``, RFC 3339 with an offset or
  ``Z``; a TIMESTAMP without one is UTC).
* a number to DATE is days since 1970-01-01; to TIMESTAMP microseconds since the epoch; to
  TIME and DATETIME the packed 64-bit civil time of ``CivilTimeEncoder`` (bit fields
  year 26+, month 22, day 17, hour 12, minute 6, second 0, then 20 bits of microseconds).
* BYTES from a JSON string is its base64 (BigQuery's own JSON form of BYTES).
* NUMERIC keeps 9 decimals, rounded half away from zero; a value beyond 29 integer digits
  (or BIGNUMERIC's range) does not convert.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

from eoclient.server_stub.bigquery.table_schema import (
    BIGNUMERIC,
    BOOL,
    BYTES,
    DATE,
    DATETIME,
    FLOAT64,
    GEOGRAPHY,
    INT64,
    JSON_TYPE,
    NUMERIC,
    NUMERIC_PRECISION,
    NUMERIC_SCALE,
    RECORD,
    STRING,
    TIME,
    TIMESTAMP,
    Field,
    find,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
BIGNUMERIC_SCALE = 38
# BIGNUMERIC's range (BigQuery "Data types"): about ±5.79E+38, 38 decimals.
BIGNUMERIC_MAX = decimal.Decimal(
    "578960446186580977117854925043439539266.34992332820282019728792003956564819967"
)
BIGNUMERIC_MIN = -BIGNUMERIC_MAX - decimal.Decimal("1e-38")
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Enough digits for BIGNUMERIC (77) with room to round.
_CONTEXT = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)
_MICRO_BITS = 20


class ConversionError(ValueError):
    """A value that does not convert to its column; ``unknown`` when it is a field the table
    lacks (written only with ``drop_unknown_fields``)."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


class UnknownFieldError(ConversionError):
    def __init__(self, path: str) -> None:
        super().__init__(
            f"the message has a field {path!r} that the table has no column for "
            "(set drop_unknown_fields to drop such fields)",
            unknown=True,
        )


def convert_record(
    fields: tuple[Field, ...],
    value: Mapping[str, Any],
    *,
    drop_unknown: bool,
    json_source: bool,
    path: str = "",
) -> dict[str, Any]:
    """Every field of ``fields`` from ``value`` (missing ones None, REQUIRED ones refused);
    a key of ``value`` no field has raises ``UnknownFieldError`` unless ``drop_unknown``."""
    out: dict[str, Any] = {}
    for key in value:
        if find(fields, key) is None and not drop_unknown:
            raise UnknownFieldError(path + key)
    lowered = {k.casefold(): v for k, v in value.items()}
    for f in fields:
        raw = lowered.get(f.name.casefold())
        out[f.name] = convert(
            f, raw, drop_unknown=drop_unknown, json_source=json_source, path=path + f.name
        )
    return out


def convert(f: Field, value: Any, *, drop_unknown: bool, json_source: bool, path: str) -> Any:
    """``value`` as field ``f`` keeps it (its whole mode: NULL, REQUIRED, REPEATED)."""
    if f.repeated:
        if value is None:
            return []  # a REPEATED field is never NULL in BigQuery: an empty array
        if not isinstance(value, list | tuple):
            raise ConversionError(f"{path} is REPEATED: expected an array, got {_kind(value)}")
        items = []
        for i, item in enumerate(value):
            if item is None:
                raise ConversionError(f"{path}[{i}] is null: an array element cannot be NULL")
            items.append(_one(f, item, drop_unknown, json_source, f"{path}[{i}]"))
        return items
    if value is None:
        if f.required:
            raise ConversionError(f"{path} is REQUIRED but the message has no value for it")
        return None
    return _one(f, value, drop_unknown, json_source, path)


def _one(f: Field, value: Any, drop_unknown: bool, json_source: bool, path: str) -> Any:
    kind = f.type
    try:
        if kind == RECORD:
            if not isinstance(value, Mapping):
                raise ConversionError(f"{path} is a RECORD: expected an object, got {_kind(value)}")
            return convert_record(
                f.fields,
                value,
                drop_unknown=drop_unknown,
                json_source=json_source,
                path=path + ".",
            )
        converter = _CONVERTERS[kind]
    except KeyError:
        raise ConversionError(
            f"{path} has the type {kind}, which the stand-in cannot fill"
        ) from None
    try:
        return converter(f, value, json_source)
    except ConversionError as error:
        raise ConversionError(f"{path}: {error}") from None
    except (ValueError, TypeError, ArithmeticError, OverflowError) as error:
        raise ConversionError(
            f"{path}: {_show(value)} does not convert to {kind} ({error})"
        ) from None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | decimal.Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, bytes):
        return "bytes"
    return type(value).__name__


def _refuse(kind: str, value: Any) -> ConversionError:
    return ConversionError(f"{_kind(value)} ({_show(value)}) does not convert to {kind}")


# -------------------------------------------------------------- scalars


def _string(f: Field, value: Any, json_source: bool) -> str:
    if isinstance(value, str):
        return value
    raise _refuse(f.type, value)


def _bytes(f: Field, value: Any, json_source: bool) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            raise ConversionError(f"{_show(value)} is not base64 (BYTES in JSON)") from None
    raise _refuse(BYTES, value)


def _json(f: Field, value: Any, json_source: bool) -> str:
    if not json_source:
        # A schema's string field into a JSON column: the string must itself be JSON.
        if not isinstance(value, str):
            raise _refuse(JSON_TYPE, value)
        try:
            json.loads(value)
        except ValueError:
            raise ConversionError(f"{_show(value)} is not valid JSON") from None
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _int64(f: Field, value: Any, json_source: bool) -> int:
    if isinstance(value, bool):
        raise _refuse(INT64, value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ConversionError(f"{value!r} is not an integer")
        value = int(value)
    elif isinstance(value, str):
        value = int(value.strip())
    if not isinstance(value, int):
        raise _refuse(INT64, value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ConversionError(f"{value} is outside INT64")
    return value


def _float64(f: Field, value: Any, json_source: bool) -> float:
    if isinstance(value, bool):
        raise _refuse(FLOAT64, value)
    if isinstance(value, int | float | decimal.Decimal):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise _refuse(FLOAT64, value)


def _bool(f: Field, value: Any, json_source: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _refuse(BOOL, value)


def _decimal(f: Field, value: Any, scale: int) -> decimal.Decimal:
    if isinstance(value, bool):
        raise _refuse(f.type, value)
    if isinstance(value, decimal.Decimal):
        number = value
    elif isinstance(value, int):
        number = decimal.Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ConversionError(f"{value!r} has no {f.type} value")
        number = decimal.Decimal(repr(value))  # the double's shortest text
    elif isinstance(value, bytes):
        number = _from_encoder_bytes(value, scale)
    elif isinstance(value, str):
        try:
            number = decimal.Decimal(value.strip())
            if not number.is_finite():
                raise ConversionError(f"{value!r} has no {f.type} value")
        except decimal.InvalidOperation:
            try:
                raw = base64.b64decode(value, validate=True)
            except binascii.Error:
                raise ConversionError(
                    f"{_show(value)} is neither a number nor base64 BigDecimalByteStringEncoder "
                    "bytes"
                ) from None
            number = _from_encoder_bytes(raw, scale)
    else:
        raise _refuse(f.type, value)
    return number.quantize(decimal.Decimal(1).scaleb(-scale), context=_CONTEXT)


def _from_encoder_bytes(raw: bytes, scale: int) -> decimal.Decimal:
    if not raw:
        raise ConversionError("empty bytes are not a BigDecimalByteStringEncoder value")
    unscaled = int.from_bytes(raw, "little", signed=True)
    return decimal.Decimal(unscaled).scaleb(-scale, context=_CONTEXT)


def _numeric(f: Field, value: Any, json_source: bool) -> decimal.Decimal:
    precision = f.precision or NUMERIC_PRECISION
    scale = f.scale if f.precision is not None or f.scale is not None else NUMERIC_SCALE
    number = _decimal(f, value, scale or 0)
    if abs(number) >= decimal.Decimal(10) ** (precision - (scale or 0)):
        raise ConversionError(f"{number} is outside NUMERIC({precision}, {scale})")
    return number


def _bignumeric(f: Field, value: Any, json_source: bool) -> str:
    number = _decimal(f, value, BIGNUMERIC_SCALE)
    if not BIGNUMERIC_MIN <= number <= BIGNUMERIC_MAX:
        raise ConversionError(f"{number} is outside BIGNUMERIC")
    text = format(number.normalize(_CONTEXT), "f")
    return "0" if text in ("-0", "0") else text


def _date(f: Field, value: Any, json_source: bool) -> dt.date:
    if isinstance(value, dt.datetime):
        raise _refuse(DATE, value)
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        return dt.date.fromisoformat(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return _EPOCH_DATE + dt.timedelta(days=value)
    raise _refuse(DATE, value)


def _time(f: Field, value: Any, json_source: bool) -> dt.time:
    if isinstance(value, dt.time):
        return value.replace(tzinfo=None)
    if isinstance(value, str):
        return dt.time.fromisoformat(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return unpack_time_micros(value)
    raise _refuse(TIME, value)


def _datetime(f: Field, value: Any, json_source: bool) -> dt.datetime:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            raise _refuse(DATETIME, value)
        return value
    if isinstance(value, str):
        parsed = dt.datetime.fromisoformat(value.strip())
        if parsed.tzinfo is not None:
            raise ConversionError(f"{value!r} has a time zone: a DATETIME has none")
        return parsed
    if isinstance(value, int) and not isinstance(value, bool):
        return unpack_datetime_micros(value)
    raise _refuse(DATETIME, value)


def _timestamp(f: Field, value: Any, json_source: bool) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(" UTC"):
            text = text[:-4]
        parsed = dt.datetime.fromisoformat(text.replace("z", "Z"))
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
    if isinstance(value, int) and not isinstance(value, bool):
        return _EPOCH + dt.timedelta(microseconds=value)
    if isinstance(value, float) and value.is_integer():
        return _EPOCH + dt.timedelta(microseconds=int(value))
    raise _refuse(TIMESTAMP, value)


def _geography(f: Field, value: Any, json_source: bool) -> str:
    if isinstance(value, str):
        return value
    raise _refuse(GEOGRAPHY, value)


_CONVERTERS = {
    STRING: _string,
    BYTES: _bytes,
    JSON_TYPE: _json,
    INT64: _int64,
    FLOAT64: _float64,
    BOOL: _bool,
    NUMERIC: _numeric,
    BIGNUMERIC: _bignumeric,
    DATE: _date,
    TIME: _time,
    DATETIME: _datetime,
    TIMESTAMP: _timestamp,
    GEOGRAPHY: _geography,
}


# ------------------------------------------------------- packed civil time


def unpack_time_micros(packed: int) -> dt.time:
    """A TIME from ``CivilTimeEncoder``'s packed 64-bit micros (hour, minute, second, then
    20 bits of microseconds)."""
    micros = packed & ((1 << _MICRO_BITS) - 1)
    seconds = packed >> _MICRO_BITS
    return dt.time((seconds >> 12) & 0x1F, (seconds >> 6) & 0x3F, seconds & 0x3F, micros)


def unpack_datetime_micros(packed: int) -> dt.datetime:
    """A DATETIME from ``CivilTimeEncoder``'s packed 64-bit micros (year, month, day,
    hour, minute, second, then 20 bits of microseconds)."""
    micros = packed & ((1 << _MICRO_BITS) - 1)
    s = packed >> _MICRO_BITS
    return dt.datetime(
        (s >> 26) & 0x3FFF,
        (s >> 22) & 0xF,
        (s >> 17) & 0x1F,
        (s >> 12) & 0x1F,
        (s >> 6) & 0x3F,
        s & 0x3F,
        micros,
    )


def pack_time_micros(value: dt.time) -> int:
    seconds = (value.hour << 12) | (value.minute << 6) | value.second
    return (seconds << _MICRO_BITS) | value.microsecond


def pack_datetime_micros(value: dt.datetime) -> int:
    seconds = (
        (value.year << 26)
        | (value.month << 22)
        | (value.day << 17)
        | (value.hour << 12)
        | (value.minute << 6)
        | value.second
    )
    return (seconds << _MICRO_BITS) | value.microsecond
