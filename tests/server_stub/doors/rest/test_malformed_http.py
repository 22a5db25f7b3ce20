"""Requests the REST door's HTTP layer cannot parse (doors/rest/malformed.py): each is
answered 400 in Google's JSON error format, naming the problem, and logged in one line at
INFO — no ERROR, no traceback (aiohttp's own answer is a plain-text 400 and an ERROR
traceback per request)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from eoclient.server_stub.server import ReferenceServer

HOST = b"Host: 127.0.0.1\r\n"
MALFORMED = {
    "request line over 8,190 bytes": (
        b"GET /v1/projects/p/topics/" + b"a" * 9000 + b" HTTP/1.1\r\n" + HOST + b"\r\n",
        "Got more than 8190 bytes",
    ),
    "unknown method": (
        b"FOO /v1/projects/p/topics HTTP/1.1\r\n" + HOST + b"\r\n",
        "Invalid method",
    ),
    "bad Content-Length": (
        b"POST /v1/projects/p/topics/t:publish HTTP/1.1\r\n" + HOST
        + b"Content-Length: abc\r\n\r\n{}",
        "Content-Length",
    ),
    "bad chunk size": (
        b"POST /v1/projects/p/topics/t:publish HTTP/1.1\r\n" + HOST
        + b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        + b"zz\r\n{}\r\n0\r\n\r\n",
        "chunk size",
    ),
    "header over 8,190 bytes": (
        b"GET /v1/projects/p/topics HTTP/1.1\r\n" + HOST + b"X-Big: " + b"b" * 9000 + b"\r\n\r\n",
        "Got more than 8190 bytes",
    ),
    "TLS on the plain port": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03junk\r\n\r\n", "HTTPS"),
}  # fmt: skip


async def exchange(server: ReferenceServer, raw: bytes, *, close_after: float = 0.0) -> bytes:
    host, port = server.rest_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(raw)
        await writer.drain()
        if close_after:
            await asyncio.sleep(close_after)
            writer.close()
            return b""
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_malformed_http_gets_a_json_error_and_one_info_line(
    reference: ReferenceServer, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    raw, named = MALFORMED[case]
    caplog.set_level(logging.DEBUG)
    answer = await exchange(reference, raw)
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *headers = head.decode("latin-1").split("\r\n")
    assert status_line.split()[1] == "400", answer[:300]
    assert "content-type: application/json; charset=utf-8" in [h.lower() for h in headers]
    error = json.loads(body)["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"].startswith("The request is not valid HTTP: ")
    assert named in error["message"]
    assert "\n" not in error["message"]
    assert problems(caplog) == []
    lines = [
        r for r in caplog.records if r.name.startswith("eoclient") and r.levelno >= logging.INFO
    ]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.INFO
    assert "malformed HTTP request" in lines[0].getMessage()


async def test_a_body_cut_short_by_the_client_is_one_info_line(
    reference: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    raw = (
        b"POST /v1/projects/p/topics/t:publish HTTP/1.1\r\n" + HOST
        + b"Content-Length: 100\r\nContent-Type: application/json\r\n\r\n{}"
    )  # fmt: skip
    await exchange(reference, raw, close_after=0.2)
    for _ in range(100):  # the door notices when the connection's end reaches it
        if any("closed the connection" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.02)
    assert problems(caplog) == []
    [line] = [r for r in caplog.records if "closed the connection" in r.getMessage()]
    assert line.levelno == logging.INFO


async def test_the_connection_after_a_good_request_still_serves(reference: ReferenceServer) -> None:
    """A sanity check that the door's server is the usual one for well-formed requests."""
    answer = await exchange(
        reference,
        b"GET /v1/projects/p/topics HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {}
