"""Bad input never breaks state — one regression test per finding.

Each bad input is sent through the doors (raw gRPC, raw HTTP); the answer must be a
documented 4xx-class status naming the problem, and afterwards every read of the project
must still work on both doors (a stored value the service cannot render used to make
every later GetSnapshot/ListSnapshots, and every REST read, fail).
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import grpc
import pytest
from support.wire import PROJECT, Wire, unique

from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer

PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"
NON_ASCII_DIGITS = "x-\u00b2-1"  # '²'.isdigit() is True, int('²') raises ValueError
THOUSANDS_OF_DIGITS = "x-" + "1" * 5000 + "-1"  # past int()'s 4,300-digit limit
BAD_ACK_IDS = [NON_ASCII_DIGITS, THOUSANDS_OF_DIGITS, "", "a\x00b"]


class Http:
    """Raw HTTP to the REST door: every answer must be JSON."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self, method: str, path: str, body: bytes | None = None, **headers: str
    ) -> tuple[int, Any]:
        headers.setdefault("Content-Type", "application/json")
        async with self.session.request(
            method, self.base + path, data=body, headers=headers
        ) as response:
            assert response.content_type == "application/json", await response.text()
            return response.status, await response.json()

    async def error(self, method: str, path: str, body: bytes | None = None, **headers: str) -> str:
        """Expect a 400 INVALID_ARGUMENT in Google's JSON error shape; its message."""
        status, answer = await self.call(method, path, body, **headers)
        assert status == 400, answer
        assert set(answer) == {"error"}, answer
        assert answer["error"]["code"] == 400
        assert answer["error"]["status"] == "INVALID_ARGUMENT"
        message: str = answer["error"]["message"]
        return message

    async def readable(self, project: str = PROJECT) -> None:
        """Every list of the project answers 200, and each listed resource renders."""
        for kind in ("topics", "subscriptions", "snapshots"):
            status, answer = await self.call("GET", f"/v1/projects/{project}/{kind}")
            assert status == 200, answer
            for item in answer.get(kind, []):
                name = item if isinstance(item, str) else item["name"]
                status, _ = await self.call("GET", f"/v1/{name}")
                assert status == 200, (name, _)


@pytest.fixture
async def http(reference: ReferenceServer) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as session:
        yield Http(session, reference.rest_url)


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def grpc_readable(wire: Wire, project: str = PROJECT) -> None:
    await wire.ListTopics(pb.ListTopicsRequest(project=f"projects/{project}"))
    subscriptions = await wire.ListSubscriptions(
        pb.ListSubscriptionsRequest(project=f"projects/{project}")
    )
    for sub in subscriptions.subscriptions:
        await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub.name))
    snapshots = await wire.ListSnapshots(pb.ListSnapshotsRequest(project=f"projects/{project}"))
    for snapshot in snapshots.snapshots:
        await wire.GetSnapshot(pb.GetSnapshotRequest(snapshot=snapshot.name))


# ------------------------------------------------- values that cannot be rendered


async def test_update_snapshot_with_expire_time_out_of_range_is_refused(
    wire: Wire, http: Http
) -> None:
    _, sub = await wire.subscription()
    snapshot = f"projects/{PROJECT}/snapshots/snap-{unique('x').rsplit('/', 1)[1]}"
    await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=snapshot, subscription=sub))
    update = pb.UpdateSnapshotRequest(snapshot=pb.Snapshot(name=snapshot))
    update.snapshot.expire_time.seconds = 2**63 - 1
    update.update_mask.paths.append("expire_time")
    error = await rpc_error(wire.UpdateSnapshot(update))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "snapshot.expire_time" in (error.details() or "")
    await grpc_readable(wire)
    await http.readable()


def _ttl_too_long(sub: pb.Subscription) -> None:
    sub.expiration_policy.ttl.seconds = 10**15


def _ttl_sign_mismatch(sub: pb.Subscription) -> None:
    sub.expiration_policy.ttl.seconds = 10**6
    sub.expiration_policy.ttl.nanos = -1


