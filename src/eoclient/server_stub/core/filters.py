"""The subscription filter language: parse once at CreateSubscription, match at publish.

Grammar (docs/protocol.md#filter-language, from Google's "Filter messages from a subscription"
page)::

    filter   := unary ( "AND" unary )*  |  unary ( "OR" unary )*
    unary    := ( "NOT" | "-" ) unary  |  "(" filter ")"  |  atom
    atom     := "attributes" ":" key
              | "attributes" "." key ( "=" | "!=" ) string
              | "hasPrefix" "(" "attributes" "." key "," string ")"
    key      := identifier of [A-Za-z0-9_-]+  |  string

Rules that the grammar alone does not say:

* operators are uppercase only (``and`` is an error, not an identifier);
* ``NOT`` (or ``-``) binds tightest; ``AND`` and ``OR`` cannot be mixed at one level
  without parentheses (``a AND b OR c`` is invalid, ``a AND (b OR c)`` is valid);
* values must be string literals, written in double (or single) quotes, with the
  escapes the docs list: ``\\\\ \\" \\'``, the non-printing ``\\a \\b \\f \\n \\r \\t \\v``,
  Unicode ``\\uXXXX`` / ``\\UXXXXXXXX``, hexadecimal ``\\xXX`` and octal ``\\NNN``;
* ``attributes.k != "v"`` is true when ``k`` is absent (docs: "messages without the
  name attribute and the value of com"); ``=`` and ``hasPrefix`` need ``k`` present;
* at most 256 bytes (UTF-8), checked by ``validation.filter_length``.

Single-quoted literals are accepted because the AIP-160 lexers (the one pstest uses,
go.einride.tech/aip/filtering) accept them; rejecting a filter the real service takes
would be worse than accepting one it refuses.

Errors are ``InvalidArgument`` naming the 1-based column (in characters) where parsing
failed, so a client can point at it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eoclient.errors import InvalidArgument

Attributes = Mapping[str, str]


# ------------------------------------------------------------------ expressions


@dataclass(frozen=True, slots=True)
class Has:
    key: str

    def matches(self, attributes: Attributes) -> bool:
        return self.key in attributes


@dataclass(frozen=True, slots=True)
class Equals:
    key: str
    value: str

    def matches(self, attributes: Attributes) -> bool:
        return attributes.get(self.key) == self.value


@dataclass(frozen=True, slots=True)
class NotEquals:
    key: str
    value: str

    def matches(self, attributes: Attributes) -> bool:
        return attributes.get(self.key) != self.value  # absent key: true


@dataclass(frozen=True, slots=True)
class HasPrefix:
    key: str
    prefix: str

    def matches(self, attributes: Attributes) -> bool:
        value = attributes.get(self.key)
        return value is not None and value.startswith(self.prefix)


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expression

    def matches(self, attributes: Attributes) -> bool:
        return not self.operand.matches(attributes)


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Expression, ...]

    def matches(self, attributes: Attributes) -> bool:
        return all(o.matches(attributes) for o in self.operands)


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Expression, ...]

    def matches(self, attributes: Attributes) -> bool:
        return any(o.matches(attributes) for o in self.operands)


Expression = Has | Equals | NotEquals | HasPrefix | Not | And | Or


@dataclass(frozen=True)
class Filter:
    """A parsed filter. ``Filter.parse("")`` is None: no filter, every message matches."""

    text: str
    expression: Expression

    def matches(self, attributes: Attributes) -> bool:
        return self.expression.matches(attributes)

    @staticmethod
    def parse(text: str) -> Filter | None:
        if text == "":
            return None
        return Filter(text, _Parser(text).parse())


def parse(text: str) -> Filter | None:
    """Parse ``text`` (InvalidArgument naming the column on error); None for ""."""
    return Filter.parse(text)


# ---------------------------------------------------------------------- parser

_IDENT_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_SIMPLE_ESCAPES = {
    "\\": "\\",
    '"': '"',
    "'": "'",
    "`": "`",
    "?": "?",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    # ---------------------------------------------------------------- helpers

    def error(self, message: str, pos: int | None = None) -> InvalidArgument:
        at = self.pos if pos is None else pos
        return InvalidArgument(
            f"Invalid filter expression at column {at + 1}: {message} (filter: {self.text!r})."
        )

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def found(self) -> str:
        if self.pos >= len(self.text):
            return "the end of the filter"
        word = self.peek_word()
        return repr(word) if word else repr(self.text[self.pos])

    def peek_word(self) -> str:
        end = self.pos
        while end < len(self.text) and self.text[end] in _WORD_CHARS:
            end += 1
        return self.text[self.pos : end]

    def expect(self, symbol: str, what: str) -> None:
        self.skip_space()
        if not self.text.startswith(symbol, self.pos):
            raise self.error(f"expected {what}, found {self.found()}")
        self.pos += len(symbol)

    # ------------------------------------------------------------------ rules

    def parse(self) -> Expression:
        self.skip_space()
        if self.pos == len(self.text):
            raise self.error("the filter is empty")
        expression = self.expression()
        self.skip_space()
        if self.pos < len(self.text):
            if self.peek() == ")":
                raise self.error("unbalanced ')'")
            raise self.error(f"expected AND, OR or the end of the filter, found {self.found()}")
        return expression

    def expression(self) -> Expression:
        """unary (OP unary)* with one OP throughout (AND or OR)."""
        first = self.unary()
        operands = [first]
        operator = ""
        while True:
            self.skip_space()
            start = self.pos
            word = self.peek_word()
            if word not in ("AND", "OR"):
                if word.upper() in ("AND", "OR"):
                    raise self.error(f"operators must be uppercase: write {word.upper()}")
                break
            if operator and word != operator:
                raise self.error(
                    f"{operator} and {word} cannot be mixed without parentheses; "
                    f"write for example 'a {operator} (b {word} c)'",
                    start,
                )
            operator = word
            self.pos += len(word)
            operands.append(self.unary())
        if not operator:
            return first
        return And(tuple(operands)) if operator == "AND" else Or(tuple(operands))

    def unary(self) -> Expression:
        self.skip_space()
        char = self.peek()
        if char == "-":
            self.pos += 1
            return Not(self.unary())
        if char == "(":
            self.pos += 1
            inner = self.expression()
            self.expect(")", "')'")
            return inner
        word = self.peek_word()
        if word == "NOT":
            self.pos += 3
            return Not(self.unary())
        if word == "not":
            raise self.error("operators must be uppercase: write NOT")
        if word in ("AND", "OR"):
            raise self.error(f"{word} needs an expression on its left")
        if word == "hasPrefix":
            return self.has_prefix()
        if word == "attributes":
            return self.comparison()
        if char in ("'", '"'):
            raise self.error(
                'a string literal cannot start a comparison: write attributes.KEY = "VALUE"'
            )
        if char == "":
            raise self.error("expected an expression, found the end of the filter")
        if char == ")":
            raise self.error("expected an expression before ')'")
        if word:
            raise self.error(
                f'unknown name {word!r}: expected attributes:KEY, attributes.KEY = "VALUE", '
                'attributes.KEY != "VALUE" or hasPrefix(attributes.KEY, "PREFIX")'
            )
        raise self.error(f"unexpected character {char!r}")

    def comparison(self) -> Expression:
        self.pos += len("attributes")
        self.skip_space()
        char = self.peek()
        if char == ":":
            self.pos += 1
            return Has(self.key())
        if char != ".":
            raise self.error(f"expected ':' or '.' after attributes, found {self.found()}")
        self.pos += 1
        key = self.key()
        self.skip_space()
        if self.text.startswith("!=", self.pos):
            self.pos += 2
            return NotEquals(key, self.value("!="))
        if self.peek() == "=":
            self.pos += 1
            return Equals(key, self.value("="))
        if self.peek() == ":":
            raise self.error("write attributes:KEY to test for a key, not attributes.KEY:")
        raise self.error(f"expected '=' or '!=' after attributes.{key}, found {self.found()}")

    def has_prefix(self) -> Expression:
        self.pos += len("hasPrefix")
        self.expect("(", "'(' after hasPrefix")
        self.skip_space()
        if self.peek_word() != "attributes":
            raise self.error(
                f"expected attributes.KEY as hasPrefix's first argument, found {self.found()}"
            )
        self.pos += len("attributes")
        self.expect(".", "'.' after attributes")
        key = self.key()
        self.expect(",", "',' between hasPrefix's arguments")
        prefix = self.value("hasPrefix(attributes.KEY,")
        self.expect(")", "')' after hasPrefix's two arguments")
        return HasPrefix(key, prefix)

    def key(self) -> str:
        self.skip_space()
        if self.peek() in ("'", '"'):
            return self.string()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _IDENT_CHARS:
            self.pos += 1
        if self.pos == start:
            if self.peek() == "\\":
                raise self.error("escapes are only allowed inside a string literal")
            raise self.error(
                f"expected an attribute key, found {self.found()} (keys with characters other "
                "than letters, digits, '-' and '_' must be written as string literals)"
            )
        if self.peek() == "\\":
            raise self.error("escapes are only allowed inside a string literal")
        return self.text[start : self.pos]

    def value(self, after: str) -> str:
        self.skip_space()
        if self.peek() in ("'", '"'):
            return self.string()
        if self.peek_word() == "attributes":
            raise self.error("an attribute can only be compared with a string literal")
        raise self.error(f"expected a string literal after {after}, found {self.found()}")

    def string(self) -> str:
        quote = self.text[self.pos]
        start = self.pos
        self.pos += 1
        out: list[str] = []
        text = self.text
        while True:
            if self.pos >= len(text):
                raise self.error("unterminated string literal", start)
            char = text[self.pos]
            if char == quote:
                self.pos += 1
                return "".join(out)
            if char == "\\":
                out.append(self.escape())
                continue
            out.append(char)
            self.pos += 1

    def escape(self) -> str:
        start = self.pos
        self.pos += 1
        char = self.peek()
        if char == "":
            raise self.error("unterminated escape sequence", start)
        if char in _SIMPLE_ESCAPES:
            self.pos += 1
            return _SIMPLE_ESCAPES[char]
        if char in ("x", "X"):
            return self.numeric_escape(start, 1, 2, _HEX, 16)
        if char == "u":
            return self.numeric_escape(start, 1, 4, _HEX, 16)
        if char == "U":
            return self.numeric_escape(start, 1, 8, _HEX, 16)
        if char in _OCTAL:
            return self.numeric_escape(start, 0, 3, _OCTAL, 8)
        raise self.error(f"invalid escape sequence '\\{char}'", start)

    def numeric_escape(
        self, start: int, prefix: int, digits: int, allowed: frozenset[str], base: int
    ) -> str:
        begin = self.pos + prefix
        chunk = self.text[begin : begin + digits]
        if len(chunk) != digits or not all(c in allowed for c in chunk):
            raise self.error(
                f"invalid escape sequence {self.text[start : begin + digits]!r}: expected "
                f"{digits} {'hexadecimal' if base == 16 else 'octal'} digits",
                start,
            )
        code = int(chunk, base)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise self.error(
                f"escape sequence {self.text[start : begin + digits]!r} is not a "
                "valid Unicode code point",
                start,
            )
        self.pos = begin + digits
        return chr(code)
