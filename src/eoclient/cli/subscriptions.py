"""``eoclient subscriptions create|list|describe|update|delete|detach|ack|modify-ack-deadline``."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from eoclient.admin import (
    DeadLetterPolicy,
    ExpirationPolicy,
    PushConfig,
    RetryPolicy,
    SeekOutcome,
    Subscription,
)
from eoclient.cli import ack_by_id, policies, policy_values
from eoclient.cli.app import Invocation, common_options
from eoclient.cli.errors import CliError, UsageProblem
from eoclient.cli.export_flags import (
    apply_update_exports,
    create_exports,
    export_options,
    update_exports,
)
from eoclient.cli.flags import (
    DURATION,
    EXPIRATION,
    TIME,
    duration_help,
    label_changes_requested,
    label_update_options,
    labels_option,
    merged,
    updated_labels,
)
from eoclient.cli.resource_verbs import ResourceVerbs
from eoclient.cli.transforms_file import (
    clear_transforms_option,
    read_transforms,
    transforms_change,
    transforms_file_option,
)
from eoclient.cli.values import wire_time
from eoclient.cli.views import (
    SUBSCRIPTION_COLUMNS,
    subscription_fields,
    subscription_record,
)

# RetryPolicy's wire defaults, used for the bound a flag leaves out
# (docs/protocol.md#subscription-properties-and-defaults).
DEFAULT_MIN_RETRY_DELAY = RetryPolicy().minimum_backoff
DEFAULT_MAX_RETRY_DELAY = RetryPolicy().maximum_backoff
DEFAULT_MAX_DELIVERY_ATTEMPTS = DeadLetterPolicy("").max_delivery_attempts


@click.group()
def subscriptions() -> None:
    """Create, inspect, change, detach and delete subscriptions; ack by id."""


SUBSCRIPTIONS: ResourceVerbs[Subscription] = ResourceVerbs(
    "subscription",
    "subscriptions",
    SUBSCRIPTION_COLUMNS,
    subscription_record,
    subscription_fields,
    lambda admin, name: admin.get_subscription(name),
    lambda admin, project: admin.list_subscriptions(project),
)
SUBSCRIPTIONS.add_to(subscriptions)
subscriptions.add_command(ack_by_id.ack)
subscriptions.add_command(ack_by_id.modify_ack_deadline)


# Flags both create and update take, as gcloud names them.
def _policy_options(command: Any) -> Any:
    for option in reversed(
        [
            click.option("--ack-deadline", type=int, help="Seconds to ack a delivery, 10..600."),
            click.option(
                "--message-retention-duration",
                type=DURATION,
                help=duration_help("How long unacked (and retained acked) messages stay, 10m..31d"),
            ),
            click.option(
                "--expiration-period",
                type=EXPIRATION,
                help="Delete the subscription after this long idle (>= 1d), or 'never'.",
            ),
            click.option(
                "--dead-letter-topic",
                metavar="TOPIC",
                help="Topic for messages that were not acked after --max-delivery-attempts.",
            ),
            click.option(
                "--dead-letter-topic-project",
                metavar="PROJECT",
                help="Project of --dead-letter-topic when given by id.",
            ),
            click.option(
                "--max-delivery-attempts",
                type=int,
                help=f"Delivery attempts before dead-lettering, 5..100 "
                f"(default {DEFAULT_MAX_DELIVERY_ATTEMPTS}).",
            ),
            click.option(
                "--min-retry-delay",
                type=DURATION,
                help=duration_help("Least redelivery backoff after a nack or expiry, 0..600s"),
            ),
            click.option(
                "--max-retry-delay",
                type=DURATION,
                help=duration_help("Greatest redelivery backoff, 0..600s"),
            ),
            click.option("--push-endpoint", metavar="URL", help="Push messages to this URL."),
        ]
    ):
        command = option(command)
    return command


@subscriptions.command("create")
@click.argument("subscription")
@click.option("--topic", required=True, help="The topic to subscribe to.")
@click.option("--topic-project", metavar="PROJECT", help="Project of --topic when given by id.")
@_policy_options
@click.option(
    "--enable-exactly-once-delivery", is_flag=True, help="Deliver each message exactly once."
)
@click.option("--enable-message-ordering", is_flag=True, help="Deliver in order per ordering key.")
@click.option("--message-filter", default="", help="Deliver only messages matching this filter.")
@click.option(
    "--retain-acked-messages", is_flag=True, help="Keep acked messages (for seek --time)."
)
@export_options(update=False)
@labels_option
@transforms_file_option
@common_options
def create(
    invocation: Invocation,
    subscription: str,
    topic: str,
    topic_project: str | None,
    ack_deadline: int | None,
    message_retention_duration: datetime.timedelta | None,
    expiration_period: ExpirationPolicy | None,
    dead_letter_topic: str | None,
    dead_letter_topic_project: str | None,
    max_delivery_attempts: int | None,
    min_retry_delay: datetime.timedelta | None,
    max_retry_delay: datetime.timedelta | None,
    push_endpoint: str | None,
    enable_exactly_once_delivery: bool,
    enable_message_ordering: bool,
    message_filter: str,
    retain_acked_messages: bool,
    labels: Sequence[Mapping[str, str]],
    message_transforms_file: Path | None,
    **export_flags: Any,
) -> None:
    """Create SUBSCRIPTION to --topic (a pull subscription unless --push-endpoint,
    --bigquery-table or --cloud-storage-bucket makes it push or export)."""
    exports = create_exports(export_flags)
    name = invocation.name("subscription", subscription)
    transforms = read_transforms(message_transforms_file) if message_transforms_file else ()
    topic_name = invocation.name("topic", topic, topic_project)
    dead_letter = None
    if dead_letter_topic is not None:
        dead_letter = DeadLetterPolicy(
            invocation.name("topic", dead_letter_topic, dead_letter_topic_project),
            max_delivery_attempts or DEFAULT_MAX_DELIVERY_ATTEMPTS,
        )
    elif max_delivery_attempts is not None:
        raise UsageProblem("--max-delivery-attempts needs --dead-letter-topic")
    retry = None
    if min_retry_delay is not None or max_retry_delay is not None:
        retry = RetryPolicy(
            min_retry_delay if min_retry_delay is not None else DEFAULT_MIN_RETRY_DELAY,
            max_retry_delay if max_retry_delay is not None else DEFAULT_MAX_RETRY_DELAY,
        )

    async def call() -> Subscription:
        async with invocation.admin() as admin:
            return await admin.create_subscription(
                name,
                topic_name,
                ack_deadline_seconds=ack_deadline or 0,
                retain_acked_messages=retain_acked_messages,
                message_retention_duration=message_retention_duration,
                labels=merged(labels),
                enable_message_ordering=enable_message_ordering,
                expiration_policy=expiration_period,
                filter=message_filter,
                dead_letter_policy=dead_letter,
                retry_policy=retry,
                enable_exactly_once_delivery=enable_exactly_once_delivery,
                push_config=PushConfig(push_endpoint) if push_endpoint else None,
                message_transforms=transforms,
                **exports,
            )

    SUBSCRIPTIONS.show(invocation, invocation.run(call()), "created")


@subscriptions.command("update")
@click.argument("subscription")
@_policy_options
@click.option(
    "--enable-exactly-once-delivery/--no-enable-exactly-once-delivery",
    default=None,
    help="Turn exactly-once delivery on or off.",
)
@click.option(
    "--retain-acked-messages/--no-retain-acked-messages",
    default=None,
    help="Keep acked messages (for seek --time), or stop keeping them.",
)
@click.option("--clear-dead-letter-policy", is_flag=True, help="Stop dead-lettering.")
@click.option("--clear-retry-policy", is_flag=True, help="Redeliver at once again.")
@click.option(
    "--clear-push-config", is_flag=True, help="Make a push subscription a pull one again."
)
@export_options(update=True)
@label_update_options
@transforms_file_option
@clear_transforms_option
@common_options
def update(
    invocation: Invocation,
    subscription: str,
    ack_deadline: int | None,
    message_retention_duration: datetime.timedelta | None,
    expiration_period: ExpirationPolicy | None,
    dead_letter_topic: str | None,
    dead_letter_topic_project: str | None,
    max_delivery_attempts: int | None,
    min_retry_delay: datetime.timedelta | None,
    max_retry_delay: datetime.timedelta | None,
    push_endpoint: str | None,
    enable_exactly_once_delivery: bool | None,
    retain_acked_messages: bool | None,
    clear_dead_letter_policy: bool,
    clear_retry_policy: bool,
    clear_push_config: bool,
    update_labels: Sequence[Mapping[str, str]],
    remove_labels: Sequence[str],
    clear_labels: bool,
    message_transforms_file: Path | None,
    clear_message_transforms: bool,
    **export_flags: Any,
) -> None:
    """Change SUBSCRIPTION (only what the flags name; filter and ordering are fixed)."""
    name = invocation.name("subscription", subscription)
    _refuse_both(clear_dead_letter_policy, dead_letter_topic or max_delivery_attempts, "dead")
    _refuse_both(clear_retry_policy, min_retry_delay or max_retry_delay, "retry")
    _refuse_both(clear_push_config, push_endpoint, "push")
    dead_letter_topic_name = (
        invocation.name("topic", dead_letter_topic, dead_letter_topic_project)
        if dead_letter_topic
        else None
    )
    changes: dict[str, Any] = {}
    if ack_deadline is not None:
        changes["ack_deadline_seconds"] = ack_deadline
    if message_retention_duration is not None:
        changes["message_retention_duration"] = message_retention_duration
    if expiration_period is not None:
        changes["expiration_policy"] = expiration_period
    if enable_exactly_once_delivery is not None:
        changes["enable_exactly_once_delivery"] = enable_exactly_once_delivery
    if retain_acked_messages is not None:
        changes["retain_acked_messages"] = retain_acked_messages
    if clear_dead_letter_policy:
        changes["dead_letter_policy"] = None
    if clear_retry_policy:
        changes["retry_policy"] = None
    if clear_push_config:
        changes["push_config"] = None
    elif push_endpoint:
        changes["push_config"] = PushConfig(push_endpoint)
    transforms = transforms_change(message_transforms_file, clear_message_transforms)
    if transforms is not None:
        changes["message_transforms"] = transforms
    export_changes, export_merges = update_exports(export_flags)
    changes.update(export_changes)
    relabel = label_changes_requested(update_labels, remove_labels, clear_labels)
    merges = (
        export_merges
        or relabel
        or dead_letter_topic_name is not None
        or max_delivery_attempts is not None
        or min_retry_delay is not None
        or max_retry_delay is not None
    )
    if not changes and not merges:
        raise UsageProblem("nothing to update: pass at least one flag (see --help)")

    async def call() -> Subscription:
        async with invocation.admin() as admin:
            if merges:
                # Flags that change part of a policy keep the rest of it as it is.
                current = await admin.get_subscription(name)
                changes.update(apply_update_exports(export_flags, current))
                if relabel:
                    changes["labels"] = updated_labels(
                        current.labels, update_labels, remove_labels, clear_labels
                    )
                if dead_letter_topic_name is not None or max_delivery_attempts is not None:
                    changes["dead_letter_policy"] = _dead_letter(
                        current.dead_letter_policy, dead_letter_topic_name, max_delivery_attempts
                    )
                if min_retry_delay is not None or max_retry_delay is not None:
                    old = current.retry_policy or RetryPolicy()
                    changes["retry_policy"] = RetryPolicy(
                        min_retry_delay if min_retry_delay is not None else old.minimum_backoff,
                        max_retry_delay if max_retry_delay is not None else old.maximum_backoff,
                    )
            return await admin.update_subscription(name, **changes)

    SUBSCRIPTIONS.show(invocation, invocation.run(call()), "updated")


def _refuse_both(clear: bool, value: object, policy: str) -> None:
    if clear and value:
        flag = {"dead": "--clear-dead-letter-policy", "retry": "--clear-retry-policy"}.get(
            policy, "--clear-push-config"
        )
        raise UsageProblem(f"{flag} contradicts the flags that set that policy")


def _dead_letter(
    current: DeadLetterPolicy | None, topic: str | None, attempts: int | None
) -> DeadLetterPolicy:
    if topic is None:
        if current is None:
            raise CliError(
                "--max-delivery-attempts needs --dead-letter-topic: "
                "the subscription has no dead-letter policy"
            )
        topic = current.dead_letter_topic
    if attempts is None:
        attempts = current.max_delivery_attempts if current else DEFAULT_MAX_DELIVERY_ATTEMPTS
    return DeadLetterPolicy(topic, attempts)


@subscriptions.command("delete")
@click.argument("subscription")
@common_options
def delete(invocation: Invocation, subscription: str) -> None:
    """Delete SUBSCRIPTION and its backlog."""
    name = invocation.name("subscription", subscription)

    async def call() -> None:
        async with invocation.admin() as admin:
            await admin.delete_subscription(name)

    invocation.run(call())
    invocation.output.done("deleted", "subscription", name, {"name": name, "deleted": True})


@subscriptions.command("detach")
@click.argument("subscription")
@common_options
def detach(invocation: Invocation, subscription: str) -> None:
    """Detach SUBSCRIPTION from its topic: it stops receiving, pulls fail."""
    name = invocation.name("subscription", subscription)

    async def call() -> None:
        async with invocation.admin() as admin:
            await admin.detach_subscription(name)

    invocation.run(call())
    invocation.output.done("detached", "subscription", name, {"name": name, "detached": True})


@subscriptions.command("seek")
@click.argument("subscription")
@click.option(
    "--time",
    "to_time",
    type=TIME,
    help="Unack messages published after this (ISO 8601, 'now', or -DURATION), ack older ones.",
)
@click.option("--snapshot", help="Take the snapshot's ack state (same topic).")
@click.option(
    "--snapshot-project", metavar="PROJECT", help="Project of --snapshot when given by id."
)
@common_options
def seek(
    invocation: Invocation,
    subscription: str,
    to_time: datetime.datetime | None,
    snapshot: str | None,
    snapshot_project: str | None,
) -> None:
    """Replay or skip SUBSCRIPTION's messages: seek to a time or to a snapshot.

    Seeking back in time redelivers acked messages only if the subscription retains
    them (--retain-acked-messages) or the topic retains messages.
    """
    name = invocation.name("subscription", subscription)
    if (to_time is None) == (snapshot is None):
        raise UsageProblem("pass exactly one of --time and --snapshot")
    snapshot_name = invocation.name("snapshot", snapshot, snapshot_project) if snapshot else None

    async def call() -> SeekOutcome | None:
        async with invocation.admin() as admin:
            if to_time is not None:  # how far back it reached (policies.py)
                return await policies.seek_with_outcome(admin, name, to_time)
            await admin.seek(name, snapshot=snapshot_name)
            return None

    outcome = invocation.run(call())
    when = wire_time(to_time) if to_time is not None else None
    kind, target = ("snapshot", snapshot_name) if snapshot_name else ("time", when)
    record = {"subscription": name, "time": when, "snapshot": snapshot_name}
    if to_time is not None:
        record.update(policy_values.seek_outcome_record(outcome))
        policies.warn_incomplete_seek(invocation, outcome, to_time)
    invocation.output.done(f"seeked subscription {name} to", kind, str(target), record)
