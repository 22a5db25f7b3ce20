"""The ``eoclient`` command.

::

    eoclient serve                      the reference server (eoclient demo: the demo)
    eoclient topics create|list|describe|update|delete|list-subscriptions|list-snapshots
    eoclient topics set-retention|set-backlog-quota|set-message-ttl|remove-...|policies
    eoclient subscriptions create|list|describe|update|delete|detach|ack|modify-ack-deadline
    eoclient subscriptions skip-messages|set-message-ttl|remove-message-ttl|policies
    eoclient snapshots create|list|describe|update|delete
    eoclient publish TOPIC [MESSAGE...]  (else stdin, or --file)
    eoclient pull SUB   eoclient tail SUB   eoclient seek SUB --time|--snapshot
    eoclient bigquery mk-dataset|mk|ls|show|query|rm|rm-dataset   (the BigQuery stand-in)

Every verb takes ``--project``, ``--endpoint`` and ``--format table|json``;
``eoclient COMMAND --help`` lists the rest.

The admin verbs need ``pip install 'eoclient[cli]'`` (click, rich); ``serve`` and
``demo`` need ``pip install 'eoclient[server]'``. Without them, :func:`main` prints one
line naming the install and exits 1.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

from eoclient._extras import install_hint
from eoclient.cli.errors import EXIT_FAILURE

if TYPE_CHECKING:
    from eoclient.cli.app import EoclientGroup, cli
    from eoclient.cli.serve import rest_port_for

__all__ = ["cli", "main", "rest_port_for"]

# The verbs that run the reference server in this process: they need the server extra,
# every other verb only the cli extra.
SERVER_VERBS = frozenset({"serve", "demo"})


def main(argv: list[str] | None = None) -> int:
    """The console script: run ``eoclient`` with ``argv`` (default: the command line)."""
    args = sys.argv[1:] if argv is None else argv
    problem = missing_extra(args)
    if problem is not None:
        print(f"eoclient: {problem}", file=sys.stderr)
        return EXIT_FAILURE
    return _command().main(args=args, prog_name="eoclient", standalone_mode=False)


def missing_extra(args: list[str]) -> str | None:
    """The one line to print instead of running ``args``, when the extra their verb
    needs is not installed (``pip install eoclient`` is the SDK alone)."""
    # The root group's options take no values, so the first word that is not an option
    # is the verb.
    verb = next((arg for arg in args if not arg.startswith("-")), None)
    if verb in SERVER_VERBS:
        return install_hint("server", f"eoclient {verb}")
    return install_hint("cli", "the eoclient command")


def __getattr__(name: str) -> Any:
    # The command is put together on first use: importing eoclient.cli (the console
    # script does, before main checks the extras) needs neither click nor rich.
    if name == "cli":
        return _command()
    if name == "rest_port_for":
        from eoclient.cli.serve import rest_port_for

        return rest_port_for
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _command() -> EoclientGroup:
    """The ``eoclient`` group with every verb added (once)."""
    from eoclient.cli import (
        bigquery,
        policies,
        publish,
        receive,
        serve,
        snapshots,
        subscriptions,
        topics,
    )
    from eoclient.cli.app import cli

    cli.add_command(serve.serve)
    cli.add_command(serve.demo)
    cli.add_command(topics.topics)
    cli.add_command(subscriptions.subscriptions)
    cli.add_command(snapshots.snapshots)
    cli.add_command(publish.publish)
    cli.add_command(receive.pull)
    cli.add_command(receive.tail)
    cli.add_command(subscriptions.seek)
    cli.add_command(bigquery.bigquery)
    # gcloud's spellings too: topics publish, subscriptions pull, subscriptions seek.
    topics.topics.add_command(publish.publish)
    subscriptions.subscriptions.add_command(receive.pull)
    # Pulsar-style policies: skip-messages, set-retention, set-backlog-quota, ...
    policies.register(topics.topics, subscriptions.subscriptions)
    return cli
