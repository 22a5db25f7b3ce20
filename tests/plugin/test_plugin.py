"""eoclient's pytest plugin, exercised the way a user meets it: test files run by pytest
(pytester), with the plugin loaded from its ``pytest11`` entry point."""

from __future__ import annotations

import importlib.metadata

import google.cloud.pubsub_v1  # noqa: F401
import pytest

# Imported here, before pytester snapshots sys.modules: an in-process inner run drops
# the modules it imported, and importing google.cloud.pubsub_v1 a second time fails
# (its protos are already in protobuf's default descriptor pool).

pytest_plugins = ["pytester"]

# The inner runs' settings: strict asyncio mode (pytest-asyncio's default, what a user
# has without configuring it), warnings as errors as in this project.
INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def test_the_entry_point_is_registered() -> None:
    points = importlib.metadata.entry_points(group="pytest11")
    assert {p.name: p.value for p in points}.get("eoclient") == "eoclient.pytest_plugin"


# A user's suite, run once (each inner pytest run costs ~1.5 s): what each file shows is
# in its name.
USERS_CONFTEST = """
import pytest


@pytest.fixture
def left_behind(pubsub_server):
    # Set up before the factories (first in the test's arguments), so torn down after
    # them: what it sees is what the factories left.
    found = {}
    yield found
    project = pubsub_server.project
    found["topics"] = pubsub_server.admin(lambda a: a.list_topics(project).collect())
    found["subs"] = pubsub_server.admin(lambda a: a.list_subscriptions(project).collect())
    assert found == {"topics": [], "subs": []}, found


@pytest.fixture
def pubsub_project(request):
    return "mine" if request.node.name == "test_project_override" else "test-project"
"""

