"""Resource names: ``projects/{project}/{collection}/{id}``.

Rule (google.pubsub.v1 proto comments, docs/protocol.md#resource-names): an id starts with a
letter, holds only ``[A-Za-z0-9-_.~+%]``, is 3..255 characters long and must not
start with ``goog``. Projects are not validated beyond "non-empty, no slash": the
emulator and test suites use ids like ``p1`` that the real service would refuse.
"""

from __future__ import annotations

import base64
import re
from typing import Literal

from eoclient.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

Collection = Literal["topics", "subscriptions", "snapshots"]

_ID = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")
_ID_CHARACTER = re.compile(r"[A-Za-z0-9\-_.~+%]")
_PROJECT = re.compile(r"[^/]+")

# The real service's text for a bad name (docs/protocol.md#resource-names, akka/alpakka#1798).
_BAD_NAME = (
    "Invalid resource name given (name={name}). Refer to "
    "https://cloud.google.com/pubsub/docs/admin#resource_names for more information."
)


# After the service's sentence, the rule the name broke: the service's text alone names no
# rule, and "Invalid resource name" for an id one character too short leaves a newcomer
# guessing.
ID_RULE = (
    "An id is 3 to 255 characters, starts with a letter, holds only letters, digits and "
    "- _ . ~ + %, and does not start with goog."
)


def invalid_name(name: str, problem: str = "") -> InvalidArgument:
    """INVALID_ARGUMENT with the service's text for a bad name, then ``problem`` (what is
    wrong with it, a sentence) if known."""
    return InvalidArgument(_BAD_NAME.format(name=name) + (f" {problem}" if problem else ""))


def id_problem(resource_id: str) -> str:
    """What breaks the id rule in ``resource_id``, then the rule; ``""`` if it keeps it."""
    if _ID.fullmatch(resource_id) and not resource_id.lower().startswith("goog"):
        return ""
    if not 3 <= len(resource_id) <= 255:
        length = len(resource_id)
        what = f"The id {resource_id!r} is {length} character{'s' * (length != 1)} long."
    elif not resource_id[:1].isascii() or not resource_id[:1].isalpha():
        what = f"The id {resource_id!r} does not start with a letter."
    elif resource_id.lower().startswith("goog"):
        what = f"The id {resource_id!r} starts with goog."
    else:
        bad = sorted({c for c in resource_id if not _ID_CHARACTER.fullmatch(c)})
        what = f"The id {resource_id!r} holds {', '.join(repr(c) for c in bad)}."
    return f"{what} {ID_RULE}"


def parse(name: str, collection: Collection) -> tuple[str, str]:
    """Split ``projects/{p}/{collection}/{id}`` into (project, id), or raise InvalidArgument."""
    parts = name.split("/")
    if (
        len(parts) != 4
        or parts[0] != "projects"
        or parts[2] != collection
        or not _PROJECT.fullmatch(parts[1])
    ):
        raise invalid_name(name, f"A name is projects/{{project}}/{collection}/{{id}}.")
    problem = id_problem(parts[3])
    if problem:
        raise invalid_name(name, problem)
    return parts[1], parts[3]


def parse_project(name: str) -> str:
    """Validate ``projects/{p}`` and return ``p``."""
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "projects" or not _PROJECT.fullmatch(parts[1]):
        raise invalid_name(name, "A project is projects/{project}.")
    return parts[1]


def project_of(name: str) -> str:
    return name.split("/")[1]


def short_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def paginate(names_sorted: list[str], page_size: int, page_token: str) -> tuple[list[str], str]:
    """Page through sorted names; the token is the last name returned, base64url-encoded."""
    if page_size < 0:
        raise InvalidArgument(f"page_size must not be negative (you passed {page_size}).")
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    start = 0
    if page_token:
        try:
            after = base64.urlsafe_b64decode(page_token.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            raise InvalidArgument(f"The page_token {page_token!r} is not valid.") from None
        start = next((i for i, n in enumerate(names_sorted) if n > after), len(names_sorted))
    page = names_sorted[start : start + size]
    more = start + size < len(names_sorted)
    token = base64.urlsafe_b64encode(page[-1].encode()).decode() if more and page else ""
    return page, token
