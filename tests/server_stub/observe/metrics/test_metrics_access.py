"""Who may scrape /metrics: the REST door's browser rules and bearer tokens apply.

A Prometheus scraper sends no Origin and a loopback (or ``--allow-host``) Host, so it is
let in; a page of another site is not. With a token file, a scrape needs a token, and a
token limited to some projects sees only their series.
"""

from __future__ import annotations

import json

import aiohttp

from eoclient.server_stub import run_server
from eoclient.server_stub.access.security import BrowserPolicy, DoorSecurity
from eoclient.server_stub.access.tokens import TokenTable
from eoclient.server_stub.core import SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer

from .support import Scrape, scrape, scrape_text

TOKENS = """\
team-a-token   team-a
admin-token    *
"""


def create(srv: ReferenceServer, project: str) -> None:
    topic, sub = f"projects/{project}/topics/topic", f"projects/{project}/subscriptions/sub"
    srv.broker.topics.create(TopicConfig(topic))
    srv.broker.subscriptions.create(SubscriptionConfig(sub, topic))


def projects_in(metrics: Scrape) -> set[str]:
    return {
        value.split("/")[1]
        for _, labels in metrics.samples
        for key, value in labels
        if key in ("topic", "subscription")
    }


async def test_tokens_are_required_and_limit_what_is_seen() -> None:
    async with run_server(security=DoorSecurity(tokens=TokenTable.parse(TOKENS))) as srv:
        create(srv, "team-a")
        create(srv, "team-b")
        body = json.loads(await scrape_text(srv, status=401))
        assert body["error"]["status"] == "UNAUTHENTICATED"
        await scrape_text(srv, {"Authorization": "Bearer wrong"}, status=401)

        admin = await scrape(srv, {"Authorization": "Bearer admin-token"})
        assert projects_in(admin) == {"team-a", "team-b"}
        assert "process_cpu_seconds" in admin.types or "python_info" in admin.types

        team_a = await scrape(srv, {"Authorization": "Bearer team-a-token"})
        assert projects_in(team_a) == {"team-a"}
        assert not any(name.startswith(("process_", "python_")) for name in team_a.types)
        # Google's access_token query parameter works as for every REST call.
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{srv.rest_url}/metrics?access_token=team-a-token") as response,
        ):
            assert response.status == 200
            assert projects_in(Scrape(await response.text())) == {"team-a"}


async def test_browser_rules_apply_and_only_get_is_served() -> None:
    async with run_server(
        security=DoorSecurity(browser=BrowserPolicy.of(["metrics.internal"]))
    ) as srv:
        create(srv, "team-a")
        body = json.loads(await scrape_text(srv, {"Origin": "https://evil.example"}, status=403))
        assert "Origin" in body["error"]["message"]
        await scrape_text(srv, {"Host": "attacker.example"}, status=403)
        assert projects_in(await scrape(srv, {"Host": "metrics.internal:9999"})) == {"team-a"}
        body = json.loads(
            await scrape_text(srv, {"Content-Type": "application/json"}, method="POST", status=405)
        )
        assert "GET, HEAD" in body["error"]["message"]
        await scrape_text(srv, method="HEAD")


async def test_openmetrics_is_served_when_asked_for() -> None:
    async with run_server() as srv:
        create(srv, "team-a")
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{srv.rest_url}/metrics",
                headers={"Accept": "application/openmetrics-text; version=1.0.0"},
            ) as response,
        ):
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            text = await response.text()
        assert text.endswith("# EOF\n")
        assert "pubsub_subscription_num_undelivered_messages{" in text


async def test_servers_in_one_process_do_not_mix() -> None:
    async with run_server() as first, run_server() as second:
        create(first, "only-first")
        create(second, "only-second")
        assert projects_in(await scrape(first)) == {"only-first"}
        assert projects_in(await scrape(second)) == {"only-second"}


async def test_without_a_rest_door_there_is_no_metrics_route() -> None:
    async with run_server(rest_port=None) as srv:
        assert b'topic="' not in srv.metrics.render(None, None)[0]  # readable in-process
        create(srv, "proj-p")
        assert b'topic="projects/proj-p/topics/topic"' in srv.metrics.render(None, None)[0]
