"""The ``eoclient`` command group, the options every verb shares, and error reporting.

Each verb is a click command in the module of its group (``topics``, ``subscriptions``,
``snapshots``, ``policies``, ``publish``, ``receive``, ``serve``) that takes an
:class:`Invocation` — the project, the endpoint and the output format of this run — and
calls the public SDK (``AdminClient``, ``PublisherClient``, ``SubscriberClient``) inside
:meth:`Invocation.run`.

Errors never show a traceback: :func:`guarded` turns each kind into one line on
stderr, ``eoclient: <what happened>``, and a non-zero exit status (2 for a wrong
command line, 1 for a failure, 130 for Ctrl-C). The service's errors keep the
service's own code and message (``NOT_FOUND: Resource not found (resource=t).``).
``EOCLIENT_TRACEBACK=1`` adds the traceback of an unexpected error, for bug reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import sys
import traceback
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click

from eoclient._endpoint import EMULATOR_HOST_ENV, Endpoint
from eoclient._transport import PLAIN_TEXT_PEER_HINT
from eoclient.admin import DEFAULT, AdminClient
from eoclient.admin.calls import Retry
from eoclient.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, CliError
from eoclient.cli.names import PROJECT_ENV, Kind, project_id, required_project, resource_name
from eoclient.cli.output import FORMATS, Format, Output
from eoclient.errors import (
    CredentialsError,
    EoclientError,
    PermissionDenied,
    RpcError,
    Unavailable,
)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

TRACEBACK_ENV = "EOCLIENT_TRACEBACK"
# An admin verb's whole budget, retries included: the SDK's default for AdminClient.
ADMIN_TIMEOUT = 60.0
# check_exists' deadline: a get answers in milliseconds; a server this slow to answer
# one is better reported than waited on.
CHECK_TIMEOUT = 30.0
# What to change when the server is not where the endpoint says, or speaks plain text.
WHERE_HINT = (
    f"for an emulator or eoclient serve set --endpoint or {EMULATOR_HOST_ENV}, "
    "adding --insecure if it is not on this machine"
)


def endpoint_from_flags(endpoint: str | None, insecure: bool) -> Endpoint:
    """Where a verb connects: ``--endpoint`` resolved as the SDK resolves a string
    (:meth:`Endpoint.resolve`: plain text for this machine or ``$PUBSUB_EMULATOR_HOST``'s
    value, else TLS with Application Default Credentials; no ``--endpoint``:
    ``$PUBSUB_EMULATOR_HOST``, else the real service), or plain text to any host with
    ``--insecure`` (an emulator in a container, ``eoclient serve`` on another machine)."""
    if not insecure:
        return Endpoint.resolve(endpoint)
    target = endpoint or os.environ.get(EMULATOR_HOST_ENV)
    if not target:
        raise click.UsageError(
            "--insecure needs --endpoint HOST:PORT (or $PUBSUB_EMULATOR_HOST): "
            "the real service speaks TLS only",
            ctx=click.get_current_context(silent=True),
        )
    return Endpoint.insecure(target)


@dataclass(frozen=True, slots=True)
class Invocation:
    """What every verb needs: where to connect, the default project, how to print."""

    project: str | None
    endpoint: Endpoint  # endpoint_from_flags
    output: Output

    @property
    def target(self) -> str:
        """Where the SDK will connect, for messages."""
        return self.endpoint.target

    @property
    def admin_retry(self) -> Retry:
        """How the admin verbs retry, which follows the endpoint.

        A plain-text server (an emulator, ``eoclient serve``) gets one attempt: it answers
        UNAVAILABLE only when it is not running or refused the connection, which no retry
        mends, and a person at a prompt is better told "is it running?" at once than after
        the SDK's 60 s of retries. A TLS endpoint (the real service) gets the SDK's
        default, the official clients' retries: there UNAVAILABLE (and ABORTED or UNKNOWN,
        where the method's settings say so) is the service's transient answer — a
        frontend restarting, a load spike — that a script's ``eoclient topics create``
        should outlast.
        """
        return DEFAULT if self.endpoint.secure else None

    def admin(self, *, timeout: float = ADMIN_TIMEOUT) -> AdminClient:
        """The AdminClient of every admin verb (:attr:`admin_retry` says how it retries)."""
        return AdminClient(self.endpoint, timeout=timeout, retry=self.admin_retry)

    def name(self, kind: Kind, value: str, project: str | None = None) -> str:
        """A full resource name; ``project`` overrides ``--project`` (``--topic-project``)."""
        return resource_name(kind, value, project_id(project) or self.project)

    def required_project(self, what: str) -> str:
        return required_project(self.project, what)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run one verb's coroutine; an unreachable server is reported with its address,
        and a TLS endpoint without credentials as such."""
        if self.endpoint.secure and importlib.util.find_spec("google.auth") is None:
            coroutine.close()
            raise CliError(
                f"{self.target} is a TLS endpoint, and connecting to it needs google-auth "
                f"(pip install 'eoclient[gcp]'); {WHERE_HINT}"
            )
        try:
            return asyncio.run(coroutine)
        except Unavailable as error:
            said = str(error)
            if PLAIN_TEXT_PEER_HINT in said:  # the SDK's hint, in Python's words
                said = said.replace(PLAIN_TEXT_PEER_HINT, "")
                hint = "the TLS handshake met a plain-text server: add --insecure"
            else:
                hint = f"is it running? {WHERE_HINT}"
            raise CliError(f"{said} (server {self.target}: {hint})") from error
        except Exception as error:
            if isinstance(error, CredentialsError) or type(error).__module__.startswith(
                "google.auth"
            ):  # no or bad credentials
                # google-auth's own words when it found none; the SDK's advice around
                # them is for Python callers.
                cause = error.__cause__
                reason = cause if type(cause).__module__.startswith("google.auth") else error
                raise CliError(
                    f"credentials for {self.target}: {reason} (a TLS endpoint: run `gcloud "
                    f"auth application-default login`; {WHERE_HINT})"
                ) from error
            raise


