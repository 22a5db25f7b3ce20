"""A resource's ``message_transforms`` (protobuf) as UDFs, and the check a create or
update runs on them (docs/protocol.md#message-transforms).

The transforms live in the topic's or subscription's ``extras`` (the core keeps them
opaque, ``services/translate.py``), so what is stored round-trips unchanged, ``disabled``
and the deprecated ``enabled`` included. Only JavaScript UDFs run here: a Compression or
AI Inference transform is refused (UNIMPLEMENTED), never stored and ignored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument, Unimplemented
from eoclient.server_stub.transforms.engine import check_udf, engine_missing
from eoclient.server_stub.transforms.rules import TransformLimits, Udf, static_problem

__all__ = ["check_transforms", "transforms_key", "udfs_of"]

# What a transform other than a JavaScript UDF would make the service do.
_NOT_HERE = {
    "compression": "compress or decompress message data",
    "ai_inference": "send messages to a Vertex AI endpoint",
}


def udfs_of(transforms: Sequence[pubsub_pb2.MessageTransform]) -> list[Udf]:
    """The JavaScript UDFs of ``transforms``, in order (others were refused at create)."""
    return [
        Udf(t.javascript_udf.function_name, t.javascript_udf.code, t.disabled)
        for t in transforms
        if t.WhichOneof("transform") == "javascript_udf"
    ]


def transforms_key(transforms: Sequence[pubsub_pb2.MessageTransform]) -> bytes:
    """The transforms' identity: equal keys, the same compiled chain."""
    return pubsub_pb2.Topic(message_transforms=transforms).SerializeToString(deterministic=True)


async def check_transforms(
    kind: str, transforms: Sequence[pubsub_pb2.MessageTransform], limits: TransformLimits
) -> None:
    """Refuse ``transforms`` (of a ``kind``, "topic" or "subscription") as the service
    would at create or update: INVALID_ARGUMENT when one is malformed, or its code does
    not load or lacks ``function_name``; UNIMPLEMENTED for a kind of transform this
    server cannot run, or when its JavaScript engine is not installed."""
    if not transforms:
        return
    for index, transform in enumerate(transforms):
        which = transform.WhichOneof("transform")
        if which is None:
            raise InvalidArgument(
                f"{kind}.message_transforms[{index}] sets no transform "
                "(javascript_udf is the one this server runs)."
            )
        if which != "javascript_udf":
            raise Unimplemented(
                f"{kind}.message_transforms[{index}].{which} is not supported by eoclient's "
                f"reference server: it does not {_NOT_HERE.get(which, 'run it')}. Only "
                "javascript_udf transforms run here (a transform that would silently not "
                "run is refused rather than stored)."
            )
    udfs = udfs_of(transforms)
    problem = static_problem(udfs)
    if problem is not None:
        raise InvalidArgument(f"Invalid {kind}.message_transforms: {problem}")
    missing = engine_missing()
    if missing is not None:
        raise Unimplemented(f"eoclient's reference server cannot run {kind} transforms: {missing}")
    loop = asyncio.get_running_loop()
    for index, udf in enumerate(udfs):
        # Loading runs the code's top level (bounded by the time limit): off the loop.
        problem = await loop.run_in_executor(None, check_udf, udf, limits)
        if problem is not None:
            raise InvalidArgument(
                f"Invalid {kind}.message_transforms[{index}].javascript_udf "
                f"(function_name {udf.function_name}): {problem}."
            )
