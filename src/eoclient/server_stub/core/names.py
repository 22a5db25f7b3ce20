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
_PROJECT = re.compile(r"[^/]+")

# The real service's text for a bad name (docs/protocol.md#resource-names, akka/alpakka#1798).
_BAD_NAME = (
    "Invalid resource name given (name={name}). Refer to "
    "https://cloud.google.com/pubsub/docs/admin#resource_names for more information."
)


def invalid_name(name: str) -> InvalidArgument:
    return InvalidArgument(_BAD_NAME.format(name=name))


def parse(name: str, collection: Collection) -> tuple[str, str]:
    """Split ``projects/{p}/{collection}/{id}`` into (project, id), or raise InvalidArgument."""
    parts = name.split("/")
    if (
        len(parts) != 4
        or parts[0] != "projects"
        or parts[2] != collection
        or not _PROJECT.fullmatch(parts[1])
        or not _ID.fullmatch(parts[3])
        or parts[3].lower().startswith("goog")
    ):
        raise invalid_name(name)
    return parts[1], parts[3]


def parse_project(name: str) -> str:
    """Validate ``projects/{p}`` and return ``p``."""
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "projects" or not _PROJECT.fullmatch(parts[1]):
        raise invalid_name(name)
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
