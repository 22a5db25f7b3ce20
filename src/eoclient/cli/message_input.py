"""What ``eoclient publish`` reads: one message a line, or JSON lines.

Pure: bytes in, :class:`OutgoingMessage` out, or a :class:`~eoclient.cli.errors.CliError`
naming the line. Plain lines are published byte for byte (without the line ending);
blank lines are skipped (a message needs data or attributes, and a blank line is almost
always a trailing newline or a separator). A JSON line is an object::

    {"data": "text", "attributes": {"k": "v"}, "ordering_key": "user-1"}
    {"dataBase64": "AAEC", "orderingKey": "user-1"}

``data`` is text (sent as UTF-8), ``dataBase64`` / ``data_base64`` bytes; either may be
left out when there are attributes. Lines printed by ``eoclient tail --format json``
are accepted as they are (their delivery fields are ignored, ``dataBase64`` wins over
``data``), so a stream can be replayed into another topic.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from eoclient.cli.errors import CliError

# Keys of a JSON line, by meaning; snake_case as gcloud users write them, camelCase as
# the REST mapping (and eoclient's own JSON output) does.
_DATA_KEYS = ("data",)
_BASE64_KEYS = ("dataBase64", "data_base64")
_ATTRIBUTE_KEYS = ("attributes",)
_ORDERING_KEYS = ("orderingKey", "ordering_key")
# Fields of ``eoclient tail --format json`` that describe a delivery, not a message.
_DELIVERY_KEYS = frozenset(
    {"messageId", "publishTime", "deliveryAttempt", "ackId", "settled", "ackStatus", "ackInfo"}
)
_KNOWN = frozenset(_DATA_KEYS + _BASE64_KEYS + _ATTRIBUTE_KEYS + _ORDERING_KEYS) | _DELIVERY_KEYS


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message to publish, and where it came from (1-based line; 0 = an argument)."""

    data: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)
    ordering_key: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class Defaults:
    """``--attribute`` and ``--ordering-key``: applied to every message (a JSON line's
    own attributes win over these, and its own ordering key replaces this one)."""

    attributes: Mapping[str, str] = field(default_factory=dict)
    ordering_key: str = ""


def from_arguments(messages: Iterable[str], defaults: Defaults) -> Iterator[OutgoingMessage]:
    for text in messages:
        yield OutgoingMessage(text.encode(), dict(defaults.attributes), defaults.ordering_key)


def parse_line(
    raw: bytes, number: int, json_lines: bool, defaults: Defaults
) -> OutgoingMessage | None:
    """The message on line ``number`` (``raw`` without its line ending); None if blank."""
    if not raw.strip():
        return None
    if not json_lines:
        return OutgoingMessage(raw, dict(defaults.attributes), defaults.ordering_key, number)
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CliError(f"line {number}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise CliError(f"line {number}: expected a JSON object, got {type(value).__name__}")
    return _from_object(value, number, defaults)


def _first(value: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((value[key] for key in keys if key in value), None)


def _from_object(value: dict[str, Any], number: int, defaults: Defaults) -> OutgoingMessage:
    unknown = sorted(set(value) - _KNOWN)
    if unknown:
        raise CliError(
            f"line {number}: unknown key(s) {', '.join(unknown)}; expected data or "
            "dataBase64, attributes, orderingKey"
        )
    encoded = _first(value, _BASE64_KEYS)
    text = _first(value, _DATA_KEYS)
    data = b""
    if encoded is not None:
        if not isinstance(encoded, str):
            raise CliError(f"line {number}: dataBase64 must be a string")
        try:
            data = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise CliError(f"line {number}: dataBase64 is not valid base64") from None
    elif text is not None:
        if not isinstance(text, str):
            raise CliError(
                f"line {number}: data must be a string (use dataBase64 for bytes), "
                f"got {type(text).__name__}"
            )
        data = text.encode()
    attributes = dict(defaults.attributes)
    own = _first(value, _ATTRIBUTE_KEYS)
    if own is not None:
        if not isinstance(own, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in own.items()
        ):
            raise CliError(f"line {number}: attributes must be an object of strings")
        if "" in own:  # the service refuses the whole batch for it (INVALID_ARGUMENT)
            raise CliError(f"line {number}: an attribute key must not be empty")
        attributes.update(own)
    ordering_key = _first(value, _ORDERING_KEYS)
    if ordering_key is None:
        ordering_key = defaults.ordering_key
    elif not isinstance(ordering_key, str):
        raise CliError(f"line {number}: orderingKey must be a string")
    if not data and not attributes:
        raise CliError(f"line {number}: a message needs data or attributes")
    return OutgoingMessage(data, attributes, ordering_key, number)


class LineSplitter:
    """Bytes in chunks → complete lines (without ``\\n`` or ``\\r\\n``), numbered."""

    def __init__(self) -> None:
        self._rest = b""
        self.lines = 0

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """The complete lines in ``chunk`` (with what was left over before)."""
        parts = (self._rest + chunk).split(b"\n")
        self._rest = parts.pop()
        return [self._number(part) for part in parts]

    def close(self) -> list[tuple[int, bytes]]:
        """The last line, if the input did not end with a newline."""
        rest, self._rest = self._rest, b""
        return [self._number(rest)] if rest else []

    def _number(self, line: bytes) -> tuple[int, bytes]:
        self.lines += 1
        return self.lines, line.removesuffix(b"\r")