async def check_exists(invocation: Invocation, kind: Kind, name: str) -> None:
    """Fail fast when the topic or subscription is missing or the server unreachable.

    For the verbs whose SDK call would otherwise retry or reconnect for minutes
    (publish retries UNAVAILABLE; a stream reconnects). A caller allowed to publish or
    consume but not to look (PERMISSION_DENIED on the get) goes ahead.
    """
    async with invocation.admin(timeout=CHECK_TIMEOUT) as admin:
        try:
            if kind == "topic":
                await admin.get_topic(name)
            else:
                await admin.get_subscription(name)
        except PermissionDenied:
            pass


def common_options(command: F) -> F:
    """Add ``--project``, ``--endpoint``, ``--insecure`` and ``--format`` to a verb; it
    receives an :class:`Invocation` as its first argument instead."""

    @click.option(
        "--project",
        envvar=PROJECT_ENV,
        show_envvar=True,
        metavar="PROJECT",
        help="Project of resources given by id (default: $PUBSUB_PROJECT_ID).",
    )
    @click.option(
        "--endpoint",
        metavar="HOST:PORT",
        help=(
            "Where to connect, as the SDK reads a string endpoint: plain text to this "
            "machine (localhost, 127.0.0.1, [::1]) or to $PUBSUB_EMULATOR_HOST's value, "
            "TLS with Application Default Credentials to any other host. "
            "Default: $PUBSUB_EMULATOR_HOST, else the real service."
        ),
    )
    @click.option(
        "--insecure",
        is_flag=True,
        help=(
            "Plain text to --endpoint whatever host it names: an emulator or eoclient "
            "serve on another machine or in a container."
        ),
    )
    @click.option(
        "--format",
        "output_format",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table for people, json for scripts.",
    )
    @click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="Also show the SDK's log (reconnects, retries) on stderr.",
    )
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        project: str | None,
        endpoint: str | None,
        insecure: bool,
        output_format: Format,
        verbose: bool,
        **kwargs: Any,
    ) -> Any:
        where = endpoint_from_flags(endpoint or None, insecure)
        invocation = Invocation(project_id(project), where, Output(output_format))
        with sdk_logging(verbose):
            return command(invocation, *args, **kwargs)

    return cast(F, wrapper)


