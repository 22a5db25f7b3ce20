"""TLS and bearer tokens on both doors.

A server with a certificate from a private CA and a token file; clients trust that CA
and send ``authorization: Bearer <token>``. Missing or unknown tokens are
UNAUTHENTICATED (401), a token used outside its projects PERMISSION_DENIED (403), on
unary calls, StreamingPull and REST alike.
"""

from __future__ import annotations

import logging
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from support.processes import eoclient_serve

from eoclient._proto import iam_policy_pb2
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub import server as server_module
from eoclient.server_stub.access.security import DoorSecurity, exposure_warnings
from eoclient.server_stub.access.tokens import TokenTable, request_projects
from eoclient.server_stub.server import ReferenceServer, run_server

from .tls_support import ADMIN, TEAM_A, TOKENS, Certificates


@pytest.fixture
async def channel(
    secured: ReferenceServer, certificates: Certificates
) -> AsyncIterator[grpc.aio.Channel]:
    credentials = grpc.ssl_channel_credentials(root_certificates=certificates.ca_pem)
    async with grpc.aio.secure_channel(secured.address, credentials) as opened:
        yield opened


def unary(channel: grpc.aio.Channel, method: str, response: Any) -> Any:
    service = "Publisher" if method in ("CreateTopic", "Publish", "GetTopic") else "Subscriber"
    return channel.unary_unary(
        f"/google.pubsub.v1.{service}/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response.FromString,
    )


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def code_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


