"""``eoclient pull SUB`` (one-off) and ``eoclient tail SUB`` (a live stream).

Both show each message and, when they settle it, the server's answer for that ack or
nack: on an exactly-once subscription ``SUCCESS`` means the message will not be
delivered again, and ``INVALID_ACK_ID`` / ``FAILED_PRECONDITION`` / ... say why not.

``tail`` stops on Ctrl-C (SIGINT) or SIGTERM: it stops taking messages, waits up to
:data:`DRAIN_SECONDS` for the answers to acks already sent (a second Ctrl-C stops
waiting), gives back the messages it holds but has not shown (nack), prints a summary
on stderr and exits 0.
"""

from __future__ import annotations

import asyncio
import collections
import signal
from collections.abc import Sequence

import click

from eoclient.cli.app import Invocation, check_exists, common_options
from eoclient.cli.errors import UsageProblem
from eoclient.cli.values import wire_time
from eoclient.cli.views import (
    Column,
    ack_status_text,
    human_data,
    human_labels,
    message_record,
)
from eoclient.subscriber import (
    AckResult,
    FlowControl,
    Message,
    ShutdownBehavior,
    ShutdownOptions,
    SubscriberClient,
)

# Unary Pull returns at most this many messages a call (the service's limit).
MAX_PULL = 1000
# tail leases at most this many messages ahead of showing them: enough for a steady
# stream, few enough that a stopped tail holds (and must give back) little.
TAIL_OUTSTANDING = 100
# After Ctrl-C, how long tail waits for the answers to acks already sent.
DRAIN_SECONDS = 5.0


async def _settle(message: Message, settle: str) -> AckResult | None:
    if settle == "ack":
        return await message.ack_result()
    if settle == "nack":
        return AckResult(await message.nack_with_response())
    return None


# ================================================================ pull


PULL_COLUMNS: Sequence[Column[tuple[Message, AckResult | None]]] = (
    Column("MESSAGE ID", lambda item: item[0].message_id),
    Column("PUBLISHED", lambda item: wire_time(item[0].publish_time)),
    Column("ATTEMPT", lambda item: str(item[0].delivery_attempt or "")),
    Column("ORDERING KEY", lambda item: item[0].ordering_key),
    Column("ATTRIBUTES", lambda item: human_labels(item[0].attributes)),
    Column("DATA", lambda item: human_data(item[0].data)),
    Column("ACK", lambda item: ack_status_text(item[1], item[0].settled)),
)
ACK_ID_COLUMN: Column[tuple[Message, AckResult | None]] = Column(
    "ACK ID", lambda item: item[0].ack_id
)


def _settle_mode(ack: bool, nack: bool) -> str:
    if ack and nack:
        raise UsageProblem("--ack and --nack contradict each other")
    return "ack" if ack else "nack" if nack else ""


@click.command("pull")
@click.argument("subscription")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Most messages to pull.",
)
@click.option(
    "--ack",
    "--auto-ack",
    "ack",
    is_flag=True,
    help="Acknowledge what was pulled (shows each ack's exactly-once status).",
)
@click.option(
    "--nack", is_flag=True, help="Give what was pulled back at once (peek without consuming)."
)
@common_options
def pull(invocation: Invocation, subscription: str, limit: int, ack: bool, nack: bool) -> None:
    """Pull up to --limit messages from SUBSCRIPTION, once.

    Without --ack or --nack the messages stay leased until their ack deadline; settle
    them by ack id with 'eoclient subscriptions ack'.
    """
    name = invocation.name("subscription", subscription)
    settle = _settle_mode(ack, nack)

    async def call() -> list[tuple[Message, AckResult | None]]:
        received: list[Message] = []
        async with SubscriberClient(invocation.endpoint) as client:
            # A Pull returns at most MAX_PULL: pull again while the answers come back
            # full. One that comes back short is taken as "that is what there is now"
            # (asking again would wait for more, as gcloud's single pull does not).
            while len(received) < limit:
                asked = min(limit - len(received), MAX_PULL)
                batch = await client.pull(name, asked)
                received.extend(batch)
                if len(batch) < asked:
                    break
            results = await asyncio.gather(*(_settle(m, settle) for m in received))
        return list(zip(received, results, strict=True))

    pulled = invocation.run(call())
    out = invocation.output
    if out.json:
        out.document([message_record(m, result, m.settled) for m, result in pulled])
    elif pulled:
        out.rows(pulled, [*PULL_COLUMNS, *([] if settle else [ACK_ID_COLUMN])])
    else:
        out.note(f"no messages in {name} right now")


