"""Resource names as gcloud users write them: a full name, or a short id with a project.

``projects/p/topics/t`` is used as given; ``t`` becomes ``projects/{project}/topics/t``
where the project comes from ``--project`` or ``PUBSUB_PROJECT_ID`` (the variable the
emulator's users already set). Only the *shape* is checked here (the segments, no
``/`` in an id): which characters an id may hold is the server's rule, and its own
message says so better than a copy of the rule would (the reference server, the
emulator and the service differ slightly).
"""

from __future__ import annotations

from typing import Literal

from eoclient.cli.errors import UsageProblem

Kind = Literal["topic", "subscription", "snapshot"]

PROJECT_ENV = "PUBSUB_PROJECT_ID"

_COLLECTIONS: dict[Kind, str] = {
    "topic": "topics",
    "subscription": "subscriptions",
    "snapshot": "snapshots",
}


def project_id(project: str | None) -> str | None:
    """The project id from ``--project`` (``p`` or ``projects/p``); None if not given."""
    if not project:
        return None
    value = project.removeprefix("projects/")
    if not value or "/" in value:
        raise UsageProblem(f"invalid project {project!r}: expected a project id such as my-project")
    return value


def resource_name(kind: Kind, value: str, project: str | None) -> str:
    """The full name of a ``kind`` given as a full name or as an id in ``project``."""
    collection = _COLLECTIONS[kind]
    expected = f"projects/PROJECT/{collection}/ID, or an id with --project"
    if value.startswith("projects/"):
        parts = value.split("/")
        if len(parts) != 4 or not parts[1] or not parts[3]:
            raise UsageProblem(f"invalid {kind} name {value!r}: expected {expected}")
        if parts[2] != collection:
            raise UsageProblem(
                f"{value!r} names {parts[2] or 'nothing'}, not {collection}: expected {expected}"
            )
        return value
    if not value or "/" in value:
        raise UsageProblem(f"invalid {kind} name {value!r}: expected {expected}")
    if project is None:
        raise UsageProblem(
            f"{kind} {value!r} needs a project: pass --project, set {PROJECT_ENV}, "
            f"or give the full name projects/PROJECT/{collection}/{value}"
        )
    return f"projects/{project}/{collection}/{value}"


def required_project(project: str | None, what: str) -> str:
    """The project for a call that needs one (``list``)."""
    if project is None:
        raise UsageProblem(f"{what} needs a project: pass --project or set {PROJECT_ENV}")
    return project
