"""Export subscriptions: Cloud Storage files and BigQuery rows, delivered by the server itself
(docs/protocol.md#export-subscriptions).

``runner`` (the async shell: one worker per export subscription), ``cloud_storage`` (the
Cloud Storage worker), ``batch`` (when a file closes; its leases), ``files`` (text and Avro),
``naming`` (object names and the date-time grammar), ``settings`` (the stored config as the
worker uses it), ``status`` (state and counters), ``journal`` (leases given back after a
crash), ``context`` (what the workers share).
"""

from eoclient.server_stub.exports.runner import ExportRunner
from eoclient.server_stub.exports.status import ExportStatus, Written

__all__ = ["ExportRunner", "ExportStatus", "Written"]
