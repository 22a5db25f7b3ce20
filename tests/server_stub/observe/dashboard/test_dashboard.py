"""The dashboard over HTTP (aiohttp as the browser): pages, peek, actions, and the door's
protections around it. The real browser test is test_browser.py."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from typing import Any

import aiohttp
import pytest
from support.processes import eoclient_serve

import eoclient
from eoclient.admin import SchemaType
from eoclient.server_stub.access.security import DoorSecurity
from eoclient.server_stub.access.tokens import TokenTable
from eoclient.server_stub.server import ReferenceServer, run_server

TOPIC = "projects/shop/topics/orders"
SUB = "projects/shop/subscriptions/billing"
OTHER_SUB = "projects/other/subscriptions/audit"


async def _fill(server: ReferenceServer, count: int = 5) -> list[str]:
    async with eoclient.AdminClient(server.address) as admin:
        await admin.create_topic(TOPIC)
        await admin.create_subscription(SUB, TOPIC, enable_exactly_once_delivery=True)
        await admin.create_topic("projects/other/topics/audit")
        await admin.create_subscription(OTHER_SUB, "projects/other/topics/audit")
    async with eoclient.PublisherClient(server.address) as publisher:
        return [
            await publisher.publish(TOPIC, f"<img src=x onerror=alert({n})>".encode(), k="<b>")
            for n in range(count)
        ]


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _text(http: aiohttp.ClientSession, url: str, **params: str) -> str:
    async with http.get(url, params=params) as answer:
        assert answer.status == 200, await answer.text()
        assert answer.headers["Content-Type"].startswith("text/html")
        return await answer.text()


async def _action(
    http: aiohttp.ClientSession, server: ReferenceServer, **body: str
) -> tuple[int, Any]:
    async with http.post(f"{server.rest_url}/dashboard/action", json=body) as answer:
        return answer.status, await answer.json()


def _backlog(page: str) -> list[int]:
    return [int(n) for n in re.findall(r"<td class='n backlog'>(\d+)</td>", page)]


async def test_overview_lists_topics_and_subscriptions_with_backlog(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    await _fill(server)
    server.dashboard.sample()
    page = await _text(http, server.rest_url + "/")
    assert TOPIC in page
    assert SUB in page
    assert "exactly-once" in page
    assert _backlog(page) == [0, 5]  # by name: other/audit, shop/billing
    server.dashboard.sample()
    assert "<svg" in await _text(http, server.rest_url + "/")  # two samples: a chart


async def test_user_data_is_escaped(server: ReferenceServer, http: aiohttp.ClientSession) -> None:
    await _fill(server, 1)
    page = await _text(http, f"{server.rest_url}/dashboard/subscription", name=SUB)
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(0)&gt;" in page
    assert "k=&lt;b&gt;" in page


async def test_peek_takes_no_lease(server: ReferenceServer, http: aiohttp.ClientSession) -> None:
    ids = await _fill(server, 3)
    page = await _text(http, f"{server.rest_url}/dashboard/subscription", name=SUB)
    for message_id in ids:
        assert f"<code>{message_id}</code>" in page
    async with eoclient.SubscriberClient(server.address) as client:
        pulled = await client.pull(SUB, 10)
        assert sorted(m.message_id for m in pulled) == sorted(ids)  # all still there
        assert all(m.delivery_attempt in (None, 0, 1) for m in pulled)
        page = await _text(http, f"{server.rest_url}/dashboard/subscription", name=SUB)
        assert page.count(">leased<") == 3
        for message in pulled:
            await message.ack_with_response()


async def test_actions_skip_seek_purge_and_detach(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    ids = await _fill(server, 4)
    status, answer = await _action(
        http, server, action="skip", subscription=SUB, message_ids=f"{ids[0]}, {ids[1]} 999"
    )
    assert status == 200, answer
    assert answer["message"] == f"Skipped — {ids[0]}: SKIPPED, {ids[1]}: SKIPPED, 999: NOT_FOUND"
    assert server.broker.backlog(SUB) == 2
    status, answer = await _action(http, server, action="purge", subscription=SUB)
    assert (status, server.broker.backlog(SUB)) == (200, 0)
    status, answer = await _action(
        http, server, action="seek-time", subscription=SUB, time="2020-01-01T00:00:00"
    )
    assert status == 200, answer  # nothing retained that old: the backlog stays empty
    assert server.broker.backlog(SUB) == 0
    async with eoclient.AdminClient(server.address) as admin:
        await admin.create_subscription(
            "projects/shop/subscriptions/replay", TOPIC, retain_acked_messages=True
        )
        await admin.create_snapshot(
            "projects/shop/snapshots/before", "projects/shop/subscriptions/replay"
        )
    async with eoclient.PublisherClient(server.address) as publisher:
        await publisher.publish(TOPIC, b"after the snapshot")
    page = await _text(
        http, f"{server.rest_url}/dashboard/subscription", name="projects/shop/subscriptions/replay"
    )
    assert "<option>projects/shop/snapshots/before</option>" in page
    await _action(http, server, action="purge", subscription="projects/shop/subscriptions/replay")
    assert server.broker.backlog("projects/shop/subscriptions/replay") == 0
    status, answer = await _action(
        http,
        server,
        action="seek-snapshot",
        subscription="projects/shop/subscriptions/replay",
        snapshot="projects/shop/snapshots/before",
    )
    assert status == 200, answer
    assert server.broker.backlog("projects/shop/subscriptions/replay") == 1
    status, answer = await _action(http, server, action="detach", subscription=SUB)
    assert status == 200, answer
    assert server.broker.subscriptions.get(SUB).config.detached


async def test_bad_actions_get_clear_errors_and_change_nothing(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    await _fill(server, 2)
    status, answer = await _action(
        http, server, action="seek-time", subscription=SUB, time="yesterday"
    )
    assert status == 400
    assert "Not a date and time" in answer["error"]["message"]
    status, answer = await _action(http, server, action="explode", subscription=SUB)
    assert status == 400
    assert "Unknown dashboard action" in answer["error"]["message"]
    status, answer = await _action(
        http, server, action="purge", subscription="projects/shop/subscriptions/nope"
    )
    assert status == 404
    assert server.broker.backlog(SUB) == 2


async def test_cross_site_requests_are_refused(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    await _fill(server, 2)
    url = f"{server.rest_url}/dashboard/action"
    # A form another site posts (a "simple request", no preflight): wrong Content-Type.
    form = {"action": "purge", "subscription": SUB}
    async with http.post(url, data=form, headers={"Origin": "https://evil.example"}) as answer:
        assert answer.status in (403, 415)
    async with http.post(url, json=form, headers={"Origin": "https://evil.example"}) as answer:
        assert answer.status == 403
    # Another site's page cannot read the dashboard either (no CORS for it).
    async with http.get(
        server.rest_url + "/", headers={"Origin": "https://evil.example"}
    ) as answer:
        assert answer.status == 403
    # DNS rebinding: a foreign Host.
    async with http.get(server.rest_url + "/", headers={"Host": "attacker.example"}) as answer:
        assert answer.status == 403
    assert server.broker.backlog(SUB) == 2


async def test_with_tokens_the_dashboard_needs_one_and_shows_its_projects_only(
    http: aiohttp.ClientSession,
) -> None:
    tokens = TokenTable.parse("shop-token shop\nadmin-token *\n")
    async with run_server(security=DoorSecurity(tokens=tokens)) as server:
        admin = {"Authorization": "Bearer admin-token"}
        for topic, sub in ((TOPIC, SUB), ("projects/other/topics/audit", OTHER_SUB)):
            async with http.put(f"{server.rest_url}/v1/{topic}", json={}, headers=admin) as a:
                assert a.status == 200
            async with http.put(
                f"{server.rest_url}/v1/{sub}", json={"topic": topic}, headers=admin
            ) as a:
                assert a.status == 200
        async with http.get(server.rest_url + "/") as answer:
            assert answer.status == 401
        page = await _text(http, server.rest_url + "/", access_token="shop-token")
        assert SUB in page
        assert OTHER_SUB not in page
        # Links carry the token on.
        assert "access_token=shop-token" in page
        async with http.get(
            f"{server.rest_url}/dashboard/subscription",
            params={"name": OTHER_SUB, "access_token": "shop-token"},
        ) as answer:
            assert answer.status == 403
        async with http.post(
            f"{server.rest_url}/dashboard/action",
            json={"action": "purge", "subscription": OTHER_SUB},
            headers={"Authorization": "Bearer shop-token"},
        ) as answer:
            assert answer.status == 403


# ------------------------------------------------------------------ the door and the pages


class _Tables(HTMLParser):
    """Each table's rows, as the kinds of their cells (``th`` / ``td``)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append((dict(attrs).get("id") or "", []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("th", "td") and self.tables and self.tables[-1][1]:
            self.tables[-1][1][-1].append(tag)


