"""Message transforms (JavaScript UDFs) on topics and subscriptions: ``rules`` (pure: the
limits, what a UDF sees and what its result means), ``engine`` (V8 through mini-racer:
one isolate per UDF, batches, time and memory limits, a thread per resource), ``config``
(a resource's ``message_transforms`` and the create/update check) and ``stage`` (a
Publish on its way in, deliveries on their way out). docs/server/transforms.md."""

from eoclient.server_stub.transforms.rules import TransformLimits, Udf
from eoclient.server_stub.transforms.stage import MessageTransforms, StagedPublish, TransformCounts

__all__ = ["MessageTransforms", "StagedPublish", "TransformCounts", "TransformLimits", "Udf"]
