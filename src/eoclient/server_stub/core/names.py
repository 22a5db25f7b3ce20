"""Resource names: ``projects/{project}/{collection}/{id}``.

Rule (google.pubsub.v1 proto comments, wire-contract §1.5): an id starts with a
letter, holds only ``[A-Za-z0-9-_.~+%]``, is 3..255 characters long and must not
start with ``goog``. Projects are not validated beyond "non-empty, no slash": the
emulator and test suites use ids like ``p1`` that the real service would refuse.
"""

from __future__ import annotations

import re
from typing import Literal

from eoclient.errors import InvalidArgument

Collection = Literal["topics", "subscriptions", "snapshots"]

_ID = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")
_PROJECT = re.compile(r"[^/]+")

# The real service's text for a bad name (wire-contract §1.5, akka/alpakka#1798).
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