# ================================================================ tail


class _TailPrinter:
    """Prints each settled message: a line per message for people, JSON lines for
    scripts; counts the outcomes for the summary."""

    HEADER = ("PUBLISHED", "MESSAGE ID", "ATTEMPT", "ACK", "ORDERING KEY", "ATTRIBUTES", "DATA")
    WIDTHS = (27, 12, 7, 14, 12, 12)

    def __init__(self, invocation: Invocation) -> None:
        self.out = invocation.output
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.shown = 0

    def _row(self, values: Sequence[str]) -> str:
        cells = [value.ljust(width) for value, width in zip(values, self.WIDTHS, strict=False)]
        return "  ".join([*cells, *values[len(self.WIDTHS) :]]).rstrip()

    def header(self) -> None:
        if not self.out.json:
            self.out.line(self._row(self.HEADER))

    def show(self, message: Message, result: AckResult | None) -> None:
        self.shown += 1
        status = ack_status_text(result, message.settled)
        self.outcomes[status.split(" (")[0]] += 1
        if self.out.json:
            self.out.json_line(message_record(message, result, message.settled))
            return
        self.out.line(
            self._row(
                (
                    wire_time(message.publish_time),
                    message.message_id,
                    str(message.delivery_attempt or ""),
                    status,
                    message.ordering_key,
                    human_labels(message.attributes),
                    human_data(message.data),
                )
            )
        )

    def summary(self, name: str, interrupted: bool) -> str:
        outcomes = ", ".join(f"{status} {count}" for status, count in sorted(self.outcomes.items()))
        how = "stopped" if interrupted else "done"
        return f"tail {how}: {self.shown} message(s) from {name}" + (
            f" ({outcomes})" if outcomes else ""
        )


async def _tail(
    invocation: Invocation, name: str, settle: str, limit: int | None, printer: _TailPrinter
) -> bool:
    """Stream until ``limit`` messages, an error, or a signal; True if a signal stopped it."""
    loop = asyncio.get_running_loop()
    interrupted = False
    shows: set[asyncio.Task[None]] = set()
    reader: asyncio.Task[None] | None = None

    async def show(message: Message) -> None:
        printer.show(message, await _settle(message, settle))

    def stop_showing() -> None:
        for task in shows:
            task.cancel()

    def on_signal() -> None:
        nonlocal interrupted
        if interrupted:  # the second time: stop waiting for answers
            stop_showing()
            return
        interrupted = True
        if reader is not None:
            reader.cancel()
        loop.call_later(DRAIN_SECONDS, stop_showing)

    flow = FlowControl(max_messages=min(limit or TAIL_OUTSTANDING, TAIL_OUTSTANDING))
    # Messages held but not shown go back at once when tail stops.
    shutdown = ShutdownOptions(ShutdownBehavior.NACK_IMMEDIATELY, timeout=DRAIN_SECONDS)
    await check_exists(invocation, "subscription", name)
    printer.header()  # once the subscription is known to be there
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
    try:
        async with (
            SubscriberClient(invocation.endpoint) as client,
            client.subscribe(name, flow_control=flow, shutdown=shutdown) as stream,
            asyncio.TaskGroup() as group,
        ):

            async def read() -> None:
                taken = 0
                async for message in stream:
                    task = group.create_task(show(message))
                    shows.add(task)
                    task.add_done_callback(shows.discard)
                    taken += 1
                    if limit is not None and taken >= limit:
                        return

            reader = group.create_task(read())
    except BaseExceptionGroup as errors:
        raise _first_error(errors) from None
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    return interrupted


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real error in a task group's failure (nested groups flattened)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


@click.command("tail")
@click.argument("subscription")
@click.option(
    "--nack",
    is_flag=True,
    help="Give each message back instead of acking it (watch without consuming; "
    "messages come back again).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many messages (default: until Ctrl-C).",
)
@common_options
def tail(invocation: Invocation, subscription: str, nack: bool, limit: int | None) -> None:
    """Stream messages from SUBSCRIPTION as they arrive, acking each (or --nack).

    Each line shows the message and its ack's exactly-once status; --format json
    prints one JSON object a line. Stop with Ctrl-C.
    """
    name = invocation.name("subscription", subscription)
    printer = _TailPrinter(invocation)
    interrupted = invocation.run(_tail(invocation, name, "nack" if nack else "ack", limit, printer))
    invocation.output.note(printer.summary(name, interrupted))
