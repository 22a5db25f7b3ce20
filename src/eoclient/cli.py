"""The ``eoclient`` command: ``eoclient serve`` runs the reference server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8085  # the port Google's emulator uses by default


def rest_port_for(port: int, rest_port: int | None, no_rest: bool) -> int | None:
    """The REST port to serve: as given, else the gRPC port + 1 (0 when gRPC's is 0)."""
    if no_rest:
        return None
    if rest_port is not None:
        return rest_port
    return port + 1 if port else 0


async def _serve(host: str, port: int, rest_port: int | None, record_history: bool) -> None:
    from eoclient._clock import SystemClock
    from eoclient.server_stub.core import Broker
    from eoclient.server_stub.server import ReferenceServer

    clock = SystemClock()
    server = ReferenceServer(Broker(clock, record_history=record_history), clock)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="eoclient", description="eoclient: Pub/Sub SDK and reference server"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the reference server (google.pubsub.v1)")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"default {DEFAULT_HOST}")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks one"
    )
    serve.add_argument(
        "--rest-port",
        type=int,
        default=None,
        help="REST/JSON port; default: --port + 1, or 0 (pick one) when --port is 0",
    )
    serve.add_argument("--no-rest", action="store_true", help="serve gRPC only")
    serve.add_argument(
        "--history",
        action="store_true",
        help="record every delivery, ack and modack per message (memory grows with traffic)",
    )
    demo = commands.add_parser(
        "demo",
        help="end-to-end exactly-once demo on an embedded reference server",
    )
    demo.add_argument("--messages", type=int, default=10_000, help="how many to publish")
    options = parser.parse_args(argv)
    if options.command == "demo":
        from eoclient.demo import main as demo_main

        return demo_main(options.messages)
    if options.command == "serve":
        rest_port = rest_port_for(options.port, options.rest_port, options.no_rest)
        try:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(_serve(options.host, options.port, rest_port, options.history))
        except OSError as error:  # e.g. the REST port (--port + 1 by default) is taken
            print(f"eoclient serve: {error} (see --rest-port / --no-rest)", file=sys.stderr)
            return 1
        return 0
    parser.error(f"unknown command {options.command}")


if __name__ == "__main__":
    sys.exit(main())
