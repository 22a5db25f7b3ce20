"""``eoclient subscriptions ack|modify-ack-deadline``: settling deliveries by ack id (from
``eoclient subscriptions pull``) as a subscriber does, through the SDK's
``SubscriberClient``, with each id's result (an exactly-once subscription's status)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from eoclient.cli.app import Invocation, common_options
from eoclient.cli.views import Column
from eoclient.subscriber import AckResult, SubscriberClient


def _settle_by_id(
    invocation: Invocation, subscription: str, ack_ids: Sequence[str], seconds: int | None
) -> None:
    name = invocation.name("subscription", subscription)

    async def call() -> dict[str, AckResult]:
        async with SubscriberClient(invocation.endpoint) as client:
            if seconds is None:
                return await client.acknowledge(name, ack_ids)
            return await client.modify_ack_deadline(name, ack_ids, seconds)

    results = invocation.run(call())
    out = invocation.output
    if out.json:
        out.document(
            [
                {"ackId": ack_id, "status": r.status.name, "info": r.info or None}
                for ack_id, r in results.items()
            ]
        )
        return
    out.rows(list(results.items()), _ACK_COLUMNS)


_ACK_COLUMNS: Sequence[Column[tuple[str, AckResult]]] = (
    Column("ACK ID", lambda item: item[0]),
    Column("STATUS", lambda item: item[1].status.name),
    Column("INFO", lambda item: item[1].info),
)


@click.command("ack")
@click.argument("subscription")
@click.argument("ack_ids", nargs=-1, required=True, metavar="ACK_ID...")
@common_options
def ack(invocation: Invocation, subscription: str, ack_ids: Sequence[str]) -> None:
    """Acknowledge deliveries by ack id (from pull); shows each id's exactly-once status."""
    _settle_by_id(invocation, subscription, ack_ids, None)


@click.command("modify-ack-deadline")
@click.argument("subscription")
@click.argument("ack_ids", nargs=-1, required=True, metavar="ACK_ID...")
@click.option(
    "--ack-deadline",
    type=click.IntRange(0, 600),
    required=True,
    help="Seconds from now, 0..600; 0 gives the messages back for redelivery now.",
)
@common_options
def modify_ack_deadline(
    invocation: Invocation, subscription: str, ack_ids: Sequence[str], ack_deadline: int
) -> None:
    """Extend (or end, with 0) the deadline of deliveries by ack id."""
    _settle_by_id(invocation, subscription, ack_ids, ack_deadline)
