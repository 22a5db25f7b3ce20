"""Fixtures of the access tests: a private certificate authority, and a reference server
that serves both doors over TLS and wants a bearer token on every call."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from eoclient.server_stub.access.security import DoorSecurity, TlsFiles
from eoclient.server_stub.access.tokens import TokenTable
from eoclient.server_stub.server import ReferenceServer, run_server

from .tls_support import TOKENS, Certificates, make_certificates


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def secured(certificates: Certificates) -> AsyncIterator[ReferenceServer]:
    security = DoorSecurity(
        tls=TlsFiles(certificates.cert_file, certificates.key_file),
        tokens=TokenTable.parse(TOKENS),
    )
    async with run_server(security=security) as server:
        yield server
