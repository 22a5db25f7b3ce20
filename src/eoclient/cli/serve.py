"""``eoclient serve`` runs the reference server; ``eoclient demo`` the end-to-end demo.

The server's flags are wired in one place, :func:`serve`, which builds the server
from them; a new flag is one ``click.option`` and one argument there.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from eoclient.cli.errors import CliError, UsageProblem
from eoclient.cli.serve_gc import tune_collector

if TYPE_CHECKING:
    from eoclient.server_stub.access.security import DoorSecurity
    from eoclient.server_stub.server import ReferenceServer

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
    data_dir: Path | None,
    security: DoorSecurity,
    max_leases: int,
    buckets_dir: Path | None = None,
    bigquery_db: Path | None = None,
) -> None:
    from eoclient.server_stub.server import run_server

    async with run_server(
        host,
        port,
        rest_port=rest_port,
        record_history=record_history,
        data_dir=data_dir,
        security=security,
        max_leases=max_leases,
        buckets_dir=buckets_dir,
        bigquery_db=bigquery_db,
    ) as server:
        # This process is the server's own: its collector is tuned for it (serve_gc.py).
        tune_collector()
        await _announce_and_wait(server, rest_port, data_dir)


async def _announce_and_wait(
    server: ReferenceServer, rest_port: int | None, data_dir: Path | None
) -> None:
    print(f"eoclient reference server listening on {server.address} (gRPC)", flush=True)
    if data_dir is not None:
        print(f"state kept in {data_dir} (it survives restarts)", flush=True)
    else:
        print("state kept in memory (gone when it stops; --data-dir keeps it)", flush=True)
    if rest_port is not None:
        print(f"REST/JSON on {server.rest_url}/v1/", flush=True)
        print(f"dashboard on {server.rest_url}/dashboard", flush=True)
    if server.buckets is not None:
        print(f"Cloud Storage exports write to {server.buckets.describe()}", flush=True)
    if server.bigquery is not None:
        print(f"BigQuery exports write to the DuckDB file {server.bigquery.path}", flush=True)
    security = server.security
    if security.tls is None and security.tokens is None:
        print(f"export PUBSUB_EMULATOR_HOST={server.address}", flush=True)
    else:  # clients of PUBSUB_EMULATOR_HOST connect without TLS or credentials
        print(
            f"endpoint {server.address}: TLS={security.tls is not None}, bearer tokens="
            f"{security.tokens is not None}",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        print("shutting down", flush=True)


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
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep topics, subscriptions, snapshots, messages and acks in this directory "
    "(SQLite), so they survive a restart or a crash. Default: in memory only.",
)
@click.option(
    "--buckets-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Cloud Storage buckets as subdirectories of this directory (exports write objects "
    "there). Default: DATA_DIR/buckets with --data-dir, else a new temporary directory, "
    "printed at start. Ignored when STORAGE_EMULATOR_HOST is set: objects then go to that "
    "Cloud Storage emulator's JSON API.",
)
@click.option(
    "--bigquery-db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The DuckDB file standing in for BigQuery (BigQuery subscriptions write rows "
    "there). Default: DATA_DIR/bigquery.duckdb with --data-dir, else a new temporary file, "
    "printed at start.",
)
# -- door security (eoclient.server_stub.access.security) ----------------------------------
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
@click.option("--tls-cert", metavar="PEM", help="Serve both doors over TLS with this chain.")
@click.option("--tls-key", metavar="PEM", help="The private key of --tls-cert.")
@click.option(
    "--auth-token-file",
    metavar="FILE",
    help="Require bearer tokens: lines of 'TOKEN PROJECT [PROJECT...]' (* = every project).",
)
@click.option(
    "--max-streams-per-connection",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="Open StreamingPulls one client connection may have (0 = unlimited).",
)
@click.option(
    "--max-streams",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Open StreamingPulls in all (0 = unlimited).",
)
@click.option(
    "--max-leases",
    type=click.IntRange(min=0),
    default=1_000_000,
    show_default=True,
    help="Outstanding leases one subscription may hold (0 = unlimited); beyond it a Pull "
    "is refused with RESOURCE_EXHAUSTED and streams wait.",
)
def serve(
    host: str,
    port: int,
    rest_port: int | None,
    no_rest: bool,
    history: bool,
    data_dir: Path | None,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    auth_token_file: str | None,
    max_streams_per_connection: int,
    max_streams: int,
    max_leases: int,
    buckets_dir: Path | None,
    bigquery_db: Path | None,
) -> None:
    """Run the reference server (google.pubsub.v1 over gRPC and REST/JSON).

    The REST port also serves a web dashboard (http://127.0.0.1:8086/dashboard by
    default): topics, subscriptions, backlogs, charts, exactly-once ack failures, and
    actions such as seek and purge. It prints its addresses and the export
    PUBSUB_EMULATOR_HOST=... line for clients, and stops cleanly on Ctrl-C or SIGTERM.
    """
    # The server's imports here, not at module level: every other verb starts faster.
    from eoclient.server_stub.access.security import DoorSecurity
    from eoclient.server_stub.storage.sqlite import StoreError

    rest = rest_port_for(port, rest_port, no_rest)
    try:
        security = DoorSecurity.from_flags(
            allow_hosts=allow_hosts,
            allow_origins=allow_origins,
            tls_cert=tls_cert,
            tls_key=tls_key,
            auth_token_file=auth_token_file,
            max_streams_per_connection=max_streams_per_connection,
            max_streams=max_streams,
        )
    except ValueError as error:  # a missing or unreadable certificate, key or token file
        raise UsageProblem(f"serve: {error}") from error
    if buckets_dir is None and data_dir is None:
        # Kept after the server stops: what was exported stays readable.
        buckets_dir = Path(tempfile.mkdtemp(prefix="eoclient-buckets-"))
    if bigquery_db is None:
        bigquery_db = (
            data_dir / "bigquery.duckdb"
            if data_dir is not None
            else Path(tempfile.mkdtemp(prefix="eoclient-bigquery-")) / "bigquery.duckdb"
        )
    try:
        asyncio.run(
            _serve(
                host, port, rest, history, data_dir, security, max_leases, buckets_dir, bigquery_db
            )
        )
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        pass
    except StoreError as error:  # foreign or corrupt files, another server on the directory
        raise CliError(f"serve: {error}") from error
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
