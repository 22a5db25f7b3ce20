"""The skipByMessageIds body formats (PIP-423) and the Pulsar id mapping, as tables.

Every 400 text of Pulsar's ``SkipMessageIdsRequest.Deserializer``
(docs/protocol.md#skip-by-message-id) has a row; base64 ids are built with protobuf from our
copy of Pulsar's ``MessageIdData`` (field numbers as in PulsarApi.proto), plus the example
of PIP-423.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient._proto import pulsar_message_id_pb2
from eoclient.server_stub.doors.rest.pulsar_ids import (
    PulsarMessageId,
    PulsarPayloadError,
    encode_message_id,
    message_id_of,
    parse_skip_body,
)


def b64(**fields: int) -> str:
    data = pulsar_message_id_pb2.MessageIdData(**fields).SerializePartialToString()
    return base64.b64encode(data).decode()


# ------------------------------------------------------------------- body formats

GOOD_BODIES = [
    # 2. a bare array of base64 MessageIdData (PIP-423's own example: 12345:4)
    (b'["CLlgEAQwAA==","CLlgEAYwAA=="]', [PulsarMessageId(12345, 4), PulsarMessageId(12345, 6)]),
    (f'["{b64(ledgerId=0, entryId=17)}"]'.encode(), [PulsarMessageId(0, 17)]),
    # padding is optional (Java's basic decoder), nulls are skipped
    (b'["CAAQEQ", null]', [PulsarMessageId(0, 17)]),
    (
        f'["{b64(ledgerId=0, entryId=3, batch_index=0, partition=-1)}"]'.encode(),
        [PulsarMessageId(0, 3, 0, -1)],
    ),
    (f'["{b64(ledgerId=0, entryId=3, batch_index=-1)}"]'.encode(), [PulsarMessageId(0, 3)]),
    (b"[]", []),
    # 3. byteArray: type omitted, empty, any case
    (b'{"messageIds": ["CAAQEQ=="]}', [PulsarMessageId(0, 17)]),
    (b'{"type": "", "messageIds": ["CAAQEQ=="]}', [PulsarMessageId(0, 17)]),
    (b'{"type": null, "messageIds": ["CAAQEQ=="]}', [PulsarMessageId(0, 17)]),
    (b'{"type": "BYTEARRAY", "messageIds": ["CAAQEQ=="]}', [PulsarMessageId(0, 17)]),
    # 1. messageId objects: numbers or numeric strings, batchIndex optional, < 0 absent
    (
        b'{"type":"messageId","messageIds":[{"ledgerId":12345,"entryId":100},'
        b'{"ledgerId":12346,"entryId":200,"batchIndex":5}]}',
        [PulsarMessageId(12345, 100), PulsarMessageId(12346, 200, 5)],
    ),
    (
        b'{"type":"MessageId","messageIds":[{"ledgerId":"0","entryId":"7","batchIndex":"-1"},'
        b"null]}",
        [PulsarMessageId(0, 7)],
    ),
    (
        b'{"type":"messageId","messageIds":[{"ledgerId":0,"entryId":7.9,"batchIndex":null}]}',
        [PulsarMessageId(0, 7)],
    ),
]


@pytest.mark.parametrize(("body", "expected"), GOOD_BODIES)
def test_accepted_bodies(body: bytes, expected: list[PulsarMessageId]) -> None:
    assert parse_skip_body(body) == expected


PREFIX = "Invalid skipByMessageIds payload: "

BAD_BODIES = [
    (b"", "empty body"),
    (b"  \n", "empty body"),
    (b"null", "empty body"),
    (b'"CAAQEQ=="', "unsupported top-level JSON"),
    (b"17", "unsupported top-level JSON"),
    (b"true", "unsupported top-level JSON"),
    (b"{}", "missing messageIds"),
    (b'{"type": "messageId"}', "missing messageIds"),
    (b'{"messageIds": {"12345": "100"}}', "messageIds must be an array"),  # the old map form
    (b'{"messageIds": "CAAQEQ=="}', "unsupported messageIds type"),
    (b'{"messageIds": null}', "unsupported messageIds type"),
    (b'{"type": "map_of_ledgerId_entryId", "messageIds": []}', "unsupported type for array"),
    (b'{"type": "messageId", "messageIds": ["CAAQEQ=="]}', "messageIds elements must be objects"),
    (b'{"type": "messageId", "messageIds": [{"entryId": 1}]}', "missing ledgerId"),
    (b'{"type": "messageId", "messageIds": [{"ledgerId": 0}]}', "missing entryId"),
    (b'{"type": "messageId", "messageIds": [{"ledgerId": "x", "entryId": 1}]}', "invalid ledgerId"),
    (
        b'{"type": "messageId", "messageIds": [{"ledgerId": true, "entryId": 1}]}',
        "invalid ledgerId",
    ),
    (b'{"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": "1 "}]}', "invalid entryId"),
    (b'{"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": [1]}]}', "invalid entryId"),
    (
        b'{"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": 1, "batchIndex": "a"}]}',
        "invalid batchIndex",
    ),
    (
        b'{"type":"messageId","messageIds":[{"ledgerId":0,"entryId":1,"batchIndex":"9999999999"}]}',
        "invalid batchIndex",
    ),
    (b'["not base64!"]', "invalid base64 messageId"),
    (b'["CAAQEQ==\\n"]', "invalid base64 messageId"),
    (b'[""]', "invalid base64 messageId (empty)"),
    (b"[{}]", "invalid base64 messageId (empty)"),  # asText() of an object is ""
]


@pytest.mark.parametrize(("body", "reason"), BAD_BODIES)
def test_refused_bodies_have_pulsars_texts(body: bytes, reason: str) -> None:
    with pytest.raises(PulsarPayloadError) as caught:
        parse_skip_body(body)
    assert str(caught.value) == PREFIX + reason


def test_malformed_json_is_a_payload_error_too() -> None:
    with pytest.raises(PulsarPayloadError, match=r"^Invalid skipByMessageIds payload: malformed"):
        parse_skip_body(b'{"messageIds": [')


def test_base64_that_is_not_a_message_id_data_is_refused() -> None:
    missing_entry = b64(ledgerId=0)
    with pytest.raises(PulsarPayloadError, match="without entryId"):
        parse_skip_body(f'["{missing_entry}"]'.encode())
    with pytest.raises(PulsarPayloadError, match="is not a Pulsar MessageIdData"):
        parse_skip_body(b'["/////w=="]')


# ------------------------------------------------------------------- the mapping

MAPPED = [
    (PulsarMessageId(0, 1), "1"),
    (PulsarMessageId(0, 17), "17"),
    (PulsarMessageId(0, 17, batch_index=0), "17"),
    (PulsarMessageId(0, 17, partition=0), "17"),
    (PulsarMessageId(0, 2**40), str(2**40)),
]


@pytest.mark.parametrize(("item", "message_id"), MAPPED)
def test_ledger_zero_entry_n_is_message_n(item: PulsarMessageId, message_id: str) -> None:
    assert message_id_of(item) == message_id


UNMAPPED = [
    (PulsarMessageId(12345, 4), "no other ledger exists here"),
    (PulsarMessageId(-1, -1), "no other ledger exists here"),
    (PulsarMessageId(0, 0), "no other ledger exists here"),
    (PulsarMessageId(0, 4, batch_index=3), "not batched"),
    (PulsarMessageId(0, 4, partition=2), "not partitioned"),
]


@pytest.mark.parametrize(("item", "why"), UNMAPPED)
def test_ids_naming_no_message_here_are_refused(item: PulsarMessageId, why: str) -> None:
    with pytest.raises(PulsarPayloadError, match=why):
        message_id_of(item)


def test_encode_round_trips_through_the_byte_array_format() -> None:
    encoded = encode_message_id("42")
    assert [message_id_of(i) for i in parse_skip_body(f'["{encoded}"]'.encode())] == ["42"]
    assert str(PulsarMessageId(0, 42, 0)) == "0:42:0"


def test_message_id_data_has_pulsars_field_numbers() -> None:
    # PulsarApi.proto: ledgerId = 1, entryId = 2, partition = 3, batch_index = 4.
    fields = pulsar_message_id_pb2.MessageIdData.DESCRIPTOR.fields_by_name
    numbers = {
        name: fields[name].number for name in ("ledgerId", "entryId", "partition", "batch_index")
    }
    assert numbers == {"ledgerId": 1, "entryId": 2, "partition": 3, "batch_index": 4}
    assert fields["batch_index"].default_value == -1


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["type", "messageIds", "ledgerId", "entryId", "batchIndex", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=64) | _JSON.map(lambda v: json.dumps(v).encode()))
def test_any_body_parses_or_is_a_payload_error(body: bytes) -> None:
    # Anything else (a KeyError, a RecursionError, ...) would be a 500 at the door.
    texts: list[str] = []
    try:
        items = parse_skip_body(body)
    except PulsarPayloadError as error:
        texts.append(str(error))
        items = []
    for item in items:
        try:
            texts.append(f"id {message_id_of(item)}")
        except PulsarPayloadError as error:
            texts.append(str(error))
    prefixes = ("Invalid skipByMessageIds payload: ", "Invalid message id ", "id ")
    assert all(text.startswith(prefixes) for text in texts), texts
