"""gRPC's own floor: what grpc.aio costs a server for Pull + Acknowledge, with no broker.

Usage::

    .venv/bin/python benchmarks/grpc_floor.py [--rounds 300] [--pull-size 1000] [--repeat 3]

The same exchange as ``server_pull_ack.py`` (a Pull answered with ``--pull-size`` messages
of 100 bytes, then an Acknowledge of that many ack ids, one client on one connection), but
served by a grpc.aio server whose handlers do nothing: Pull returns one PullResponse
encoded once beforehand, Acknowledge only has its request decoded (by protobuf, as the
reference server's door does). Reported: the server process's CPU a message (from /proc),
the best of ``--repeat`` runs. What remains of ``server_pull_ack.py``'s server CPU a
message above it is the reference server's own work, in Python; ``broker_pull_ack.py``
measures that work without gRPC.

Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from multiprocessing.connection import Connection

import grpc

# benchmarks/ is on sys.path when run as a script
from _server import PAYLOAD, process_cpu
from google.protobuf import empty_pb2

from eoclient._proto import pubsub_pb2

SERVICE = "google.pubsub.v1.Subscriber"
SUBSCRIPTION = "projects/bench/subscriptions/floor"
# Ids shaped like the reference server's ({uid}-{seq}-{generation}): the same bytes to decode.
ACK_ID_PREFIX = "5f0c2e1d9a-"
WARM_UP_ROUNDS = 20


def pull_response(size: int) -> bytes:
    """A PullResponse of ``size`` deliveries, encoded once."""
    response = pubsub_pb2.PullResponse()
    for i in range(size):
        received = response.received_messages.add(ack_id=f"{ACK_ID_PREFIX}{500_000 + i}-1")
        received.message.data = PAYLOAD
        received.message.message_id = str(10_000_000 + i)
        received.message.publish_time.seconds = 1_795_900_000
        received.message.publish_time.nanos = 123_456_000
    return response.SerializeToString()


def serve(size: int, port_out: Connection) -> None:
    """The server process: Pull and Acknowledge handlers that do nothing."""
    answer = pull_response(size)

    async def pull(request: pubsub_pb2.PullRequest, context: object) -> bytes:
        return answer

    async def acknowledge(
        request: pubsub_pb2.AcknowledgeRequest, context: object
    ) -> empty_pb2.Empty:
        return empty_pb2.Empty()

    async def run() -> None:
        handlers = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Pull": grpc.unary_unary_rpc_method_handler(
                    pull,
                    request_deserializer=pubsub_pb2.PullRequest.FromString,
                    response_serializer=bytes,
                ),
                "Acknowledge": grpc.unary_unary_rpc_method_handler(
                    acknowledge,
                    request_deserializer=pubsub_pb2.AcknowledgeRequest.FromString,
                    response_serializer=empty_pb2.Empty.SerializeToString,
                ),
            },
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handlers,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_out.send(port)
        await server.wait_for_termination()

    asyncio.run(run())


async def exchange(port: int, pid: int, size: int, rounds: int) -> tuple[float, float]:
    """``rounds`` Pull + Acknowledge pairs; the server's CPU seconds and the wall time."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        pull = channel.unary_unary(
            f"/{SERVICE}/Pull",
            request_serializer=pubsub_pb2.PullRequest.SerializeToString,
            response_deserializer=bytes,
        )
        acknowledge = channel.unary_unary(
            f"/{SERVICE}/Acknowledge",
            request_serializer=pubsub_pb2.AcknowledgeRequest.SerializeToString,
            response_deserializer=bytes,
        )
        pull_request = pubsub_pb2.PullRequest(subscription=SUBSCRIPTION, max_messages=size)
        ack_request = pubsub_pb2.AcknowledgeRequest(
            subscription=SUBSCRIPTION,
            ack_ids=[f"{ACK_ID_PREFIX}{500_000 + i}-1" for i in range(size)],
        )
        for _ in range(WARM_UP_ROUNDS):
            await pull(pull_request)
            await acknowledge(ack_request)
        cpu, started = process_cpu(pid), time.perf_counter()
        for _ in range(rounds):
            await pull(pull_request)
            await acknowledge(ack_request)
        return process_cpu(pid) - cpu, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="Pull + Acknowledge pairs")
    parser.add_argument("--pull-size", type=int, default=1000, help="messages a Pull")
    parser.add_argument("--repeat", type=int, default=3, help="runs (the best is reported)")
    options = parser.parse_args()
    load_before = os.getloadavg()[0]
    runs = []
    for _ in range(options.repeat):
        receiver, sender = multiprocessing.Pipe(duplex=False)
        server = multiprocessing.Process(target=serve, args=(options.pull_size, sender))
        server.start()
        try:
            port = receiver.recv()
            assert server.pid is not None
            runs.append(asyncio.run(exchange(port, server.pid, options.pull_size, options.rounds)))
        finally:
            server.terminate()
            server.join()
    messages = options.rounds * options.pull_size
    for cpu, wall in runs:
        print(
            f"grpc.aio floor: {cpu / messages * 1e6:.2f} µs of server CPU a message "
            f"({cpu / options.rounds * 1e3:.2f} ms a Pull + Acknowledge pair), "
            f"{messages / wall:,.0f} msg/s"
        )
    best = min(cpu for cpu, _ in runs)
    print(f"best: **{best / messages * 1e6:.2f}** µs a message")
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
