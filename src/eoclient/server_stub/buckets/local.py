"""Buckets as directories: ``DIR/<bucket>/<object name>``, ``/`` in a name making
subdirectories, so that ``ls``, Spark or pandas read what the server wrote as plain files.

* **Whole objects.** A write goes to a temporary file in ``DIR/.eoclient-staging`` (the same
  file system) and is renamed into place once complete: a reader sees the old object or the
  new one, never half a file. Staging files left by a crash are removed when a store next
  opens the directory (those older than ``STALE_STAGING_SECONDS``, so that a second server on
  the directory is not disturbed); ``.eoclient-staging`` is not a valid bucket name.
* **Metadata without sidecars.** An object's creation time is its file's modification time,
  which the store sets when it renames the file in, and its generation is that time in
  microseconds (a rewrite within the same microsecond is given the next one), so both survive
  a restart and a file copied in by hand has them too. The content type is guessed from the
  name's extension (``.avro``, ``.txt``, ``.json``, ``.csv``, ...; else
  ``application/octet-stream``): a directory has nowhere to keep the one a writer passed.

Blocking file work runs in a thread (``asyncio.to_thread``); the event loop never waits on
the disk.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import mimetypes
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path

from eoclient.server_stub.buckets.model import (
    DEFAULT_CONTENT_TYPE,
    READ_CHUNK_BYTES,
    BucketError,
    BucketNotFound,
    InvalidName,
    ObjectInfo,
    ObjectNotFound,
    check_bucket_name,
    check_object_name,
    one_chunk,
)

STAGING = ".eoclient-staging"
STALE_STAGING_SECONDS = 3600.0
# Types mimetypes does not know; the rest come from it.
_CONTENT_TYPES = {".avro": "application/avro", ".jsonl": "application/jsonl"}


def content_type_of(name: str) -> str:
    suffix = os.path.splitext(name)[1].lower()
    if suffix in _CONTENT_TYPES:
        return _CONTENT_TYPES[suffix]
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or DEFAULT_CONTENT_TYPE


class LocalBuckets:
    """Buckets as the subdirectories of ``root`` (created if missing)."""

    def __init__(self, root: str | os.PathLike[str], *, clock_ns: Callable[[], int] = time.time_ns):
        self.root = Path(root)
        self._clock_ns = clock_ns
        self.root.mkdir(parents=True, exist_ok=True)
        self._staging = self.root / STAGING
        self._staging.mkdir(exist_ok=True)
        self._clean_staging()

    def __repr__(self) -> str:
        return f"<LocalBuckets {self.root}>"

    def describe(self) -> str:
        return f"bucket directories in {self.root}"

    def _clean_staging(self) -> None:
        cutoff = time.time() - STALE_STAGING_SECONDS
        for entry in os.scandir(self._staging):
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)

    # ------------------------------------------------------------ paths

    def bucket_path(self, bucket: str) -> Path:
        check_bucket_name(bucket)
        return self.root / bucket

    def _object_path(self, bucket: str, name: str) -> Path:
        check_object_name(name)
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise InvalidName(
                f"object name {name!r} cannot be a file in a bucket directory: no empty, '.' "
                "or '..' segment between slashes, and no leading or trailing '/'"
            )
        return self.bucket_path(bucket).joinpath(*parts)

    def _existing_bucket(self, bucket: str) -> Path:
        path = self.bucket_path(bucket)
        if not path.is_dir():
            raise BucketNotFound(bucket, f"no directory {path}")
        return path

    def _info(self, bucket: str, name: str, stat: os.stat_result) -> ObjectInfo:
        return ObjectInfo(
            bucket=bucket,
            name=name,
            size=stat.st_size,
            created=stat.st_mtime_ns / 1e9,
            generation=stat.st_mtime_ns // 1000,
            content_type=content_type_of(name),
        )

    # ----------------------------------------------------------- buckets

    async def exists(self, bucket: str) -> bool:
        return await asyncio.to_thread(self.bucket_path(bucket).is_dir)

    async def create_bucket(self, bucket: str, *, exist_ok: bool = False) -> None:
        path = self.bucket_path(bucket)
        try:
            await asyncio.to_thread(path.mkdir, exist_ok=exist_ok)
        except FileExistsError:
            raise BucketError(f"bucket {bucket!r} already exists ({path})") from None

    # ------------------------------------------------------------ writes

    async def write_file(
        self,
        bucket: str,
        name: str,
        path: Path,
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
        move: bool = False,
    ) -> ObjectInfo:
        target = self._object_path(bucket, name)
        return await asyncio.to_thread(self._place_file, bucket, name, target, Path(path), move)

    def _place_file(
        self, bucket: str, name: str, target: Path, source: Path, move: bool
    ) -> ObjectInfo:
        self._existing_bucket(bucket)
        staged = self._staging / f"{uuid.uuid4().hex}.part"
        try:
            moved = False
            if move:
                try:
                    os.replace(source, staged)  # same file system: no copy
                    moved = True
                except OSError:
                    pass
            if not moved:
                shutil.copyfile(source, staged)
            return self._publish(bucket, name, target, staged)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)

    async def write_chunks(
        self,
        bucket: str,
        name: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> ObjectInfo:
        target = self._object_path(bucket, name)
        await asyncio.to_thread(self._existing_bucket, bucket)
        fd, staged_name = await asyncio.to_thread(
            tempfile.mkstemp, suffix=".part", dir=self._staging
        )
        staged = Path(staged_name)
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    await asyncio.to_thread(out.write, chunk)
            return await asyncio.to_thread(self._publish, bucket, name, target, staged)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)

    async def write_bytes(
        self, bucket: str, name: str, data: bytes, *, content_type: str = DEFAULT_CONTENT_TYPE
    ) -> ObjectInfo:
        return await self.write_chunks(bucket, name, one_chunk(data), content_type=content_type)

    def _publish(self, bucket: str, name: str, target: Path, staged: Path) -> ObjectInfo:
        """Rename the complete ``staged`` file into place, stamped with its generation."""
        bucket_dir = self._existing_bucket(bucket)
        if target.is_dir():
            raise InvalidName(
                f"object name {name!r} is a directory in {bucket_dir}: other objects' names "
                f"start with {name + '/'!r}"
            )
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidName(
                f"object name {name!r} needs a directory where bucket {bucket!r} has an object "
                "(a name that is a prefix of it ending before a '/')"
            ) from None
        stamp = self._clock_ns()
        with contextlib.suppress(FileNotFoundError):
            previous = target.stat().st_mtime_ns
            # A new generation, even within the same microsecond as the one it replaces.
            stamp = max(stamp, (previous // 1000 + 1) * 1000)
        os.utime(staged, ns=(stamp, stamp))
        os.replace(staged, target)
        return self._info(bucket, name, target.stat())

    # ------------------------------------------------------------- reads

    async def list(self, bucket: str, prefix: str = "") -> list[ObjectInfo]:
        return await asyncio.to_thread(self._list, bucket, prefix)

    def _list(self, bucket: str, prefix: str) -> builtins.list[ObjectInfo]:
        root = self._existing_bucket(bucket)
        # Only the directories a name with this prefix can be under are walked.
        start = root
        head, _, _ = prefix.rpartition("/")
        if head:
            start = root.joinpath(*head.split("/"))
            if not start.is_dir():
                return []
        found: builtins.list[ObjectInfo] = []
        for directory, dirnames, filenames in os.walk(start):
            dirnames.sort()
            relative = os.path.relpath(directory, root)
            base = "" if relative == "." else relative.replace(os.sep, "/") + "/"
            for filename in filenames:
                name = base + filename
                if not name.startswith(prefix):
                    continue
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                    stat = os.stat(os.path.join(directory, filename))
                    found.append(self._info(bucket, name, stat))
        found.sort(key=lambda info: info.name)
        return found

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        return await asyncio.to_thread(self._stat, bucket, name)

    def _stat(self, bucket: str, name: str) -> ObjectInfo:
        path = self._object_path(bucket, name)
        try:
            stat = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            self._existing_bucket(bucket)
            raise ObjectNotFound(bucket, name) from None
        if not path.is_file():
            raise ObjectNotFound(bucket, name)
        return self._info(bucket, name, stat)

    async def read(self, bucket: str, name: str) -> bytes:
        return await asyncio.to_thread(self._read, bucket, name)

    def _read(self, bucket: str, name: str) -> bytes:
        self._stat(bucket, name)
        return self._object_path(bucket, name).read_bytes()

    async def read_chunks(
        self, bucket: str, name: str, chunk_bytes: int = READ_CHUNK_BYTES
    ) -> AsyncIterator[bytes]:
        await self.stat(bucket, name)
        source = await asyncio.to_thread(open, self._object_path(bucket, name), "rb")
        try:
            while chunk := await asyncio.to_thread(source.read, chunk_bytes):
                yield chunk
        finally:
            source.close()

    async def aclose(self) -> None:
        return None
