"""Import topics' series for ``/metrics`` (observe/metrics.py registers this collector).

This server's own names (``eoclient_``), one series per import topic, labelled with the
topic's full name and its source (``cloud_storage``, ``aws_kinesis``, ...):

* ``eoclient_topic_ingestion_objects_total`` — Cloud Storage objects ingested (every
  message of the object published, or refused as a failure);
* ``eoclient_topic_ingestion_messages_total`` — messages published from them;
* ``eoclient_topic_ingestion_bytes_total`` — the objects' bytes;
* ``eoclient_topic_ingestion_failures_total{reason}`` — ingestion failures, by the reason
  of their ``IngestionFailureEvent``: ``avro`` (an object not of its Avro format),
  ``api_violation`` (a message over the limits), ``schema_violation``, ``transform``;
* ``eoclient_topic_ingestion_state{state}`` — 1 for the source's current state (its
  State's name: ``ACTIVE``, ``BUCKET_NOT_FOUND``, ``KINESIS_PERMISSION_DENIED``, ...).

Counters start at zero when the server starts, like the broker's; a scrape with a token
limited to some projects sees only their topics.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from eoclient.server_stub.core import names
from eoclient.server_stub.ingestion.shell import Ingestion

_LABELS = ("topic", "source")


class IngestionCollector(Collector):
    """Reads the ingestion room at every scrape (``projects``: only theirs; None: all)."""

    def __init__(self, ingestion: Ingestion, projects: frozenset[str] | None = None) -> None:
        self._ingestion = ingestion
        self._projects = projects

    def collect(self) -> Iterator[Metric]:
        statuses = [
            s
            for s in self._ingestion.statuses()
            if self._projects is None or names.project_of(s.topic) in self._projects
        ]
        for name, documentation, attribute in (
            ("eoclient_topic_ingestion_objects", "Objects ingested.", "objects"),
            (
                "eoclient_topic_ingestion_messages",
                "Messages published from ingested objects.",
                "messages",
            ),
            ("eoclient_topic_ingestion_bytes", "Bytes of the ingested objects.", "bytes"),
        ):
            counter = CounterMetricFamily(name, documentation, labels=_LABELS)
            for s in statuses:
                counter.add_metric([s.topic, s.source], float(getattr(s.counters, attribute)))
            yield counter
        failures = CounterMetricFamily(
            "eoclient_topic_ingestion_failures",
            "Ingestion failures (IngestionFailureEvents), by reason.",
            labels=[*_LABELS, "reason"],
        )
        for s in statuses:
            for reason, count in sorted(s.counters.failures.items()):
                failures.add_metric([s.topic, s.source, reason], float(count))
        yield failures
        state = GaugeMetricFamily(
            "eoclient_topic_ingestion_state",
            "1 for the ingestion source's current state.",
            labels=[*_LABELS, "state"],
        )
        for s in statuses:
            state.add_metric([s.topic, s.source, s.state], 1.0)
        yield state
