"""3,000 expired ack ids in one Acknowledge (and one ModifyAckDeadline) on an exactly-once
subscription, from google-cloud-pubsub in emulator mode, from Google's Node.js client and
from eoclient's own transport:
answered at once, INVALID_ARGUMENT with a trailer of under 8 KiB, which each client reads
and classifies with its own code — the listed ids INVALID, the rest OTHER (failed, may
come again), none SUCCESS, none retried — and the connection stays usable
(doors/grpc/ack_failure_trailer.py, docs/protocol.md#ack-failures-that-do-not-fit-in-a-trailer).

Before, the trailer listed every id (~240 KB): the Python client saw RESOURCE_EXHAUSTED or
a ValueError, the Node client's connection was torn down with GOAWAY and its calls hung.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures as cf
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber._protocol import requests as client_requests
from google.cloud.pubsub_v1.subscriber._protocol.streaming_pull_manager import (
    _get_ack_errors,
    _get_status,
    _process_requests,
)
from google.cloud.pubsub_v1.subscriber.exceptions import AcknowledgeError
from google.cloud.pubsub_v1.subscriber.exceptions import AcknowledgeStatus as OfficialStatus
from google.protobuf import empty_pb2
from support.node_client import node_client

from eoclient import AcknowledgeStatus
from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2
from eoclient._transport import Endpoint, PubSubTransport, create_channel
from eoclient.errors import RpcError
from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.doors.grpc.ack_failure_trailer import UNLISTED_KEY
from eoclient.server_stub.server import ReferenceServer
from eoclient.subscriber.ack_results import classify_unary_error

TOPIC = "projects/node-contract/topics/expired-acks"
SUBSCRIPTION = "projects/node-contract/subscriptions/expired-acks"
EXPIRED = 3000
FRESH = 100
SCRIPT = Path(__file__).parent / "node" / "expired_acks.mjs"


def expire_ack_ids(server: ReferenceServer, clock: FakeClock) -> list[str]:
    """``EXPIRED`` messages pulled (by the server's own Pull) and their leases run out."""
    broker = server.broker
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(
        SubscriptionConfig(
            SUBSCRIPTION, TOPIC, enable_exactly_once_delivery=True, ack_deadline_seconds=10
        )
    )
    for _ in range(EXPIRED // 1000):
        broker.publishing.publish(TOPIC, [NewMessage(b"x" * 10) for _ in range(1000)])
    ack_ids = [
        d.ack_id for _ in range(EXPIRED // 1000) for d in broker.leasing.pull(SUBSCRIPTION, 1000)
    ]
    clock.advance(10)
    return ack_ids


def trailer_bytes(error: api_exceptions.GoogleAPICallError) -> int:
    """The trailers' size as HTTP/2 counts it (binary values base64-encoded, unpadded)."""
    total = 0
    for key, value in error.response.trailing_metadata():
        encoded = base64.b64encode(value).rstrip(b"=") if key.endswith("-bin") else value
        total += len(key) + len(encoded) + 32
    total += len("grpc-message") + len(error.response.details()) + 32
    return total


def classify(
    error: api_exceptions.GoogleAPICallError, ack_ids: list[str]
) -> tuple[dict[str, int], int]:
    """The Python client's own reading of a failed call (``_process_requests``, as its
    streaming pull manager does after an ack/modack RPC fails); (results, retried)."""
    status = _get_status(error)
    assert status is not None, "the client could not read the trailer's Status"
    errors = _get_ack_errors(error)
    assert errors is not None
    pending: dict[str, client_requests.AckRequest] = {
        ack_id: client_requests.AckRequest(ack_id, 0, 0.0, None, cf.Future()) for ack_id in ack_ids
    }
    _, retried = _process_requests(status, pending, dict(errors))
    results = {"invalid": 0, "other": 0, "success": 0}
    for request in pending.values():
        assert request.future is not None
        if not request.future.done():
            continue
        exception = request.future.exception()
        if exception is None:
            results["success"] += 1
        else:
            assert isinstance(exception, AcknowledgeError)
            invalid = exception.error_code is OfficialStatus.INVALID_ACK_ID
            results["invalid" if invalid else "other"] += 1
    return results, len(retried)


@pytest.fixture
def official(reference: ReferenceServer) -> Iterator[pubsub_v1.SubscriberClient]:
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = reference.address
    try:
        with pubsub_v1.SubscriberClient() as client:
            yield client
    finally:
        if previous is None:
            del os.environ["PUBSUB_EMULATOR_HOST"]
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = previous


async def test_google_cloud_pubsub_reads_an_ack_of_three_thousand_expired_ids(
    reference: ReferenceServer, clock: FakeClock, official: pubsub_v1.SubscriberClient
) -> None:
    expired = expire_ack_ids(reference, clock)
    reference.broker.publishing.publish(TOPIC, [NewMessage(b"fresh") for _ in range(FRESH)])
    fresh = [d.ack_id for d in reference.broker.leasing.pull(SUBSCRIPTION, FRESH)]
    ack_ids = expired + fresh

    def call(method: str, **fields: Any) -> tuple[api_exceptions.GoogleAPICallError, float]:
        started = time.monotonic()
        with pytest.raises(api_exceptions.InvalidArgument) as caught:
            getattr(official, method)(
                subscription=SUBSCRIPTION, ack_ids=ack_ids, timeout=20, **fields
            )
        return caught.value, time.monotonic() - started

    for method, fields in (
        ("modify_ack_deadline", {"ack_deadline_seconds": 30}),
        ("acknowledge", {}),
    ):
        error, seconds = await asyncio.to_thread(call, method, **fields)
        assert seconds < 10
        assert trailer_bytes(error) < 8 * 1024
        errors = _get_ack_errors(error)
        assert errors is not None
        listed = {k: v for k, v in errors.items() if k != UNLISTED_KEY}
        assert 50 <= len(listed) < EXPIRED
        assert set(listed.values()) == {"PERMANENT_FAILURE_INVALID_ACK_ID"}
        assert set(listed) <= set(expired)
        assert int(errors[UNLISTED_KEY]) == EXPIRED - len(listed)
        results, retried = classify(error, ack_ids)
        # Listed: INVALID. Unlisted (expired, and the fresh ones the server applied): OTHER
        # ("may come again") — never SUCCESS for an id that was not applied, never a retry.
        assert retried == 0
        assert results == {
            "invalid": len(listed),
            "other": len(ack_ids) - len(listed),
            "success": 0,
        }
    # The fresh leases were extended, then acked; the expired messages wait for redelivery.
    assert reference.broker.backlog(SUBSCRIPTION) == EXPIRED
    # The channel is fine: a plain call right after.
    got = await asyncio.to_thread(official.get_subscription, subscription=SUBSCRIPTION)
    assert got.name == SUBSCRIPTION


async def test_eoclient_says_it_reads_large_trailers_and_gets_every_failure(
    reference: ReferenceServer, clock: FakeClock
) -> None:
    """eoclient's transport declares the 4 MiB of trailer its channels read: every failed
    id comes back listed, each INVALID_ACK_ID, and the applied ones SUCCESS."""
    expired = expire_ack_ids(reference, clock)
    reference.broker.publishing.publish(TOPIC, [NewMessage(b"fresh") for _ in range(FRESH)])
    fresh = [d.ack_id for d in reference.broker.leasing.pull(SUBSCRIPTION, FRESH)]
    transport = PubSubTransport(create_channel(Endpoint.resolve(reference.address)))
    try:
        with pytest.raises(RpcError) as caught:
            await transport.acknowledge(SUBSCRIPTION, expired + fresh)
    finally:
        await transport.close()
    assert set(caught.value.error_info) == set(expired)
    outcome = classify_unary_error(expired + fresh, caught.value, exactly_once=True)
    statuses = Counter(result.status for result in outcome.final.values())
    assert outcome.retry == {}
    assert statuses == {AcknowledgeStatus.INVALID_ACK_ID: EXPIRED, AcknowledgeStatus.SUCCESS: FRESH}
    assert reference.broker.backlog(SUBSCRIPTION) == EXPIRED


async def test_eoclient_reads_a_cut_listing_safely(
    reference: ReferenceServer, clock: FakeClock
) -> None:
    """Without the declaration (a call that does not make it) the listing is cut to fit:
    eoclient sees the count of the failed ids left out and reads every unlisted id — the
    applied fresh ones, like the expired ones that were not — as OTHER, never a SUCCESS
    the server may not have given."""
    expired = expire_ack_ids(reference, clock)
    reference.broker.publishing.publish(TOPIC, [NewMessage(b"fresh") for _ in range(FRESH)])
    fresh = [d.ack_id for d in reference.broker.leasing.pull(SUBSCRIPTION, FRESH)]
    transport = PubSubTransport(create_channel(Endpoint.resolve(reference.address)))
    request = pubsub_pb2.AcknowledgeRequest(subscription=SUBSCRIPTION, ack_ids=expired + fresh)
    try:
        with pytest.raises(RpcError) as caught:
            await transport.call("Subscriber", "Acknowledge", request, empty_pb2.Empty)
    finally:
        await transport.close()
    outcome = classify_unary_error(expired + fresh, caught.value, exactly_once=True)
    statuses = Counter(result.status for result in outcome.final.values())
    listed = len(caught.value.error_info) - 1
    assert 50 <= listed < EXPIRED
    assert outcome.retry == {}
    assert statuses == {
        AcknowledgeStatus.INVALID_ACK_ID: listed,
        AcknowledgeStatus.OTHER: EXPIRED + FRESH - listed,
    }
    assert reference.broker.backlog(SUBSCRIPTION) == EXPIRED


def _node_client() -> Path:
    return node_client()


@pytest.mark.timeout(300)  # a first run installs the client from npm
async def test_the_node_client_reads_an_ack_of_three_thousand_expired_ids(
    reference: ReferenceServer, clock: FakeClock, tmp_path: Path
) -> None:
    home = await asyncio.to_thread(_node_client)
    ack_ids = expire_ack_ids(reference, clock)
    ids_file = tmp_path / "ack_ids.json"
    ids_file.write_text(json.dumps(ack_ids))
    # An .mjs script resolves packages from its own directory upwards: run a copy placed
    # beside the installed node_modules.
    script = home / SCRIPT.name
    script.write_text(SCRIPT.read_text())
    env = {
        **os.environ,
        "PUBSUB_EMULATOR_HOST": reference.address,
        "SUBSCRIPTION": SUBSCRIPTION,
        "ACK_IDS_FILE": str(ids_file),
    }
    process = await asyncio.create_subprocess_exec(
        "node",
        str(script),
        cwd=home,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()[-2000:]
    out = json.loads(stdout.decode().strip().splitlines()[-1])
    for call in ("ack", "modack"):
        answer = out[call]
        assert answer["ok"] is False
        assert answer["code"] == 3, answer  # INVALID_ARGUMENT, not DEADLINE_EXCEEDED
        assert answer["seconds"] < 10
        listed = answer["listed"] - 1  # less the count of the unlisted
        assert 50 <= listed < EXPIRED
        assert answer["unlisted"] == EXPIRED - listed
        assert answer["results"] == {
            "invalid": listed,
            "other": EXPIRED - listed,
            "retry": 0,
            "success": 0,
        }
    assert out["after"]["ok"] is True, out["after"]  # no GOAWAY: the connection still serves
