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

Every verb takes ``--project``, ``--endpoint`` and ``--format table|json``;
``eoclient COMMAND --help`` lists the rest.
"""

from __future__ import annotations

from eoclient.cli import policies, publish, receive, serve, snapshots, subscriptions, topics
from eoclient.cli.app import cli
from eoclient.cli.serve import rest_port_for

__all__ = ["cli", "main", "rest_port_for"]

cli.add_command(serve.serve)
cli.add_command(serve.demo)
cli.add_command(topics.topics)
cli.add_command(subscriptions.subscriptions)
cli.add_command(snapshots.snapshots)
cli.add_command(publish.publish)
cli.add_command(receive.pull)
cli.add_command(receive.tail)
cli.add_command(subscriptions.seek)
# gcloud's spellings too: topics publish, subscriptions pull, subscriptions seek.
topics.topics.add_command(publish.publish)
subscriptions.subscriptions.add_command(receive.pull)
# Pulsar-style policies (issue 12): skip-messages, set-retention, set-backlog-quota, ...
policies.register(topics.topics, subscriptions.subscriptions)


def main(argv: list[str] | None = None) -> int:
    """The console script: run ``eoclient`` with ``argv`` (default: the command line)."""
    return cli.main(args=argv, prog_name="eoclient", standalone_mode=False)
