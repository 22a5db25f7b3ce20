"""Pulsar-style policy verbs (eoclient's reference server; docs/policies.md)::

    eoclient subscriptions skip-messages SUB --message-id ID [--message-id ID ...]
    eoclient topics set-retention TOPIC --time 3h --size 10G      (-1: forever)
    eoclient topics remove-retention TOPIC
    eoclient topics set-backlog-quota TOPIC --limit 2G --limit-time 1h
        --policy producer_request_hold|producer_exception|consumer_backlog_eviction
    eoclient topics remove-backlog-quota TOPIC
    eoclient topics|subscriptions set-message-ttl NAME --ttl 120   (0: remove, as Pulsar)
    eoclient topics|subscriptions remove-message-ttl NAME
    eoclient topics|subscriptions policies NAME                    (policies + counters)

Durations take the command's one grammar, which reads ``pulsar-admin``'s units too (s, m,
h, d, w, y; ``values.py``); sizes take ``pulsar-admin``'s (``policy_values``). ``register`` adds the
verbs to the ``topics`` and ``subscriptions`` groups; ``seek_with_warning`` is what
``eoclient seek --time`` uses to say when the time is older than what is retained.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import click

from eoclient.admin import (
    AdminClient,
    BacklogQuotaAction,
    SeekOutcome,
    SkipOutcome,
    SubscriptionPolicies,
    SubscriptionPolicyCounters,
    TopicPolicies,
    TopicPolicyCounters,
)
from eoclient.admin.policies import DEFAULT_HOLD_TIMEOUT
from eoclient.admin.policy_calls import extension_missing
from eoclient.cli import policy_values as pv
from eoclient.cli.app import Invocation, common_options
from eoclient.cli.errors import CliError, UsageProblem
from eoclient.cli.flags import DURATION, DURATION_OR_FOREVER, _Parsed
from eoclient.cli.values import DURATION_EXAMPLES, wire_time
from eoclient.cli.views import Column
from eoclient.errors import Unimplemented

T = TypeVar("T")

_POLICY_NAMES = [action.value for action in BacklogQuotaAction]


SIZE = _Parsed("size", pv.parse_size)


def _admin_call(invocation: Invocation, call: Callable[[AdminClient], Awaitable[T]]) -> T:
    async def run() -> T:
        async with invocation.admin() as admin:
            try:
                return await call(admin)
            except Unimplemented as error:
                if extension_missing(error):
                    raise CliError(
                        f"{invocation.target} does not serve eoclient's broker policies: "
                        "they need eoclient's reference server (eoclient serve)"
                    ) from error
                raise

    return invocation.run(run())


def _show_topic(invocation: Invocation, policies: TopicPolicies, done: str) -> None:
    out = invocation.output
    if out.json:
        out.document(pv.topic_policies_record(policies))
        return
    out.note(f"{done} topic {policies.topic}")
    out.fields(pv.topic_policy_fields(policies))


def _show_subscription(invocation: Invocation, policies: SubscriptionPolicies, done: str) -> None:
    out = invocation.output
    if out.json:
        out.document(pv.subscription_policies_record(policies))
        return
    out.note(f"{done} subscription {policies.subscription}")
    out.fields(pv.subscription_policy_fields(policies))


# ================================================================ skip


_OUTCOME_COLUMNS: Sequence[Column[tuple[str, SkipOutcome]]] = (
    Column("MESSAGE ID", lambda row: row[0]),
    Column("OUTCOME", lambda row: row[1].value),
)


@click.command("skip-messages")
@click.argument("subscription")
@click.option(
    "--message-id",
    "message_ids",
    multiple=True,
    required=True,
    metavar="ID",
    help="A message id as publish printed it; repeatable.",
)
@common_options
def skip_messages(invocation: Invocation, subscription: str, message_ids: Sequence[str]) -> None:
    """Acknowledge chosen messages on SUBSCRIPTION as if a subscriber had (PIP-423).

    Each id is reported: skipped; already_acknowledged (a message of the subscription's
    topic, not pending there); or not_found (no message of its topic). Skipped messages
    are never delivered again there (other subscriptions keep them); a delayed one is
    cancelled; the head of an ordering key releases the next.
    """
    name = invocation.name("subscription", subscription)
    outcomes = _admin_call(invocation, lambda admin: admin.skip_messages(name, message_ids))
    out = invocation.output
    if out.json:
        out.document([{"messageId": i, "outcome": o.value} for i, o in outcomes.items()])
        return
    out.rows(list(outcomes.items()), _OUTCOME_COLUMNS)
    missing = sum(1 for o in outcomes.values() if o is SkipOutcome.NOT_FOUND)
    if missing:
        topic = _admin_call(invocation, lambda admin: admin.get_subscription(name)).topic
        out.note(
            f"{missing} of the ids are no message of {topic} (never issued, or published to "
            "another topic)"
        )


# ================================================================ topics


@click.command("set-retention")
@click.argument("topic")
@click.option(
    "-t",
    "--time",
    "time",
    type=DURATION_OR_FOREVER,
    required=True,
    help=f"How long to keep messages ({DURATION_EXAMPLES}; -1: forever; 0 with --size 0: none).",
)
@click.option(
    "-s",
    "--size",
    "size",
    type=SIZE,
    required=True,
    help=f"How much to keep ({pv.SIZE_EXAMPLES}; -1 infinite).",
)
@common_options
def set_retention(
    invocation: Invocation, topic: str, time: datetime.timedelta | None, size: int | None
) -> None:
    """Keep TOPIC's messages, acknowledged or not, for seek to a time (Pulsar retention)."""
    name = invocation.name("topic", topic)
    zero = datetime.timedelta(0)
    if time == zero and size == 0:  # Pulsar's "0 and 0": no retention
        policies = _admin_call(invocation, lambda admin: admin.remove_topic_retention(name))
        _show_topic(invocation, policies, "removed retention of")
        return
    policies = _admin_call(
        invocation, lambda admin: admin.set_topic_retention(name, time=time, size_bytes=size)
    )
    _show_topic(invocation, policies, "set retention of")


