"""A BigQuery stand-in on a DuckDB file in the test's own directory, and message makers."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from eoclient.server_stub.bigquery import BigQueryStandIn, parse_schema
from eoclient.server_stub.core.model import StoredMessage

PUBLISH_TIME = 1_714_564_800.25  # 2024-05-01T12:00:00.25Z


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[BigQueryStandIn]:
    store = BigQueryStandIn(tmp_path / "bigquery.duckdb")
    store.create_dataset("ds")
    yield store
    store.close()


def make_table(store: BigQueryStandIn, table: str, fields: Any, key: tuple[str, ...] = ()) -> None:
    store.create_table("ds", table, parse_schema(fields, key))


def message(
    message_id: str,
    data: bytes | Mapping[str, Any],
    attributes: Mapping[str, str] | None = None,
    ordering_key: str = "",
) -> StoredMessage:
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    return StoredMessage(
        message_id, body, dict(attributes or {}), ordering_key, PUBLISH_TIME, len(body)
    )


def rows(store: BigQueryStandIn, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in store.query(sql).rows]
