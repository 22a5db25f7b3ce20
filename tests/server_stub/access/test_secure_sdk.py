"""TLS and bearer tokens on the SDK side: eoclient's secure path, end to end.

The reference server serves TLS with a certificate of a private CA and takes bearer
tokens; the SDK's clients connect with ``eoclient.Endpoint.tls`` (that CA, credentials
supplied by the caller: a static token here) — the path a deployment with its own CA, or
the real service, takes. PERMISSION_DENIED reaches ``ack_with_response`` as its own
status and a publish as a typed error; a token refresh runs off the event loop.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import google.auth.credentials
import pytest
from google.oauth2.credentials import Credentials

import eoclient
from eoclient import errors
from eoclient.server_stub.access.tokens import TokenTable
from eoclient.server_stub.server import ReferenceServer

from .tls_support import Certificates

TOPIC = "projects/team-a/topics/secure-orders"
SUBSCRIPTION = "projects/team-a/subscriptions/secure-orders"


def endpoint(
    server: ReferenceServer, certificates: Certificates, credentials: Any
) -> eoclient.Endpoint:
    return eoclient.Endpoint.tls(
        server.address, root_certificates=certificates.ca_pem, credentials=credentials
    )


async def test_admin_publish_and_exactly_once_subscribe_over_tls_with_a_token(
    secured: ReferenceServer, certificates: Certificates
) -> None:
    team_a = endpoint(secured, certificates, Credentials("team-a-token"))
    async with eoclient.AdminClient(team_a) as admin:
        await admin.create_topic(TOPIC)
        await admin.create_subscription(SUBSCRIPTION, TOPIC, enable_exactly_once_delivery=True)
    async with eoclient.PublisherClient(team_a) as publisher:
        message_id = await publisher.publish(TOPIC, b"order 1")
    async with (
        eoclient.SubscriberClient(team_a) as client,
        client.subscribe(SUBSCRIPTION) as stream,
    ):
        async for message in stream:
            assert message.message_id == message_id
            assert await message.ack_with_response() is eoclient.AcknowledgeStatus.SUCCESS
            break
    assert secured.broker.backlog(SUBSCRIPTION) == 0


async def test_permission_denied_is_typed_for_publish_and_a_status_for_acks(
    secured: ReferenceServer, certificates: Certificates
) -> None:
    admin_endpoint = endpoint(secured, certificates, Credentials("admin-token"))
    team_a = endpoint(secured, certificates, Credentials("team-a-token"))
    async with eoclient.AdminClient(admin_endpoint) as admin:
        await admin.create_topic("projects/team-b/topics/other")
        await admin.create_topic(TOPIC)
        await admin.create_subscription(SUBSCRIPTION, TOPIC, enable_exactly_once_delivery=True)
    async with eoclient.PublisherClient(team_a) as publisher:
        with pytest.raises(errors.PermissionDenied):
            await publisher.publish("projects/team-b/topics/other", b"not yours")
        await publisher.publish(TOPIC, b"m")
    async with eoclient.SubscriberClient(team_a) as client:
        [message] = await client.pull(SUBSCRIPTION)
        # The token loses the project while the message is held (the server's token table
        # is a test instrument): the ack is refused with PERMISSION_DENIED, its own status.
        secured.services.tokens = TokenTable.parse("team-a-token elsewhere\n")
        status = await message.ack_with_response()
    assert status is eoclient.AcknowledgeStatus.PERMISSION_DENIED
    assert secured.broker.backlog(SUBSCRIPTION) == 1


async def test_unknown_tokens_and_plain_text_clients_are_refused(
    secured: ReferenceServer, certificates: Certificates
) -> None:
    guessed = endpoint(secured, certificates, Credentials("guessed"))
    async with eoclient.AdminClient(guessed) as admin:
        with pytest.raises(errors.Unauthenticated):
            await admin.create_topic(TOPIC)
    async with eoclient.AdminClient(secured.address, timeout=5) as plain:  # no TLS
        with pytest.raises(errors.RpcError):
            await plain.create_topic(TOPIC)


class SlowRefreshingCredentials(google.auth.credentials.Credentials):  # type: ignore[misc]
    """A token that takes a second to fetch (a blocking HTTP call in real credentials)."""

    def __init__(self, token: str, on_refresh: Any) -> None:
        super().__init__()
        self._issued = token
        self._on_refresh = on_refresh
        self.refresh_threads: list[str] = []

    def refresh(self, request: Any) -> None:
        self.refresh_threads.append(threading.current_thread().name)
        self._on_refresh("start")
        time.sleep(1.0)
        self.token = self._issued
        self._on_refresh("end")


async def test_a_token_refresh_does_not_block_the_event_loop(
    secured: ReferenceServer, certificates: Certificates
) -> None:
    # The loop serves the in-process server too: were the refresh run on it, the first
    # call could not even be answered. Counted instead of timed: ticks of the loop while
    # the refresh sleeps.
    ticks = 0
    marks: dict[str, int] = {}
    credentials = SlowRefreshingCredentials("team-a-token", lambda at: marks.setdefault(at, ticks))

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    beating = asyncio.create_task(heartbeat())
    try:
        async with eoclient.AdminClient(endpoint(secured, certificates, credentials)) as admin:
            await admin.create_topic(TOPIC)
    finally:
        beating.cancel()
    assert credentials.refresh_threads
    assert threading.main_thread().name not in credentials.refresh_threads
    assert marks["end"] - marks["start"] >= 10  # the loop kept running meanwhile


def test_the_gcp_extra_exists_and_brings_what_the_secure_path_imports() -> None:
    # The SDK's error for a missing google-auth says pip install 'eoclient[gcp]'.
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[; ]", requirement)[0] for requirement in extras["gcp"]}
    assert {"google-auth", "requests"} <= names
