"""Which failures are transient: errors.py's classification table, and that the one
mapping place (``_transport.rpc_error_from_grpc``) and the ack classifier follow it.

The local gRPC stack raises RESOURCE_EXHAUSTED for its size limits; those are
permanent, while a server's quota RESOURCE_EXHAUSTED is retried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import empty_pb2

from eoclient import AcknowledgeStatus, AckRetrySettings, SubscriberClient
from eoclient._proto import pubsub_pb2
from eoclient._transport import CHANNEL_OPTIONS, rpc_error_from_grpc
from eoclient.errors import (
    Aborted,
    Cancelled,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    RpcError,
    SizeLimitExceeded,
    Unavailable,
    Unknown,
    is_retryable,
    rpc_error_class,
)
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.subscriber.ack_results import classify_unary

from .test_session_support import make_env

# (code, message) → (class, retryable). Messages are the texts gRPC core and the
# service produce (errors.py cites their sources).
TABLE: list[tuple[str, str, type[RpcError], bool]] = [
    ("UNAVAILABLE", "failed to connect to all addresses", Unavailable, True),
    ("DEADLINE_EXCEEDED", "Deadline Exceeded", DeadlineExceeded, True),
    ("ABORTED", "", Aborted, True),
    ("INTERNAL", "Received RST_STREAM with error code 2", Internal, True),
    ("UNKNOWN", "", Unknown, True),
    (
        "RESOURCE_EXHAUSTED",
        "Quota exceeded for quota metric 'Acknowledge requests'",
        ResourceExhausted,
        True,
    ),
    ("RESOURCE_EXHAUSTED", "", ResourceExhausted, True),
    (
        "RESOURCE_EXHAUSTED",
        "Stream removed (received metadata size exceeds hard limit"
        " (value length 113155 vs. 16384))",
        SizeLimitExceeded,
        False,
    ),
    (
        "RESOURCE_EXHAUSTED",
        "received metadata size exceeds soft limit (20000 vs. 16384)",
        SizeLimitExceeded,
        False,
    ),
    (
        "RESOURCE_EXHAUSTED",
        "CLIENT: Sent message larger than max (598 vs. 100)",
        SizeLimitExceeded,
        False,
    ),
    (
        "RESOURCE_EXHAUSTED",
        "Stream removed (CLIENT: Received message larger than max (362 vs. 100))",
        SizeLimitExceeded,
        False,
    ),
    (
        "RESOURCE_EXHAUSTED",
        "SERVER: Received message larger than max (11000000 vs. 10485760)",
        SizeLimitExceeded,
        False,
    ),
    ("CANCELLED", "Locally cancelled by application!", Cancelled, False),
    ("INVALID_ARGUMENT", "", InvalidArgument, False),
    ("NOT_FOUND", "", NotFound, False),
    ("PERMISSION_DENIED", "", PermissionDenied, False),
    ("NOT_A_STATUS", "", Unknown, False),
]


@pytest.mark.parametrize(("code", "message", "cls", "retryable"), TABLE)
def test_classification_table(
    code: str, message: str, cls: type[RpcError], retryable: bool
) -> None:
    assert rpc_error_class(code, message) is cls
    assert is_retryable(code, message) is retryable
    if code != "NOT_A_STATUS":
        assert cls(message).retryable is retryable


@pytest.mark.parametrize(("code", "message", "cls", "retryable"), TABLE)
def test_ack_classifier_retries_exactly_the_retryable_statuses(
    code: str, message: str, cls: type[RpcError], retryable: bool
) -> None:
    outcome = classify_unary(["a", "b"], code=code, message=message, exactly_once=True)
    if retryable:
        assert set(outcome.retry) == {"a", "b"}
        assert not outcome.final
    else:
        assert not outcome.retry
        assert {r.status for r in outcome.final.values()} <= {
            AcknowledgeStatus.OTHER,
            AcknowledgeStatus.PERMISSION_DENIED,
        }


def test_size_limit_is_a_resource_exhausted() -> None:
    # Code that catches ResourceExhausted still catches it; only `retryable` differs.
    error = SizeLimitExceeded("CLIENT: Sent message larger than max (2 vs. 1)")
    assert isinstance(error, ResourceExhausted)
    assert error.code == "RESOURCE_EXHAUSTED"


def test_the_channel_accepts_large_error_trailers() -> None:
    assert dict(CHANNEL_OPTIONS)["grpc.max_metadata_size"] >= 1024 * 1024


# ------------------------------------------------- real gRPC errors, mapped once


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server(rest_port=None) as server:
        yield server


async def _acknowledge_raw(
    srv: ReferenceServer, subscription: str, ack_ids: list[str], options: list[tuple[str, int]]
) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(srv.address, options=options) as channel:
        call = channel.unary_unary(
            "/google.pubsub.v1.Subscriber/Acknowledge",
            request_serializer=pubsub_pb2.AcknowledgeRequest.SerializeToString,
            response_deserializer=empty_pb2.Empty.FromString,
        )
        # Declared as eoclient's transport does: the server lists every failed id, whatever
        # the trailer's size (else it cuts the list to fit in 7.5 KiB).
        metadata = (("x-eoclient-error-trailer-bytes", "4194304"),)
        request = pubsub_pb2.AcknowledgeRequest(subscription=subscription, ack_ids=ack_ids)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(request, metadata=metadata)
    return raised.value


async def test_locally_generated_size_limits_map_to_permanent_errors(srv: ReferenceServer) -> None:
    env = make_env(srv)
    # A request larger than the channel may send.
    sent = await _acknowledge_raw(
        srv, env.subscription, ["x" * 200], [("grpc.max_send_message_length", 100)]
    )
    # Error trailers (the ErrorInfo of 500 invalid ids) larger than the channel accepts.
    received = await _acknowledge_raw(
        srv,
        env.subscription,
        [f"not-an-ack-id-{i}" for i in range(500)],
        [("grpc.max_metadata_size", 1024)],
    )
    for raw in (sent, received):
        assert raw.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        error = rpc_error_from_grpc(raw)
        assert isinstance(error, SizeLimitExceeded), raw.details()
        assert not error.retryable


async def test_a_server_quota_error_stays_retryable(srv: ReferenceServer) -> None:
    env = make_env(srv)
    srv.faults.fail("Acknowledge", "RESOURCE_EXHAUSTED", "Quota exceeded")
    raw = await _acknowledge_raw(srv, env.subscription, ["a"], [])
    error = rpc_error_from_grpc(raw)
    assert type(error) is ResourceExhausted
    assert error.retryable


FAST_RETRY = AckRetrySettings(initial_backoff=0.01, max_backoff=0.05, deadline=10.0)


async def test_acknowledge_reports_a_size_limit_at_once_and_retries_a_quota(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv)
    env.publish(2)
    async with SubscriberClient(srv.address) as client:
        messages = await client.pull(env.subscription, 2)
        assert len(messages) == 2
        ack_ids = [m.ack_id for m in messages]
        srv.faults.fail(
            "Acknowledge",
            "RESOURCE_EXHAUSTED",
            "SERVER: Received message larger than max (9 vs. 4)",
        )
        # A retry would find the ids valid and report SUCCESS: OTHER shows it was not retried.
        refused = await client.acknowledge(env.subscription, ack_ids, ack_retry=FAST_RETRY)
        assert {r.status for r in refused.values()} == {AcknowledgeStatus.OTHER}
        assert all("larger than max" in r.info for r in refused.values())
        srv.faults.fail("Acknowledge", "RESOURCE_EXHAUSTED", "Quota exceeded", times=2)
        accepted = await client.acknowledge(env.subscription, ack_ids, ack_retry=FAST_RETRY)
        assert {r.status for r in accepted.values()} == {AcknowledgeStatus.SUCCESS}
    assert env.backlog() == 0