@click.command("set-backlog-quota")
@click.argument("topic")
@click.option(
    "-l", "--limit", type=SIZE, help=f"Unacked bytes per subscription ({pv.SIZE_EXAMPLES})."
)
@click.option(
    "--limit-time",
    type=DURATION,
    help=f"Age of the oldest unacked message ({DURATION_EXAMPLES}).",
)
@click.option(
    "-p",
    "--policy",
    type=click.Choice(_POLICY_NAMES),
    default=BacklogQuotaAction.PRODUCER_REQUEST_HOLD.value,
    show_default=True,
    help="What Publish does when a subscription is over the quota.",
)
@click.option(
    "--hold-timeout",
    type=DURATION,
    help=(
        "producer_request_hold: how long a publish waits "
        f"(default {DEFAULT_HOLD_TIMEOUT.seconds}s)."
    ),
)
@common_options
def set_backlog_quota(
    invocation: Invocation,
    topic: str,
    limit: int | None,
    limit_time: datetime.timedelta | None,
    policy: str,
    hold_timeout: datetime.timedelta | None,
) -> None:
    """Limit each subscription's unacknowledged backlog of TOPIC."""
    name = invocation.name("topic", topic)
    if limit is None and limit_time is None:
        raise UsageProblem("pass --limit, --limit-time or both")
    action = BacklogQuotaAction(policy)
    if hold_timeout is not None and action is not BacklogQuotaAction.PRODUCER_REQUEST_HOLD:
        raise UsageProblem("--hold-timeout applies to --policy producer_request_hold only")
    policies = _admin_call(
        invocation,
        lambda admin: admin.set_topic_backlog_quota(
            name,
            limit_bytes=limit,
            limit_age=limit_time,
            action=action,
            hold_timeout=hold_timeout or DEFAULT_HOLD_TIMEOUT,
        ),
    )
    _show_topic(invocation, policies, "set backlog quota of")


def _topic_remover(verb: str, what: str, method: str) -> click.Command:
    @click.argument("topic")
    @common_options
    def command(invocation: Invocation, topic: str) -> None:
        name = invocation.name("topic", topic)
        policies = _admin_call(invocation, lambda admin: getattr(admin, method)(name))
        _show_topic(invocation, policies, f"removed {what} of")

    command.__doc__ = f"Remove TOPIC's {what}."
    return click.command(verb)(command)


def _ttl_option(command: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--ttl",
        type=DURATION,
        required=True,
        help=f"Unacked messages older than this are acknowledged ({DURATION_EXAMPLES}; "
        "0 removes the TTL, as in Pulsar).",
    )(command)


@click.command("set-message-ttl")
@click.argument("topic")
@_ttl_option
@common_options
def set_topic_ttl(invocation: Invocation, topic: str, ttl: datetime.timedelta) -> None:
    """Acknowledge TOPIC's unacknowledged messages once older than --ttl (on every
    subscription without a TTL of its own)."""
    name = invocation.name("topic", topic)
    if not ttl:  # Pulsar: 0 disables the TTL
        policies = _admin_call(invocation, lambda admin: admin.remove_topic_message_ttl(name))
        _show_topic(invocation, policies, "removed message ttl of")
        return
    policies = _admin_call(invocation, lambda admin: admin.set_topic_message_ttl(name, ttl))
    _show_topic(invocation, policies, "set message ttl of")


