"""What one export subscription is doing, as GetSubscription, ``/metrics`` and the dashboard
show it: its state (the proto's ``State`` names), counters since the server started, and the
last objects or row batches written.

``state`` is one of ``ACTIVE``, ``NOT_FOUND`` (the bucket, dataset or table does not exist:
messages wait in the subscription), ``SCHEMA_MISMATCH`` (the topic's schema and the
subscription's settings do not fit together), ``PERMISSION_DENIED`` (the destination refused
the write). The two configs number these differently (``CloudStorageConfig.State``,
``BigQueryConfig.State``): the services set the enum by name.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

ACTIVE = "ACTIVE"
NOT_FOUND = "NOT_FOUND"
SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
PERMISSION_DENIED = "PERMISSION_DENIED"

CLOUD_STORAGE = "cloud_storage"
BIGQUERY = "bigquery"

# How many of the last objects / row batches each status keeps.
LAST_WRITTEN = 10


@dataclass(frozen=True)
class Written:
    """One object (Cloud Storage) or one committed batch of rows (BigQuery)."""

    target: str  # gs://bucket/object, or project.dataset.table
    messages: int
    bytes: int
    at: float  # clock seconds


@dataclass
class ExportStatus:
    subscription: str
    kind: str  # CLOUD_STORAGE or BIGQUERY
    destination: str = ""
    state: str = ACTIVE
    reason: str = ""  # why the state is not ACTIVE
    checked_at: float = 0.0  # when the destination was last looked at (clock seconds)
    # Counters since the server started.
    messages: int = 0  # written and acknowledged
    bytes: int = 0  # of the files written, or of the messages' data for rows
    objects: int = 0
    rows: int = 0
    unwritable: int = 0  # messages that could not be written (nacked: a failed delivery)
    write_failures: int = 0  # writes that failed and were tried again
    last_error: str = ""
    # Now.
    open_messages: int = 0  # in the batch being filled and those being written
    open_bytes: int = 0
    last_written: deque[Written] = field(default_factory=lambda: deque(maxlen=LAST_WRITTEN))

    def set_state(self, state: str, reason: str, now: float) -> None:
        self.state, self.reason, self.checked_at = state, reason, now
