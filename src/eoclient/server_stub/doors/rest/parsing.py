"""REST requests → request protos: the body (Content-Encoding, strict JSON) and the query.

Everything a client can send is refused here with INVALID_ARGUMENT naming the problem,
never passed on half-checked: a body whose Content-Encoding does not decode (or that
decodes past the size limit), bytes that are not UTF-8, JSON that is not strict JSON
(``NaN``/``Infinity`` are not JSON), nested deeper than protobuf's own recursion limit,
strings or keys holding unpaired surrogates (valid JSON escapes, but not text any
protobuf string can hold), bytes fields that are not base64, fields of the wrong type.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from eoclient.errors import InvalidArgument

# Publish requests may be 10 MB of data, i.e. ~13.4 MB of base64 JSON (plus framing); the
# same limit holds for a body after its Content-Encoding is undone.
MAX_BODY_BYTES = 32 * 2**20
# protobuf's default recursion limit (binary and JSON parsers): what the gRPC door accepts.
MAX_JSON_DEPTH = 100

# Content-Encoding → zlib wbits (RFC 9110 §8.4.1: gzip; deflate is the zlib format, and
# raw deflate is what some clients send under that name, so both are accepted).
_ZLIB_WBITS: Mapping[str, tuple[int, ...]] = {
    "gzip": (31,),
    "x-gzip": (31,),
    "deflate": (15, -15),
}


async def read_body(request: web.Request) -> bytes:
    """The request body with its Content-Encoding undone (the server does not auto-decode:
    a body that lies about its encoding is a 400 here, not aiohttp's plain-text one)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as error:
        raise _too_large() from error
    codings = [
        coding.strip().lower()
        for coding in request.headers.get("Content-Encoding", "").split(",")
        if coding.strip()
    ]
    for coding in reversed(codings):  # the last coding applied is undone first
        if coding == "identity":
            continue
        wbits = _ZLIB_WBITS.get(coding)
        if wbits is None:
            raise InvalidArgument(
                f"Unsupported Content-Encoding {coding!r}: the REST door accepts gzip, "
                "deflate and identity."
            )
        raw = _inflate(raw, coding, wbits)
    return raw


def _too_large() -> InvalidArgument:
    return InvalidArgument(f"Request payload size exceeds the limit: {MAX_BODY_BYTES} bytes.")


def _inflate(data: bytes, coding: str, wbits_choices: tuple[int, ...]) -> bytes:
    for wbits in wbits_choices:
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(data, MAX_BODY_BYTES + 1)
        except zlib.error:
            continue
        if len(out) > MAX_BODY_BYTES or inflater.unconsumed_tail:
            raise _too_large()
        if inflater.eof and not inflater.unused_data:
            return out
    raise InvalidArgument(
        f"The request body is not valid {coding} data, as its Content-Encoding says "
        "(corrupt, truncated or followed by other bytes)."
    )


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not allowed in JSON")


def load_json_object(raw: bytes) -> dict[str, Any]:
    """A strict JSON object of bounded depth, all of whose text is valid Unicode."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidArgument(
            f"Invalid JSON payload received. The body is not UTF-8: {error.reason}."
        ) from error
    try:
        document = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as error:
        raise InvalidArgument(
            f"Invalid JSON payload received. {error.msg} at line {error.lineno} "
            f"column {error.colno}."
        ) from error
    except RecursionError as error:
        raise _too_deep() from error
    except ValueError as error:  # NaN/Infinity; an integer of more than 4,300 digits
        raise InvalidArgument(f"Invalid JSON payload received. {error}.") from error
    if not isinstance(document, dict):
        raise InvalidArgument(
            f"Invalid JSON payload received. Expected a JSON object, got {type(document).__name__}."
        )
    _check_text_and_depth(document)
    return document


def _too_deep() -> InvalidArgument:
    return InvalidArgument(
        f"Invalid JSON payload received. The JSON is nested more than {MAX_JSON_DEPTH} levels."
    )


def _check_text_and_depth(document: dict[str, Any]) -> None:
    # Iterative: the depth bound is what makes the recursive steps after this one safe.
    stack: list[tuple[Any, int, str]] = [(document, 1, "")]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            check_text(value, path or "body")
        elif isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise _too_deep()
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                where = f"{path}[{key}]" if isinstance(key, int) else _join(path, key)
                if isinstance(key, str):
                    check_text(key, where)
                stack.append((item, depth + 1, where))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_text(text: str, where: str) -> None:
    """Refuse text no protobuf string can hold (unpaired surrogates, from JSON escapes)."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        shown = where.encode("ascii", "backslashreplace").decode("ascii")
        raise InvalidArgument(
            f"Invalid JSON payload received. Unpaired surrogate (\\u{ord(text[error.start]):x}) "
            f"in the text at '{shown}'."
        ) from error


def parse_body(raw: bytes, message: Message) -> None:
    """Fill ``message`` from a JSON body (an empty body leaves the defaults)."""
    if not raw.strip():
        return  # no body: the request is the path (and defaults)
    document = load_json_object(raw)
    _check_base64(document, message.DESCRIPTOR, "")
    _parse_dict(document, message)


def _parse_dict(document: dict[str, Any], message: Message) -> None:
    try:
        json_format.ParseDict(document, message)
    except json_format.ParseError as error:
        raise InvalidArgument(_parse_error_text(error)) from error
    except (ValueError, TypeError, OverflowError) as error:  # what ParseDict lets through
        raise InvalidArgument(f"Invalid JSON payload received. {error}") from error


# Standard or URL-safe alphabet, optional padding: what proto3 JSON parsers accept.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


def _check_base64(document: Any, descriptor: Any, path: str) -> None:
    """Reject bytes fields that are not base64 (protobuf's parser silently skips junk)."""
    if not isinstance(document, dict):
        return
    for key, value in document.items():
        field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)
        if field is None:
            continue  # ParseDict names unknown fields
        where = f"{path}.{key}" if path else key
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            at = where if index is None else f"{where}[{index}]"
            if field.type == FieldDescriptor.TYPE_BYTES and isinstance(item, str):
                if not _BASE64.fullmatch(item) or len(item.rstrip("=")) % 4 == 1:
                    shown = item if len(item) <= 64 else item[:64] + "..."
                    raise InvalidArgument(
                        f"Invalid value at '{at}' (TYPE_BYTES), Base64 decoding failed for "
                        f'"{shown}"'
                    )
            elif field.message_type is not None:
                _check_base64(item, field.message_type, at)


