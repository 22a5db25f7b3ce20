"""``eoclient serve`` runs the reference server; ``eoclient demo`` the end-to-end demo.

The server's flags are wired in one place, :func:`serve`, which builds the server
from them; a new flag is one ``click.option`` and one argument there.
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING

import click

from eoclient.cli.errors import CliError

if TYPE_CHECKING:
    from eoclient.server_stub.security import DoorSecurity

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8085  # the port Google's emulator uses by default


def rest_port_for(port: int, rest_port: int | None, no_rest: bool) -> int | None:
    """The REST port to serve: as given, else the gRPC port + 1 (0 when gRPC's is 0)."""
    if no_rest:
        return None
    if rest_port is not None:
        return rest_port
    return port + 1 if port else 0


async def _serve(
    host: str,
    port: int,
    rest_port: int | None,
    record_history: bool,
    security: DoorSecurity,
) -> None:
    from eoclient._clock import SystemClock
    from eoclient.server_stub.core import Broker
    from eoclient.server_stub.server import ReferenceServer

    clock = SystemClock()
    server = ReferenceServer(Broker(clock, record_history=record_history), clock, security)
    await server.start(host, port, rest_port)
    print(f"eoclient reference server listening on {server.address} (gRPC)", flush=True)
    if rest_port is not None:
        print(f"REST/JSON on {server.rest_url}/v1/", flush=True)
    print(f"export PUBSUB_EMULATOR_HOST={server.address}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        print("shutting down", flush=True)
        await server.stop()


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=int,
    default=DEFAULT_PORT,
    show_default=True,
    help="gRPC port; 0 picks a free one.",
)
@click.option(
    "--rest-port",
    type=int,
    default=None,
    help="REST/JSON port; default: --port + 1, or 0 (pick one) when --port is 0.",
)
@click.option("--no-rest", is_flag=True, help="Serve gRPC only.")
@click.option(
    "--history",
    is_flag=True,
    help="Record every delivery, ack and modack per message (memory grows with traffic).",
)
# -- door security (issue 13; eoclient.server_stub.security) --------------------------
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Accept this Host in REST requests besides loopback ones (repeatable).",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Let web pages of this origin (scheme://host[:port]) call the REST door (repeatable).",
)
def serve(
    host: str,
    port: int,
    rest_port: int | None,
    no_rest: bool,
    history: bool,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
) -> None:
    """Run the reference server (google.pubsub.v1 over gRPC and REST/JSON).

    It prints the export PUBSUB_EMULATOR_HOST=... line for clients, and stops cleanly
    on Ctrl-C or SIGTERM.
    """
    from eoclient.server_stub.security import BrowserPolicy, DoorSecurity

    rest = rest_port_for(port, rest_port, no_rest)
    security = DoorSecurity(browser=BrowserPolicy.of(allow_hosts, allow_origins))
    try:
        asyncio.run(_serve(host, port, rest, history, security))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        pass
    except OSError as error:  # e.g. the REST port (--port + 1 by default) is taken
        raise CliError(f"serve: {error} (see --rest-port / --no-rest)") from error


@click.command()
@click.option(
    "--messages", type=int, default=10_000, show_default=True, help="How many to publish."
)
def demo(messages: int) -> int:
    """End-to-end exactly-once demo on an embedded reference server."""
    from eoclient.demo import main as demo_main

    return demo_main(messages)