def _columns_without_header(page: str) -> list[str]:
    """Tables with a column no header names: a grid whose first row is not all headers,
    or a row wider than it; a facts table whose row does not start with its header."""
    parser = _Tables()
    parser.feed(page)
    problems = []
    for table_id, rows in parser.tables:
        if all(row[:1] == ["th"] and row.count("th") == 1 for row in rows):
            continue  # facts: (header, value) per row
        head, *body = rows
        if set(head) != {"th"} or any(len(row) > len(head) for row in body):
            problems.append(table_id)
    return problems


async def test_the_dashboard_answers_at_its_own_path(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    await _fill(server, 1)
    for path in ("/dashboard", "/dashboard/", "/"):
        page = await _text(http, server.rest_url + path)
        assert "<title>Topics and subscriptions · eoclient</title>" in page, path
    # Its links stay under /dashboard.
    assert "href='/dashboard'" in page
    assert "href='/dashboard/subscription?name=" in page


async def test_failed_exactly_once_acks_by_reason_and_redeliveries(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    ids = await _fill(server, 3)
    server.inject_ack_failure(SUB, ids[0], "PERMANENT_FAILURE_INVALID_ACK_ID")
    async with eoclient.SubscriberClient(server.address) as client:
        first = await client.pull(SUB, 3)
        by_id = {m.message_id: m for m in first}
        assert await by_id[ids[0]].ack_with_response() is eoclient.AcknowledgeStatus.INVALID_ACK_ID
        await by_id[ids[1]].nack_with_response()
        again = await client.pull(SUB, 3)
        assert [m.message_id for m in again] == [ids[1]]
        for message in again:
            await message.ack_with_response()
    page = await _text(http, f"{server.rest_url}/dashboard/subscription", name=SUB)
    failures = re.search(r"<table id=ack-failures>.*?</table>", page)
    assert failures is not None, page
    assert "<code>PERMANENT_FAILURE_INVALID_ACK_ID</code>" in failures[0]
    assert "<td>Acknowledge</td>" in failures[0]
    assert "<td class=n>1</td>" in failures[0]
    assert "1 delivery of a message delivered before" in page
    # A plain subscription says why nothing fails there.
    page = await _text(http, f"{server.rest_url}/dashboard/subscription", name=OTHER_SUB)
    assert "Exactly-once delivery is off" in page


async def test_the_topic_page_shows_retention_and_backlog_policies(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    await _fill(server, 2)
    async with eoclient.AdminClient(server.address) as admin:
        await admin.update_topic(TOPIC, message_retention_duration=datetime.timedelta(days=2))
        await admin.set_topic_retention(
            TOPIC, time=datetime.timedelta(days=7), size_bytes=10 * 2**20
        )
        await admin.set_topic_backlog_quota(TOPIC, limit_bytes=2**20)
        await admin.set_topic_message_ttl(TOPIC, datetime.timedelta(hours=1))
    page = await _text(http, f"{server.rest_url}/dashboard/topic", name=TOPIC)
    policies = re.search(r"<table id=policies class=facts>.*?</table>", page)
    assert policies is not None, page
    text = " ".join(re.sub(r"<[^>]+>", " ", policies[0]).split())
    assert "message retention 2d" in text
    assert "every message, acknowledged or not, for 7d, up to 10.0 MiB" in text
    assert "1.0 MiB per subscription: publishes wait (up to 30s)" in text
    assert "1h (then acknowledged for every subscription)" in text
    # Units on the numbers: requests, messages, bytes.
    assert "2 messages" in page
    assert "2 requests" in page
    assert re.search(r"<td class=n>\d+ B</td>", page)


async def test_snapshots_and_schemas_are_listed(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    await _fill(server, 1)
    page = await _text(http, server.rest_url + "/dashboard")
    assert "id=no-snapshots" in page
    assert "id=no-schemas" in page
    async with eoclient.AdminClient(server.address) as admin:
        await admin.create_snapshot("projects/shop/snapshots/before", SUB)
        await admin.create_schema(
            "projects/shop",
            "order",
            SchemaType.AVRO,
            '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}',
        )
    page = await _text(http, server.rest_url + "/dashboard")
    assert "<tr data-name='projects/shop/snapshots/before'>" in page
    assert "<tr data-name='projects/shop/schemas/order'>" in page
    assert "<td>AVRO</td>" in page
    topic_page = await _text(http, f"{server.rest_url}/dashboard/topic", name=TOPIC)
    assert "snapshots/<wbr></span><b>before</b>" in topic_page


async def test_every_column_has_a_header_and_times_read_as_the_cli_writes_them(
    server: ReferenceServer, http: aiohttp.ClientSession
) -> None:
    await _fill(server, 2)
    async with eoclient.AdminClient(server.address) as admin:
        await admin.create_snapshot("projects/shop/snapshots/before", SUB)
    server.dashboard.sample()
    pages = {
        "overview": await _text(http, server.rest_url + "/dashboard"),
        "topic": await _text(http, f"{server.rest_url}/dashboard/topic", name=TOPIC),
        "subscription": await _text(http, f"{server.rest_url}/dashboard/subscription", name=SUB),
    }
    for kind, page in pages.items():
        assert _columns_without_header(page) == [], kind
        assert "+00:00" not in page, kind
    assert re.search(r"<td>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ</td>", pages["subscription"])
    assert re.search(r"<td>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ</td>", pages["overview"])
    assert "<th>state</th>" in pages["subscription"]  # the peek's last column


def test_eoclient_serve_names_the_dashboard_when_it_starts_and_in_its_help() -> None:
    with eoclient_serve() as serve:
        url = serve.wait_for(r"dashboard on (http://\S+/dashboard)\n").group(1)
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200
            assert "Topics and subscriptions" in answer.read().decode()
    help_text = subprocess.run(
        [sys.executable, "-m", "eoclient.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "dashboard" in help_text
    assert "/dashboard" in help_text