def _max_duration_nanos(sub: pb.Subscription) -> None:
    sub.cloud_storage_config.bucket = "b"
    sub.cloud_storage_config.max_duration.seconds = 60
    sub.cloud_storage_config.max_duration.nanos = 2 * 10**9


def _retention_nanos(sub: pb.Subscription) -> None:
    sub.message_retention_duration.seconds = 3600
    sub.message_retention_duration.nanos = -5


def _struct_nan(sub: pb.Subscription) -> None:
    transform = sub.message_transforms.add()
    transform.ai_inference.endpoint = "e"
    parameters = transform.ai_inference.unstructured_inference.parameters
    parameters.fields["t"].number_value = float("nan")


@pytest.mark.parametrize(
    ("setter", "named"),
    [
        (_ttl_too_long, "expiration_policy.ttl"),
        (_ttl_sign_mismatch, "expiration_policy.ttl"),
        (_max_duration_nanos, "cloud_storage_config.max_duration"),
        (_retention_nanos, "message_retention_duration"),
        (_struct_nan, "message_transforms[0].ai_inference.unstructured_inference.parameters"),
    ],
    ids=["ttl-too-long", "ttl-sign", "max-duration-nanos", "retention-nanos", "struct-nan"],
)
async def test_subscription_values_that_cannot_be_rendered_are_refused(
    wire: Wire, http: Http, setter: Callable[[pb.Subscription], None], named: str
) -> None:
    topic = await wire.topic()
    subscription = pb.Subscription(name=unique("sub"), topic=topic)
    setter(subscription)
    error = await rpc_error(wire.CreateSubscription(subscription))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"'{named}'" in (error.details() or ""), error.details()

    # Through UpdateSubscription too (the opaque fields are merged by the mask).
    _, sub = await wire.subscription(topic)
    update = pb.UpdateSubscriptionRequest(subscription=subscription)
    update.subscription.name = sub
    update.update_mask.paths.append(named.split(".")[0].split("[")[0])
    error = await rpc_error(wire.UpdateSubscription(update))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"'subscription.{named}'" in (error.details() or ""), error.details()
    await grpc_readable(wire)
    await http.readable()


async def test_seek_to_a_time_out_of_range_is_refused(wire: Wire) -> None:
    _, sub = await wire.subscription()
    for seconds, nanos in ((1, -1), (253_402_300_800, 0), (-62_135_596_801, 0)):
        request = pb.SeekRequest(subscription=sub)
        request.time.seconds, request.time.nanos = seconds, nanos
        error = await rpc_error(wire.Seek(request))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'time'" in (error.details() or "")


async def test_values_at_the_edge_of_the_range_are_stored_and_render(
    wire: Wire, http: Http
) -> None:
    # The core keeps float seconds: the largest renderable values round up on the way in
    # and must still render on the way out.
    topic = await wire.topic()
    sub = unique("sub")
    subscription = pb.Subscription(name=sub, topic=topic)
    subscription.expiration_policy.ttl.seconds = 315_576_000_000
    subscription.expiration_policy.ttl.nanos = 999_999_999
    await wire.CreateSubscription(subscription)
    snapshot = f"projects/{PROJECT}/snapshots/snap-{sub.rsplit('-', 1)[1]}"
    await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=snapshot, subscription=sub))
    update = pb.UpdateSnapshotRequest(snapshot=pb.Snapshot(name=snapshot))
    update.snapshot.expire_time.seconds = 253_402_300_799
    update.snapshot.expire_time.nanos = 999_999_999
    update.update_mask.paths.append("expire_time")
    await wire.UpdateSnapshot(update)
    status, answer = await http.call("GET", f"/v1/{snapshot}")
    assert status == 200
    assert answer["expireTime"].startswith("9999-12-31T23:59:59")
    status, answer = await http.call("GET", f"/v1/{sub}")
    assert status == 200
    assert answer["expirationPolicy"]["ttl"].startswith("31557600000")
    await grpc_readable(wire)
    await http.readable()


# ------------------------------------------------------------- bad ack ids


