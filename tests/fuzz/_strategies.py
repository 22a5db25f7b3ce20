"""Hypothesis strategies for google.pubsub.v1 requests, built from the descriptors.

Any request message of the API can be drawn (``request_of(cls)``): each field is set or
not, with values aimed where bugs live — resource names from a small pool of existing
and malformed ones, ack ids from the ids the fuzzer was really given (``@ACK<n>``
placeholders, filled in when sent) and ids that cannot be any, integers at the edges of
their types, Timestamps and Durations at and past the renderable range, Structs with NaN,
field masks naming real and unreal fields. ``mutated(raw)`` damages an encoded request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

PROJECT = "projects/fz"
TOPICS = [f"{PROJECT}/topics/t-aaa", f"{PROJECT}/topics/t-bbb"]
SUBSCRIPTIONS = [f"{PROJECT}/subscriptions/s-aaa", f"{PROJECT}/subscriptions/s-bbb"]
SNAPSHOTS = [f"{PROJECT}/snapshots/n-aaa", f"{PROJECT}/snapshots/n-bbb"]
ACK_PLACEHOLDERS = [f"@ACK{i}" for i in range(4)]  # replaced by ack ids really delivered
# Replaced by a name no resource has yet (so that creations succeed and store what the
# example drew), when the request is sent.
NEW = {"topics": "@NEW-TOPIC", "subscriptions": "@NEW-SUBSCRIPTION", "snapshots": "@NEW-SNAPSHOT"}
BAD_NAMES = [
    "",
    "projects/",
    PROJECT,
    f"{PROJECT}/topics/",
    f"{PROJECT}/topics/ab",
    f"{PROJECT}/topics/goog-x",
    f"{PROJECT}/topics/" + "x" * 300,
    f"{PROJECT}/topics/t-aaa/extra",
    f"{PROJECT}/subscriptions/\u00e9\u00e9\u00e9",
    "projects/fz/topics/t-\x00aa",
    "//",
]
BAD_ACK_IDS = ["", "x-\u00b2-1", "x-" + "9" * 5000 + "-1", "a-1-1", "0-0-0", "-", "\x7f", "ü"]
FILTERS = ['attributes.k = "v"', "hasPrefix(attributes.k, ", "NOT attributes:k", "x" * 300]

_INT_EDGES = {
    "int32": [0, 1, -1, 9, 10, 600, 601, 2**31 - 1, -(2**31)],
    "int64": [0, 1, -1, 1000, 2**31, 2**63 - 1, -(2**63), 10**15],
}
_INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1, "int32"),
    FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1, "int64"),
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1, "int32"),
    FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1, "int64"),
}
# Hypothesis draws the first elements of a sampled list most: the values that cannot be
# rendered come first (past the Duration and Timestamp ranges), then the edges of what the
# service accepts.
_SECONDS = [
    2**63 - 1,
    315_576_000_001,
    253_402_300_800,
    -62_135_596_801,
    -(2**63),
    0,
    1,
    -1,
    59,
    600,
    601,
    86_400,
    7 * 86_400,
    31 * 86_400,
    315_576_000_000,
    253_402_300_799,
    -62_135_596_800,
]
_NANOS = [1_000_000_000, -1, 0, 1, 999_999_999, -1_000_000_000, 2**31 - 1, -(2**31)]

_names = st.sampled_from(TOPICS + SUBSCRIPTIONS + SNAPSHOTS + [PROJECT] + BAD_NAMES)
_text = st.text(max_size=24)
_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    _text,
)
_struct_values = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=8,
)


_KIND_OF_NAME = {
    "google.pubsub.v1.Topic": "topics",
    "google.pubsub.v1.Subscription": "subscriptions",
    "google.pubsub.v1.Snapshot": "snapshots",
    "google.pubsub.v1.CreateSnapshotRequest": "snapshots",
}
_KIND_OF_FIELD = {
    "resource": "subscriptions",  # google.iam.v1: any resource; mostly a subscription
    "topic": "topics",
    "dead_letter_topic": "topics",
    "subscription": "subscriptions",
    "snapshot": "snapshots",
}
_POOLS = {"topics": TOPICS, "subscriptions": SUBSCRIPTIONS, "snapshots": SNAPSHOTS}


def _string(field: FieldDescriptor) -> st.SearchStrategy[str]:
    name = field.name
    if name in ("ack_ids", "modify_deadline_ack_ids"):
        return st.one_of(st.sampled_from(ACK_PLACEHOLDERS + BAD_ACK_IDS), _text)
    kind = _KIND_OF_FIELD.get(name) or (
        _KIND_OF_NAME.get(field.containing_type.full_name) if name == "name" else None
    )
    if kind is not None:  # mostly names of the right kind, existing or new
        right = st.sampled_from([*_POOLS[kind], NEW[kind]])
        return st.one_of(right, right, right, _names, _text)
    if name == "project":
        return st.one_of(st.just(PROJECT), _names, _text)
    if name == "filter":
        return st.one_of(st.sampled_from(FILTERS), _text)
    return _text


def _integer(field: FieldDescriptor) -> st.SearchStrategy[int]:
    low, high, kind = _INT_RANGES[field.cpp_type]
    edges = [v for v in _INT_EDGES[kind] if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        if field.type == FieldDescriptor.TYPE_BYTES:
            return st.binary(max_size=64)
        return _string(field)
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return st.booleans()
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(values), st.sampled_from([-1, 99, 2**31 - 1]))
    if cpp in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    return _integer(field)


@st.composite
def _fill(
    draw: st.DrawFn,
    message: Message,
    depth: int,
    min_fields: int = 0,
    skip: str = "",
    dense: bool = False,
) -> None:
    descriptor: Descriptor = message.DESCRIPTOR
    full_name = descriptor.full_name
    if full_name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        message.seconds = draw(st.sampled_from(_SECONDS))  # type: ignore[attr-defined]
        message.nanos = draw(st.sampled_from(_NANOS))  # type: ignore[attr-defined]
        return
    if full_name == "google.protobuf.Struct":
        for key, value in draw(st.dictionaries(_text, _struct_values, max_size=3)).items():
            message[key] = value  # type: ignore[index]
        return
    if full_name == "google.protobuf.FieldMask":
        paths = st.one_of(st.sampled_from(_MASK_PATHS), _text)
        message.paths.extend(draw(st.lists(paths, max_size=3)))  # type: ignore[attr-defined]
        return
    fields = [f for f in descriptor.fields if f.name != skip]
    # A few fields each: one bad value is enough to refuse a request, and requests that
    # are accepted are the ones that store what was drawn. Dense: every field of nested
    # messages (configs the core stores without reading them: push, BigQuery, Cloud
    # Storage, transforms), where a value that cannot be rendered hides best.
    chosen: set[FieldDescriptor] = set()
    if dense and depth > 0:
        chosen = set(fields)
    elif fields:
        chosen = draw(
            st.sets(st.sampled_from(fields), min_size=min_fields, max_size=min(len(fields), 3))
        )
    for field in sorted(chosen, key=lambda f: f.number):
        _set(draw, message, field, depth, dense)


def _set(
    draw: st.DrawFn, message: Message, field: FieldDescriptor, depth: int, dense: bool
) -> None:
    target = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        keys = draw(st.lists(_text, max_size=3, unique=True))
        for key in keys:
            if value_field.message_type is None:
                target[key] = draw(_scalar(value_field))
            elif depth < 3:
                draw(_fill(target[key], depth + 1, dense=dense))
        return
    if field.is_repeated:
        count = draw(st.integers(0, 3))
        for _ in range(count):
            if field.message_type is None:
                target.append(draw(_scalar(field)))
            elif depth < 3:
                draw(_fill(target.add(), depth + 1, dense=dense))
        return
    if field.message_type is None:
        setattr(message, field.name, draw(_scalar(field)))
    elif depth < 3:
        target.SetInParent()
        draw(_fill(target, depth + 1, dense=dense))


_MASK_PATHS = [
    "labels",
    "ack_deadline_seconds",
    "expire_time",
    "message_retention_duration",
    "expiration_policy",
    "dead_letter_policy",
    "retry_policy",
    "filter",
    "enable_exactly_once_delivery",
    "push_config",
    "cloud_storage_config",
    "message_transforms",
    "schema_settings",
    "detached",
]


# The fields that make a request of each method reach the state (a new name for
# creations, an existing resource otherwise): set in four examples of five.
_KEYS: dict[str, dict[str, str]] = {
    "google.pubsub.v1.Topic": {"name": NEW["topics"]},
    "google.pubsub.v1.UpdateTopicRequest": {"topic.name": TOPICS[0]},
    "google.pubsub.v1.PublishRequest": {"topic": TOPICS[0]},
    "google.pubsub.v1.Subscription": {"name": NEW["subscriptions"], "topic": TOPICS[0]},
    "google.pubsub.v1.UpdateSubscriptionRequest": {"subscription.name": SUBSCRIPTIONS[1]},
    "google.pubsub.v1.CreateSnapshotRequest": {
        "name": NEW["snapshots"],
        "subscription": SUBSCRIPTIONS[1],
    },
    "google.pubsub.v1.UpdateSnapshotRequest": {"snapshot.name": SNAPSHOTS[0]},
    "google.pubsub.v1.SeekRequest": {"subscription": SUBSCRIPTIONS[1]},
    "google.pubsub.v1.AcknowledgeRequest": {"subscription": SUBSCRIPTIONS[0]},
    "google.pubsub.v1.ModifyAckDeadlineRequest": {"subscription": SUBSCRIPTIONS[0]},
    "google.pubsub.v1.PullRequest": {"subscription": SUBSCRIPTIONS[0]},
    "google.pubsub.v1.StreamingPullRequest": {"subscription": SUBSCRIPTIONS[0]},
}


def _apply_keys(message: Message) -> None:
    for dotted, value in _KEYS.get(message.DESCRIPTOR.full_name, {}).items():
        *parents, leaf = dotted.split(".")
        target = message
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, leaf, value)


def request_of(cls: type[Message], dense: bool = False) -> st.SearchStrategy[Message]:
    """A random request of type ``cls``.

    Mostly its key fields are valid (``_KEYS``), so that what else was drawn reaches the
    state; update requests mostly get a mask naming exactly the fields drawn (a random
    mask mostly names fields not set, or is refused). ``dense``: nested messages get
    every field."""

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        draw(_fill(message, 0, min_fields=int(dense), dense=dense))
        updated = _updated_resource(message)
        # Hypothesis leans to small draws: 0 (the usual case here) keeps the request valid.
        if updated is not None and draw(st.integers(0, 2)) < 2:
            updated.Clear()
            draw(_fill(updated, 0, min_fields=1, skip="name", dense=dense))
            paths = [f.name for f, _ in updated.ListFields() if f.name != "name"]
            message.update_mask.paths[:] = paths  # type: ignore[attr-defined]
        if draw(st.integers(0, 4)) < 4:
            _apply_keys(message)
        return message

    return build()


def _updated_resource(message: Message) -> Message | None:
    for field in ("topic", "subscription", "snapshot"):
        descriptor = message.DESCRIPTOR.fields_by_name.get(field)
        if (
            descriptor is not None
            and descriptor.message_type is not None
            and "update_mask" in message.DESCRIPTOR.fields_by_name
        ):
            resource: Message = getattr(message, field)
            return resource
    return None


def mutated(raw: bytes) -> st.SearchStrategy[bytes]:
    """``raw`` with a few bytes flipped, inserted or cut (encoded requests, JSON bodies)."""

    @st.composite
    def damage(draw: st.DrawFn) -> bytes:
        data = bytearray(raw)
        for _ in range(draw(st.integers(1, 4))):
            edit: Callable[[bytearray], None] = draw(st.sampled_from(_EDITS))
            position = draw(st.integers(0, max(len(data), 1) - 1))
            value = draw(st.integers(0, 255))
            edit_at(data, edit, position, value)
        return bytes(data)

    return damage()


def _flip(data: bytearray, position: int, value: int) -> None:
    if data:
        data[position] ^= value or 1


def _insert(data: bytearray, position: int, value: int) -> None:
    data.insert(position, value)


def _cut(data: bytearray, position: int, value: int) -> None:
    del data[position:]


_EDITS: list[Any] = [_flip, _insert, _cut]


def edit_at(data: bytearray, edit: Any, position: int, value: int) -> None:
    edit(data, min(position, max(len(data) - 1, 0)), value)
