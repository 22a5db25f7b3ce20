"""Endpoints as the official clients read them, client options, and an injected channel.

* What a string means (pure): TLS with Application Default Credentials, unless it names
  this machine or is ``PUBSUB_EMULATOR_HOST``'s value; ``Endpoint.insecure`` and
  ``Endpoint.service`` (universe domain, the mutual-TLS host).
* What a client sends, seen by a TLS server that records each call: the bearer token,
  the quota project (``x-goog-user-project``), and a client certificate the server
  requires (mutual TLS).
* Failures that used to be obscure are clear at connect time (no credentials found, a
  universe domain that is not the credentials').
* A ``grpc.aio.Channel`` handed to any of the three clients is used, and left open for its
  owner.

The subscriber gets its endpoint through the same ``Endpoint.resolve`` as the publisher
and the admin client: its cases here check that it does (a TLS string, the token and
quota project on its calls, the refusal without credentials, an injected channel).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials
from google.oauth2.credentials import Credentials

from eoclient import AcknowledgeStatus, Endpoint
from eoclient.admin import AdminClient, topic_path
from eoclient.errors import CredentialsError, RpcError
from eoclient.publisher import PublisherClient
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.subscriber import SubscriberClient

from .certificates import CLIENT_NAME, Certificates, make_certificates
from .recording_server import recording_server

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_UNIVERSE_DOMAIN", raising=False)


@pytest.fixture(scope="module")
def certificates() -> Certificates:
    return make_certificates()


# ====================================================================== what a string means


@pytest.mark.parametrize(
    "target",
    [
        "us-east1-pubsub.googleapis.com:443",
        "pubsub.googleapis.com:443",
        "pubsub-emulator:8085",  # a container's name is a remote host, as for the official client
        "10.0.0.7:8085",
        "dns:///pubsub.example.com:443",
    ],
)
def test_a_string_endpoint_is_tls_with_default_credentials(target: str) -> None:
    endpoint = Endpoint.resolve(target)
    assert endpoint.secure
    assert endpoint.target == target
    assert endpoint.credentials is None  # Application Default Credentials when connecting
    assert endpoint.universe_domain == "googleapis.com"


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:8085",
        "127.8.9.10:1",
        "localhost:8085",
        "LOCALHOST:8085",
        "api.localhost:8085",
        "[::1]:8085",
        "::1",
        "0.0.0.0:8085",
        "ipv4:127.0.0.1:8085",
        "dns:///localhost:8085",
        "unix:/tmp/pubsub.sock",
    ],
)
def test_a_loopback_endpoint_is_plain_text(target: str) -> None:
    endpoint = Endpoint.resolve(target)
    assert not endpoint.secure
    assert endpoint.target == target


def test_the_emulator_variable_is_plain_text_whatever_its_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "pubsub-emulator:8085")
    assert Endpoint.resolve() == Endpoint.insecure("pubsub-emulator:8085")
    # The same string passed on (PublisherClient(os.environ["PUBSUB_EMULATOR_HOST"])).
    assert not Endpoint.resolve("pubsub-emulator:8085").secure
    # Another remote host is still TLS.
    assert Endpoint.resolve("pubsub.example.com:443").secure


def test_no_endpoint_is_the_service_of_the_universe(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Endpoint.resolve() == Endpoint.tls("pubsub.googleapis.com:443")
    monkeypatch.setenv("GOOGLE_CLOUD_UNIVERSE_DOMAIN", "example-universe.com")
    service = Endpoint.resolve()
    assert (service.target, service.secure) == ("pubsub.example-universe.com:443", True)
    assert service.universe_domain == "example-universe.com"
    assert Endpoint.service(universe_domain="other.com").target == "pubsub.other.com:443"


def test_insecure_says_plain_text_for_any_host() -> None:
    endpoint = Endpoint.insecure("pubsub-emulator:8085")
    assert (endpoint.target, endpoint.secure) == ("pubsub-emulator:8085", False)
    assert Endpoint.resolve(endpoint) is endpoint


def test_the_mutual_tls_service_host(certificates: Certificates) -> None:
    pair = (certificates.client.chain, certificates.client.key)
    assert Endpoint.service(client_certificate=pair).target == "pubsub.mtls.googleapis.com:443"
    with pytest.raises(ValueError, match=r"mutual TLS is offered in the googleapis\.com universe"):
        Endpoint.service(universe_domain="example.com", client_certificate=pair)


def test_options_that_need_tls_are_refused_on_plain_text(certificates: Certificates) -> None:
    with pytest.raises(ValueError, match=r"cannot carry quota_project.*Endpoint\.tls"):
        Endpoint("localhost:8085", secure=False, quota_project="billing")
    with pytest.raises(ValueError, match="plain-text endpoint cannot carry credentials"):
        Endpoint("localhost:8085", secure=False, credentials=Credentials("t"))
    with pytest.raises(ValueError, match="both its chain and its private key"):
        Endpoint("h:1", secure=True, client_certificate_chain=certificates.client.chain)
    with pytest.raises(TypeError, match="endpoint must be"):
        Endpoint.resolve(8085)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a target"):
        Endpoint.insecure("")


def test_the_private_key_is_not_in_the_repr(certificates: Certificates) -> None:
    endpoint = Endpoint.tls(
        "h:443", client_certificate=(certificates.client.chain, certificates.client.key)
    )
    assert "PRIVATE KEY" not in repr(endpoint)


# ====================================================================== failures at connect


async def test_no_default_credentials_says_how_to_connect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    # Application Default Credentials read this file first: missing, they fail at once.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", f"{tmp_path}/missing.json")
    with pytest.raises(CredentialsError) as raised:
        async with PublisherClient("pubsub-emulator:8085"):
            pass
    text = str(raised.value)
    assert "pubsub-emulator:8085 is a TLS endpoint and Application Default Credentials" in text
    assert "Endpoint.insecure('pubsub-emulator:8085')" in text
    admin = AdminClient("pubsub-emulator:8085")
    with pytest.raises(CredentialsError, match=r"Endpoint\.insecure"):
        await admin.get_topic(topic_path("p", "t"))
    await admin.aclose()
    subscriber = SubscriberClient("pubsub-emulator:8085")
    with pytest.raises(CredentialsError, match=r"Endpoint\.insecure"):
        subscriber.subscribe("projects/p/subscriptions/s")
    with pytest.raises(CredentialsError, match=r"Endpoint\.insecure"):
        await subscriber.pull("projects/p/subscriptions/s")
    await subscriber.aclose()


def test_a_universe_the_credentials_do_not_belong_to_is_refused() -> None:
    endpoint = Endpoint.tls("h:443", credentials=Credentials("t"), universe_domain="example.com")
    with pytest.raises(CredentialsError, match=r"universe domain \('example.com'\).*'googleapis"):
        endpoint.create_channel()


def test_credentials_without_a_quota_project_are_refused() -> None:
    endpoint = Endpoint.tls("h:443", credentials=AnonymousCredentials(), quota_project="billing")
    with pytest.raises(CredentialsError, match="AnonymousCredentials cannot carry a quota"):
        endpoint.create_channel()


# ====================================================================== what a client sends


async def test_the_subscriber_resolves_its_endpoint_like_the_others(
    monkeypatch: pytest.MonkeyPatch, certificates: Certificates
) -> None:
    # Nothing connects until the client is used: the repr shows the resolved target.
    assert repr(SubscriberClient("pubsub.example.com:443")) == (
        "<SubscriberClient pubsub.example.com:443>"
    )
    async with recording_server(certificates) as server:
        # A string endpoint is TLS: against a TLS server with the CA trusted and a token.
        endpoint = Endpoint.tls(
            server.address,
            root_certificates=certificates.ca,
            credentials=Credentials("team-token"),
            quota_project="billing-project",
        )
        async with SubscriberClient(endpoint) as client:
            assert await client.pull("projects/p/subscriptions/s") == []
            await client.pull("projects/p/subscriptions/s", timeout=5)
    first, second = server.calls
    assert first.metadata["authorization"] == "Bearer team-token"
    assert first.metadata["x-goog-user-project"] == "billing-project"
    # The call's budget reaches the server as its deadline: 60 s by default, as GAPIC's
    # (the grpc-timeout header rounds to its unit: a little above the value is allowed).
    assert first.time_remaining is not None
    assert 30 < first.time_remaining < 60.5
    assert second.time_remaining is not None
    assert 2 < second.time_remaining < 5.5
    async with recording_server(None) as plain:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", plain.address)
        async with SubscriberClient() as client:  # the emulator variable: plain text
            assert await client.pull("projects/p/subscriptions/s") == []
    assert len(plain.calls) == 1


async def test_the_token_and_the_quota_project_are_sent(certificates: Certificates) -> None:
    async with recording_server(certificates) as server:
        endpoint = Endpoint.tls(
            server.address,
            root_certificates=certificates.ca,
            credentials=Credentials("team-token"),
            quota_project="billing-project",
        )
        async with AdminClient(endpoint) as admin:
            topic = await admin.get_topic(topic_path("p", "t"))
    assert topic.name == "projects/p/topics/t"
    [seen] = server.calls
    assert seen.metadata["authorization"] == "Bearer team-token"
    assert seen.metadata["x-goog-user-project"] == "billing-project"
    assert seen.client_names == []


async def test_mutual_tls_presents_the_client_certificate(certificates: Certificates) -> None:
    async with recording_server(certificates, require_client_certificate=True) as server:
        with_certificate = Endpoint.tls(
            server.address,
            root_certificates=certificates.ca,
            credentials=Credentials("team-token"),
            client_certificate=(certificates.client.chain, certificates.client.key),
        )
        async with AdminClient(with_certificate) as admin:
            await admin.get_topic(topic_path("p", "t"))
        without = Endpoint.tls(
            server.address, root_certificates=certificates.ca, credentials=Credentials("t")
        )
        async with AdminClient(without, timeout=2) as admin:
            with pytest.raises(RpcError):  # the handshake fails: the server wants a certificate
                await admin.get_topic(topic_path("p", "t"))
    [seen] = server.calls
    assert seen.client_names == [CLIENT_NAME]


# ====================================================================== an injected channel


@pytest.fixture
async def reference() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


@pytest.fixture
async def channel(reference: ReferenceServer) -> AsyncIterator[grpc.aio.Channel]:
    channel = Endpoint.resolve(reference.address).create_channel()
    yield channel
    await channel.close()


async def test_an_injected_channel_is_used_and_left_open(
    reference: ReferenceServer, channel: grpc.aio.Channel
) -> None:
    topic = topic_path("p", "shared-channel")
    async with AdminClient(channel=channel) as admin:
        await admin.create_topic(topic)
        assert repr(admin) == "<AdminClient shared transport>"
    async with PublisherClient(channel=channel) as publisher:
        message_id = await publisher.publish(topic, b"over the shared channel")
        assert "shared channel" in repr(publisher)
    subscription = "projects/p/subscriptions/shared-channel"
    async with AdminClient(channel=channel) as admin:
        await admin.create_subscription(subscription, topic)
    async with PublisherClient(channel=channel) as publisher:
        await publisher.publish(topic, b"streamed")
        await publisher.publish(topic, b"pulled")
    async with SubscriberClient(channel=channel) as client:
        assert repr(client) == "<SubscriberClient shared channel>"
        async with client.subscribe(subscription) as stream:
            async for message in stream:
                received = message.data
                assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
                break
        [pulled] = await client.pull(subscription, max_messages=5)
        assert {received, pulled.data} == {b"streamed", b"pulled"}
        pulled.ack()
    async with AdminClient(channel=channel) as admin:  # still open after all three closed
        assert (await admin.get_topic(topic)).name == topic
    assert message_id


async def test_a_channel_and_an_endpoint_together_are_refused(channel: grpc.aio.Channel) -> None:
    with pytest.raises(ValueError, match="endpoint= or channel="):
        PublisherClient("localhost:1", channel=channel)
    with pytest.raises(ValueError, match="only one of"):
        AdminClient("localhost:1", channel=channel)
    with pytest.raises(ValueError, match="endpoint= or channel="):
        SubscriberClient("localhost:1", channel=channel)


async def test_tls_to_a_plain_text_server_says_so(reference: ReferenceServer) -> None:
    # A string endpoint for a remote host is TLS; pointed at a plain-text server (an
    # emulator in a container, say), the handshake fails with a hint instead of an SSL code.
    endpoint = Endpoint.tls(reference.address, credentials=AnonymousCredentials())
    async with AdminClient(endpoint, retry=None, timeout=10) as admin:
        with pytest.raises(RpcError) as raised:
            await admin.get_topic(topic_path("p", "t"))
    assert raised.value.code == "UNAVAILABLE"
    assert "connect with Endpoint.insecure(target) or set PUBSUB_EMULATOR_HOST" in str(raised.value)
