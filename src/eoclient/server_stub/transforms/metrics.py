"""The transforms' Prometheus series, for ``/metrics`` (``observe/metrics.py`` registers
the collector next to the broker's).

No Cloud Monitoring metric counts what a message transform did, so these are eoclient's
own, one series per outcome, counted since the server started:

* ``eoclient_topic_message_transforms_total{topic, outcome}`` — messages of Publish
  requests a topic's transforms ``transformed`` (stored), ``filtered`` (returned null: not
  stored) or ``failed`` (the request was refused);
* ``eoclient_subscription_message_transforms_total{subscription, topic, outcome}`` —
  deliveries a subscription's transforms ``transformed`` (sent), ``filtered`` (acknowledged
  by the server) or ``failed`` (nacked for redelivery).

A resource that never ran a transform has no series; a deleted one's disappear.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from eoclient.errors import NotFound
from eoclient.server_stub.core import names
from eoclient.server_stub.transforms.stage import MessageTransforms, TransformCounts

__all__ = ["TransformCollector"]

_OUTCOMES = ("transformed", "filtered", "failed")


class TransformCollector(Collector):
    """Reads the stage's counts at every scrape (``projects``: only those projects')."""

    def __init__(self, transforms: MessageTransforms, projects: frozenset[str] | None) -> None:
        self._transforms = transforms
        self._projects = projects

    def _visible(self, name: str) -> bool:
        return self._projects is None or names.project_of(name) in self._projects

    def collect(self) -> Iterator[Metric]:
        broker = self._transforms.broker
        topics = CounterMetricFamily(
            "eoclient_topic_message_transforms",
            "Messages published to a topic, by what its message transforms did with them.",
            labels=("topic", "outcome"),
        )
        for topic, counts in sorted(self._transforms.topic_counts.items()):
            if not self._visible(topic):
                continue
            try:
                broker.topics.get(topic)
            except NotFound:
                continue
            _add(topics, [topic], counts)
        yield topics
        subscriptions = CounterMetricFamily(
            "eoclient_subscription_message_transforms",
            "Deliveries of a subscription, by what its message transforms did with them.",
            labels=("subscription", "topic", "outcome"),
        )
        for subscription, counts in sorted(self._transforms.subscription_counts.items()):
            if not self._visible(subscription):
                continue
            try:
                topic = broker.subscriptions.get(subscription).config.topic
            except NotFound:
                continue
            _add(subscriptions, [subscription, topic], counts)
        yield subscriptions


def _add(family: CounterMetricFamily, labels: list[str], counts: TransformCounts) -> None:
    for outcome in _OUTCOMES:
        family.add_metric([*labels, outcome], float(getattr(counts, outcome)))
