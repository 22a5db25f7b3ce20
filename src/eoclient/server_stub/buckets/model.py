"""What every bucket store shares: the object record, the errors, the name rules and the
``BucketStore`` protocol that ``local.LocalBuckets`` and ``json_api.JsonApiBuckets`` implement.

Names follow Cloud Storage's rules where a file system can hold them: a bucket name is 3 to
222 characters of lowercase letters, digits, ``-``, ``_`` and ``.``, starting and ending with a
letter or digit; an object name is 1 to 1024 bytes of UTF-8 without carriage return, line
feed or NUL. Bucket directories add what a directory tree cannot hold: no empty segment
(``a//b``), no ``.`` or ``..`` segment, no leading or trailing ``/``, and an object cannot
share its name with a "directory" that other objects' names make (``a`` beside ``a/b``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# What an object holds when the writer does not say (Cloud Storage's own default).
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# A read in chunks hands out at most this much at a time.
READ_CHUNK_BYTES = 1 << 20

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
MAX_OBJECT_NAME_BYTES = 1024


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object of a bucket, as a listing or a write reports it.

    ``created`` is seconds since the epoch (Cloud Storage's ``timeCreated``); ``generation``
    changes whenever the object's content is replaced (Cloud Storage's ``generation``: in a
    bucket directory, the file's modification time in microseconds).
    """

    bucket: str
    name: str
    size: int
    created: float
    generation: int
    content_type: str


class BucketError(Exception):
    """A bucket store could not do what was asked (the message says what and why)."""


class BucketNotFound(BucketError):
    """The bucket does not exist."""

    def __init__(self, bucket: str, where: str = "") -> None:
        super().__init__(f"bucket {bucket!r} does not exist{f' ({where})' if where else ''}")
        self.bucket = bucket


class ObjectNotFound(BucketError):
    """The bucket exists, the object does not."""

    def __init__(self, bucket: str, name: str) -> None:
        super().__init__(f"object {name!r} does not exist in bucket {bucket!r}")
        self.bucket = bucket
        self.name = name


class InvalidName(BucketError, ValueError):
    """A bucket or object name the store cannot hold."""


def check_bucket_name(bucket: str) -> None:
    if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        raise InvalidName(
            f"invalid bucket name {bucket!r}: 3 to 222 lowercase letters, digits, '-', '_' "
            "and '.', starting and ending with a letter or a digit"
        )


def check_object_name(name: str) -> None:
    """Cloud Storage's rules for an object name (both stores)."""
    if not name or len(name.encode()) > MAX_OBJECT_NAME_BYTES:
        raise InvalidName(f"invalid object name {name!r}: 1 to 1024 bytes of UTF-8")
    if any(c in name for c in "\r\n\0"):
        raise InvalidName(f"invalid object name {name!r}: no carriage return, line feed or NUL")


class BucketStore(Protocol):
    """Buckets and their objects, as the server's edge consumers use them (async)."""

    def describe(self) -> str:
        """Where the objects go, for a person (the server prints it at start)."""
        ...

    async def exists(self, bucket: str) -> bool: ...

    async def create_bucket(self, bucket: str, *, exist_ok: bool = False) -> None:
        """Create ``bucket`` (``BucketError`` if it exists, unless ``exist_ok``)."""
        ...

    async def write_file(
        self,
        bucket: str,
        name: str,
        path: Path,
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
        move: bool = False,
    ) -> ObjectInfo:
        """Store the local file ``path`` as ``name``, whole or not at all; ``move``: the
        file may be taken rather than copied (a bucket directory renames it when it can)."""
        ...

    async def write_chunks(
        self,
        bucket: str,
        name: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> ObjectInfo:
        """Store the concatenated ``chunks`` as ``name`` (streamed), whole or not at all."""
        ...

    async def write_bytes(
        self, bucket: str, name: str, data: bytes, *, content_type: str = DEFAULT_CONTENT_TYPE
    ) -> ObjectInfo: ...

    async def list(self, bucket: str, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose name starts with ``prefix``, by name (every page)."""
        ...

    async def stat(self, bucket: str, name: str) -> ObjectInfo: ...

    async def read(self, bucket: str, name: str) -> bytes: ...

    def read_chunks(
        self, bucket: str, name: str, chunk_bytes: int = READ_CHUNK_BYTES
    ) -> AsyncIterator[bytes]:
        """The object's content in pieces of at most ``chunk_bytes``."""
        ...

    async def aclose(self) -> None:
        """Release connections (idempotent)."""
        ...


async def one_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data
