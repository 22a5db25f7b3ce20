"""A real Cloud Storage emulator (the ``gcp-storage-emulator`` package, in the ``dev``
extra) for the tests: in this process, on a thread, on a free 127.0.0.1 port, in memory.

``storage_emulator()`` yields its base URL (``http://127.0.0.1:PORT``): the value for
``STORAGE_EMULATOR_HOST``, which Google's ``google-cloud-storage`` and the reference server
both read. ``storage_client(url)`` is a ``google.cloud.storage.Client`` on it (anonymous).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import logging
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def storage_emulator() -> Iterator[str]:
    from gcp_storage_emulator.server import RequestHandler
    from gcp_storage_emulator.storage import Storage

    # Its request log is INFO per call: keep the tests' output readable.
    logging.getLogger("gcp_storage_emulator").setLevel(logging.WARNING)
    # Its own Server binds in its thread and waits forever if that fails: bind port 0 here.
    storage = Storage(use_memory_fs=True)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), functools.partial(RequestHandler, storage))
    thread = threading.Thread(target=httpd.serve_forever, name="storage-emulator", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def storage_client(url: str) -> Any:
    """Google's Cloud Storage client on the emulator at ``url`` (no credentials)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": url},
    )
