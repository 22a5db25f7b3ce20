"""Topic ingestion: import topics fed from outside sources (docs/server/ingestion.md)."""

from eoclient.server_stub.ingestion.ledger import IngestedObjects
from eoclient.server_stub.ingestion.objects import IngestionStatus
from eoclient.server_stub.ingestion.shell import BucketReader, Ingestion

__all__ = ["BucketReader", "IngestedObjects", "Ingestion", "IngestionStatus"]