_UNKNOWN_FIELD = re.compile(r'has no field named "([^"]+)" at "([^"]*)"')


def _parse_error_text(error: json_format.ParseError) -> str:
    text = str(error)
    unknown = _UNKNOWN_FIELD.search(text)
    if unknown is not None:  # Google's wording, without protobuf's list of fields
        return (
            f'Invalid JSON payload received. Unknown name "{unknown.group(1)}" at '
            f"'{unknown.group(2)}': Cannot find field."
        )
    return f"Invalid JSON payload received. {text}"


def cannot_bind(key: str) -> InvalidArgument:
    return InvalidArgument(
        f'Invalid JSON payload received. Unknown name "{key}": Cannot bind query parameter. '
        f"Field '{key}' could not be found in request message."
    )


def refuse_query(query: Sequence[tuple[str, str]]) -> None:
    """A request whose body is the message binds no query parameter (system parameters
    were taken out before)."""
    for key, _ in query:
        raise cannot_bind(_shown(key))


def _shown(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii")


def bind_query(message: Message, query: Sequence[tuple[str, str]]) -> None:
    """GET/DELETE: query parameters fill request fields (json or proto names, dotted;
    a repeated field's parameter may repeat)."""
    document: dict[str, Any] = {}
    for key, value in query:
        check_text(key, "query")
        check_text(value, key)
        field = _field_path(message.DESCRIPTOR, key)
        if field is None:
            raise cannot_bind(_shown(key))
        converted: Any = value
        if field.type == FieldDescriptor.TYPE_BOOL:
            if value not in ("true", "false"):
                raise InvalidArgument(
                    f"Invalid value at '{key}' (TYPE_BOOL), \"{value}\": expected true or false."
                )
            converted = value == "true"
        target = document
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        if field.is_repeated:
            target.setdefault(leaf, []).append(converted)
        else:
            target[leaf] = converted
    _parse_dict(document, message)


def _field_path(descriptor: Any, dotted: str) -> FieldDescriptor | None:
    field: FieldDescriptor | None = None
    current: Descriptor | None = descriptor
    for part in dotted.split("."):
        if current is None:
            return None
        field = current.fields_by_name.get(part) or current.fields_by_camelcase_name.get(part)
        if field is None:
            return None
        current = field.message_type
    if field is not None and field.message_type is not None:
        return None  # only scalar (and repeated scalar) fields bind to query parameters
    return field


def set_field(message: Message, dotted: str, value: str) -> None:
    *parents, leaf = dotted.split(".")
    target = message
    for parent in parents:
        target = getattr(target, parent)
    setattr(target, leaf, value)
