"""The hand-written StreamingPull and Pull encodings parse exactly like the protobuf-built ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.core.model import Delivery, StoredMessage
from eoclient.server_stub.doors.grpc.wire_encoding import (
    _attribute_entry,
    _attributes,
    encode_properties,
    encode_pull,
    encode_received_message,
    encode_streaming_pull,
    encode_streaming_response,
    varint,
)
from eoclient.server_stub.services import translate

_text = st.text(max_size=20)
_messages = st.builds(
    StoredMessage,
    message_id=st.integers(min_value=1, max_value=10**12).map(str),
    data=st.binary(max_size=300),
    attributes=st.dictionaries(_text, _text, max_size=4),
    ordering_key=_text,
    publish_time=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    size=st.just(0),
)

# (ack id, message, delivery attempt)
_delivery = st.tuples(st.text(min_size=1, max_size=40), _messages, st.integers(0, 200))


@given(
    deliveries=st.lists(_delivery, max_size=5),
    exactly_once=st.booleans(),
    ordering=st.booleans(),
)
def test_encoding_matches_protobuf(
    deliveries: list[tuple[str, StoredMessage, int]], exactly_once: bool, ordering: bool
) -> None:
    encoded = encode_streaming_response(
        [encode_received_message(a, m, n) for a, m, n in deliveries],
        encode_properties(exactly_once, ordering),
    )
    expected = pubsub_pb2.StreamingPullResponse(
        received_messages=[translate.received_message(Delivery(a, m, n)) for a, m, n in deliveries]
    )
    expected.subscription_properties.exactly_once_delivery_enabled = exactly_once
    expected.subscription_properties.message_ordering_enabled = ordering
    assert pubsub_pb2.StreamingPullResponse.FromString(encoded) == expected


@given(
    deliveries=st.lists(_delivery, max_size=8),
    exactly_once=st.booleans(),
    ordering=st.booleans(),
)
def test_streaming_pull_in_one_loop_encodes_as_each_message_alone(
    deliveries: list[tuple[str, StoredMessage, int]], exactly_once: bool, ordering: bool
) -> None:
    # The door's StreamingPull encoding (encode_pull's loop, then the properties) against
    # the general one, a ReceivedMessage at a time: the same bytes.
    properties = encode_properties(exactly_once, ordering)
    general = encode_streaming_response(
        [encode_received_message(a, m, n) for a, m, n in deliveries], properties
    )
    assert encode_streaming_pull([Delivery(a, m, n) for a, m, n in deliveries], properties) == (
        general
    )


@given(deliveries=st.lists(_delivery, max_size=5))
def test_pull_encoding_matches_protobuf(deliveries: list[tuple[str, StoredMessage, int]]) -> None:
    encoded = encode_pull([Delivery(a, m, n) for a, m, n in deliveries])
    expected = pubsub_pb2.PullResponse(
        received_messages=[translate.received_message(Delivery(a, m, n)) for a, m, n in deliveries]
    )
    assert pubsub_pb2.PullResponse.FromString(encoded) == expected


# Attribute keys and values at the edges of _attributes' one-step entry (1-127 bytes
# encoded; "é" is two bytes, so 64 of them are 128) and of the varints around it.
_edge_text = st.sampled_from(["", "k", "é" * 63, "é" * 64, "v" * 127, "v" * 128, "w" * 0x4000])
_attribute_text = _text | _edge_text
# A few keys and values, so that attribute sets repeat within a call (encode_pull encodes
# each distinct set once) and the same items in another order appear.
_repeating_attributes = st.dictionaries(
    st.sampled_from(["a", "b", ""]), st.sampled_from(["1", "2", ""]), max_size=3
)

# Mostly the common message (no ordering key) that encode_pull builds in place, with the
# edges of its shortcut: empty data or id, long data, attributes of every kind.
_plain_messages = st.builds(
    StoredMessage,
    message_id=st.sampled_from(["", "1", "x" * 200]) | st.integers(1, 10**12).map(str),
    data=st.binary(max_size=5) | st.sampled_from([b"", b"d" * 0x3FFF, b"d" * 0x4000]),
    attributes=st.just({})
    | _repeating_attributes
    | st.dictionaries(_attribute_text, _attribute_text, max_size=3),
    ordering_key=st.just("") | _text,
    publish_time=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    size=st.just(0),
)


@given(
    deliveries=st.lists(
        st.tuples(
            st.text(min_size=1, max_size=40) | st.just("a" * 0x4000),
            _plain_messages | _messages,
            st.integers(0, 200),
        ),
        max_size=12,
    )
)
def test_pull_in_one_loop_encodes_as_each_message_alone(
    deliveries: list[tuple[str, StoredMessage, int]],
) -> None:
    # The general encoder of one ReceivedMessage, each framed as PullResponse field 1
    # (tag 0x0a, then the length): the bytes encode_pull makes in its one loop.
    framed = b""
    for ack_id, message, attempt in deliveries:
        item = encode_received_message(ack_id, message, attempt)
        framed += b"\x0a" + varint(len(item)) + item
    assert encode_pull([Delivery(a, m, n) for a, m, n in deliveries]) == framed


@given(
    attribute_sets=st.lists(
        st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from("12")), max_size=3),
        min_size=2,
        max_size=30,
    )
)
def test_pull_encodes_repeated_attribute_sets_as_each_message_alone(
    attribute_sets: list[list[tuple[str, str]]],
) -> None:
    # Messages of encode_pull's in-place kind only, with few keys and values: sets repeat
    # in a call, also the same keys with other values and the same items in another order,
    # and each must still come out as its own message's encoding.
    deliveries = [
        Delivery(f"a-{n}", StoredMessage(str(n + 1), b"x", dict(items), "", 1.5, 0), 0)
        for n, items in enumerate(attribute_sets)
    ]
    framed = b""
    for delivery in deliveries:
        item = encode_received_message(delivery.ack_id, delivery.message, 0)
        framed += b"\x0a" + varint(len(item)) + item
    assert encode_pull(deliveries) == framed


@given(attributes=st.dictionaries(_attribute_text, _attribute_text, max_size=4))
def test_attributes_in_one_step_encode_as_the_general_entry(attributes: dict[str, str]) -> None:
    # _attributes joins the common entry in one step; _attribute_entry is the general
    # one (each field framed on its own, empty ones omitted): the same bytes.
    general = b"".join(_attribute_entry(k.encode(), v.encode()) for k, v in attributes.items())
    assert _attributes(attributes) == general
    message = pubsub_pb2.PubsubMessage.FromString(general)
    assert dict(message.attributes) == attributes


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_varint_round_trips(value: int) -> None:
    # StreamingPullRequest.max_outstanding_messages is int64 field 7: tag 7 << 3 | 0.
    parsed = pubsub_pb2.StreamingPullRequest.FromString(b"\x38" + varint(value))
    assert parsed.max_outstanding_messages == value


def test_repeated_and_alternating_publish_times_encode_correctly() -> None:
    # The encoder remembers the last publish time it encoded; changing back and
    # forth between times must never reuse a stale encoding.
    times = [1_767_225_600.25, 1_767_225_600.25, 1_767_225_601.5, 1_767_225_600.25, 0.0]
    for index, publish_time in enumerate(times):
        message = StoredMessage(str(index + 1), b"x", {}, "", publish_time, 1)
        encoded = encode_streaming_response(
            [encode_received_message("a-1-1", message, 0)], encode_properties(False, False)
        )
        decoded = pubsub_pb2.StreamingPullResponse.FromString(encoded)
        stamp = decoded.received_messages[0].message.publish_time
        assert stamp.seconds + stamp.nanos / 1e9 == publish_time