async def test_grpc_door_over_tls_with_tokens(channel: grpc.aio.Channel) -> None:
    create_topic = unary(channel, "CreateTopic", pb.Topic)
    topic = pb.Topic(name="projects/team-a/topics/orders")
    assert await code_of(create_topic(topic)) == grpc.StatusCode.UNAUTHENTICATED
    assert (
        await code_of(create_topic(topic, metadata=bearer("guessed")))
        == grpc.StatusCode.UNAUTHENTICATED
    )
    assert (
        await code_of(create_topic(topic, metadata=(("authorization", "Basic dXNlcjpwYXNz"),)))
        == grpc.StatusCode.UNAUTHENTICATED
    )
    assert (await create_topic(topic, metadata=bearer(TEAM_A))).name == topic.name
    other = pb.Topic(name="projects/team-b/topics/orders")
    assert (
        await code_of(create_topic(other, metadata=bearer(TEAM_A)))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    assert (await create_topic(other, metadata=bearer(ADMIN))).name == other.name
    # Every resource name counts: a team-a subscription on team-b's topic is refused.
    create_subscription = unary(channel, "CreateSubscription", pb.Subscription)
    crossing = pb.Subscription(name="projects/team-a/subscriptions/sub1", topic=other.name)
    assert (
        await code_of(create_subscription(crossing, metadata=bearer(TEAM_A)))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    # "projects/shared" in the token file grants project "shared".
    shared = pb.Topic(name="projects/shared/topics/shared-topic")
    assert (await create_topic(shared, metadata=bearer(TEAM_A))).name == shared.name


async def test_streaming_pull_needs_a_token_for_the_subscription(
    channel: grpc.aio.Channel,
) -> None:
    admin = bearer(ADMIN)
    topic, sub = "projects/team-b/topics/tbt", "projects/team-b/subscriptions/tbs"
    await unary(channel, "CreateTopic", pb.Topic)(pb.Topic(name=topic), metadata=admin)
    await unary(channel, "CreateSubscription", pb.Subscription)(
        pb.Subscription(name=sub, topic=topic), metadata=admin
    )
    await unary(channel, "Publish", pb.PublishResponse)(
        pb.PublishRequest(topic=topic, messages=[pb.PubsubMessage(data=b"m")]), metadata=admin
    )
    first = pb.StreamingPullRequest(subscription=sub, stream_ack_deadline_seconds=60)
    streaming_pull = channel.stream_stream(
        "/google.pubsub.v1.Subscriber/StreamingPull",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.StreamingPullResponse.FromString,
    )
    for metadata, expected in (
        ((), grpc.StatusCode.UNAUTHENTICATED),
        (bearer("guessed"), grpc.StatusCode.UNAUTHENTICATED),
        (bearer(TEAM_A), grpc.StatusCode.PERMISSION_DENIED),
    ):
        call = streaming_pull(iter([first]), metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
        assert caught.value.code() == expected
    call = streaming_pull(metadata=admin)
    await call.write(first)
    response = await call.read()
    assert [m.message.data for m in response.received_messages] == [b"m"]
    call.cancel()


async def test_plain_text_clients_cannot_talk_to_a_tls_door(secured: ReferenceServer) -> None:
    async with grpc.aio.insecure_channel(secured.address) as plain:
        create_topic = unary(plain, "CreateTopic", pb.Topic)
        call = create_topic(pb.Topic(name="projects/team-a/topics/x"), timeout=5)
        assert await code_of(call) == grpc.StatusCode.UNAVAILABLE


async def test_rest_door_over_tls_with_tokens(
    secured: ReferenceServer, certificates: Certificates
) -> None:
    assert secured.rest_url.startswith("https://")
    context = ssl.create_default_context(cafile=str(certificates.ca_file))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:

        async def put(path: str, token: str | None = None, query: str = "") -> tuple[int, Any]:
            headers = {"Content-Type": "application/json"}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            async with session.put(
                f"{secured.rest_url}/v1/{path}{query}", data=b"{}", headers=headers
            ) as response:
                assert response.content_type == "application/json"
                if response.status == 401:
                    assert response.headers["WWW-Authenticate"].startswith("Bearer")
                return response.status, await response.json()

        status, body = await put("projects/team-a/topics/rest")
        assert (status, body["error"]["status"]) == (401, "UNAUTHENTICATED")
        status, body = await put("projects/team-a/topics/rest", "guessed")
        assert (status, body["error"]["status"]) == (401, "UNAUTHENTICATED")
        status, body = await put("projects/team-a/topics/rest", TEAM_A)
        assert status == 200, body
        status, body = await put("projects/team-b/topics/rest", TEAM_A)
        assert (status, body["error"]["status"]) == (403, "PERMISSION_DENIED")
        # Google's access_token system parameter works as the header does.
        status, body = await put("projects/team-a/topics/rest2", None, f"?access_token={TEAM_A}")
        assert status == 200, body


def test_token_file_format_and_request_projects() -> None:
    table = TokenTable.parse(TOKENS)
    assert table.authenticate(f"Bearer {TEAM_A}").projects == {"team-a", "shared"}
    assert table.authenticate(f"bearer  {ADMIN} ").every_project
    for bad, words in (
        ("", "no tokens"),
        ("lonely-token\n", ":1: the token has no projects"),
        ("t p\nt q\n", ":2: the token is listed twice"),
    ):
        with pytest.raises(ValueError, match=words):
            TokenTable.parse(bad)
    update = pb.UpdateSubscriptionRequest(
        subscription=pb.Subscription(
            name="projects/a/subscriptions/s",
            topic="projects/b/topics/t",
            dead_letter_policy=pb.DeadLetterPolicy(dead_letter_topic="projects/c/topics/d"),
        )
    )
    assert request_projects(update) == {"a", "b", "c"}
    assert request_projects(pb.ListTopicsRequest(project="projects/p")) == {"p"}
    iam = iam_policy_pb2.GetIamPolicyRequest(resource="projects/q/topics/t")
    assert request_projects(iam) == {"q"}  # a token may not read another project's policy
    schema_bound = pb.Topic(name="projects/a/topics/t")
    schema_bound.schema_settings.schema = "projects/s/schemas/x"
    assert request_projects(schema_bound) == {"a", "s"}
    assert request_projects(pb.Topic(name="not-a-name")) == set()


def test_exposure_warnings() -> None:
    open_door = DoorSecurity()
    with_tokens = DoorSecurity(tokens=TokenTable.parse(TOKENS))
    assert exposure_warnings("127.0.0.1", open_door) == []
    assert exposure_warnings("localhost", open_door) == []
    assert exposure_warnings("::1", open_door) == []
    [warning] = exposure_warnings("0.0.0.0", open_door)
    assert "without --auth-token-file" in warning
    [warning] = exposure_warnings("", open_door)
    assert "every interface" in warning
    [warning] = exposure_warnings("10.1.2.3", with_tokens)
    assert "clear text" in warning


async def test_a_server_logs_its_exposure_when_it_starts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Binding a non-loopback address here would expose the test machine: the call is
    # checked by standing in for the (pure, tested above) warning function.
    seen: list[tuple[str, DoorSecurity]] = []

    def warnings(host: str, security: DoorSecurity) -> list[str]:
        seen.append((host, security))
        return ["exposed for the test"]

    monkeypatch.setattr(server_module, "exposure_warnings", warnings)
    with caplog.at_level(logging.WARNING, logger="eoclient.server_stub"):
        async with run_server(rest_port=None):
            pass
    assert [host for host, _ in seen] == ["127.0.0.1"]
    assert "exposed for the test" in caplog.text


# ------------------------------------------------------------------ the program


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    return path


def _serve(*flags: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eoclient.cli", "serve", "--port", "0", *map(str, flags)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_serve_refuses_bad_security_flags(
    certificates: Certificates, token_file: Path, tmp_path: Path
) -> None:
    for flags, words in (
        (["--tls-cert", certificates.cert_file], "go together"),
        (["--tls-cert", certificates.cert_file, "--tls-key", tmp_path / "none"], "--tls-key"),
        (["--tls-cert", certificates.ca_file, "--tls-key", certificates.key_file], "cannot use"),
        (["--auth-token-file", tmp_path / "none"], "--auth-token-file"),
    ):
        done = _serve(*flags)
        assert done.returncode == 2, done
        assert words in done.stderr, done.stderr


@pytest.fixture
def served_secure(certificates: Certificates, token_file: Path) -> Iterator[str]:
    flags = ("--tls-cert", str(certificates.cert_file), "--tls-key", str(certificates.key_file))
    with eoclient_serve(*flags, "--auth-token-file", str(token_file)) as serve:
        found = serve.wait_for(r"endpoint (\S+): TLS=True, bearer tokens=True")
        assert "PUBSUB_EMULATOR_HOST" not in serve.output()  # it would mean a plain channel
        yield found.group(1)


async def test_eoclient_serve_with_tls_and_tokens(
    served_secure: str, certificates: Certificates
) -> None:
    credentials = grpc.ssl_channel_credentials(root_certificates=certificates.ca_pem)
    async with grpc.aio.secure_channel(served_secure, credentials) as secure:
        create_topic = unary(secure, "CreateTopic", pb.Topic)
        topic = pb.Topic(name="projects/team-a/topics/served")
        assert await code_of(create_topic(topic)) == grpc.StatusCode.UNAUTHENTICATED
        assert (await create_topic(topic, metadata=bearer(TEAM_A))).name == topic.name