@click.command("policies")
@click.argument("topic")
@common_options
def topic_policies(invocation: Invocation, topic: str) -> None:
    """Show TOPIC's policies and what they did (counters since the server started)."""
    name = invocation.name("topic", topic)

    async def both(admin: AdminClient) -> tuple[TopicPolicies, TopicPolicyCounters]:
        return await admin.get_topic_policies(name), await admin.get_topic_policy_counters(name)

    policies, counters = _admin_call(invocation, both)
    out = invocation.output
    if out.json:
        out.document(
            {**pv.topic_policies_record(policies), "counters": pv.topic_counters_record(counters)}
        )
    else:
        out.fields(pv.topic_policy_fields(policies, counters))


# ================================================================ subscriptions


@click.command("set-message-ttl")
@click.argument("subscription")
@_ttl_option
@common_options
def set_subscription_ttl(
    invocation: Invocation, subscription: str, ttl: datetime.timedelta
) -> None:
    """Acknowledge SUBSCRIPTION's unacknowledged messages once older than --ttl (it wins
    over the topic's TTL)."""
    name = invocation.name("subscription", subscription)
    if not ttl:
        policies = _admin_call(
            invocation, lambda admin: admin.remove_subscription_message_ttl(name)
        )
        _show_subscription(invocation, policies, "removed message ttl of")
        return
    policies = _admin_call(invocation, lambda admin: admin.set_subscription_message_ttl(name, ttl))
    _show_subscription(invocation, policies, "set message ttl of")


@click.command("remove-message-ttl")
@click.argument("subscription")
@common_options
def remove_subscription_ttl(invocation: Invocation, subscription: str) -> None:
    """Remove SUBSCRIPTION's own TTL (the topic's applies again, if any)."""
    name = invocation.name("subscription", subscription)
    policies = _admin_call(invocation, lambda admin: admin.remove_subscription_message_ttl(name))
    _show_subscription(invocation, policies, "removed message ttl of")


@click.command("policies")
@click.argument("subscription")
@common_options
def subscription_policies(invocation: Invocation, subscription: str) -> None:
    """Show SUBSCRIPTION's policies and what they did (counters since the server started)."""
    name = invocation.name("subscription", subscription)

    async def both(
        admin: AdminClient,
    ) -> tuple[SubscriptionPolicies, SubscriptionPolicyCounters]:
        policies = await admin.get_subscription_policies(name)
        return policies, await admin.get_subscription_policy_counters(name)

    policies, counters = _admin_call(invocation, both)
    out = invocation.output
    if out.json:
        record = pv.subscription_policies_record(policies)
        out.document({**record, "counters": pv.subscription_counters_record(counters)})
    else:
        out.fields(pv.subscription_policy_fields(policies, counters))


# ================================================================ seek


async def seek_with_outcome(
    admin: AdminClient, subscription: str, time: datetime.datetime
) -> SeekOutcome | None:
    """Seek to ``time``, with its outcome where the server tells it (eoclient's); a
    server without the extension (Google's emulator, the service) seeks plainly: None."""
    try:
        return await admin.seek_with_outcome(subscription, time=time)
    except Unimplemented as error:
        if not extension_missing(error):
            raise
    await admin.seek(subscription, time=time)
    return None


def warn_incomplete_seek(
    invocation: Invocation, outcome: SeekOutcome | None, time: datetime.datetime
) -> None:
    """Say when a seek to ``time`` could not reach back that far (stderr)."""
    if outcome is None:
        return
    if outcome.replayable_from is None:
        if time < datetime.datetime.now(datetime.UTC):
            invocation.output.note(
                "warning: nothing is retained to replay (see --retain-acked-messages "
                "and 'eoclient topics set-retention')"
            )
        return
    if not outcome.complete:
        invocation.output.note(
            f"warning: {wire_time(time)} is older than anything retained; the replay "
            f"starts at {wire_time(outcome.replayable_from)}"
        )


def register(topics: click.Group, subscriptions: click.Group) -> None:
    """Add the policy verbs to the ``topics`` and ``subscriptions`` groups."""
    for command in (
        set_retention,
        _topic_remover("remove-retention", "retention", "remove_topic_retention"),
        set_backlog_quota,
        _topic_remover("remove-backlog-quota", "backlog quota", "remove_topic_backlog_quota"),
        set_topic_ttl,
        _topic_remover("remove-message-ttl", "message ttl", "remove_topic_message_ttl"),
        topic_policies,
    ):
        topics.add_command(command)
    for command in (
        skip_messages,
        set_subscription_ttl,
        remove_subscription_ttl,
        subscription_policies,
    ):
        subscriptions.add_command(command)
