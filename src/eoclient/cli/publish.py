"""``eoclient publish TOPIC [MESSAGE...]``: from arguments, standard input or ``--file``.

Messages are published as they are read, up to :data:`WINDOW` in flight, so a large
file streams in bounded memory and a slow pipe (``tail -f log | eoclient publish t``)
is published line by line. A ``--file`` is read twice: a first pass checks every line
(and counts them for the progress bar), so a bad line publishes nothing. From standard
input a bad line stops the run there, and the error says how many messages were
published before it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from eoclient._endpoint import Endpoint
from eoclient.cli.app import Invocation, check_exists, common_options
from eoclient.cli.errors import EXIT_INTERRUPTED, CliError, UsageProblem
from eoclient.cli.flags import LABELS, merged
from eoclient.cli.message_input import (
    Defaults,
    LineSplitter,
    OutgoingMessage,
    from_arguments,
    parse_line,
)
from eoclient.errors import EoclientError
from eoclient.publisher import BatchSettings, PublisherClient

# Messages whose ids are awaited at once: ten full requests of 1,000 (the service's
# per-request maximum, used as the batch size), enough to keep the connection busy
# while the oldest come back, few enough to bound memory on a file of any size.
WINDOW = 10_000
BATCH = BatchSettings(max_messages=1000)
# Bytes read from the input at a time; a pipe returns what it has, a file this much.
CHUNK = 256 * 1024


@dataclass
class PublishReport:
    """What a run published (``message_ids`` in input order), and its first failure."""

    topic: str
    message_ids: list[str] = field(default_factory=list)
    read: int = 0
    skipped_blank: int = 0
    seconds: float = 0.0
    failed: int = 0
    first_failure: str = ""

    @property
    def published(self) -> int:
        return len(self.message_ids)

    @property
    def rate(self) -> float:
        return self.published / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        text = (
            f"published {self.published} message{'s' * (self.published != 1)} to "
            f"{self.topic} in {self.seconds:.2f} s ({self.rate:,.0f} msg/s)"
        )
        if self.skipped_blank:
            text += f"; skipped {self.skipped_blank} blank line(s)"
        return text

    def record(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "published": self.published,
            "messageIds": self.message_ids,
            "seconds": round(self.seconds, 6),
            "messagesPerSecond": round(self.rate, 1),
            "skippedBlankLines": self.skipped_blank,
        }


class _ReaderGone(Exception):
    """The event loop that wanted the input has stopped (Ctrl-C, an error)."""


async def _chunks(stream: BinaryIO) -> AsyncIterator[bytes]:
    """The stream's bytes, read by a daemon thread and handed to the loop.

    Not ``asyncio.to_thread``: the default executor's threads are joined when the loop
    closes, and a read blocked on a terminal or an idle pipe would then keep the
    process alive after Ctrl-C until the next line. A daemon thread is left behind.
    The small queue bounds what is read ahead of publishing.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
    # Read-ahead slots, taken by the thread and given back by the loop. A thread-side
    # semaphore rather than a bounded queue's ``put()``: that coroutine, created in the
    # thread, is never awaited when Ctrl-C closes the loop first, and Python prints a
    # RuntimeWarning under the one-line error.
    slots = threading.Semaphore(4)

    def put(item: bytes | BaseException | None) -> None:
        slots.acquire()
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is closed
            raise _ReaderGone from None

    read = _reader(stream)

    def read_all() -> None:
        try:
            try:
                while chunk := read(CHUNK):
                    put(chunk)
            except Exception as error:  # handed to the loop, raised there
                put(error)
            else:
                put(None)
        except _ReaderGone:
            return

    threading.Thread(target=read_all, name="eoclient-publish-input", daemon=True).start()
    while (item := await queue.get()) is not None:
        slots.release()
        if isinstance(item, BaseException):
            raise item
        yield item


