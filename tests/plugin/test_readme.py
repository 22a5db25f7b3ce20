"""The README's pytest plugin example, run as written (with a small ``myapp``)."""

from __future__ import annotations

import re
from pathlib import Path

import google.cloud.pubsub_v1  # noqa: F401
import pytest

# Imported here, before pytester snapshots sys.modules: an in-process inner run drops
# the modules it imported, and importing google.cloud.pubsub_v1 a second time fails
# (its protos are already in protobuf's default descriptor pool).

pytest_plugins = ["pytester"]

README = Path(__file__).parents[2] / "README.md"

# The app the example tests: bills what is pending with the official (sync) client.
MYAPP = """
from google.cloud import pubsub_v1


def bill_pending(subscription):
    with pubsub_v1.SubscriberClient() as subscriber:
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
        ack_ids = [m.ack_id for m in response.received_messages]
        if ack_ids:
            subscriber.acknowledge(subscription=subscription, ack_ids=ack_ids, timeout=10)
        return len(ack_ids)
"""


def readme_example() -> str:
    section = README.read_text().split("## Testing your app", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the plugin section of README.md lost its example"
    return found.group(1)


def test_the_readme_example_passes(pytester: pytest.Pytester) -> None:
    example = readme_example()
    assert len(example.strip().splitlines()) <= 12  # "a ten-line example"
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\nfilterwarnings = error\n"
    )
    pytester.makepyfile(myapp=MYAPP, test_readme_example=example)
    pytester.syspathinsert()
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