async def test_bad_ack_ids_fail_alone_on_unary_calls_with_exactly_once(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    await wire.publish(topic, b"a", b"b")
    a, b = await wire.pull(sub, 2)
    error = await rpc_error(
        wire.ModifyAckDeadline(
            pb.ModifyAckDeadlineRequest(
                subscription=sub, ack_ids=[*BAD_ACK_IDS, b.ack_id], ack_deadline_seconds=60
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = Wire.error_info(error)
    assert info is not None
    assert dict(info.metadata) == dict.fromkeys(BAD_ACK_IDS, PERMANENT)
    error = await rpc_error(
        wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[*BAD_ACK_IDS, a.ack_id]))
    )
    info = Wire.error_info(error)
    assert info is not None
    assert dict(info.metadata) == dict.fromkeys(BAD_ACK_IDS, PERMANENT)
    assert reference.broker.backlog(sub) == 1  # a was acknowledged; b's modack applied
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[b.ack_id]))
    assert reference.broker.backlog(sub) == 0


async def test_bad_ack_ids_without_exactly_once_name_the_id_and_the_others_apply(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription()
    await wire.publish(topic, b"a", b"b", b"c")
    a, b, c = await wire.pull(sub, 3)
    for bad in BAD_ACK_IDS[:2]:
        error = await rpc_error(
            wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[bad, a.ack_id]))
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "invalid ack ID" in (error.details() or "")
        assert Wire.error_info(error) is None
    # An id this server never issued (well-formed, other server): the others still apply.
    error = await rpc_error(
        wire.Acknowledge(
            pb.AcknowledgeRequest(subscription=sub, ack_ids=["0123abc-1-1", b.ack_id, c.ack_id])
        )
    )
    assert "0123abc-1-1" in (error.details() or "")
    assert reference.broker.backlog(sub) == 0


