"""The rules of message transforms (JavaScript UDFs), pure: no engine, no I/O, no protobuf.

What a resource's transforms may be (``static_problem``: the checks that need no engine),
what a message looks like to a UDF (``udf_input``), and what a UDF's result means
(``interpret``): the message transformed, filtered out, or failed. The engine
(``engine.py``) runs the code; the stage (``stage.py``) applies these outcomes to a
Publish or to deliveries. The rules are in docs/protocol.md#message-transforms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_CODE_BYTES",
    "MAX_TRANSFORMS",
    "Failed",
    "Filtered",
    "Outcome",
    "TransformLimits",
    "Transformed",
    "Udf",
    "enabled",
    "interpret",
    "publish_time_text",
    "static_problem",
    "udf_input",
]

# The service's documented limits on a resource's transforms: at most five per topic or
# subscription, each UDF's code at most 20 KB (docs/protocol.md#message-transforms).
MAX_TRANSFORMS = 5
MAX_CODE_BYTES = 20 * 1024

# What a published message may carry (docs/protocol.md#publish-limits): a transform's
# result is a message too, so it is held to the same limits.
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024

# A function name the runner can call by name: a plain JavaScript identifier (ASCII; the
# service's samples and gcloud's docs use such names).
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
# Words that cannot name a function declaration.
_RESERVED = frozenset(
    [
        "break",
        "case",
        "catch",
        "class",
        "const",
        "continue",
        "debugger",
        "default",
        "delete",
        "do",
        "else",
        "enum",
        "export",
        "extends",
        "false",
        "finally",
        "for",
        "function",
        "if",
        "import",
        "in",
        "instanceof",
        "new",
        "null",
        "return",
        "super",
        "switch",
        "this",
        "throw",
        "true",
        "try",
        "typeof",
        "var",
        "void",
        "while",
        "with",
        "yield",
        "let",
        "static",
        "await",
    ]
)


@dataclass(frozen=True)
class Udf:
    """One JavaScript UDF of a resource, as configured (``disabled``: skipped)."""

    function_name: str
    code: str
    disabled: bool = False


@dataclass(frozen=True)
class TransformLimits:
    """What one UDF may spend: ``time_per_message`` seconds of JavaScript for each
    message it transforms, ``memory_bytes`` of JavaScript heap for its context.

    The service publishes neither number; these keep a runaway UDF (``while (true) {}``,
    an allocation that never ends) from holding a message, or the engine's thread, for
    long: half a second is thousands of times what a transform of a small message takes
    (docs/server/transforms.md measures it), 64 MiB ample for any one message of 10 MB.
    """

    time_per_message: float = 0.5
    memory_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        if not self.time_per_message > 0:
            raise ValueError("time_per_message must be positive (seconds)")
        if self.memory_bytes < 2**20:
            raise ValueError("memory_bytes must be at least 1 MiB")


def enabled(udfs: Sequence[Udf]) -> tuple[Udf, ...]:
    """The UDFs that run, in order: a disabled one is skipped."""
    return tuple(u for u in udfs if not u.disabled)


def static_problem(udfs: Sequence[Udf]) -> str | None:
    """What is wrong with ``udfs`` before any code runs (None: nothing): how many there
    are, each one's function name and code size, and the names' uniqueness (the proto:
    several UDFs on one resource must have distinct function names). Disabled UDFs are
    checked too: enabling one later must not need another check."""
    if len(udfs) > MAX_TRANSFORMS:
        return (
            f"A resource may have at most {MAX_TRANSFORMS} message transforms; "
            f"{len(udfs)} were given."
        )
    seen: set[str] = set()
    for index, udf in enumerate(udfs):
        where = f"message_transforms[{index}].javascript_udf"
        name = udf.function_name
        if not name:
            return f"{where}.function_name is required."
        if not _IDENTIFIER.fullmatch(name) or name in _RESERVED:
            return (
                f"{where}.function_name {name!r} is not a JavaScript function name "
                "(letters, digits, _ and $, not starting with a digit)."
            )
        if not udf.code.strip():
            return f"{where}.code is required."
        size = len(udf.code.encode("utf-8"))
        if size > MAX_CODE_BYTES:
            return (
                f"{where}.code is {size} bytes; the limit is {MAX_CODE_BYTES} bytes "
                f"({MAX_CODE_BYTES // 1024} KB)."
            )
        if name in seen:
            return (
                f"{where}.function_name {name!r} is used by another transform of this "
                "resource; each JavaScript UDF must have a unique function_name."
            )
        seen.add(name)
    return None


# ------------------------------------------------------------------ outcomes


@dataclass(frozen=True, slots=True)
class Transformed:
    """The message as the UDF returned it (attributes as they now are)."""

    data: bytes
    attributes: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Filtered:
    """The UDF returned ``null``: the message goes no further."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The UDF threw, ran out of time or memory, or returned something that is not a
    message; ``reason`` says which, for the publisher's error or the server's log."""

    reason: str


Outcome = Transformed | Filtered | Failed
FILTERED = Filtered()


def publish_time_text(seconds: float) -> str:
    """A publish time as the UDF contract gives it: ``YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    import datetime

    moment = datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def udf_input(
    data: bytes,
    attributes: Mapping[str, str],
    *,
    message_id: str = "",
    publish_time: float | None = None,
    ordering_key: str = "",
) -> dict[str, object] | Failed:
    """One message as the runner hands it to a UDF (``d``: ``message.data``, ``a``:
    ``message.attributes``, ``m``: ``metadata``, whose keys are each optional and left
    out when unknown), or ``Failed`` when ``data`` is not text: the contract gives the
    function ``data`` as a string, and bytes that are not UTF-8 have none."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return Failed(
            f"message data is not UTF-8 text (byte {error.start}), and a UDF receives "
            "message.data as a string"
        )
    metadata: dict[str, str] = {}
    if message_id:
        metadata["message_id"] = message_id
    if publish_time is not None:
        metadata["publish_time"] = publish_time_text(publish_time)
    if ordering_key:
        metadata["ordering_key"] = ordering_key
    return {"d": text, "a": dict(attributes), "m": metadata}


def interpret(raw: Mapping[str, object], attributes: Mapping[str, str]) -> Outcome:
    """What one runner result means. ``raw`` is the runner's record for one message:
    ``{"v": result}`` (``v`` absent when the function returned ``undefined``) or
    ``{"e": error text}``; ``attributes`` are the message's before this UDF ran (kept
    when the result has no ``attributes``)."""
    if "e" in raw:
        return Failed(f"the function threw: {raw['e']}")
    if "v" not in raw:
        return Failed("the function returned undefined (return null to filter a message out)")
    value = raw["v"]
    if value is None:
        return FILTERED
    if not isinstance(value, dict):
        return Failed(
            f"the function returned {_js_type(value)}; it must return null or an object "
            "with a string 'data' and optional 'attributes'"
        )
    if "data" not in value:
        return Failed("the result has no 'data' (a string is required)")
    data = value["data"]
    if not isinstance(data, str):
        return Failed(f"the result's 'data' is {_js_type(data)}, not a string")
    if "attributes" in value and value["attributes"] is not None:
        returned = value["attributes"]
        if not isinstance(returned, dict):
            return Failed(f"the result's 'attributes' is {_js_type(returned)}, not an object")
        bad = next((k for k, v in returned.items() if not isinstance(v, str)), None)
        if bad is not None:
            return Failed(
                f"the result's attribute {bad!r} is {_js_type(returned[bad])}, not a string"
            )
        attributes = returned
    problem = _attribute_problem(attributes)
    if problem is not None:
        return Failed(problem)
    encoded = data.encode("utf-8", errors="surrogatepass")
    if not encoded and not attributes:
        return Failed("the result has neither data nor attributes (an empty message)")
    return Transformed(encoded, dict(attributes))


def _attribute_problem(attributes: Mapping[str, str]) -> str | None:
    if len(attributes) > MAX_ATTRIBUTES:
        return f"the result has {len(attributes)} attributes; a message may have {MAX_ATTRIBUTES}"
    for key, value in attributes.items():
        if not key:
            return "the result has an attribute with an empty key"
        if len(key.encode("utf-8", errors="surrogatepass")) > MAX_ATTRIBUTE_KEY_BYTES:
            return f"the result's attribute key {key[:40]!r}... is over 256 bytes"
        if len(value.encode("utf-8", errors="surrogatepass")) > MAX_ATTRIBUTE_VALUE_BYTES:
            return f"the result's attribute {key!r} has a value over 1024 bytes"
    return None


def _js_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "undefined"
