"""Scraping a reference server's /metrics as Prometheus would, for the metrics tests."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from eoclient.server_stub.server import ReferenceServer

# A sample: (sample name, sorted label pairs).
Key = tuple[str, tuple[tuple[str, str], ...]]


class Scrape:
    """One scrape, parsed by prometheus_client's own parser: samples and family types."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[Key, float] = {}
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                assert key not in self.samples, f"duplicate sample {key}"
                self.samples[key] = sample.value

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name`` with exactly ``labels`` (KeyError if there is none)."""
        return self.samples[(name, tuple(sorted(labels.items())))]

    def of(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample named ``name``, by labels."""
        return {labels: value for (sample, labels), value in self.samples.items() if sample == name}

    def subscription(self, name: str, subscription: str, topic: str, **labels: str) -> float:
        return self.value(name, subscription=subscription, topic=topic, **labels)


async def scrape_text(
    srv: ReferenceServer,
    headers: Mapping[str, str] | None = None,
    *,
    status: int = 200,
    method: str = "GET",
) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"{srv.rest_url}/metrics", headers=dict(headers or {})) as response,
    ):
        text = await response.text()
        assert response.status == status, text
        return text


async def scrape(srv: ReferenceServer, headers: Mapping[str, str] | None = None) -> Scrape:
    return Scrape(await scrape_text(srv, headers))
