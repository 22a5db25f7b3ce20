"""Cloud Storage's glob patterns (``matchGlob`` of objects.list), as regular expressions.

A topic ingesting from Cloud Storage takes only the objects its ``match_glob`` matches
(docs/protocol.md#cloud-storage-ingestion). The syntax is Cloud Storage's:

* ``*`` any run of characters within one folder level (never ``/``);
* ``**`` any run of characters across levels; ``**/`` zero or more whole folders, so
  ``a/**/b`` matches ``a/b`` and ``a/x/y/b``;
* ``?`` one character other than ``/``;
* ``[abc]``, ``[a-z]`` one of the characters; ``[!abc]`` (or ``[^abc]``) one not among them;
* ``{one,two}`` one of the alternatives (no ``/`` or ``**`` inside, no nesting);
* ``\\`` takes the next character literally.

The whole name must match. A pattern that does not parse (an unclosed ``[`` or ``{``, an
empty class or alternative list) raises ``GlobError`` saying where.
"""

from __future__ import annotations

import functools
import re


class GlobError(ValueError):
    """A pattern that is not a Cloud Storage glob."""


def _class(pattern: str, start: int) -> tuple[str, int]:
    """The regex of the class opening at ``pattern[start] == "["`` and where it ends."""
    index = start + 1
    negate = index < len(pattern) and pattern[index] in "!^"
    if negate:
        index += 1
    members: list[str] = []
    while index < len(pattern) and (pattern[index] != "]" or not members):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            index += 1
            char = pattern[index]
        if char == "/":
            raise GlobError(f"'/' cannot be in a character class (at {index})")
        if index + 2 < len(pattern) and pattern[index + 1] == "-" and pattern[index + 2] != "]":
            low, high = char, pattern[index + 2]
            if low > high:
                raise GlobError(f"range {low}-{high} is reversed (at {index})")
            members.append(f"{re.escape(low)}-{re.escape(high)}")
            index += 3
            continue
        members.append(re.escape(char))
        index += 1
    if index >= len(pattern):
        raise GlobError(f"'[' at {start} is never closed")
    body = "".join(members)
    return (f"[^/{body}]" if negate else f"[{body}]"), index + 1


def _alternatives(pattern: str, start: int) -> tuple[str, int]:
    """The regex of ``{a,b}`` opening at ``start`` and where it ends."""
    end = pattern.find("}", start)
    if end < 0:
        raise GlobError(f"'{{' at {start} is never closed")
    inner = pattern[start + 1 : end]
    if "{" in inner:
        raise GlobError(f"'{{' at {start}: alternatives cannot nest")
    if "/" in inner or "**" in inner:
        raise GlobError(f"'{{' at {start}: alternatives cannot hold '/' or '**'")
    options = inner.split(",")
    if not inner:
        raise GlobError(f"'{{' at {start} holds no alternative")
    return "(?:" + "|".join(_translate(option) for option in options) + ")", end + 1


def _translate(pattern: str) -> str:
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            parts.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            parts.append(".*")
            index += 2
        elif char == "*":
            parts.append("[^/]*")
            index += 1
        elif char == "?":
            parts.append("[^/]")
            index += 1
        elif char == "[":
            regex, index = _class(pattern, index)
            parts.append(regex)
        elif char == "{":
            regex, index = _alternatives(pattern, index)
            parts.append(regex)
        elif char == "\\":
            if index + 1 >= len(pattern):
                raise GlobError("a trailing '\\' escapes nothing")
            parts.append(re.escape(pattern[index + 1]))
            index += 2
        elif char in "]}":
            raise GlobError(f"{char!r} at {index} closes nothing")
        else:
            parts.append(re.escape(char))
            index += 1
    return "".join(parts)


@functools.lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """The regular expression an object name must fully match (GlobError if invalid)."""
    return re.compile(_translate(pattern), re.DOTALL)


def matches(pattern: str, name: str) -> bool:
    """Whether the object ``name`` matches ``pattern`` (an empty pattern matches all)."""
    return not pattern or compile_glob(pattern).fullmatch(name) is not None
