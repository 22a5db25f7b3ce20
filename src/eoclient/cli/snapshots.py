"""``eoclient snapshots create|list|describe|update|delete``."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

import click

from eoclient.admin import UNSET, Snapshot, Unset
from eoclient.cli.app import Invocation, common_options
from eoclient.cli.errors import UsageProblem
from eoclient.cli.flags import (
    TIME,
    label_changes_requested,
    label_update_options,
    labels_option,
    merged,
    updated_labels,
)
from eoclient.cli.resource_verbs import ResourceVerbs
from eoclient.cli.views import SNAPSHOT_COLUMNS, snapshot_fields, snapshot_record


@click.group()
def snapshots() -> None:
    """Create, inspect, change and delete snapshots (for seek --snapshot)."""


SNAPSHOTS: ResourceVerbs[Snapshot] = ResourceVerbs(
    "snapshot",
    "snapshots",
    SNAPSHOT_COLUMNS,
    snapshot_record,
    snapshot_fields,
    lambda admin, name: admin.get_snapshot(name),
    lambda admin, project: admin.list_snapshots(project),
)
SNAPSHOTS.add_to(snapshots)


@snapshots.command("create")
@click.argument("snapshot")
@click.option("--subscription", required=True, help="The subscription whose state to keep.")
@click.option(
    "--subscription-project", metavar="PROJECT", help="Project of --subscription given by id."
)
@labels_option
@common_options
def create(
    invocation: Invocation,
    snapshot: str,
    subscription: str,
    subscription_project: str | None,
    labels: Sequence[Mapping[str, str]],
) -> None:
    """Create SNAPSHOT of --subscription's unacked backlog (and all published after)."""
    name = invocation.name("snapshot", snapshot)
    source = invocation.name("subscription", subscription, subscription_project)

    async def call() -> Snapshot:
        async with invocation.admin() as admin:
            return await admin.create_snapshot(name, source, labels=merged(labels))

    SNAPSHOTS.show(invocation, invocation.run(call()), "created")


@snapshots.command("update")
@click.argument("snapshot")
@label_update_options
@click.option(
    "--expire-time", type=TIME, help="When the snapshot is deleted (ISO 8601 or -DURATION)."
)
@common_options
def update(
    invocation: Invocation,
    snapshot: str,
    update_labels: Sequence[Mapping[str, str]],
    remove_labels: Sequence[str],
    clear_labels: bool,
    expire_time: datetime.datetime | None,
) -> None:
    """Change SNAPSHOT's labels or expiry (only what the flags name)."""
    name = invocation.name("snapshot", snapshot)
    relabel = label_changes_requested(update_labels, remove_labels, clear_labels)
    if not relabel and expire_time is None:
        raise UsageProblem("nothing to update: pass at least one flag (see --help)")

    async def call() -> Snapshot:
        async with invocation.admin() as admin:
            labels: dict[str, str] | Unset = UNSET
            if relabel:
                current = (await admin.get_snapshot(name)).labels
                labels = updated_labels(current, update_labels, remove_labels, clear_labels)
            return await admin.update_snapshot(
                name, labels=labels, expire_time=UNSET if expire_time is None else expire_time
            )

    SNAPSHOTS.show(invocation, invocation.run(call()), "updated")


@snapshots.command("delete")
@click.argument("snapshot")
@common_options
def delete(invocation: Invocation, snapshot: str) -> None:
    """Delete SNAPSHOT."""
    name = invocation.name("snapshot", snapshot)

    async def call() -> None:
        async with invocation.admin() as admin:
            await admin.delete_snapshot(name)

    invocation.run(call())
    invocation.output.done("deleted", "snapshot", name, {"name": name, "deleted": True})
