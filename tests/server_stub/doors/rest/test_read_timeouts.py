"""A request that stops half-way is answered 408 (or closed) within seconds, and its
connection and descriptor are released (doors/rest/read_timeouts.py); what is not a
request being read (a keep-alive connection between requests) is left alone.

These wait the real deadlines (5 s), all connections at once: about 6 s in all.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator

import pytest

from eoclient.server_stub.doors.rest.read_timeouts import (
    BODY_IDLE_TIMEOUT,
    HEAD_TIMEOUT,
    Reading,
    ReadWatch,
)
from eoclient.server_stub.server import ReferenceServer, run_server

pytestmark = pytest.mark.slow

# Generous: the deadline plus what a loaded machine adds; far below "never".
SLACK = 10.0
TOPIC = "projects/p/topics/timeouts"
HEAD = (
    f"POST /v1/{TOPIC}:publish HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
).encode()

HALF_SENT = {
    "headers without the blank line": HEAD,
    "a body shorter than its Content-Length": HEAD + b'Content-Length: 100\r\n\r\n{"messages": [',
    "a chunked body without its last chunk": HEAD
    + b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"mes\r\n',
    "nothing at all": b"",
}


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _half_sent(port: int, sent: bytes) -> tuple[float, bytes]:
    """Send ``sent`` and nothing more; (seconds until the server closed, what it sent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    try:
        writer.write(sent)
        await writer.drain()
        async with asyncio.timeout(HEAD_TIMEOUT + BODY_IDLE_TIMEOUT + SLACK):
            answer = await reader.read()  # to EOF: the server closes
        return time.monotonic() - started, answer
    finally:
        writer.close()


async def _keeps_alive(port: int) -> list[int]:
    """Two requests on one connection, the second after more than the head timeout."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    statuses = []
    try:
        for pause in (0.0, HEAD_TIMEOUT + 1):
            await asyncio.sleep(pause)
            writer.write(b"GET /v1/projects/p/topics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            status = await reader.readline()
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            await reader.readexactly(int(headers["content-length"]))
            statuses.append(int(status.split()[1]))
    finally:
        writer.close()
    return statuses


async def test_half_sent_requests_are_answered_and_released(server: ReferenceServer) -> None:
    port = int(server.rest_url.rsplit(":", 1)[1])
    baseline = _open_descriptors()
    cases = list(HALF_SENT.items()) * 25  # 100 connections held at once
    results, kept = await asyncio.gather(
        asyncio.gather(*(_half_sent(port, sent) for _, sent in cases)),
        _keeps_alive(port),
    )
    for (case, _), (seconds, answer) in zip(cases, results, strict=True):
        assert seconds < HEAD_TIMEOUT + BODY_IDLE_TIMEOUT + SLACK, case
        assert answer.startswith(b"HTTP/1.1 408 "), (case, answer[:200])
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == 408, case
        assert "not received in time" in error["message"], case
    # A connection between two requests is no request stopped half-way.
    assert kept == [200, 200]
    # Every connection is gone on the server's side too: the descriptors are back.
    for _ in range(int(SLACK / 0.05)):
        if _open_descriptors() <= baseline:
            break
        await asyncio.sleep(0.05)
    assert _open_descriptors() <= baseline


def test_the_watch_bounds_the_head_and_each_pause_in_a_body() -> None:
    watch = ReadWatch(100.0, head_timeout=5, body_idle_timeout=5, body_timeout=60)
    assert (watch.reading, watch.deadline) == (Reading.HEAD, 105.0)  # from the opening
    assert watch.expired(104.9) is None
    assert watch.expired(105.0) is Reading.HEAD
    watch.bytes_arrived(101.0)  # bytes of the head: its deadline stays
    assert watch.deadline == 105.0
    watch.body_expected(102.0)
    assert (watch.reading, watch.deadline) == (Reading.BODY, 107.0)
    watch.bytes_arrived(106.0)  # body bytes: 5 s more, up to 60 s in all
    assert watch.deadline == 111.0
    for now in range(110, 170, 4):
        watch.bytes_arrived(float(now))
    assert watch.deadline == 162.0  # a trickle does not hold it past the whole-body bound
    watch.request_read()
    assert (watch.reading, watch.deadline, watch.expired(1e9)) == (Reading.IDLE, None, None)
    watch.bytes_arrived(200.0)  # the next request's first byte
    assert (watch.reading, watch.deadline) == (Reading.HEAD, 205.0)