def _reader(stream: BinaryIO) -> Callable[[int], bytes]:
    """How the daemon thread reads ``stream``: straight from its file descriptor when it
    has one. The thread may still be blocked in a read when the process exits (Ctrl-C on
    an open pipe), and a read through the buffered object holds that object's lock: at
    interpreter shutdown, flushing stdin then aborts the process ("Fatal Python error:
    _enter_buffered_busy: could not acquire lock ... possibly due to daemon threads",
    status -6 instead of 130). ``os.read`` holds no lock. Nothing was read through the
    buffered object before, so nothing is left in its buffer."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return getattr(stream, "read1", stream.read)
    return lambda size: os.read(descriptor, size)


async def _lines(
    stream: BinaryIO, json_lines: bool, defaults: Defaults, report: PublishReport
) -> AsyncIterator[OutgoingMessage]:
    splitter = LineSplitter()
    async for chunk in _chunks(stream):
        for number, raw in splitter.feed(chunk):
            message = parse_line(raw, number, json_lines, defaults)
            if message is None:
                report.skipped_blank += 1
            else:
                yield message
    for number, raw in splitter.close():
        message = parse_line(raw, number, json_lines, defaults)
        if message is None:
            report.skipped_blank += 1
        else:
            yield message


def check_file(path: str, json_lines: bool, defaults: Defaults) -> int:
    """Parse every line of ``path`` (errors name the line); the number of messages."""
    count = 0
    splitter = LineSplitter()
    with open(path, "rb") as stream:
        while chunk := stream.read(CHUNK):
            for number, raw in splitter.feed(chunk):
                count += parse_line(raw, number, json_lines, defaults) is not None
    for number, raw in splitter.close():
        count += parse_line(raw, number, json_lines, defaults) is not None
    return count


async def _from_list(messages: Iterator[OutgoingMessage]) -> AsyncIterator[OutgoingMessage]:
    for message in messages:
        yield message


async def publish_all(
    endpoint: Endpoint,
    topic: str,
    messages: AsyncIterator[OutgoingMessage],
    report: PublishReport,
    advance: Callable[[int], None],
) -> None:
    """Publish ``messages`` in order of reading, :data:`WINDOW` at most in flight.

    Stops reading at the first failure (of a message or of the input), waits for what
    is in flight, and raises: the report says how far it got.
    """
    pending: collections.deque[tuple[OutgoingMessage, asyncio.Future[str]]] = collections.deque()
    ids: dict[int, str] = {}  # position in the input -> message id
    failure: BaseException | None = None
    position = 0  # of the next message to settle, in input order
    started = time.perf_counter()

    def collect(position: int, message: OutgoingMessage, future: asyncio.Future[str]) -> None:
        nonlocal failure
        error = future.exception()
        if error is None:
            ids[position] = future.result()
            advance(1)
            return
        report.failed += 1
        if failure is None:
            failure = error
            # A refused batch fails all its messages: this is the first of them.
            where = f" (first failed: line {message.line})" if message.line else ""
            report.first_failure = f"{error}{where}"

    async def settle_oldest() -> None:
        nonlocal position
        message, future = pending.popleft()
        if not future.done():
            await asyncio.wait([future])
        collect(position, message, future)
        position += 1

    async def feed(client: PublisherClient) -> None:
        async for message in messages:
            try:
                future = client.publish_nowait(
                    topic, message.data, message.ordering_key, **message.attributes
                )
            except (ValueError, TypeError, EoclientError) as error:  # the SDK's own checks
                where = f"line {message.line}: " if message.line else ""
                raise CliError(f"{where}{error}") from error
            pending.append((message, future))
            report.read += 1
            while len(pending) >= WINDOW or (pending and pending[0][1].done()):
                await settle_oldest()
            if failure is not None:
                return

    loop = asyncio.get_running_loop()
    interrupted = False
    async with (
        PublisherClient(endpoint, batch=BATCH, enable_message_ordering=True) as client,
        asyncio.TaskGroup() as tasks,
    ):
        # The reader's error is its result, not raised into the group: it is reported
        # once what was read before it is published.
        reader = tasks.create_task(_caught(feed(client)), name="eoclient-publish-feed")

        def on_interrupt() -> None:
            # The first Ctrl-C stops reading; what was read is still published. The
            # handler goes, so a second Ctrl-C interrupts that too (KeyboardInterrupt).
            nonlocal interrupted
            interrupted = True
            reader.cancel()
            loop.remove_signal_handler(signal.SIGINT)

        loop.add_signal_handler(signal.SIGINT, on_interrupt)
        try:
            await asyncio.wait([reader])
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            if not reader.done():  # this coroutine itself was cancelled
                reader.cancel()
            # Whatever was accepted is still sent, and its outcome recorded.
            while pending:
                await settle_oldest()
            report.message_ids = [ids[i] for i in sorted(ids)]
            report.seconds = time.perf_counter() - started
    bad_input = None if reader.cancelled() else reader.result()
    if failure is not None:
        raise CliError(
            f"{report.first_failure} — published {report.published} of the "
            f"{report.read} message(s) read; {report.failed} failed"
        ) from failure
    if isinstance(bad_input, CliError):  # a bad line: what came before it was published
        raise CliError(
            f"{bad_input.message} — published the {report.published} message(s) before "
            "it, nothing after"
        ) from bad_input
    if bad_input is not None:
        raise bad_input
    if interrupted:
        raise CliError(
            f"interrupted — published the {report.published} message(s) read before it",
            EXIT_INTERRUPTED,
        )


async def _caught(work: Awaitable[None]) -> Exception | None:
    """``work``'s exception as a value (``None`` when it returns)."""
    try:
        await work
    except Exception as error:
        return error
    return None


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        # Over the whole run, as the final summary counts it (rich's own speed is a
        # moving average, which would disagree with the summary at the end).
        elapsed = task.finished_time or task.elapsed
        return Text(f"{task.completed / elapsed:,.0f} msg/s" if elapsed else "")


