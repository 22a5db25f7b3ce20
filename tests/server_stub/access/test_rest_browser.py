"""The local REST door is safe from web pages.

What a page on another site can make a browser send — a form POST (``text/plain``,
urlencoded, multipart), a no-cors ``fetch`` (an ``Origin`` header, no Content-Type), a
DNS-rebound name in ``Host`` — is refused with Google's JSON error and changes nothing;
curl-like clients (no Origin, JSON), the server's own pages and allow-listed origins work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.access.security import BrowserPolicy, DoorSecurity, host_name
from eoclient.server_stub.server import ReferenceServer, run_server

DASHBOARD = "https://dash.example:8443"


@pytest.fixture
async def guarded(clock: FakeClock) -> AsyncIterator[ReferenceServer]:
    security = DoorSecurity(browser=BrowserPolicy.of(["pubsub.internal"], [DASHBOARD]))
    async with run_server(clock=clock, security=security) as server:
        yield server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def send(
    session: aiohttp.ClientSession,
    server: ReferenceServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    # skip_auto_headers: aiohttp would add a Content-Type of its own to a bytes body.
    async with session.request(
        method,
        server.rest_url + path,
        data=body,
        headers=headers or {},
        skip_auto_headers={"Content-Type"},
    ) as response:
        text = await response.text()
        assert response.content_type in ("application/json", "application/octet-stream"), text
        return response.status, (await response.json() if text else None), response.headers


def assert_error(status: int, body: Any, http: int, code: str, words: str) -> None:
    assert status == http, body
    assert body["error"]["code"] == http
    assert body["error"]["status"] == code
    assert words in body["error"]["message"], body


async def backlog_setup(wire: Wire) -> tuple[str, str]:
    topic, sub = await wire.subscription()
    await wire.publish(topic, b"m1", b"m2")
    return topic, sub


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_cross_site_form_posts_are_refused_and_change_nothing(
    guarded: ReferenceServer,
    wire_factory: Any,
    session: aiohttp.ClientSession,
    content_type: str,
) -> None:
    wire = wire_factory(guarded.address)
    topic, sub = await backlog_setup(wire)
    attacks = [
        (f"/v1/{topic}:publish", b'{"messages": [{"data": "ZXZpbA=="}]}'),
        (f"/v1/{sub}:pull", b'{"maxMessages": 10}'),
        (f"/v1/{sub}:seek", b'{"time": "2999-01-01T00:00:00Z"}'),
        (f"/v1/{sub}:detach", b""),
    ]
    for path, body in attacks:
        # A form post sends no Origin in some browsers; the Content-Type alone refuses it.
        status, answer, _ = await send(
            session, guarded, "POST", path, body, {"Content-Type": content_type}
        )
        assert_error(status, answer, 415, "INVALID_ARGUMENT", "application/json")
    assert guarded.broker.backlog(sub) == 2  # nothing published, nor purged by a seek
    assert guarded.broker.counters(sub)["delivered"] == 0
    subscription = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert not subscription.detached


async def test_no_cors_fetch_from_another_origin_is_refused(
    guarded: ReferenceServer, wire_factory: Any, session: aiohttp.ClientSession
) -> None:
    # fetch(url, {method: "POST", mode: "no-cors"}): no Content-Type, no body, an Origin.
    wire = wire_factory(guarded.address)
    _, sub = await backlog_setup(wire)
    for origin in ("https://evil.example", "null", "http://localhost:9999"):
        status, answer, headers = await send(
            session, guarded, "POST", f"/v1/{sub}:detach", None, {"Origin": origin}
        )
        assert_error(status, answer, 403, "PERMISSION_DENIED", "Origin")
        assert "Access-Control-Allow-Origin" not in headers
    subscription = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert not subscription.detached


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8086", "127.0.0.1.evil.example", "10.0.0.1"]
)
async def test_a_foreign_host_is_refused(
    guarded: ReferenceServer, session: aiohttp.ClientSession, host: str
) -> None:
    # DNS rebinding: the attacker's name resolves to 127.0.0.1; the browser sends it as Host.
    status, answer, _ = await send(
        session, guarded, "GET", "/v1/projects/p1/topics", None, {"Host": host}
    )
    assert_error(status, answer, 403, "PERMISSION_DENIED", "not allowed")


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST:1234",
        "app.localhost",
        "127.0.0.2",
        "[::1]:8086",
        "pubsub.internal:8086",
    ],
)
async def test_loopback_and_configured_hosts_are_accepted(
    guarded: ReferenceServer, session: aiohttp.ClientSession, host: str
) -> None:
    status, answer, _ = await send(
        session, guarded, "GET", "/v1/projects/p1/topics", None, {"Host": host}
    )
    assert status == 200, answer


async def test_curl_like_clients_and_the_servers_own_pages_are_accepted(
    guarded: ReferenceServer, session: aiohttp.ClientSession
) -> None:
    topic = "projects/p1/topics/own-origin"
    # curl: JSON, no Origin.
    status, answer, _ = await send(
        session, guarded, "PUT", f"/v1/{topic}", b"{}", {"Content-Type": "application/json"}
    )
    assert status == 200, answer
    # A body-less GET/DELETE needs no Content-Type.
    status, answer, _ = await send(session, guarded, "GET", f"/v1/{topic}")
    assert status == 200, answer
    # A page the server serves itself: its origin is the door's own.
    own = f"http://{guarded.rest_address}"
    status, answer, headers = await send(
        session,
        guarded,
        "POST",
        f"/v1/{topic}:publish",
        b'{"messages": [{"data": "aGk="}]}',
        {"Content-Type": "application/json; charset=utf-8", "Origin": own},
    )
    assert status == 200, answer
    assert "Access-Control-Allow-Origin" not in headers  # same origin: no CORS needed


async def test_an_allowed_origin_gets_cors_and_preflight_answers(
    guarded: ReferenceServer, session: aiohttp.ClientSession
) -> None:
    status, _, headers = await send(
        session,
        guarded,
        "OPTIONS",
        "/v1/projects/p1/topics/t-cors:publish",
        None,
        {
            "Origin": DASHBOARD,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == DASHBOARD
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert "Content-Type" in headers["Access-Control-Allow-Headers"]
    status, answer, headers = await send(
        session,
        guarded,
        "PUT",
        "/v1/projects/p1/topics/t-cors",
        b"{}",
        {"Content-Type": "application/json", "Origin": DASHBOARD},
    )
    assert status == 200, answer
    assert headers["Access-Control-Allow-Origin"] == DASHBOARD
    # Errors carry CORS headers too, so the page can read them.
    status, answer, headers = await send(
        session,
        guarded,
        "GET",
        "/v1/projects/p1/topics/missing-topic",
        None,
        {"Origin": DASHBOARD},
    )
    assert status == 404
    assert headers["Access-Control-Allow-Origin"] == DASHBOARD
    # A preflight from a site not on the list is refused.
    status, answer, _ = await send(
        session,
        guarded,
        "OPTIONS",
        "/v1/projects/p1/topics/t-cors:publish",
        None,
        {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert_error(status, answer, 403, "PERMISSION_DENIED", "Origin")


async def test_a_body_without_content_type_is_refused(
    guarded: ReferenceServer, session: aiohttp.ClientSession
) -> None:
    status, answer, _ = await send(session, guarded, "PUT", "/v1/projects/p1/topics/t-ct", b"{}")
    assert_error(status, answer, 415, "INVALID_ARGUMENT", "application/json")


async def test_the_bound_address_is_an_accepted_host() -> None:
    # A door bound to one address answers requests naming it (a wildcard bind does not
    # accept every name: --allow-host says which).
    policy = BrowserPolicy.of().with_host("192.0.2.7")
    assert policy.host_refusal("192.0.2.7:8086") is None
    assert policy.host_refusal("192.0.2.8:8086") is not None
    assert BrowserPolicy.of().with_host("0.0.0.0").allowed_hosts == frozenset()
    assert host_name("[::1]:8086") == "::1"
    assert host_name("Example.COM.:80") == "example.com"
