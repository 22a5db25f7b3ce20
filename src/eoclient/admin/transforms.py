"""Message transforms of topics and subscriptions, as frozen dataclasses (no protobuf in
them), and their conversion to and from ``google.pubsub.v1.MessageTransform``.

A transform is a JavaScript UDF: ``function_name(message, metadata)`` returns the message
changed, or ``null`` to filter it out (docs/server/transforms.md has the contract). A
topic's transforms run on each message published to it, before it is stored; a
subscription's on each message it delivers. Several run in order; a ``disabled`` one is
skipped.

::

    from eoclient.admin import JavaScriptUdf, MessageTransform

    redact = MessageTransform(
        JavaScriptUdf(
            "redact",
            "function redact(message, metadata) {"
            "  const data = JSON.parse(message.data); delete data.ssn;"
            "  return {data: JSON.stringify(data), attributes: message.attributes}; }",
        )
    )
    await admin.create_topic(name, message_transforms=[redact])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from eoclient._proto import pubsub_pb2 as pb

__all__ = ["JavaScriptUdf", "MessageTransform"]


@dataclass(frozen=True, slots=True)
class JavaScriptUdf:
    """A JavaScript user-defined function (``google.pubsub.v1.JavaScriptUDF``).

    Attributes:
        function_name: the function of ``code`` applied to each message; unique among a
            resource's transforms.
        code: JavaScript defining it (the service takes at most 20 KB).
    """

    function_name: str
    code: str


@dataclass(frozen=True, slots=True)
class MessageTransform:
    """One transform of a topic or subscription (``google.pubsub.v1.MessageTransform``).

    Attributes:
        javascript_udf: the UDF; ``None`` for a kind of transform this SDK does not model
            (the service's Compression and AI Inference), read from a server only.
        disabled: kept on the resource but not applied.
    """

    javascript_udf: JavaScriptUdf | None
    disabled: bool = False


def transforms_to_pb(
    transforms: Iterable[MessageTransform], target: Sequence[pb.MessageTransform]
) -> None:
    """Append ``transforms`` to a resource's repeated ``message_transforms``."""
    for transform in transforms:
        message = target.add()  # type: ignore[attr-defined]
        message.disabled = transform.disabled
        if transform.javascript_udf is not None:
            message.javascript_udf.function_name = transform.javascript_udf.function_name
            message.javascript_udf.code = transform.javascript_udf.code


def transforms_from_pb(messages: Iterable[pb.MessageTransform]) -> tuple[MessageTransform, ...]:
    return tuple(
        MessageTransform(
            JavaScriptUdf(m.javascript_udf.function_name, m.javascript_udf.code)
            if m.WhichOneof("transform") == "javascript_udf"
            else None,
            disabled=m.disabled,
        )
        for m in messages
    )
