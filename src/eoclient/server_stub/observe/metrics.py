"""Prometheus metrics of the reference server, at ``/metrics`` on the REST door.

Named after Cloud Monitoring's Pub/Sub metrics (``pubsub.googleapis.com/...``, the
Google Cloud metrics list, "pubsub" section) where one exists, so dashboards and alerts
carry over: the path becomes the name, a cumulative count gets ``_total`` and a time its
unit. Every subscription series has the labels ``subscription`` and ``topic`` and every
topic series ``topic``, holding full resource names (``projects/p/subscriptions/s``).

================================================  =========================================
Prometheus (type)                                  Cloud Monitoring metric (what it counts)
================================================  =========================================
pubsub_subscription_num_undelivered_messages (g)   subscription/num_undelivered_messages
                                                   (unacknowledged: waiting or leased)
pubsub_subscription_backlog_bytes (g)              subscription/backlog_bytes
pubsub_subscription_oldest_unacked_message_        subscription/oldest_unacked_message_age
age_seconds (g)                                    (0 with no backlog)
pubsub_subscription_num_outstanding_messages (g)   subscription/num_outstanding_messages
                                                   (leased now; Cloud reports it for push
                                                   only, here every lease counts)
pubsub_subscription_sent_message_count_total (c)   subscription/sent_message_count
pubsub_subscription_ack_message_count_total (c)    subscription/ack_message_count
pubsub_subscription_mod_ack_deadline_message_      subscription/mod_ack_deadline_message_count
count_total (c)                                    (extensions; a 0 s modack is a nack)
pubsub_subscription_nack_requests_total (c)        subscription/nack_requests (messages)
pubsub_subscription_expired_ack_deadlines_count_   subscription/expired_ack_deadlines_count
total (c)
pubsub_subscription_exactly_once_warning_count_    subscription/exactly_once_warning_count:
total (c) {operation_type, reason}                 ack ids of Acknowledge ("ack") or
                                                   ModifyAckDeadline ("modack") that failed,
                                                   by ErrorInfo reason (PERMANENT_FAILURE_
                                                   INVALID_ACK_ID, TRANSIENT_FAILURE_
                                                   UNORDERED_ACK_ID, injected faults)
pubsub_subscription_dead_letter_message_count_     subscription/dead_letter_message_count
total (c)                                          (forwarded; a forward that cannot happen
                                                   because the topic is gone is not counted)
pubsub_subscription_open_streaming_pulls (g)       subscription/open_streaming_pulls, by
{status}                                           status: ok, suspended_max_outstanding_
                                                   messages_exceeded / _bytes_exceeded
pubsub_topic_send_request_count_total (c)          topic/send_request_count (Publish requests
                                                   that succeeded; refused ones are not)
pubsub_topic_send_message_operation_count_         topic/send_message_operation_count
total (c)                                          (messages published; deprecated in Cloud
                                                   for topic/message_sizes' count)
pubsub_topic_byte_cost_total (c)                   topic/byte_cost (the Publish requests'
                                                   serialized sizes)
================================================  =========================================

This server's own (``eoclient_``; no Cloud metric exists):

* ``eoclient_subscription_policy_acked_messages_total{reason}`` — acknowledged by the
  server, not a subscriber: ``filtered`` (did not match the filter; Cloud counts these as
  ack_message_count with delivery_type "filter"), ``skipped`` (skip by id),
  ``evicted`` (backlog quota), ``expired_by_ttl`` (message TTL);
* ``eoclient_subscription_discarded_messages_total`` — dropped unacknowledged when older
  than the subscription's retention;
* ``eoclient_topic_backlog_quota_publishes_total{outcome}`` — Publish requests a backlog
  quota held then admitted (``held_admitted``), held then refused (``held_refused``) or
  refused at once (``refused``);
* ``eoclient_topic_message_transforms_total{outcome}`` and
  ``eoclient_subscription_message_transforms_total{outcome}`` — what message transforms
  did: ``transformed``, ``filtered``, ``failed`` (``transforms/metrics.py``);
* ``eoclient_topic_retained_messages``, ``eoclient_topic_retained_bytes``,
  ``eoclient_topic_oldest_retained_message_age_seconds`` — what a topic's retention (its
  policy and its message_retention_duration) keeps (topics with either only).

Plus the Python client's process and runtime collectors (``process_*``, ``python_*``).
Counters start at zero when the server starts (a durable server's backlog gauges come back
from its store, its counters do not), and a deleted resource's series disappear.

Reading: the values come from ``Broker.stats()`` at scrape time (nothing is kept for
Prometheus on the request path); a scrape takes no lease and changes no state. Each
server has its own ``CollectorRegistry``, so servers in one process do not mix.

Access: the REST door's rules apply as to every other path (``rest.py``, ``security.py``):
Host must be allowed (a scraper from another machine needs ``--allow-host``), an Origin
header must be allowed (Prometheus sends none). With ``--auth-token-file`` a scrape needs
a token (``authorization: Bearer``, Prometheus' ``authorization`` scrape setting, or
``?access_token=``); a token limited to some projects sees only their topics and
subscriptions, and only a ``*`` token sees the process metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.core import Broker, names
from eoclient.server_stub.core.stats import BrokerStats, SubscriptionStats, TopicStats
from eoclient.server_stub.doors.rest.errors import HttpProblem
from eoclient.server_stub.transforms import MessageTransforms
from eoclient.server_stub.transforms.metrics import TransformCollector

METRICS_PATH = "/metrics"
_METHODS = ("GET", "HEAD")

_SUBSCRIPTION_LABELS = ("subscription", "topic")
_TOPIC_LABELS = ("topic",)


def _subscription_families(stats: Iterable[SubscriptionStats]) -> Iterator[Metric]:
    subscriptions = list(stats)

    def family(
        name: str, documentation: str, *, counter: bool, extra: tuple[str, ...] = ()
    ) -> CounterMetricFamily | GaugeMetricFamily:
        labels = [*_SUBSCRIPTION_LABELS, *extra]
        if counter:
            return CounterMetricFamily(name, documentation, labels=labels)
        return GaugeMetricFamily(name, documentation, labels=labels)

    simple: tuple[tuple[str, str, bool, str], ...] = (
        (
            "pubsub_subscription_num_undelivered_messages",
            "Unacknowledged messages (waiting or leased) in the subscription.",
            False,
            "undelivered_messages",
        ),
        (
            "pubsub_subscription_backlog_bytes",
            "Total size of the subscription's unacknowledged messages, in bytes.",
            False,
            "backlog_bytes",
        ),
        (
            "pubsub_subscription_oldest_unacked_message_age_seconds",
            "Age of the oldest unacknowledged message since its publish (0: none).",
            False,
            "oldest_unacked_age",
        ),
        (
            "pubsub_subscription_num_outstanding_messages",
            "Messages leased to subscribers and not acknowledged yet.",
            False,
            "outstanding_messages",
        ),
        (
            "pubsub_subscription_sent_message_count",
            "Messages sent to subscribers (Pull and StreamingPull), redeliveries included.",
            True,
            "delivered",
        ),
        (
            "pubsub_subscription_ack_message_count",
            "Messages acknowledged by Acknowledge requests (or a stream's ack ids).",
            True,
            "acked",
        ),
        (
            "pubsub_subscription_mod_ack_deadline_message_count",
            "Messages whose ack deadline a ModifyAckDeadline extended.",
            True,
            "modacked",
        ),
        (
            "pubsub_subscription_nack_requests",
            "Messages nacked (ModifyAckDeadline with 0 s); each nack counts.",
            True,
            "nacked",
        ),
        (
            "pubsub_subscription_expired_ack_deadlines_count",
            "Messages whose ack deadline expired while they were leased.",
            True,
            "expired",
        ),
        (
            "pubsub_subscription_dead_letter_message_count",
            "Messages forwarded to the subscription's dead-letter topic.",
            True,
            "dead_lettered",
        ),
        (
            "eoclient_subscription_discarded_messages",
            "Messages dropped unacknowledged, older than the subscription's retention.",
            True,
            "discarded",
        ),
    )
    for name, documentation, counter, attribute in simple:
        metric = family(name, documentation, counter=counter)
        for s in subscriptions:
            metric.add_metric([s.name, s.topic], float(getattr(s, attribute)))
        yield metric

    warnings = family(
        "pubsub_subscription_exactly_once_warning_count",
        "Ack ids of Acknowledge / ModifyAckDeadline requests that failed (may lead to "
        "redeliveries), by operation and ErrorInfo reason.",
        counter=True,
        extra=("operation_type", "reason"),
    )
    for s in subscriptions:
        for (operation, reason), count in sorted(s.ack_failures.items()):
            warnings.add_metric([s.name, s.topic, operation, reason], float(count))
    yield warnings

    streams = family(
        "pubsub_subscription_open_streaming_pulls",
        "Open StreamingPull streams, by status (suspended: the stream's flow control is full).",
        counter=False,
        extra=("status",),
    )
    for s in subscriptions:
        for status, count in sorted(s.streams.items()):
            streams.add_metric([s.name, s.topic, status], float(count))
    yield streams

    by_policy = family(
        "eoclient_subscription_policy_acked_messages",
        "Messages acknowledged by the server rather than a subscriber, by reason.",
        counter=True,
        extra=("reason",),
    )
    for s in subscriptions:
        for reason, count in (
            ("filtered", s.filtered),
            ("skipped", s.skipped),
            ("evicted", s.evicted),
            ("expired_by_ttl", s.expired_by_ttl),
        ):
            by_policy.add_metric([s.name, s.topic, reason], float(count))
    yield by_policy


def _topic_families(stats: Iterable[TopicStats]) -> Iterator[Metric]:
    topics = list(stats)
    for name, documentation, attribute in (
        (
            "pubsub_topic_send_request_count",
            "Publish requests that stored their messages.",
            "publish_requests",
        ),
        (
            "pubsub_topic_send_message_operation_count",
            "Messages published.",
            "published_messages",
        ),
        (
            "pubsub_topic_byte_cost",
            "Bytes of the Publish requests that stored their messages (serialized size).",
            "published_bytes",
        ),
    ):
        counter = CounterMetricFamily(name, documentation, labels=_TOPIC_LABELS)
        for t in topics:
            counter.add_metric([t.name], float(getattr(t, attribute)))
        yield counter

    quota = CounterMetricFamily(
        "eoclient_topic_backlog_quota_publishes",
        "Publish requests a backlog quota held then admitted, held then refused, or refused.",
        labels=[*_TOPIC_LABELS, "outcome"],
    )
    for t in topics:
        quota.add_metric([t.name, "held_admitted"], float(t.held_publishes - t.held_then_refused))
        quota.add_metric([t.name, "held_refused"], float(t.held_then_refused))
        quota.add_metric([t.name, "refused"], float(t.refused_publishes))
    yield quota

    retained = [t for t in topics if t.retained_messages is not None]
    for name, documentation, attribute in (
        (
            "eoclient_topic_retained_messages",
            "Messages the topic's retention policy keeps.",
            "retained_messages",
        ),
        (
            "eoclient_topic_retained_bytes",
            "Bytes the topic's retention policy keeps.",
            "retained_bytes",
        ),
        (
            "eoclient_topic_oldest_retained_message_age_seconds",
            "Age of the oldest message the topic's retention policy keeps (0: none).",
            "oldest_retained_age",
        ),
    ):
        gauge = GaugeMetricFamily(name, documentation, labels=_TOPIC_LABELS)
        for t in retained:
            gauge.add_metric([t.name], float(getattr(t, attribute) or 0))
        yield gauge


def families(stats: BrokerStats) -> Iterator[Metric]:
    """The Prometheus metric families of one ``Broker.stats()`` reading."""
    yield from _subscription_families(stats.subscriptions)
    yield from _topic_families(stats.topics)


def visible_to(stats: BrokerStats, projects: frozenset[str]) -> BrokerStats:
    """Only the topics and subscriptions of ``projects`` (a token's grant)."""
    return BrokerStats(
        tuple(s for s in stats.subscriptions if names.project_of(s.name) in projects),
        tuple(t for t in stats.topics if names.project_of(t.name) in projects),
    )


class BrokerCollector(Collector):
    """Reads the broker at every scrape (``projects``: only those projects' resources)."""

    def __init__(self, broker: Broker, projects: frozenset[str] | None = None) -> None:
        self._broker = broker
        self._projects = projects

    def collect(self) -> Iterator[Metric]:
        stats = self._broker.stats()
        if self._projects is not None:
            stats = visible_to(stats, self._projects)
        return families(stats)


@dataclass
class ServerMetrics:
    """One reference server's metrics: its own registry, rendered for each scrape."""

    broker: Broker
    # More series beside the broker's (import topics, exports), for a grant's projects (None:
    # every project).
    extra: Callable[[frozenset[str] | None], Iterable[Collector]] = lambda _projects: ()
    # Message transforms' counts (transforms/metrics.py), when the server runs them.
    transforms: MessageTransforms | None = None
    registry: CollectorRegistry = field(init=False)

    def __post_init__(self) -> None:
        # auto_describe=False: describing a custom collector would collect it once more.
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(self.broker))
        if self.transforms is not None:
            self.registry.register(TransformCollector(self.transforms, None))
        for collector in self.extra(None):
            self.registry.register(collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def render(self, accept: str | None, grant: Grant | None) -> tuple[bytes, str]:
        """The exposition for a scraper's ``Accept`` header (Prometheus text, or
        OpenMetrics when asked) and its grant; (body, Content-Type)."""
        encoder, content_type = choose_encoder(accept or "")
        if grant is None or grant.every_project:
            return encoder(self.registry), content_type
        limited = CollectorRegistry(auto_describe=False)
        limited.register(BrokerCollector(self.broker, grant.projects))
        if self.transforms is not None:
            limited.register(TransformCollector(self.transforms, grant.projects))
        for collector in self.extra(grant.projects):
            limited.register(collector)
        return encoder(limited), content_type

    def matches(self, path: str) -> bool:
        return path == METRICS_PATH

    async def response(
        self, request: web.Request, grant: Grant | None, cors: dict[str, str]
    ) -> web.Response:
        """The REST door's answer to ``/metrics`` (after its browser and token checks)."""
        if request.method not in _METHODS:
            raise HttpProblem(
                405,
                "UNIMPLEMENTED",
                f"HTTP method {request.method} is not allowed on {METRICS_PATH} "
                f"(allowed: {', '.join(_METHODS)}).",
                {"Allow": ", ".join(_METHODS)},
            )
        body, content_type = self.render(request.headers.get("Accept"), grant)
        return web.Response(body=body, headers={**cors, "Content-Type": content_type})
