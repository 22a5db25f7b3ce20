"""Where the command connects: ``--endpoint`` as the SDK resolves a string endpoint
(``Endpoint.resolve``), ``--insecure`` for plain text to any host, and how each retries."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from eoclient import Endpoint
from eoclient.admin import DEFAULT, AdminClient
from eoclient.cli import cli
from eoclient.cli.app import Invocation, endpoint_from_flags
from eoclient.cli.errors import CliError
from eoclient.cli.output import Output
from eoclient.pytest_plugin import ServerThread

from .support import Eo, assert_one_line_error

EMULATOR = "pubsub-emulator:8085"


@pytest.mark.parametrize(
    ("endpoint", "emulator_host", "secure", "target"),
    [
        ("127.0.0.1:8085", None, False, "127.0.0.1:8085"),
        ("localhost:8085", None, False, "localhost:8085"),
        ("[::1]:8085", None, False, "[::1]:8085"),
        (EMULATOR, None, True, EMULATOR),  # another host: TLS, as the official clients
        (EMULATOR, EMULATOR, False, EMULATOR),  # the emulator variable's value: plain text
        (None, EMULATOR, False, EMULATOR),
        (None, None, True, "pubsub.googleapis.com:443"),
    ],
)
def test_endpoint_follows_endpoint_resolve(
    monkeypatch: pytest.MonkeyPatch,
    endpoint: str | None,
    emulator_host: str | None,
    secure: bool,
    target: str,
) -> None:
    if emulator_host is None:
        monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    else:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator_host)
    resolved = endpoint_from_flags(endpoint, insecure=False)
    assert resolved == Endpoint.resolve(endpoint)
    assert (resolved.secure, resolved.target) == (secure, target)


def test_insecure_is_plain_text_to_any_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    assert endpoint_from_flags(EMULATOR, insecure=True) == Endpoint.insecure(EMULATOR)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", EMULATOR)
    assert endpoint_from_flags(None, insecure=True) == Endpoint.insecure(EMULATOR)


def test_insecure_without_an_endpoint_is_a_usage_error() -> None:
    result = CliRunner(env={"PUBSUB_EMULATOR_HOST": None}).invoke(
        cli, ["topics", "list", "--project", "p", "--insecure"]
    )
    assert result.exit_code == 2
    assert_one_line_error(result.stderr)
    assert "--insecure needs --endpoint HOST:PORT" in result.stderr
    assert "the real service speaks TLS only" in result.stderr


def test_insecure_reaches_a_plain_text_server(cli_server: ServerThread, project: str) -> None:
    eo = Eo("127.0.0.1:1", project)  # the environment points nowhere; the flags say where
    flags = ("--endpoint", cli_server.address, "--insecure")
    eo.ok("topics", "create", "orders", *flags)
    listed = eo.json("topics", "list", *flags)
    assert [t["name"] for t in listed] == [f"projects/{project}/topics/orders"]


def test_another_host_is_tls_with_credentials(no_credentials: Path) -> None:
    # google-auth refuses before anything is sent, which shows the endpoint was taken
    # for TLS (plain text never asks for credentials).
    result = CliRunner(env={"PUBSUB_EMULATOR_HOST": None}).invoke(
        cli, ["topics", "list", "--project", "p", "--endpoint", "pubsub.example.invalid:8085"]
    )
    assert result.exit_code == 1
    assert_one_line_error(result.stderr)
    line = result.stderr.strip()
    assert line.startswith("eoclient: credentials for pubsub.example.invalid:8085: ")
    assert no_credentials.name in line  # google-auth's own reason
    assert "adding --insecure if it is not on this machine" in line
    assert "Endpoint.insecure" not in line  # the SDK's advice is for Python callers


def test_tls_to_a_plain_text_server_says_insecure(cli_server: ServerThread) -> None:
    from google.auth.credentials import AnonymousCredentials

    secure = Endpoint.tls(cli_server.address, credentials=AnonymousCredentials())
    invocation = Invocation("p", secure, Output("table"))

    async def describe() -> None:
        async with AdminClient(secure, retry=None) as admin:
            await admin.get_topic("projects/p/topics/t")

    with pytest.raises(CliError) as raised:
        invocation.run(describe())
    message = raised.value.message
    assert "WRONG_VERSION_NUMBER" in message
    assert message.endswith(
        f"(server {cli_server.address}: the TLS handshake met a plain-text server: add --insecure)"
    )
    assert "Endpoint.insecure" not in message  # the SDK's advice is for Python callers


def test_admin_verbs_retry_on_tls_only() -> None:
    """A plain-text server answering UNAVAILABLE is not running: one attempt, so the
    verb says so at once. The service's UNAVAILABLE is transient: the SDK's retries."""
    plain = Invocation(None, Endpoint.insecure(EMULATOR), Output("table"))
    tls = Invocation(None, Endpoint.tls(EMULATOR), Output("table"))
    assert plain.admin_retry is None
    assert tls.admin_retry is DEFAULT
