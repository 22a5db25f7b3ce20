"""Bearer-token authentication of both doors (``eoclient serve --auth-token-file``).

Off by default. When on, every call must carry ``authorization: Bearer <token>`` (gRPC
metadata, or the HTTP header; REST also takes Google's ``access_token`` query parameter),
and each token may use the projects the file grants it:

* no token, another scheme, or a token not in the file → UNAUTHENTICATED (HTTP 401);
* a known token naming a resource of a project it was not granted → PERMISSION_DENIED
  (HTTP 403), checked on every resource name of the request (a subscription in a granted
  project attached to another project's topic is refused too).

The token file has one token a line, then the projects it may use (ids or
``projects/<id>``; ``*`` for every project); ``#`` starts a comment::

    # token                      projects
    ci-7f3a9c2e55b14d0e          ci-project
    dashboard-1b2c3d4e5f60718    analytics reporting
    admin-0a9b8c7d6e5f4a3b       *

Tokens are compared by their SHA-256 digests, so a lookup's timing says nothing about
how much of a guessed token matched.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from eoclient.errors import PermissionDenied, Unauthenticated

EVERY_PROJECT = "*"
# Request fields that hold resource names (google.pubsub.v1; google.iam.v1's
# ``resource``; SchemaService's ``parent`` and ``schema``), and the message fields to
# look into for more (the resource of an Update request, a dead-letter policy, a topic's
# schema settings, a schema).
_NAME_FIELDS = frozenset(
    {
        "name",
        "topic",
        "subscription",
        "snapshot",
        "project",
        "dead_letter_topic",
        "resource",
        "parent",
        "schema",
    }
)
_NESTED_FIELDS = frozenset(
    {"topic", "subscription", "snapshot", "dead_letter_policy", "schema_settings", "schema"}
)
_PROJECT = re.compile(r"projects/([^/]*)")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _project_id(text: str) -> str:
    return text.removeprefix("projects/")


@dataclass(frozen=True)
class Grant:
    """What one authenticated token may use: ``projects`` (ids), or every project."""

    projects: frozenset[str]
    every_project: bool = False

    def authorize(self, projects: Iterable[str]) -> None:
        if self.every_project:
            return
        for project in sorted(set(projects)):
            if project not in self.projects:
                raise PermissionDenied(
                    f"User not authorized to perform this action: the token may not use "
                    f"project {project!r} (it may use: {', '.join(sorted(self.projects))})."
                )


class TokenTable:
    """The tokens of ``--auth-token-file`` and what each may use."""

    def __init__(self, grants: Mapping[str, Grant]) -> None:
        if not grants:
            raise ValueError("an auth token table needs at least one token")
        self._by_digest = {_digest(token): grant for token, grant in grants.items()}

    def __repr__(self) -> str:
        return f"<TokenTable {len(self._by_digest)} tokens>"

    @classmethod
    def parse(cls, text: str, source: str = "token file") -> TokenTable:
        grants: dict[str, Grant] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            token, projects = words[0], words[1:]
            if not projects:
                raise ValueError(
                    f"{source}:{number}: the token has no projects (list project ids after "
                    "it, or * for every project)"
                )
            if token in grants:
                raise ValueError(f"{source}:{number}: the token is listed twice")
            every = EVERY_PROJECT in projects
            grants[token] = Grant(
                frozenset(_project_id(p) for p in projects if p != EVERY_PROJECT), every
            )
        if not grants:
            raise ValueError(f"{source}: no tokens (one a line: TOKEN PROJECT [PROJECT...])")
        return cls(grants)

    @classmethod
    def load(cls, path: str | Path) -> TokenTable:
        return cls.parse(Path(path).read_text(encoding="utf-8"), str(path))

    def authenticate(self, authorization: str | None) -> Grant:
        """The grant of an ``authorization`` value (``Bearer <token>``)."""
        if not authorization:
            raise Unauthenticated(
                "Request is missing required authentication credential: send "
                "'authorization: Bearer <token>' (this server runs with --auth-token-file)."
            )
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                "Request had invalid authentication credentials: only "
                "'authorization: Bearer <token>' is accepted."
            )
        grant = self._by_digest.get(_digest(token.strip()))
        if grant is None:
            raise Unauthenticated(
                "Request had invalid authentication credentials: the bearer token is not "
                "one this server accepts."
            )
        return grant


def request_projects(request: Message) -> set[str]:
    """The projects of every resource name in a request (names that are not
    ``projects/...`` are left to validation, which refuses them)."""
    projects: set[str] = set()
    for field, value in request.ListFields():
        if field.name in _NAME_FIELDS and isinstance(value, str):
            found = _PROJECT.match(value)
            if found is not None:
                projects.add(found.group(1))
        elif field.name in _NESTED_FIELDS and isinstance(value, Message):
            projects |= request_projects(value)
    return projects
