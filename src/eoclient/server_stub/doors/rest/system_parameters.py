"""Google's system query parameters on the REST door, taken as Google's front end takes them.

Accepted on every call and never bound to the request message (each may also be spelled
with a ``$`` prefix, as the official REST transports do: ``$alt=json;enum-encoding=int``):

* ``alt``: ``json`` (the only format served), with ``;enum-encoding=int`` for numeric
  enums (what google-cloud-pubsub and the Node client ask for in REST mode); other
  formats (``proto``, ``media``, ``sse``) are refused naming the format.
* ``fields``: a partial response. Paths of JSON names separated by ``/``, several
  separated by ``,``, sub-selections in parentheses, ``*`` for every field
  (``receivedMessages(ackId,message/data)``, ``subscriptions/name``); each name is
  checked against the response type (400 for a name it does not have; map keys and
  Struct contents are not checked).
* ``prettyPrint``: ``true`` (the default, indented) or ``false`` (compact).
* ``access_token`` / ``oauth_token``: a bearer token, as the Authorization header.
* ``key``, ``quotaUser``, ``userIp``, ``$.xgafv``, ``upload_protocol``, ``uploadType``:
  accepted and ignored (no API keys, quotas or uploads here).
* ``callback`` (JSONP) is refused: a script tag on any web page could read the answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from eoclient.errors import InvalidArgument

_IGNORED = frozenset({"key", "quotaUser", "userIp", ".xgafv", "upload_protocol", "uploadType"})
_TOKENS = frozenset({"access_token", "oauth_token"})
_KNOWN = _IGNORED | _TOKENS | {"alt", "fields", "prettyPrint", "callback"}
# Free-form JSON: a selection may name anything inside (not checked).
_OPAQUE = frozenset(
    {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
)
# Well-known types rendered as JSON strings (or {}): nothing inside to select.
_SCALAR_LIKE = frozenset(
    {
        "google.protobuf.Timestamp",
        "google.protobuf.Duration",
        "google.protobuf.FieldMask",
        "google.protobuf.Empty",
    }
)


# A selection: JSON name → what to keep of its value (None: all of it).
Selection = dict[str, "Selection | None"]


@dataclass(frozen=True)
class SystemParameters:
    numeric_enums: bool = False
    pretty: bool = True
    fields: str = ""
    access_token: str | None = None

    def render(self, response: Message) -> str:
        """The response as the caller asked for it: JSON, enums, fields, indentation."""
        document = json_format.MessageToDict(response, use_integers_for_enums=self.numeric_enums)
        if self.fields:
            selection = parse_fields(self.fields)
            check_selection(selection, response.DESCRIPTOR, self.fields)
            document = select(document, selection)
        if self.pretty:
            return json.dumps(document, indent=2)
        return json.dumps(document, separators=(",", ":"))


def split_query(
    query: Sequence[tuple[str, str]],
) -> tuple[SystemParameters, list[tuple[str, str]]]:
    """Take the system parameters out of a query; the rest binds to the request."""
    numeric_enums, pretty, fields, token = False, True, "", None
    rest: list[tuple[str, str]] = []
    for key, value in query:
        name = key[1:] if key.startswith("$") else key
        if name not in _KNOWN:
            if key.startswith("$"):
                raise InvalidArgument(f"Unknown system parameter {_shown(key)!r}.")
            rest.append((key, value))
            continue
        if name == "alt":
            numeric_enums = _alt(value)
        elif name == "prettyPrint":
            pretty = _boolean(key, value)
        elif name == "fields":
            fields = value.strip()
        elif name == "callback":
            raise InvalidArgument(
                "JSONP (the callback parameter) is not supported: any web page could read "
                "the answer through a script tag. Call the REST door with JSON."
            )
        elif name in _TOKENS:
            token = value
    return SystemParameters(numeric_enums, pretty, fields, token), rest


def _alt(value: str) -> bool:
    """``alt``: json, optionally ``;enum-encoding=int|string``; True for numeric enums."""
    media, *options = [part.strip() for part in value.split(";")]
    if media.lower() != "json":
        raise InvalidArgument(
            f"Unsupported alt={_shown(value)!r}: the REST door answers JSON only "
            "(alt=json, optionally ;enum-encoding=int)."
        )
    numeric = False
    for option in options:
        name, _, setting = option.partition("=")
        if name.strip().lower() != "enum-encoding" or setting.strip().lower() not in (
            "int",
            "string",
        ):
            raise InvalidArgument(
                f"Unsupported alt option {_shown(option)!r}: the one option is "
                "enum-encoding=int or enum-encoding=string."
            )
        numeric = setting.strip().lower() == "int"
    return numeric


def _boolean(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", ""):
        return True
    if lowered in ("false", "0"):
        return False
    raise InvalidArgument(f"Invalid value for {_shown(key)}: {_shown(value)!r} (true or false).")


def _shown(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii")


# ------------------------------------------------------------------- fields


def parse_fields(text: str) -> Selection:
    """Parse a partial-response selection (``a,b/c,d(e,f/g)``)."""
    selection, position = _parse_list(text, 0)
    if position != len(text):
        raise _bad_fields(text, f"unexpected {text[position]!r} at position {position}")
    return selection


def _bad_fields(text: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"Invalid fields parameter {_shown(text)!r}: {why}.")


def _parse_list(text: str, position: int) -> tuple[Selection, int]:
    selection: Selection = {}
    while True:
        position = _parse_item(text, position, selection)
        if position < len(text) and text[position] == ",":
            position += 1
            continue
        return selection, position


def _parse_item(text: str, position: int, into: Selection) -> int:
    path: list[str] = []
    while True:
        start = position
        while position < len(text) and text[position] not in ",/()":
            position += 1
        name = text[start:position].strip()
        if not name:
            raise _bad_fields(text, f"a field name is missing at position {start}")
        path.append(name)
        if position < len(text) and text[position] == "/":
            position += 1
            continue
        break
    leaf: Selection | None = None
    if position < len(text) and text[position] == "(":
        leaf, position = _parse_list(text, position + 1)
        if position >= len(text) or text[position] != ")":
            raise _bad_fields(text, "a parenthesis is not closed")
        position += 1
    _merge(into, path, leaf)
    return position


def _merge(into: Selection, path: list[str], leaf: Selection | None) -> None:
    target = into
    for name in path[:-1]:
        existing = target.get(name, {})
        if existing is None:
            return  # the whole field is selected already
        target[name] = existing
        target = existing
    last = path[-1]
    if leaf is None or target.get(last, {}) is None:
        target[last] = None
    else:
        existing = target.setdefault(last, {})
        assert existing is not None
        for name, sub in leaf.items():
            _merge(existing, [name], sub)


def check_selection(selection: Selection, descriptor: Any, text: str) -> None:
    """Every selected name must be a field of the response (JSON or proto name)."""
    for name, sub in selection.items():
        if name == "*":
            for each in descriptor.fields:
                _check_value(each, sub, text)
            continue
        found = descriptor.fields_by_camelcase_name.get(name) or descriptor.fields_by_name.get(name)
        if found is None:
            raise _bad_fields(text, f"{descriptor.name} has no field {_shown(name)!r}")
        _check_value(found, sub, text)


def _check_value(found: FieldDescriptor, sub: Selection | None, text: str) -> None:
    if sub is None:
        return
    message = found.message_type
    if message is None or message.full_name in _SCALAR_LIKE:
        raise _bad_fields(text, f"{found.json_name} has no fields to select")
    if message.full_name in _OPAQUE:
        return
    if message.GetOptions().map_entry:
        value = message.fields_by_name["value"]
        for key_selection in sub.values():  # names below a map field are its keys
            _check_value(value, key_selection, text)
        return
    check_selection(sub, message, text)


def select(document: Any, selection: Selection) -> Any:
    """Keep what ``selection`` names of a JSON document (lists: of each element)."""
    if isinstance(document, list):
        return [select(item, selection) for item in document]
    if not isinstance(document, dict):
        return document
    kept: dict[str, Any] = {}
    for key, value in document.items():
        wanted = _lookup(selection, key)
        if wanted is _ABSENT:
            if "*" not in selection:
                continue
            wanted = selection["*"]
        kept[key] = value if wanted is None else select(value, wanted)
    return kept


_ABSENT = object()


def _lookup(selection: Selection, key: str) -> Any:
    if key in selection:
        return selection[key]
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
    return selection.get(snake, _ABSENT)
