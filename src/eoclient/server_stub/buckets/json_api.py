"""Buckets through the Cloud Storage JSON API at ``STORAGE_EMULATOR_HOST`` (aiohttp).

``STORAGE_EMULATOR_HOST`` is the variable Google's own client libraries read to talk to a
Cloud Storage emulator instead of the service (``gcp-storage-emulator``, fake-gcs-server):
``host:port`` or a URL (``http://host:port``); a value without a scheme is plain HTTP, as
the libraries read it. No credentials are sent: this is for emulators, not for the service.

The calls (Cloud Storage JSON API v1): ``GET /storage/v1/b/{bucket}`` (exists),
``POST /storage/v1/b`` (create), ``POST /upload/storage/v1/b/{bucket}/o?uploadType=media``
(a write: one request streaming the file or the chunks, so the object appears whole when
the upload completes), ``GET /storage/v1/b/{bucket}/o`` with ``prefix`` and ``pageToken``
(every page of a listing), ``GET .../o/{object}`` (its metadata) and ``?alt=media`` (its
content). Object names travel percent-encoded, ``/`` included.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from eoclient.server_stub.buckets.model import (
    DEFAULT_CONTENT_TYPE,
    READ_CHUNK_BYTES,
    BucketError,
    BucketNotFound,
    ObjectInfo,
    ObjectNotFound,
    check_bucket_name,
    check_object_name,
)

ENVIRONMENT_VARIABLE = "STORAGE_EMULATOR_HOST"
# The project a bucket is created in (an emulator keeps it as metadata only).
DEFAULT_PROJECT = "eoclient"
# A call that gets no answer in this long fails (an upload streams for as long as it needs).
CONNECT_TIMEOUT_SECONDS = 30.0


def endpoint_url(value: str) -> str:
    """``STORAGE_EMULATOR_HOST``'s value as a base URL (plain HTTP when it has no scheme)."""
    value = value.strip().rstrip("/")
    if "://" not in value:
        value = f"http://{value}"
    return value


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _created(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp() if value else 0.0


def object_info(resource: Mapping[str, Any]) -> ObjectInfo:
    return ObjectInfo(
        bucket=str(resource.get("bucket", "")),
        name=str(resource.get("name", "")),
        size=int(resource.get("size") or 0),
        created=_created(str(resource.get("timeCreated") or "")),
        generation=int(resource.get("generation") or 0),
        content_type=str(resource.get("contentType") or DEFAULT_CONTENT_TYPE),
    )


class JsonApiBuckets:
    """Buckets of the Cloud Storage JSON API at ``base_url`` (see ``endpoint_url``)."""

    def __init__(self, base_url: str, *, project: str = DEFAULT_PROJECT) -> None:
        self.base_url = endpoint_url(base_url)
        self.project = project
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    def from_environment(cls) -> JsonApiBuckets | None:
        """A store for ``STORAGE_EMULATOR_HOST``, or None when it is not set."""
        value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
        return cls(value) if value else None

    def __repr__(self) -> str:
        return f"<JsonApiBuckets {self.base_url}>"

    def describe(self) -> str:
        return f"the Cloud Storage JSON API at {self.base_url} ({ENVIRONMENT_VARIABLE})"

    def _session(self) -> aiohttp.ClientSession:
        # Made in the loop that first uses it (a store may be built before the loop runs).
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS)
            self._http = aiohttp.ClientSession(timeout=timeout)
        return self._http

    async def aclose(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    def _url(self, path: str, **query: str) -> str:
        url = f"{self.base_url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        return url

    async def _json(self, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
        try:
            async with self._session().request(method, url, **kwargs) as response:
                body = await response.read()
                status = response.status
        except aiohttp.ClientError as error:
            raise BucketError(f"{method} {url}: {type(error).__name__}: {error}") from error
        if status >= 300:
            return status, body.decode(errors="replace")[:500]
        if not body:
            return status, {}
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode(errors="replace")[:500]

    # ----------------------------------------------------------- buckets

    async def exists(self, bucket: str) -> bool:
        check_bucket_name(bucket)
        status, body = await self._json("GET", self._url(f"/storage/v1/b/{bucket}"))
        if status == 404:
            return False
        if status >= 300:
            raise BucketError(f"bucket {bucket!r}: HTTP {status}: {body}")
        return True

    async def create_bucket(self, bucket: str, *, exist_ok: bool = False) -> None:
        check_bucket_name(bucket)
        url = self._url("/storage/v1/b", project=self.project)
        status, body = await self._json("POST", url, json={"name": bucket})
        if status == 409 and exist_ok:
            return
        if status >= 300:
            raise BucketError(f"could not create bucket {bucket!r}: HTTP {status}: {body}")

    # ------------------------------------------------------------ writes

    async def _upload(self, bucket: str, name: str, data: Any, content_type: str) -> ObjectInfo:
        check_bucket_name(bucket)
        check_object_name(name)
        url = self._url(f"/upload/storage/v1/b/{bucket}/o", uploadType="media", name=name)
        status, body = await self._json(
            "POST", url, data=data, headers={"Content-Type": content_type}
        )
        if status >= 300 or not isinstance(body, dict):
            if status == 404 or not await self.exists(bucket):
                raise BucketNotFound(bucket, self.base_url)
            raise BucketError(f"upload of {name!r} to bucket {bucket!r}: HTTP {status}: {body}")
        return object_info(body)

    async def write_file(
        self,
        bucket: str,
        name: str,
        path: Path,
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
        move: bool = False,
    ) -> ObjectInfo:
        # Streamed from the file with its length (aiohttp reads it in a thread); ``move``
        # changes nothing here.
        source = await asyncio.to_thread(open, path, "rb")
        try:
            return await self._upload(bucket, name, source, content_type)
        finally:
            source.close()

    async def write_chunks(
        self,
        bucket: str,
        name: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> ObjectInfo:
        return await self._upload(bucket, name, _forward(chunks), content_type)

    async def write_bytes(
        self, bucket: str, name: str, data: bytes, *, content_type: str = DEFAULT_CONTENT_TYPE
    ) -> ObjectInfo:
        return await self._upload(bucket, name, data, content_type)

    # ------------------------------------------------------------- reads

    async def list(self, bucket: str, prefix: str = "") -> list[ObjectInfo]:
        check_bucket_name(bucket)
        found: list[ObjectInfo] = []
        token = ""
        while True:
            query = {"prefix": prefix} if prefix else {}
            if token:
                query["pageToken"] = token
            status, body = await self._json("GET", self._url(f"/storage/v1/b/{bucket}/o", **query))
            if status == 404:
                raise BucketNotFound(bucket, self.base_url)
            if status >= 300 or not isinstance(body, dict):
                raise BucketError(f"listing bucket {bucket!r}: HTTP {status}: {body}")
            found.extend(object_info(item) for item in body.get("items") or ())
            token = str(body.get("nextPageToken") or "")
            if not token:
                break
        found.sort(key=lambda info: info.name)
        return found

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        check_bucket_name(bucket)
        check_object_name(name)
        status, body = await self._json(
            "GET", self._url(f"/storage/v1/b/{bucket}/o/{_quote(name)}")
        )
        if status == 404:
            await self._missing(bucket, name)
        if status >= 300 or not isinstance(body, dict):
            raise BucketError(f"object {name!r} of bucket {bucket!r}: HTTP {status}: {body}")
        return object_info(body)

    async def _missing(self, bucket: str, name: str) -> None:
        if not await self.exists(bucket):
            raise BucketNotFound(bucket, self.base_url)
        raise ObjectNotFound(bucket, name)

    async def read(self, bucket: str, name: str) -> bytes:
        return b"".join([chunk async for chunk in self.read_chunks(bucket, name)])

    async def read_chunks(
        self, bucket: str, name: str, chunk_bytes: int = READ_CHUNK_BYTES
    ) -> AsyncIterator[bytes]:
        check_bucket_name(bucket)
        check_object_name(name)
        url = self._url(f"/storage/v1/b/{bucket}/o/{_quote(name)}", alt="media")
        try:
            async with self._session().get(url) as response:
                if response.status == 404:
                    await self._missing(bucket, name)
                if response.status >= 300:
                    text = (await response.read()).decode(errors="replace")[:500]
                    raise BucketError(
                        f"reading {name!r} of bucket {bucket!r}: HTTP {response.status}: {text}"
                    )
                async for chunk in response.content.iter_chunked(chunk_bytes):
                    yield chunk
        except aiohttp.ClientError as error:
            raise BucketError(f"reading {name!r} of bucket {bucket!r}: {error}") from error


async def _forward(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        yield chunk
