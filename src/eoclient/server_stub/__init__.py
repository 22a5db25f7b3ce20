"""The eoclient reference server: google.pubsub.v1 over gRPC with faithful exactly-once.

``eoclient serve`` runs it as a program; ``run_server`` runs it inside a test.
"""

from eoclient.server_stub.server import ReferenceServer, run_server

__all__ = ["ReferenceServer", "run_server"]
