"""Pulsar message ids: the skipByMessageIds body formats (PIP-423) and their mapping to ours.

Pure: ``parse_skip_body(text)`` reads the three body formats
(docs/protocol.md#skip-by-message-id) the way Pulsar's broker does
(``SkipMessageIdsRequest.Deserializer``), with its 400 texts; ``message_id_of(item)`` maps
one Pulsar id to an eoclient message id.

The body formats::

    ["CLlgEAQwAA==", ...]                                   base64 MessageIdData
    {"type": "byteArray", "messageIds": ["CLlgEAQwAA==", ...]}   (type omitted: the same)
    {"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": 17, "batchIndex": 0}]}

A base64 id is ``MessageId.toByteArray()``: a protobuf ``MessageIdData``, decoded here
by protobuf from ``proto/pulsar/pulsar_message_id.proto`` (Pulsar's field numbers).

The mapping (docs/policies.md): eoclient numbers messages 1, 2, 3, ... across the
server and has no ledgers, partitions or batches, so message id ``N`` is Pulsar's
``ledgerId 0, entryId N`` — the triplet ``0:N`` of ``pulsar-admin topics skip-messages
--messageId-triplet``. A batch index is accepted only when absent, negative (Pulsar's
"not batched", -1) or 0 (the first, and here only, message of its entry); a partition
only when absent, -1 (not partitioned) or 0. Anything else names no message here and
is refused, so a request meant for a real Pulsar cluster never skips the wrong message.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from eoclient._proto import pulsar_message_id_pb2

PAYLOAD_ERROR = "Invalid skipByMessageIds payload"
# Java's Long.parseLong / Integer.parseInt: an optional sign and decimal digits.
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_LONG_RANGE = (-(2**63), 2**63 - 1)
_INT_RANGE = (-(2**31), 2**31 - 1)


class PulsarPayloadError(ValueError):
    """A body or id Pulsar would answer 400 for; ``str(error)`` is the text."""


@dataclass(frozen=True)
class PulsarMessageId:
    """One id of a skip request; ``batch_index`` None = not batched (absent or < 0)."""

    ledger_id: int
    entry_id: int
    batch_index: int | None = None
    partition: int = -1

    def __str__(self) -> str:
        triplet = f"{self.ledger_id}:{self.entry_id}"
        return triplet if self.batch_index is None else f"{triplet}:{self.batch_index}"


def _payload_error(what: str) -> PulsarPayloadError:
    return PulsarPayloadError(f"{PAYLOAD_ERROR}: {what}")


def parse_skip_body(body: bytes) -> list[PulsarMessageId]:
    """The ids of a skipByMessageIds body, in order; ``PulsarPayloadError`` otherwise."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        raise _payload_error("empty body")
    try:
        node = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise _payload_error(f"malformed JSON ({error})") from None
    if node is None:
        raise _payload_error("empty body")
    if isinstance(node, list):  # the default: base64 ids
        return [_from_base64(_as_text(item)) for item in node if item is not None]
    if not isinstance(node, dict):
        raise _payload_error("unsupported top-level JSON")
    kind = node.get("type")
    kind = _as_text(kind) if kind is not None else ""
    if "messageIds" not in node:
        raise _payload_error("missing messageIds")
    ids = node["messageIds"]
    if isinstance(ids, dict):
        raise _payload_error("messageIds must be an array")
    if not isinstance(ids, list):
        raise _payload_error("unsupported messageIds type")
    if kind == "" or kind.lower() == "bytearray":
        return [_from_base64(_as_text(item)) for item in ids if item is not None]
    if kind.lower() == "messageid":
        return [_from_object(item) for item in ids if item is not None]
    raise _payload_error("unsupported type for array")


def _as_text(value: Any) -> str:
    """Jackson's ``JsonNode.asText()``: a string as it is, a scalar as written, a
    container as the empty string."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return ""


def _from_object(item: Any) -> PulsarMessageId:
    if not isinstance(item, dict):
        raise _payload_error("messageIds elements must be objects")
    ledger_id = _required_long(item.get("ledgerId"), "ledgerId")
    entry_id = _required_long(item.get("entryId"), "entryId")
    batch_index = _optional_non_negative_int(item.get("batchIndex"), "batchIndex")
    return PulsarMessageId(ledger_id, entry_id, batch_index)


def _java_integer(value: Any, bounds: tuple[int, int]) -> int | None:
    """A JSON number (truncated, as Jackson's longValue) or a decimal string; None if
    neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value == value and abs(value) != float("inf") else None
    if isinstance(value, str) and _JAVA_INTEGER.fullmatch(value):
        number = int(value)
        return number if bounds[0] <= number <= bounds[1] else None
    return None


def _required_long(value: Any, field: str) -> int:
    if value is None:
        raise _payload_error(f"missing {field}")
    number = _java_integer(value, _LONG_RANGE)
    if number is None:
        raise _payload_error(f"invalid {field}")
    return number


def _optional_non_negative_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    number = _java_integer(value, _INT_RANGE)
    if number is None:
        raise _payload_error(f"invalid {field}")
    return number if number >= 0 else None


def _from_base64(text: str) -> PulsarMessageId:
    # Java's basic Base64 decoder: the standard alphabet, padding optional, nothing else.
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _payload_error("invalid base64 messageId") from None
    if not data:
        raise _payload_error("invalid base64 messageId (empty)")
    message = pulsar_message_id_pb2.MessageIdData()
    try:
        message.ParseFromString(data)
    except DecodeError:
        raise _payload_error(
            f"invalid base64 messageId ({text!r} is not a Pulsar MessageIdData)"
        ) from None
    if not message.IsInitialized():
        missing = [f for f in ("ledgerId", "entryId") if not message.HasField(f)]
        raise _payload_error(
            f"invalid base64 messageId ({text!r} is a MessageIdData without {', '.join(missing)})"
        )
    batch_index = message.batch_index if message.HasField("batch_index") else -1
    return PulsarMessageId(
        message.ledgerId,
        message.entryId,
        batch_index if batch_index >= 0 else None,
        message.partition,
    )


def message_id_of(item: PulsarMessageId) -> str:
    """The eoclient message id ``item`` names (``ledgerId 0, entryId N`` is ``"N"``)."""
    if item.ledger_id != 0 or item.entry_id < 1:
        raise PulsarPayloadError(
            f"Invalid message id {item}: eoclient message id N is ledgerId 0, entryId N "
            "(N >= 1); no other ledger exists here."
        )
    if item.batch_index not in (None, 0):
        raise PulsarPayloadError(
            f"Invalid message id {item}: eoclient messages are not batched, so a batch "
            "index must be absent, negative or 0."
        )
    if item.partition not in (-1, 0):
        raise PulsarPayloadError(
            f"Invalid message id {item}: partition {item.partition}; eoclient topics are "
            "not partitioned (-1 or 0)."
        )
    return str(item.entry_id)


def encode_message_id(message_id: str) -> str:
    """The base64 ``MessageIdData`` of an eoclient message id (what ``toByteArray()``
    would give), for clients that want the byteArray format."""
    data = pulsar_message_id_pb2.MessageIdData(ledgerId=0, entryId=int(message_id))
    return base64.b64encode(data.SerializeToString()).decode("ascii")