async def test_bad_ack_ids_never_end_a_stream_and_fail_alone(
    wire: Wire, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    stream = wire.stream(sub, protocol_version=1)
    await wire.publish(topic, b"a", b"b")
    a, b = await stream.messages(2)
    stream.send(ack_ids=[NON_ASCII_DIGITS, a.ack_id, THOUSANDS_OF_DIGITS])
    confirmation = (await stream.next()).acknowledge_confirmation
    assert list(confirmation.ack_ids) == [a.ack_id]
    assert set(confirmation.invalid_ack_ids) == {NON_ASCII_DIGITS, THOUSANDS_OF_DIGITS}
    stream.send(
        modify_deadline_ack_ids=[NON_ASCII_DIGITS, b.ack_id], modify_deadline_seconds=[0, 0]
    )
    modack = (await stream.next()).modify_ack_deadline_confirmation
    assert list(modack.ack_ids) == [b.ack_id]
    assert list(modack.invalid_ack_ids) == [NON_ASCII_DIGITS]
    [again] = await stream.messages(1)  # b was nacked: the stream still delivers
    assert again.message.data == b"b"
    assert reference.open_streams() == 1


async def test_bad_ack_ids_over_rest(http: Http, wire: Wire, reference: ReferenceServer) -> None:
    for exactly_once in (True, False):
        topic, sub = await wire.subscription(enable_exactly_once_delivery=exactly_once)
        await wire.publish(topic, b"a")
        [a] = await wire.pull(sub, 1)
        body = json.dumps({"ackIds": [NON_ASCII_DIGITS, a.ack_id]}).encode()
        status, answer = await http.call("POST", f"/v1/{sub}:acknowledge", body)
        assert status == 400, answer
        if exactly_once:
            [detail] = answer["error"]["details"]
            assert detail["metadata"] == {NON_ASCII_DIGITS: PERMANENT}
        else:
            assert "invalid ack ID" in answer["error"]["message"]
        assert reference.broker.backlog(sub) == 0


# ------------------------------------------------------- undecodable requests


@pytest.mark.parametrize(
    "raw", [b"\xff\xff\xff", b"\x0a\x02\xc3\x28", b"\x0a\x05abc"], ids=["corrupt", "utf8", "short"]
)
@pytest.mark.parametrize(
    "method",
    [
        "/google.pubsub.v1.Publisher/GetTopic",
        "/google.pubsub.v1.Publisher/Publish",
        "/google.pubsub.v1.Subscriber/Acknowledge",
        "/google.pubsub.v1.Subscriber/Pull",
    ],
)
async def test_undecodable_requests_are_invalid_argument_without_a_traceback(
    wire: Wire, raw: bytes, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    call = wire.channel.unary_unary(method)
    error = await rpc_error(call(raw))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid google.pubsub.v1." in (error.details() or "")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_undecodable_streaming_pull_requests_are_invalid_argument(
    wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    _, sub = await wire.subscription()
    call = wire.channel.stream_stream("/google.pubsub.v1.Subscriber/StreamingPull")
    first = pb.StreamingPullRequest(subscription=sub, stream_ack_deadline_seconds=60)
    for requests in ([b"\xff\xff"], [first.SerializeToString(), b"\x12\x02\xc3\x28"]):
        stream = call(iter(requests))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stream:
                pass
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "StreamingPullRequest" in (caught.value.details() or "")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# ----------------------------------------------------------- REST bodies


def _nested(levels: int) -> bytes:
    return b'{"labels": ' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize(
    ("body", "headers", "words"),
    [
        (b'{"\\ud800": 1}', {}, "Unpaired surrogate"),
        (b'{"labels": {"\\udc00x": "v"}}', {}, "Unpaired surrogate"),
        (b'{"labels": {"k": "\\ud83d"}}', {}, "Unpaired surrogate"),
        (_nested(1000), {}, "nested more than"),
        (_nested(100_000), {}, "nested more than"),
        (b'{"labels": {"k": NaN}}', {}, "NaN"),
        (b'{"kmsKeyName": ' + b"9" * 5000 + b"}", {}, "digits"),
        (b"\xff\xfe{}", {}, "not UTF-8"),
        (b'{"name": 1}', {"Content-Encoding": "gzip"}, "not valid gzip"),
        (gzip.compress(b"{}")[:12], {"Content-Encoding": "gzip"}, "not valid gzip"),
        (gzip.compress(b"{}") + b"junk", {"Content-Encoding": "gzip"}, "not valid gzip"),
        (b"{}", {"Content-Encoding": "br"}, "Unsupported Content-Encoding"),
    ],
    ids=[
        "surrogate-key",
        "surrogate-map-key",
        "surrogate-value",
        "nested-1000",
        "nested-100000",
        "nan",
        "huge-int",
        "not-utf8",
        "gzip-lie",
        "gzip-truncated",
        "gzip-trailing",
        "unsupported",
    ],
)
async def test_rest_bodies_that_cannot_be_read_are_400_json(
    http: Http, body: bytes, headers: dict[str, str], words: str
) -> None:
    message = await http.error("PUT", f"/v1/{unique('topic')}", body, **headers)
    assert words in message, message
    await http.readable()


async def test_rest_bodies_with_a_true_content_encoding_are_read(http: Http) -> None:
    for coding, encoded in (
        ("gzip", gzip.compress(b'{"labels": {"a": "b"}}')),
        ("deflate", zlib.compress(b'{"labels": {"a": "b"}}')),
        ("identity", b'{"labels": {"a": "b"}}'),
    ):
        name = unique("topic")
        status, answer = await http.call(
            "PUT", f"/v1/{name}", encoded, **{"Content-Encoding": coding}
        )
        assert status == 200, answer
        assert answer["labels"] == {"a": "b"}


async def test_rest_decompression_bomb_is_refused(http: Http) -> None:
    bomb = gzip.compress(b'{"kmsKeyName": "' + b"a" * (40 * 2**20) + b'"}')
    message = await http.error(
        "PUT", f"/v1/{unique('topic')}", bomb, **{"Content-Encoding": "gzip"}
    )
    assert "exceeds the limit" in message


async def test_paths_with_control_characters_answer_json(http: Http) -> None:
    # Found by the fuzzer: aiohttp's catch-all route did not match a newline.
    for path in ("/%0A", "/v1/projects/p1/topics/t%0Ax", "/v1/%00"):
        status, answer = await http.call("GET", path)
        assert status in (400, 404), answer
        assert set(answer) == {"error"}
