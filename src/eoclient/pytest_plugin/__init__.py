"""Test helpers for applications that use Pub/Sub: the reference server in a thread."""

from eoclient.pytest_plugin.server_thread import ServerThread

__all__ = ["ServerThread"]
