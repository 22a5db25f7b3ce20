"""The private descriptor pool that holds eoclient's copy of google.pubsub.v1.

google-cloud-pubsub registers the same fully qualified names (``google.pubsub.v1.Topic``
and so on) in protobuf's default pool under another file name; adding ours there too
fails with a duplicate-symbol error. The wire format does not carry message names,
so keeping our descriptors in a pool of their own lets both live in one process.

The well-known types our files import are added here from their own descriptors,
so that ``Timestamp``/``Duration`` fields keep their helper methods
(``FromDatetime``, ``ToTimedelta``, ...).
"""

from google.protobuf import (
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    struct_pb2,
    timestamp_pb2,
)

POOL = descriptor_pool.DescriptorPool()

for _well_known in (duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2):
    POOL.AddSerializedFile(_well_known.DESCRIPTOR.serialized_pb)
