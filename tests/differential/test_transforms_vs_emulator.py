"""Message transforms on ``eoclient serve`` and on Google's emulator (0.8.20).

The emulator stores a topic's and a subscription's ``message_transforms`` and gives them
back, but never runs them: messages are stored and delivered as published, and code that
does not even parse is accepted. eoclient runs them (docs/protocol.md#message-transforms)
and refuses such code with INVALID_ARGUMENT. The same scenario runs on both; each answer
is pinned.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb

pytestmark = pytest.mark.emulator

UPPER = pb.MessageTransform(
    javascript_udf=pb.JavaScriptUDF(
        function_name="up",
        code="function up(m) { if (m.data === 'skip') return null;"
        " return {data: m.data.toUpperCase()}; }",
    )
)
BROKEN = pb.MessageTransform(
    javascript_udf=pb.JavaScriptUDF(function_name="up", code="function up( {")
)


@pytest.fixture(params=["reference", "emulator"])
def target(request: pytest.FixtureRequest, wire_factory: Callable[[str], Wire]) -> tuple[str, Wire]:
    address = request.getfixturevalue("served" if request.param == "reference" else "emulator")
    return request.param, wire_factory(address)


async def test_transforms_are_stored_on_both_and_run_only_on_eoclient(
    target: tuple[str, Wire],
) -> None:
    kind, wire = target
    topic = unique("topic")
    created = await wire.CreateTopic(pb.Topic(name=topic, message_transforms=[UPPER]))
    assert list(created.message_transforms) == [UPPER]
    fetched = await wire.GetTopic(pb.GetTopicRequest(topic=topic))
    assert list(fetched.message_transforms) == [UPPER]
    _, plain = await wire.subscription(topic)
    _, transformed = await wire.subscription(topic, message_transforms=[UPPER])
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=transformed))
    assert list(got.message_transforms) == [UPPER]
    ids = await wire.publish(topic, b"one", b"skip")
    assert len(set(ids)) == 2  # both give the filtered message an id
    delivered = sorted(
        m.message.data for m in await wire.pull(plain, 1 if kind == "reference" else 2)
    )
    if kind == "emulator":
        assert delivered == [b"one", b"skip"]  # stored as published: nothing ran
    else:
        assert delivered == [b"ONE"]  # the topic's transform ran; "skip" was filtered
    await wire.pull_nothing(plain)


async def test_code_that_does_not_parse(target: tuple[str, Wire]) -> None:
    kind, wire = target
    call = wire.CreateTopic(pb.Topic(name=unique("topic"), message_transforms=[BROKEN]))
    if kind == "emulator":
        accepted = await call  # the emulator takes anything
        assert list(accepted.message_transforms) == [BROKEN]
        return
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not parse" in (caught.value.details() or "")
