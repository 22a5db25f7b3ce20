"""Labels: the service refuses what breaks its label rules; Google's emulator (0.8.20)
stores whatever it is sent (docs/emulator-differences.md, E9). One test per side of the
difference: if the emulator starts checking labels, ``test_emulator_*`` fails and the
note can go."""

from __future__ import annotations

import uuid

import pytest

import eoclient
from eoclient.errors import InvalidArgument

pytestmark = pytest.mark.emulator

# Each breaks one rule of docs/protocol.md#labels.
BAD_LABELS = {
    "uppercase key": {"Team": "x"},
    "empty key": {"": "x"},
    "key starting with a digit": {"1team": "x"},
    "64-character key": {"k" * 64: "x"},
    "uppercase value": {"team": "X"},
    "64-character value": {"team": "v" * 64},
    "65 labels": {f"k{i}": "v" for i in range(65)},
}


def _name(kind: str) -> str:
    return f"projects/labels/{kind}/l-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("case", list(BAD_LABELS))
async def test_emulator_stores_labels_the_service_refuses(
    emulator: str, served: str, case: str
) -> None:
    labels = BAD_LABELS[case]
    async with eoclient.AdminClient(emulator) as google, eoclient.AdminClient(served) as ours:
        topic = await google.create_topic(_name("topics"), labels=labels)
        assert topic.labels == labels
        subscription = await google.create_subscription(
            _name("subscriptions"), topic.name, labels=labels
        )
        assert subscription.labels == labels
        with pytest.raises(InvalidArgument, match="Invalid labels"):
            await ours.create_topic(_name("topics"), labels=labels)
        plain = await ours.create_topic(_name("topics"))
        with pytest.raises(InvalidArgument, match="Invalid labels"):
            await ours.create_subscription(_name("subscriptions"), plain.name, labels=labels)


async def test_both_store_labels_within_the_rules(emulator: str, served: str) -> None:
    labels = {"team": "payments", "équipe": "café", "env": "", "k" * 63: "v" * 63}
    for address in (emulator, served):
        async with eoclient.AdminClient(address) as admin:
            topic = await admin.create_topic(_name("topics"), labels=labels)
            assert (await admin.get_topic(topic.name)).labels == labels
