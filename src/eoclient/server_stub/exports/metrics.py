"""Export subscriptions at ``/metrics`` (observe/metrics.py renders them with the broker's
series; this server's own, so ``eoclient_``-prefixed; labels ``subscription`` and ``kind``,
``cloud_storage`` or ``bigquery``):

* ``eoclient_subscription_export_messages_total`` — messages written and acknowledged;
* ``eoclient_subscription_export_objects_total`` / ``..._rows_total`` — objects written to
  Cloud Storage, rows committed to BigQuery;
* ``eoclient_subscription_export_bytes_total`` — bytes of the objects (Cloud Storage) or of
  the messages' data (BigQuery);
* ``eoclient_subscription_export_failures_total{reason}`` — ``unwritable`` (messages that
  could not be written: nacked, a failed delivery) and ``write`` (writes that failed and
  were tried again);
* ``eoclient_subscription_export_state{state}`` — 1 for the export's state (``ACTIVE``,
  ``NOT_FOUND``, ``SCHEMA_MISMATCH``, ...);
* ``eoclient_subscription_export_open_messages`` — messages in batches being filled or
  written.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from eoclient.server_stub.core import names
from eoclient.server_stub.exports.runner import ExportRunner

_LABELS = ("subscription", "kind")


class ExportCollector(Collector):
    """Reads the runner's statuses at every scrape (``projects``: only theirs)."""

    def __init__(self, runner: ExportRunner, projects: frozenset[str] | None = None) -> None:
        self._runner = runner
        self._projects = projects

    def collect(self) -> Iterator[Metric]:
        statuses = [
            s
            for s in self._runner.statuses()
            if self._projects is None or names.project_of(s.subscription) in self._projects
        ]
        prefix = "eoclient_subscription_export_"
        counters = {
            "messages": "Messages written and acknowledged by the export.",
            "objects": "Objects written to Cloud Storage.",
            "rows": "Rows committed to BigQuery.",
            "bytes": "Bytes of the objects written (Cloud Storage) or of the messages' data.",
        }
        for field, documentation in counters.items():
            family = CounterMetricFamily(prefix + field, documentation, labels=_LABELS)
            for s in statuses:
                family.add_metric([s.subscription, s.kind], float(getattr(s, field)))
            yield family
        failures = CounterMetricFamily(
            prefix + "failures",
            "Messages that could not be written (unwritable) and writes tried again (write).",
            labels=[*_LABELS, "reason"],
        )
        state = GaugeMetricFamily(
            prefix + "state", "1 for the export's state.", labels=[*_LABELS, "state"]
        )
        open_messages = GaugeMetricFamily(
            prefix + "open_messages",
            "Messages in the export's batches being filled or written.",
            labels=_LABELS,
        )
        for s in statuses:
            labels = [s.subscription, s.kind]
            failures.add_metric([*labels, "unwritable"], float(s.unwritable))
            failures.add_metric([*labels, "write"], float(s.write_failures))
            state.add_metric([*labels, s.state], 1.0)
            open_messages.add_metric(labels, float(s.open_messages))
        yield failures
        yield state
        yield open_messages
