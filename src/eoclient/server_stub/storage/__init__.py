"""Stores for the broker core (``eoclient.server_stub.core.store.Store``).

``MemoryStore`` keeps everything in the process (the default: tests, ``run_server()``,
``eoclient serve`` without ``--data-dir``); ``SqliteStore`` keeps it in a data directory.
"""

from eoclient.server_stub.storage.memory import MemoryStore

__all__ = ["MemoryStore"]
