"""Resource names: ``projects/{project}/topics/{topic}`` and its siblings.

The official clients' path helpers, with the same names; each id is checked (non-empty,
no ``/``) so that a mistake is a ``ValueError`` here instead of a ``NotFound`` from the
server about a name nobody meant.
"""

from __future__ import annotations

__all__ = [
    "project_of",
    "project_path",
    "schema_path",
    "snapshot_path",
    "subscription_path",
    "topic_path",
]


def _segment(kind: str, value: str) -> str:
    if not isinstance(value, str) or not value or "/" in value:
        raise ValueError(f"{kind} must be a non-empty id without '/', got {value!r}")
    return value


def project_path(project: str) -> str:
    """``projects/{project}``."""
    return f"projects/{_segment('project', project)}"


def topic_path(project: str, topic: str) -> str:
    """``projects/{project}/topics/{topic}``."""
    return f"{project_path(project)}/topics/{_segment('topic', topic)}"


def subscription_path(project: str, subscription: str) -> str:
    """``projects/{project}/subscriptions/{subscription}``."""
    return f"{project_path(project)}/subscriptions/{_segment('subscription', subscription)}"


def snapshot_path(project: str, snapshot: str) -> str:
    """``projects/{project}/snapshots/{snapshot}``."""
    return f"{project_path(project)}/snapshots/{_segment('snapshot', snapshot)}"


def schema_path(project: str, schema: str) -> str:
    """``projects/{project}/schemas/{schema}``."""
    return f"{project_path(project)}/schemas/{_segment('schema', schema)}"


def project_of(project: str) -> str:
    """A list call's parent: ``"my-project"`` and ``"projects/my-project"`` both work."""
    return project if project.startswith("projects/") else project_path(project)
