"""Cloud Storage subscriptions over the REST door (it shares the handlers): create, the
state in camelCase JSON, an update mask, a limit refused with 400 INVALID_ARGUMENT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from eoclient.server_stub.server import run_server


async def test_cloud_storage_over_rest(tmp_path: Path) -> None:
    async with run_server(buckets_dir=tmp_path / "buckets") as server:
        assert server.buckets is not None
        await server.buckets.create_bucket("over-rest")
        base = f"{server.rest_url}/v1/projects/rest-exports"
        async with aiohttp.ClientSession() as http:

            async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
                async with http.request(method, base + path, json=body) as answer:
                    return answer.status, await answer.json()

            assert (await call("PUT", "/topics/events", {}))[0] == 200
            config = {"bucket": "over-rest", "filenamePrefix": "e/", "maxMessages": "1000"}
            status, created = await call(
                "PUT",
                "/subscriptions/events-gcs",
                {"topic": "projects/rest-exports/topics/events", "cloudStorageConfig": config},
            )
            assert status == 200, created
            assert created["cloudStorageConfig"] == {**config, "state": "ACTIVE"}
            status, updated = await call(
                "PATCH",
                "/subscriptions/events-gcs",
                {
                    "subscription": {"cloudStorageConfig": {"bucket": "gone", "avroConfig": {}}},
                    "updateMask": "cloudStorageConfig",
                },
            )
            assert status == 200, updated
            assert updated["cloudStorageConfig"] == {
                "bucket": "gone",
                "avroConfig": {},
                "state": "NOT_FOUND",
            }
            status, refused = await call(
                "PATCH",
                "/subscriptions/events-gcs",
                {
                    "subscription": {"cloudStorageConfig": {"bucket": "gone", "maxBytes": "5"}},
                    "updateMask": "cloudStorageConfig",
                },
            )
            assert status == 400
            assert refused["error"]["status"] == "INVALID_ARGUMENT"
            assert "max_bytes" in refused["error"]["message"]
