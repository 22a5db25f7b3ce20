"""Fixtures of the Spark tests (see ``_server.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._server import ThreadedServer


@pytest.fixture(scope="module")
def spark_server() -> Iterator[ThreadedServer]:
    server = ThreadedServer()
    try:
        yield server
    finally:
        server.close()
