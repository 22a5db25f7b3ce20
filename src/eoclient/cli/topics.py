"""``eoclient topics create|list|describe|update|delete|list-subscriptions|list-snapshots``."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from eoclient.admin import UNSET, IngestionSettings, Topic, Unset
from eoclient.cli.app import Invocation, common_options
from eoclient.cli.errors import UsageProblem
from eoclient.cli.flags import (
    DURATION,
    duration_help,
    label_changes_requested,
    label_update_options,
    labels_option,
    merged,
    updated_labels,
)
from eoclient.cli.ingestion import ingestion_from_flags, ingestion_options
from eoclient.cli.resource_verbs import ResourceVerbs
from eoclient.cli.transforms_file import (
    clear_transforms_option,
    read_transforms,
    transforms_change,
    transforms_file_option,
)
from eoclient.cli.views import TOPIC_COLUMNS, Column, topic_fields, topic_record


@click.group()
def topics() -> None:
    """Create, inspect, change and delete topics."""


TOPICS: ResourceVerbs[Topic] = ResourceVerbs(
    "topic",
    "topics",
    TOPIC_COLUMNS,
    topic_record,
    topic_fields,
    lambda admin, name: admin.get_topic(name),
    lambda admin, project: admin.list_topics(project),
)
TOPICS.add_to(topics)


@topics.command("create")
@click.argument("topic")
@labels_option
@click.option(
    "--message-retention-duration",
    type=DURATION,
    help=duration_help("How long the topic keeps messages, 10m..31d"),
)
@click.option("--topic-encryption-key", default="", help="Cloud KMS key name.")
@transforms_file_option
@ingestion_options(update=False)
@common_options
def create(
    invocation: Invocation,
    topic: str,
    labels: Sequence[Mapping[str, str]],
    message_retention_duration: datetime.timedelta | None,
    topic_encryption_key: str,
    message_transforms_file: Path | None,
    **ingestion_flags: Any,
) -> None:
    """Create TOPIC (an import topic with one source's --*-ingestion-* flags)."""
    name = invocation.name("topic", topic)
    transforms = read_transforms(message_transforms_file) if message_transforms_file else ()
    ingestion = ingestion_from_flags(ingestion_flags)

    async def call() -> Topic:
        async with invocation.admin() as admin:
            return await admin.create_topic(
                name,
                labels=merged(labels),
                message_retention_duration=message_retention_duration,
                kms_key_name=topic_encryption_key,
                message_transforms=transforms,
                ingestion_data_source_settings=ingestion,
            )

    TOPICS.show(invocation, invocation.run(call()), "created")


@topics.command("update")
@click.argument("topic")
@label_update_options
@click.option(
    "--message-retention-duration",
    type=DURATION,
    help=duration_help("How long the topic keeps messages, 10m..31d"),
)
@click.option(
    "--clear-message-retention-duration",
    is_flag=True,
    help="Keep no messages in the topic (subscriptions decide).",
)
@click.option("--topic-encryption-key", default=None, help="Cloud KMS key name.")
@transforms_file_option
@clear_transforms_option
@ingestion_options(update=True)
@common_options
def update(
    invocation: Invocation,
    topic: str,
    update_labels: Sequence[Mapping[str, str]],
    remove_labels: Sequence[str],
    clear_labels: bool,
    message_retention_duration: datetime.timedelta | None,
    clear_message_retention_duration: bool,
    topic_encryption_key: str | None,
    message_transforms_file: Path | None,
    clear_message_transforms: bool,
    clear_ingestion_data_source_settings: bool,
    **ingestion_flags: Any,
) -> None:
    """Change TOPIC's labels, retention, key, transforms or ingestion source (only what the
    flags name; a source's flags replace its ingestion settings whole)."""
    name = invocation.name("topic", topic)
    transforms = transforms_change(message_transforms_file, clear_message_transforms)
    if message_retention_duration is not None and clear_message_retention_duration:
        raise UsageProblem(
            "--message-retention-duration and --clear-message-retention-duration "
            "contradict each other"
        )
    retention: datetime.timedelta | Unset | None = UNSET
    if message_retention_duration is not None:
        retention = message_retention_duration
    elif clear_message_retention_duration:
        retention = None
    relabel = label_changes_requested(update_labels, remove_labels, clear_labels)
    ingestion: IngestionSettings | Unset | None = ingestion_from_flags(ingestion_flags) or UNSET
    if clear_ingestion_data_source_settings:
        if ingestion is not UNSET:
            raise UsageProblem(
                "--clear-ingestion-data-source-settings and an ingestion source's flags "
                "contradict each other"
            )
        ingestion = None
    nothing = retention is UNSET and topic_encryption_key is None and not relabel
    if nothing and transforms is None and ingestion is UNSET:
        raise UsageProblem("nothing to update: pass at least one flag (see --help)")

    async def call() -> Topic:
        async with invocation.admin() as admin:
            labels: dict[str, str] | Unset = UNSET
            if relabel:
                current = (await admin.get_topic(name)).labels
                labels = updated_labels(current, update_labels, remove_labels, clear_labels)
            return await admin.update_topic(
                name,
                labels=labels,
                message_retention_duration=retention,
                kms_key_name=UNSET if topic_encryption_key is None else topic_encryption_key,
                message_transforms=UNSET if transforms is None else transforms,
                ingestion_data_source_settings=ingestion,
            )

    TOPICS.show(invocation, invocation.run(call()), "updated")


@topics.command("delete")
@click.argument("topic")
@common_options
def delete(invocation: Invocation, topic: str) -> None:
    """Delete TOPIC (its subscriptions remain, detached from it)."""
    name = invocation.name("topic", topic)

    async def call() -> None:
        async with invocation.admin() as admin:
            await admin.delete_topic(name)

    invocation.run(call())
    invocation.output.done("deleted", "topic", name, {"name": name, "deleted": True})


def _names_command(kind: str) -> click.Command:
    """``list-subscriptions`` / ``list-snapshots``: the names attached to a topic."""

    @click.argument("topic")
    @common_options
    def command(invocation: Invocation, topic: str) -> None:
        name = invocation.name("topic", topic)

        async def call() -> list[str]:
            async with invocation.admin() as admin:
                if kind == "subscriptions":
                    return await admin.list_topic_subscriptions(name).collect()
                return await admin.list_topic_snapshots(name).collect()

        found = invocation.run(call())
        out = invocation.output
        if out.json:
            out.document(found)
        elif found:
            out.rows(found, [_NAME_COLUMN])
        else:
            out.note(f"no {kind} of {name}")

    command.__doc__ = f"List the {kind} of TOPIC."
    return click.command(f"list-{kind}")(command)


_NAME_COLUMN: Column[str] = Column("NAME", str)

topics.add_command(_names_command("subscriptions"))
topics.add_command(_names_command("snapshots"))