USERS_TESTS = {
    "test_official_client": """
        import os
        from google.cloud import pubsub_v1

        def test_publish_and_pull(pubsub_server, pubsub_subscription_factory):
            sub = pubsub_subscription_factory(name="billing", ack_deadline_seconds=30)
            assert os.environ["PUBSUB_EMULATOR_HOST"] == pubsub_server.address
            assert os.environ["PUBSUB_PROJECT_ID"] == "test-project"
            assert sub.name == "projects/test-project/subscriptions/billing"
            assert sub.topic == "projects/test-project/topics/topic-1"
            publisher = pubsub_v1.PublisherClient()   # finds the server by the variable
            publisher.publish(sub.topic, b"hello", origin="test").result(timeout=10)
            with pubsub_v1.SubscriberClient() as subscriber:
                response = subscriber.pull(subscription=sub.name, max_messages=5, timeout=10)
                [received] = response.received_messages
                assert received.message.data == b"hello"
                assert received.message.attributes["origin"] == "test"
                subscriber.acknowledge(subscription=sub.name, ack_ids=[received.ack_id])
        """,
    "test_async_clients": """
        import pytest
        from eoclient import AcknowledgeStatus

        @pytest.mark.asyncio
        async def test_exactly_once(pubsub_admin, pubsub_publisher, pubsub_subscriber,
                                    pubsub_subscription_factory):
            sub = pubsub_subscription_factory(enable_exactly_once_delivery=True)
            assert (await pubsub_admin.get_subscription(sub.name)).enable_exactly_once_delivery
            await pubsub_publisher.publish(sub.topic, b"once")
            [message] = await pubsub_subscriber.pull(sub.name)
            assert message.data == b"once"
            assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
        """,
    "test_fake_clock": """
        import pytest

        @pytest.mark.asyncio
        async def test_an_unacked_message_comes_back(
            pubsub_clock, pubsub_server, pubsub_subscription_factory, pubsub_publisher,
            pubsub_subscriber,
        ):
            assert pubsub_clock.now() == 1_767_225_600.0   # 2026-01-01T00:00:00Z
            sub = pubsub_subscription_factory(ack_deadline_seconds=10)
            message_id = await pubsub_publisher.publish(sub.topic, b"late")
            [first] = await pubsub_subscriber.pull(sub.name)
            assert first.publish_time.year == 2026
            pubsub_clock.advance(9)
            assert await pubsub_subscriber.pull(sub.name) == []     # still leased
            pubsub_clock.advance(2)                                  # deadline passed
            [again] = await pubsub_subscriber.pull(sub.name)
            assert again.message_id == message_id
            history = pubsub_server.history(sub.name, message_id)
            assert [d.time - pubsub_clock.fake.DEFAULT_START for d in history.deliveries] == [
                0, 11
            ]
        """,
    "test_faults": """
        import pytest
        from eoclient import AcknowledgeStatus
        from eoclient.errors import PermissionDenied

        @pytest.mark.asyncio
        async def test_faults(pubsub_faults, pubsub_server, pubsub_admin, pubsub_publisher,
                              pubsub_subscriber, pubsub_subscription_factory):
            assert pubsub_faults is pubsub_server.faults
            sub = pubsub_subscription_factory(enable_exactly_once_delivery=True)
            pubsub_faults.fail("GetSubscription", "PERMISSION_DENIED", "no peeking")
            with pytest.raises(PermissionDenied, match="no peeking"):
                await pubsub_admin.get_subscription(sub.name)
            await pubsub_admin.get_subscription(sub.name)   # only the next call failed
            message_id = await pubsub_publisher.publish(sub.topic, b"x")
            pubsub_faults.fail_ack(sub.name, message_id, "PERMANENT_FAILURE_OTHER")
            [message] = await pubsub_subscriber.pull(sub.name)
            assert await message.ack_with_response() is AcknowledgeStatus.OTHER
            history = pubsub_server.history(sub.name, message_id)
            assert [a.failure for a in history.acks] == ["PERMANENT_FAILURE_OTHER"]
            await pubsub_publisher.publish(sub.topic, b"streamed")
            async with pubsub_subscriber.subscribe(sub.name) as stream:
                [streamed] = [m async for m in _first(stream)]
                assert streamed.data == b"streamed"
                assert await streamed.ack_with_response() is AcknowledgeStatus.SUCCESS
                assert pubsub_server.open_streams() == 1
                assert pubsub_faults.drop_streams() == 1
            pubsub_faults.fail("Publish", "INVALID_ARGUMENT", times=-1)
            pubsub_faults.clear()
            await pubsub_publisher.publish(sub.topic, b"after clear")

        async def _first(stream):
            async for message in stream:
                yield message
                return
        """,
    "test_cleanup": """
        def test_make_and_leave(left_behind, pubsub_topic_factory, pubsub_subscription_factory,
                                pubsub_server):
            topic = pubsub_topic_factory("orders", labels={"team": "pay"})
            assert topic.labels == {"team": "pay"}
            pubsub_subscription_factory(topic)
            pubsub_subscription_factory("orders", "audit")
            pubsub_subscription_factory()            # with a topic of its own
            gone = pubsub_subscription_factory(topic, "gone")
            pubsub_server.admin(lambda a: a.delete_subscription(gone.name))  # deleted already
        """,
    "test_fresh_servers": """
        seen = []

        def test_one(pubsub_server, pubsub_topic_factory):
            seen.append(pubsub_server.address)
            pubsub_topic_factory("orders")

        def test_two(pubsub_server, pubsub_topic_factory):
            assert pubsub_server.address != seen[0]
            pubsub_topic_factory("orders")     # no ALREADY_EXISTS: a new server

        def test_project_override(pubsub_server, pubsub_topic_factory):
            assert pubsub_topic_factory().name == "projects/mine/topics/topic-1"
        """,
}


def test_the_fixtures_in_a_users_suite(inner: pytest.Pytester) -> None:
    inner.makeconftest(USERS_CONFTEST)
    inner.makepyfile(**USERS_TESTS)
    result = inner.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=8)


def test_without_pytest_asyncio(pytester: pytest.Pytester) -> None:
    inner = pytester
    inner.makeini("[pytest]\nfilterwarnings = error\n")
    inner.makepyfile(
        """
        def test_sync_fixtures_work(pubsub_server, pubsub_clock, pubsub_subscription_factory):
            sub = pubsub_subscription_factory()
            pubsub_clock.advance(5)
            assert sub.topic.startswith("projects/test-project/topics/")

        def test_asyncio_client_requested(pubsub_admin):
            pass
        """
    )
    result = inner.runpytest("-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*pubsub_admin is an asyncio client: it needs pytest-asyncio (pip install*"]
    )


def test_fixtures_are_listed_with_their_help(inner: pytest.Pytester) -> None:
    result = inner.runpytest("--fixtures", "-p", "no:cacheprovider")
    for name in (
        "pubsub_server",
        "pubsub_project",
        "pubsub_clock",
        "pubsub_faults",
        "pubsub_topic_factory",
        "pubsub_subscription_factory",
        "pubsub_admin",
        "pubsub_publisher",
        "pubsub_subscriber",
    ):
        result.stdout.fnmatch_lines([f"{name} -- *eoclient*pytest_plugin*"])
