"""The edge sections' texts where no server is needed to reach them: an export the runner
has not looked at yet or a broker without a runner, a failed export with its last failure,
an import topic on a broker without an ingestion loop, and sections left out of a page."""

from __future__ import annotations

from eoclient.server_stub.exports import ExportStatus, Written
from eoclient.server_stub.exports.status import CLOUD_STORAGE, NOT_FOUND
from eoclient.server_stub.observe.dashboard import edge_sections
from eoclient.server_stub.observe.dashboard.edges import ExportPanel, IngestionPanel
from eoclient.server_stub.observe.dashboard.frame import Section, page

SETTINGS = [("bucket", "gs://archive")]


def test_an_export_without_a_status_says_why() -> None:
    waiting = edge_sections.export_section(ExportPanel(CLOUD_STORAGE, SETTINGS, [], None, True))
    assert "has not started yet" in waiting.html
    no_runner = edge_sections.export_section(ExportPanel(CLOUD_STORAGE, SETTINGS, [], None, False))
    assert "This server runs no exports" in no_runner.html
    assert "gs://archive" in no_runner.html


def test_a_failing_export_shows_its_state_reason_and_last_failure() -> None:
    status = ExportStatus("projects/p/subscriptions/sub", CLOUD_STORAGE)
    status.set_state(NOT_FOUND, "bucket 'gone' does not exist", 1_700_000_000.0)
    status.write_failures = 2
    status.last_error = "writing a/b: <disk full>"
    status.last_written.append(Written("gs://gone/a", 3, 42, 1_699_999_000.0))
    section = edge_sections.export_section(
        ExportPanel(CLOUD_STORAGE, SETTINGS, ["write metadata"], status, True)
    )
    assert "<span class='tag warn'>NOT_FOUND</span>" in section.html
    assert "bucket &#x27;gone&#x27; does not exist" in section.html
    assert "2 writes, tried again" in section.html
    assert "<code>writing a/b: &lt;disk full&gt;</code>" in section.html  # escaped
    assert "2023-11-14T22:13:20Z" in section.html  # when the bucket was looked at
    assert "<code>gs://gone/a</code>" in section.html
    assert "<span class='tag'>write metadata</span>" in section.html


def test_ingestion_without_a_loop_and_sections_left_out() -> None:
    panel = IngestionPanel("aws_msk", [("topic", "orders")], "", "", None)
    section = edge_sections.ingestion_section(panel)
    assert "Amazon MSK" in section.html
    assert "This server runs no ingestion" in section.html
    assert edge_sections.export_section(None) == edge_sections.NOTHING
    assert edge_sections.transforms_section(None) == edge_sections.NOTHING
    assert edge_sections.edges_section([], None) == edge_sections.NOTHING
    shown = page("Page", [Section("Kept", "<p>here</p>"), edge_sections.NOTHING], None)
    assert shown.count("<section") == 1