def _progress(enabled: bool, total: int | None) -> tuple[Progress | None, Callable[[int], None]]:
    if not enabled:
        return None, lambda _: None
    progress = Progress(
        SpinnerColumn(),
        TextColumn("publishing"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        redirect_stdout=False,
        redirect_stderr=False,
    )
    task = progress.add_task("publish", total=total)
    return progress, lambda count: progress.advance(task, count)


@click.command("publish")
@click.argument("topic")
@click.argument("messages", nargs=-1)
@click.option(
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False),
    help="Publish each line of this file (else each MESSAGE, else standard input).",
)
@click.option(
    "--json-lines",
    is_flag=True,
    help='Each line is a JSON object: {"data": ..., "attributes": {...}, "orderingKey": ...}.',
)
@click.option(
    "--attribute",
    "attribute",
    type=LABELS,
    multiple=True,
    help="KEY=VALUE[,...] attributes for every message; repeatable.",
)
@click.option("--ordering-key", default="", help="Ordering key for every message.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress bar on stderr (default: when stderr is a terminal).",
)
@common_options
def publish(
    invocation: Invocation,
    topic: str,
    messages: Sequence[str],
    path: str | None,
    json_lines: bool,
    attribute: Sequence[Mapping[str, str]],
    ordering_key: str,
    progress: bool | None,
) -> None:
    """Publish messages to TOPIC: each MESSAGE, else each line of stdin or --file."""
    name = invocation.name("topic", topic)
    defaults = Defaults(merged(attribute), ordering_key)
    if messages and path:
        raise UsageProblem("give MESSAGE arguments or --file, not both")
    if messages and json_lines:
        raise UsageProblem("--json-lines reads lines (from --file or stdin), not MESSAGE arguments")
    total: int | None = len(messages) if messages else None
    if path is not None:
        total = check_file(path, json_lines, defaults)
    elif not messages and sys.stdin.isatty():
        invocation.output.note("reading messages from stdin, one a line; end with Ctrl-D")
    report = PublishReport(name)
    show, advance = _progress(sys.stderr.isatty() if progress is None else progress, total)

    async def run(source: AsyncIterator[OutgoingMessage]) -> None:
        await check_exists(invocation, "topic", name)
        await publish_all(invocation.endpoint, name, source, report, advance)

    with contextlib.ExitStack() as stack:
        if show is not None:
            stack.enter_context(show)
        if messages:
            invocation.run(run(_from_list(from_arguments(messages, defaults))))
        else:
            stream = stack.enter_context(open(path, "rb")) if path else sys.stdin.buffer
            invocation.run(run(_lines(stream, json_lines, defaults, report)))
    if not report.published and not report.failed:
        # Nothing went wrong and nothing was sent: a script fed an empty file or an empty
        # pipe is told, rather than reading "published 0 messages" with status 0.
        where = f"{path} has" if path else "standard input had"
        blank = f" (only {report.skipped_blank} blank line(s))" if report.skipped_blank else ""
        raise UsageProblem(
            f"nothing to publish: {where} no message{blank}; give MESSAGE arguments, "
            "--file FILE, or one message a line on standard input"
        )
    out = invocation.output
    if out.json:
        out.document(report.record())
        return
    if messages:  # typed by hand: the ids, as gcloud prints them
        for message_id in report.message_ids:
            out.line(f"messageId: {message_id}")
    out.line(report.summary())