@contextlib.contextmanager
def sdk_logging(verbose: bool) -> Iterator[None]:
    """The SDK's log during one verb: with ``--verbose`` everything, on stderr; else
    nothing (an error it logs is the error the verb reports, and once is enough).
    The logger is restored afterwards (tests run many verbs in one process)."""
    logger = logging.getLogger("eoclient")
    saved = logger.level, logger.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("eoclient: %(levelname)s %(name)s: %(message)s"))
    if verbose:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        logger.setLevel(logging.CRITICAL + 1)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


# ================================================================ errors


# ``eoclient`` or ``eoclient topics`` alone: click (8.2+) raises this to show the help.
_HELP_INSTEAD: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _report(message: str) -> None:
    click.echo(f"eoclient: {_one_line(message)}", err=True)


def _usage(error: click.UsageError) -> str:
    where = error.ctx.command_path if error.ctx is not None else "eoclient"
    return f"{where}: {error.format_message()} (see '{where} --help')"


def guarded(call: Callable[[], Any]) -> int:
    """Run ``call`` (click's main) and turn every outcome into an exit status."""
    try:
        result = call()
    except click.exceptions.Exit as done:  # --help, --version, ctx.exit(n)
        return done.exit_code
    except _HELP_INSTEAD as error:  # a group without its command: the help, as it is
        click.echo(error.format_message(), err=True)
        return EXIT_USAGE
    except click.UsageError as error:
        click.echo(_one_line(_usage(error)), err=True)
        return EXIT_USAGE
    except click.ClickException as error:  # e.g. a file option naming no file
        _report(error.format_message())
        return error.exit_code
    except click.Abort:  # Ctrl-C or end of input at a click prompt
        _report("aborted")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        _report("interrupted")
        return EXIT_INTERRUPTED
    except CliError as error:
        _report(error.message)
        return error.exit_code
    except RpcError as error:  # the service's code and message, unchanged
        _report(str(error))
        return EXIT_FAILURE
    except (EoclientError, ValueError, TypeError) as error:
        # The SDK's own refusals (ClosedError, bad payloads, ranges) name the problem.
        _report(str(error) or type(error).__name__)
        return EXIT_FAILURE
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except OSError as error:  # files, ports
        _report(str(error))
        return EXIT_FAILURE
    except Exception as error:
        if os.environ.get(TRACEBACK_ENV) == "1":
            traceback.print_exc()
        _report(
            f"internal error: {type(error).__name__}: {error} "
            f"(set {TRACEBACK_ENV}=1 for the traceback, and please report it)"
        )
        return EXIT_FAILURE
    return result if isinstance(result, int) else 0


class EoclientGroup(click.Group):
    """The root group: click's main, guarded (one-line errors, an int exit status)."""

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        code = guarded(
            lambda: super(EoclientGroup, self).main(
                args, prog_name, complete_var, standalone_mode=False, **extra
            )
        )
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(
    "eoclient",
    cls=EoclientGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="eoclient", prog_name="eoclient")
def cli() -> None:
    """eoclient: a Pub/Sub (google.pubsub.v1) SDK, its reference server, and this admin tool.

    Resources are full names (projects/p/topics/t) or ids with --project (default
    $PUBSUB_PROJECT_ID). Every verb connects to --endpoint (plain text to this machine,
    TLS elsewhere unless --insecure), else $PUBSUB_EMULATOR_HOST, else the real service,
    and prints a table, or JSON with --format json.
    """
