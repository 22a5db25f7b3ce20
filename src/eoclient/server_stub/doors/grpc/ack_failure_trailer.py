"""The trailer of an exactly-once ack/modack failure, kept to a size every client reads.

An Acknowledge or ModifyAckDeadline in which some ids fail is answered INVALID_ARGUMENT with
a ``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer whose ErrorInfo maps each
failed id to its failure (docs/protocol.md#exactly-once-error-details). About 60 bytes an
id, and base64 adds a third: 3,000 expired ids make a trailer of about 240 KB. Clients cap
what they read — grpc-java and grpc-js at 8 KiB of metadata, gRPC core (the Python client)
at 8 KiB soft and 16 KiB hard — and one past the cap fails the call (Node's HTTP/2 layer
goes further: GOAWAY, and every call on the connection hangs to its deadline).

The rule (docs/protocol.md#ack-failures-that-do-not-fit-in-a-trailer): every id of the
request is processed as always; the ErrorInfo lists as many failed ids as fit in
``TRAILER_BUDGET`` — temporary failures first (they are the ones a client retries), then
the permanent ones, each in request order — and the status message says how many are not
listed (a client that declares it reads more gets that much: ``budget``). An unlisted
failed id was not applied, like a listed one. Why this is the safe choice for the official
clients (Python, Node, Go): they read an id missing from the ErrorInfo of an
INVALID_ARGUMENT answer as failed, result OTHER ("it may come again"), and do not retry it
— a promise the server keeps, since the id was not applied. A listed id keeps its exact
result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from urllib.parse import quote

from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from eoclient.server_stub.services.errors import ERROR_INFO_DOMAIN, ERROR_INFO_REASON

STATUS_DETAILS_KEY = "grpc-status-details-bin"
# Everything the failure's trailers may weigh, as HTTP/2 counts a header list (name +
# value + 32 bytes a field, RFC 7540 §6.5.2): under the 8 KiB the strictest clients read,
# with half a kilobyte left for what the transport adds (a trailers-only answer also
# carries :status and content-type in the same block).
TRAILER_BUDGET = 7680
# A client that reads larger trailers may say how large (request metadata, a byte count):
# eoclient says 4 MiB, its channels' limit. Honoured up to this.
DECLARED_BUDGET_KEY = "x-eoclient-error-trailer-bytes"
MAX_DECLARED_BUDGET = 4 * 1024 * 1024
# How many failed ids the status message reports as not listed (an ErrorInfo entry of its
# own, not an ack id): for a client that wants to tell "applied" from "not listed".
UNLISTED_KEY = "unlisted-failed-ack-ids"
_FIELD_OVERHEAD = 32
_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


def trailer_size(message: str, status: status_pb2.Status) -> int:
    """What the failure's trailers weigh: grpc-status, grpc-message (percent-encoded) and
    the binary Status (base64, unpadded, as gRPC sends binary metadata)."""
    details: int = math.ceil(status.ByteSize() * 4 / 3)
    # gRPC percent-encodes the message's bytes outside printable ASCII, and "%".
    encoded_message = len(quote(message, safe=_PRINTABLE))
    return (
        len("grpc-status") + 1 + _FIELD_OVERHEAD
        + len("grpc-message") + encoded_message + _FIELD_OVERHEAD
        + len(STATUS_DETAILS_KEY) + details + _FIELD_OVERHEAD
    )  # fmt: skip


def _status(message: str, listed: list[tuple[str, str]], unlisted: int) -> status_pb2.Status:
    metadata = dict(listed)
    if unlisted:
        metadata[UNLISTED_KEY] = str(unlisted)
    info = error_details_pb2.ErrorInfo(
        reason=ERROR_INFO_REASON, domain=ERROR_INFO_DOMAIN, metadata=metadata
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message, details=[detail])


def _message(base: str, listed: int, failed: int) -> str:
    if listed == failed:
        return base
    return (
        f"{base} {failed - listed} of the {failed} failed ack ids are not listed (the "
        "error would not fit in a response trailer); those failed too and were not applied."
    )


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _entry_size(key: str, value: str) -> int:
    """The bytes one failed id adds to the Status: its ErrorInfo map entry as protobuf
    encodes it."""
    k, v = len(key.encode()), len(value.encode())
    entry = 1 + _varint_size(k) + k + 1 + _varint_size(v) + v
    return 1 + _varint_size(entry) + entry


def budget(metadata: Iterable[tuple[str, str | bytes]] | None) -> int:
    """The trailer budget for a call with this request metadata: ``TRAILER_BUDGET``, or
    what the client declares it reads (``DECLARED_BUDGET_KEY``), if larger."""
    for key, value in metadata or ():
        if key == DECLARED_BUDGET_KEY:
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            if text.isascii() and text.isdigit() and len(text) < 12:
                return max(TRAILER_BUDGET, min(int(text), MAX_DECLARED_BUDGET))
    return TRAILER_BUDGET


def fit(
    failures: Mapping[str, str], message: str, limit: int = TRAILER_BUDGET
) -> tuple[str, status_pb2.Status]:
    """The status message and Status to send for ``failures`` (ack id -> failure, in request
    order) within ``limit`` bytes of trailer; the Status repeats the message exactly
    (clients ignore the details otherwise: docs/protocol.md#rich-status-trailer)."""
    ordered = sorted(failures.items(), key=lambda item: not item[1].startswith("TRANSIENT_"))
    full = _status(message, ordered, 0)
    if trailer_size(message, full) <= limit:
        return message, full
    total = len(ordered)
    # Room for entries beside the longest message and count there can be (every id left
    # out); then each failed id in turn if it still fits (one too long to list at all —
    # ids are not checked for length before they fail — does not keep the rest out).
    longest = _message(message, 0, total)
    bare = _status(longest, [], total)
    others = trailer_size(longest, bare) - math.ceil(bare.ByteSize() * 4 / 3)
    room = (limit - others) * 3 // 4 - bare.ByteSize()  # raw bytes, before base64
    # The enclosing lengths (ErrorInfo, Any, details) grow by a byte each at most once
    # their varints lengthen: kept aside.
    room -= 3
    listed: list[tuple[str, str]] = []
    for key, value in ordered:
        size = _entry_size(key, value)
        if size <= room:
            listed.append((key, value))
            room -= size
    while True:
        text = _message(message, len(listed), total)
        status = _status(text, listed, total - len(listed))
        if trailer_size(text, status) <= limit or not listed:
            return text, status
        listed.pop()
