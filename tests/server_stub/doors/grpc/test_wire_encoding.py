"""The hand-written StreamingPull and Pull encodings parse exactly like the protobuf-built ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.core.model import Delivery, StoredMessage
from eoclient.server_stub.doors.grpc.wire_encoding import (
    encode_properties,
    encode_pull,
    encode_received_message,
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


@given(
    deliveries=st.lists(
        st.tuples(st.text(min_size=1, max_size=40), _messages, st.integers(0, 200)), max_size=5
    ),
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
    deliveries=st.lists(
        st.tuples(st.text(min_size=1, max_size=40), _messages, st.integers(0, 200)), max_size=5
    )
)
def test_pull_encoding_matches_protobuf(deliveries: list[tuple[str, StoredMessage, int]]) -> None:
    encoded = encode_pull([Delivery(a, m, n) for a, m, n in deliveries])
    expected = pubsub_pb2.PullResponse(
        received_messages=[translate.received_message(Delivery(a, m, n)) for a, m, n in deliveries]
    )
    assert pubsub_pb2.PullResponse.FromString(encoded) == expected


# Mostly the common message (no attributes, no ordering key) that encode_pull builds
# in place, with the edges of its shortcut: empty data or id, long data.
_plain_messages = st.builds(
    StoredMessage,
    message_id=st.sampled_from(["", "1", "x" * 200]) | st.integers(1, 10**12).map(str),
    data=st.binary(max_size=5) | st.sampled_from([b"", b"d" * 0x3FFF, b"d" * 0x4000]),
    attributes=st.just({}) | st.dictionaries(_text, _text, max_size=2),
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
        max_size=6,
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
