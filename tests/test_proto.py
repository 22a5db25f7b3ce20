"""The generated wire code: fresh, and living beside google-cloud-pubsub."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_regen() -> object:
    spec = importlib.util.spec_from_file_location(
        "regen_proto", ROOT / "scripts" / "regen_proto.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["regen_proto"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_not_stale() -> None:
    regen = _load_regen()
    assert regen.stale_files() == []  # type: ignore[attr-defined]


def test_coexists_with_google_cloud_pubsub_in_one_process() -> None:
    # Importing google-cloud-pubsub registers google.pubsub.v1.* in the default pool;
    # ours lives in a private pool, so both import and both round-trip a message.
    from google.pubsub_v1.types import pubsub as official

    from eoclient._proto import pubsub_pb2

    ours = pubsub_pb2.PubsubMessage(data=b"payload", attributes={"k": "v"}, ordering_key="key")
    ours.publish_time.FromSeconds(1_767_225_600)
    theirs = official.PubsubMessage.deserialize(ours.SerializeToString())
    assert theirs.data == b"payload"
    assert dict(theirs.attributes) == {"k": "v"}
    assert theirs.ordering_key == "key"
    back = pubsub_pb2.PubsubMessage.FromString(official.PubsubMessage.serialize(theirs))
    assert back == ours

    request = official.StreamingPullRequest(
        subscription="projects/p/subscriptions/s", protocol_version=1
    )
    parsed = pubsub_pb2.StreamingPullRequest.FromString(
        official.StreamingPullRequest.serialize(request)
    )
    assert parsed.subscription == "projects/p/subscriptions/s"
    assert parsed.protocol_version == 1


def test_current_fields_have_their_wire_numbers() -> None:
    from eoclient._proto import pubsub_pb2

    def number(message: object, field: str) -> int:
        return message.DESCRIPTOR.fields_by_name[field].number  # type: ignore[attr-defined, no-any-return]

    assert number(pubsub_pb2.StreamingPullResponse, "acknowledge_confirmation") == 5
    assert number(pubsub_pb2.StreamingPullResponse, "modify_ack_deadline_confirmation") == 3
    assert number(pubsub_pb2.StreamingPullResponse, "subscription_properties") == 4
    assert number(pubsub_pb2.StreamingPullRequest, "protocol_version") == 10
    assert number(pubsub_pb2.Subscription, "enable_exactly_once_delivery") == 16
    assert number(pubsub_pb2.Subscription, "state") == 19
    assert number(pubsub_pb2.Subscription, "detached") == 15
    assert number(pubsub_pb2.ModifyAckDeadlineRequest, "ack_ids") == 4
    assert number(pubsub_pb2.ModifyAckDeadlineRequest, "ack_deadline_seconds") == 3
