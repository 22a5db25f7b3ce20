"""Cloud Storage buckets for the server's edge consumers (exports write objects, ingestion
reads them): one async API, two stores.

* ``LocalBuckets(DIR)`` (``local``): a bucket is a subdirectory of ``DIR`` and ``/`` in an
  object name makes subdirectories (``eoclient serve --buckets-dir``).
* ``JsonApiBuckets(URL)`` (``json_api``): the Cloud Storage JSON API of an emulator at
  ``STORAGE_EMULATOR_HOST``, which the server honours as Google's client libraries do.

``open_bucket_store(buckets_dir)`` picks one: the JSON API when ``STORAGE_EMULATOR_HOST`` is
set, else the directory. Both implement ``BucketStore`` (``model``), whose methods are stable:

* ``exists(bucket) -> bool``; ``create_bucket(bucket, exist_ok=False)``;
* ``write_file(bucket, name, path, content_type=..., move=False) -> ObjectInfo``,
  ``write_chunks(bucket, name, chunks, content_type=...)`` (an async iterable of bytes,
  streamed, memory bounded by one chunk), ``write_bytes(bucket, name, data, ...)``: each
  object appears whole or not at all;
* ``list(bucket, prefix="") -> list[ObjectInfo]`` (every page, sorted by name);
  ``stat(bucket, name) -> ObjectInfo``; ``read(bucket, name) -> bytes``;
  ``read_chunks(bucket, name, chunk_bytes)`` (an async iterator of bytes);
* ``describe()`` (where objects go, for a person); ``aclose()`` (idempotent).

``ObjectInfo``: ``bucket``, ``name``, ``size``, ``created`` (epoch seconds), ``generation``,
``content_type``. Errors derive from ``BucketError``: ``BucketNotFound`` (``.bucket``),
``ObjectNotFound`` (``.bucket``, ``.name``), ``InvalidName`` (also a ``ValueError``).
"""

from __future__ import annotations

import os

from eoclient.server_stub.buckets.json_api import ENVIRONMENT_VARIABLE, JsonApiBuckets
from eoclient.server_stub.buckets.local import LocalBuckets
from eoclient.server_stub.buckets.model import (
    DEFAULT_CONTENT_TYPE,
    BucketError,
    BucketNotFound,
    BucketStore,
    InvalidName,
    ObjectInfo,
    ObjectNotFound,
)


def open_bucket_store(buckets_dir: str | os.PathLike[str]) -> BucketStore:
    """The JSON API at ``STORAGE_EMULATOR_HOST`` when it is set, else ``buckets_dir``."""
    remote = JsonApiBuckets.from_environment()
    if remote is not None:
        return remote
    return LocalBuckets(buckets_dir)


__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "ENVIRONMENT_VARIABLE",
    "BucketError",
    "BucketNotFound",
    "BucketStore",
    "InvalidName",
    "JsonApiBuckets",
    "LocalBuckets",
    "ObjectInfo",
    "ObjectNotFound",
    "open_bucket_store",
]
