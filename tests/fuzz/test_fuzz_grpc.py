"""Random and mutated requests on every gRPC method of google.pubsub.v1.

Each example is one request — drawn from the request's descriptor, random bytes, or an
encoded request with bytes flipped, inserted or cut — sent to a live reference server.
The answer must be a documented status (never UNKNOWN, INTERNAL or a hang), and after
every example the server must still deliver a sentinel message exactly once and render
every resource of the fuzzed project (``Target.check_alive``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoclient._proto import broker_policies_pb2, iam_policy_pb2, schema_pb2
from eoclient._proto import pubsub_pb2 as pb

from ._harness import DERANDOMIZE, EXAMPLES, METHODS, Target, assert_documented
from ._strategies import SUBSCRIPTIONS, mutated, request_of

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=DERANDOMIZE,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# Damaged bytes mostly fail to decode, which one path handles: fewer examples.
DAMAGED_SETTINGS = settings(FUZZ_SETTINGS, max_examples=max(EXAMPLES // 4, 5))


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    fuzzed = Target()
    yield fuzzed
    fuzzed.close()


def _request_class(method: str) -> type[Message]:
    # google.pubsub.v1's services, and the ones served beside them (IAMPolicy, ...;
    # eoclient.broker.v1, issue 12).
    descriptors = (
        pb.DESCRIPTOR,
        iam_policy_pb2.DESCRIPTOR,
        schema_pb2.DESCRIPTOR,
        broker_policies_pb2.DESCRIPTOR,
    )
    for descriptor in descriptors:
        for service in descriptor.services_by_name.values():
            if method in service.methods_by_name:
                return message_factory.GetMessageClass(service.methods_by_name[method].input_type)
    raise KeyError(method)


def _tame(method: str, request: Message) -> Message:
    # A Pull that waits for messages waits a second: examples would mostly wait.
    if method == "Pull":
        request.return_immediately = True  # type: ignore[attr-defined]
    return request


def _whole(method: str) -> st.SearchStrategy[Message]:
    return request_of(_request_class(method)).map(lambda m: _tame(method, m))


def _damaged(method: str) -> st.SearchStrategy[bytes]:
    return st.one_of(
        _whole(method).flatmap(lambda m: mutated(m.SerializeToString())),
        st.binary(max_size=48),
    )


UNARY = sorted(name for name in METHODS if name != "StreamingPull")


@pytest.mark.parametrize("method", UNARY)
def test_unary_methods_survive_random_requests(target: Target, method: str) -> None:
    @FUZZ_SETTINGS
    @given(request=_whole(method))
    def run(request: Message) -> None:
        target.baseline()
        code, details = target.unary(method, target.fill_placeholders(request))
        assert_documented(code, details, method)
        target.check_alive()

    run()


RESOURCE_WRITES = [
    "CreateTopic",
    "UpdateTopic",
    "CreateSubscription",
    "UpdateSubscription",
    "CreateSnapshot",
    "UpdateSnapshot",
    "Seek",
    "SetTopicPolicies",  # eoclient.broker.v1 (issue 12)
    "SetSubscriptionPolicies",
    "SeekWithOutcome",
]


@pytest.mark.parametrize("method", RESOURCE_WRITES)
def test_resource_writes_survive_dense_random_configs(target: Target, method: str) -> None:
    # What is stored must render later: every field of each nested config drawn at once.
    @FUZZ_SETTINGS
    @given(request=request_of(_request_class(method), dense=True))
    def run(request: Message) -> None:
        target.baseline()
        code, details = target.unary(method, target.fill_placeholders(request))
        assert_documented(code, details, method)
        target.check_alive()

    run()


@pytest.mark.parametrize("method", UNARY)
def test_unary_methods_survive_damaged_requests(target: Target, method: str) -> None:
    @DAMAGED_SETTINGS
    @given(raw=_damaged(method))
    def run(raw: bytes) -> None:
        target.baseline()
        code, details = target.unary(method, raw)
        assert_documented(code, details, method)
        target.check_alive()

    run()


def _opening(request: Message) -> Message:
    """A first request that opens a stream (what else it carries is as drawn)."""
    request.subscription = SUBSCRIPTIONS[0]  # type: ignore[attr-defined]
    request.stream_ack_deadline_seconds = 60  # type: ignore[attr-defined]
    return request


def _first_requests() -> st.SearchStrategy[Any]:
    drawn = request_of(pb.StreamingPullRequest)
    return st.one_of(
        drawn.map(_opening),
        drawn,
        drawn.flatmap(lambda r: mutated(_opening(r).SerializeToString())),
    )


def _later_requests() -> st.SearchStrategy[Any]:
    drawn = request_of(pb.StreamingPullRequest)
    return st.one_of(drawn, drawn.flatmap(lambda r: mutated(r.SerializeToString())))


def test_streaming_pull_survives_random_request_sequences(target: Target) -> None:
    @FUZZ_SETTINGS
    @given(first=_first_requests(), later=st.lists(_later_requests(), max_size=3))
    def run(first: Any, later: list[Any]) -> None:
        target.baseline()
        requests: list[bytes] = []
        for request in [first, *later]:
            if isinstance(request, Message):
                request = target.fill_placeholders(request).SerializeToString()
            requests.append(request)
        code, details, _ = target.stream(requests)
        assert_documented(code, details, "StreamingPull")
        target.check_alive()

    run()
