"""The source's Arrow schemas: the rows Spark gets, and the rows with their ack ids."""

from __future__ import annotations

import pyarrow as pa

# The rows of the DataFrame, in the order and with the types Spark expects for
# datasource.SCHEMA (to_arrow_schema of it: timestamps in microseconds, UTC).
ROW_FIELDS = [
    pa.field("message_id", pa.string()),
    pa.field("data", pa.binary()),
    pa.field("attributes", pa.map_(pa.string(), pa.string())),
    pa.field("ordering_key", pa.string()),
    pa.field("publish_time", pa.timestamp("us", tz="UTC")),
    pa.field("delivery_attempt", pa.int32()),
]
ROW_SCHEMA = pa.schema(ROW_FIELDS)
# A delivery: the row and the ack id it came with (what the journal keeps, so the message is
# leased and acked with it, also after a restart).
WIRE_SCHEMA = pa.schema([*ROW_FIELDS, pa.field("ack_id", pa.string())])
