"""``--message-transforms-file`` (YAML or JSON, as gcloud reads it) on topics and
subscriptions, create and update, against the reference server."""

from __future__ import annotations

import json
from pathlib import Path

from .support import Eo

YAML = """\
- javascriptUdf:
    functionName: redactSSN
    code: |
      function redactSSN(message, metadata) {
        const data = JSON.parse(message.data);
        delete data['ssn'];
        message.data = JSON.stringify(data);
        return message;
      }
- javascript_udf:
    function_name: audit
    code: "function audit(message) { return message; }"
  disabled: true
"""


def test_topics_create_and_update_from_a_file(eo: Eo, tmp_path: Path) -> None:
    path = tmp_path / "transforms.yaml"
    path.write_text(YAML)
    created = eo.json("topics", "create", "orders", "--message-transforms-file", str(path))
    assert [t["javascriptUdf"]["functionName"] for t in created["messageTransforms"]] == [
        "redactSSN",
        "audit",
    ]
    assert [t["disabled"] for t in created["messageTransforms"]] == [False, True]
    table = eo.ok("topics", "describe", "orders").stdout
    assert "redactSSN, audit (disabled)" in table
    # The JSON form gcloud also reads (and eoclient writes): the same transforms back.
    as_json = tmp_path / "transforms.json"
    as_json.write_text(json.dumps(created["messageTransforms"][:1]))
    updated = eo.json("topics", "update", "orders", "--message-transforms-file", str(as_json))
    assert updated["messageTransforms"] == created["messageTransforms"][:1]
    cleared = eo.json("topics", "update", "orders", "--clear-message-transforms")
    assert cleared["messageTransforms"] == []


def test_subscriptions_create_and_update_from_a_file(eo: Eo, tmp_path: Path) -> None:
    path = tmp_path / "transforms.yaml"
    path.write_text(YAML)
    eo.ok("topics", "create", "orders")
    created = eo.json(
        "subscriptions",
        "create",
        "audit",
        "--topic",
        "orders",
        "--message-transforms-file",
        str(path),
    )
    assert len(created["messageTransforms"]) == 2
    cleared = eo.json("subscriptions", "update", "audit", "--clear-message-transforms")
    assert cleared["messageTransforms"] == []
    again = eo.json("subscriptions", "update", "audit", "--message-transforms-file", str(path))
    assert again["messageTransforms"] == created["messageTransforms"]


def test_bad_files_and_bad_code_are_one_line_errors(eo: Eo, tmp_path: Path) -> None:
    eo.ok("topics", "create", "orders")
    cases = {
        "": "is empty",
        "{javascriptUdf: {}}": "must hold a list",
        "- {javascriptUdf: {functionName: f, code: x}, color: red}": "unrecognized fields",
        "- {disabled: true}": "javascriptUdf (functionName, code) is required",
        "- [": "not valid YAML or JSON",
    }
    for index, (text, says) in enumerate(cases.items()):
        path = tmp_path / f"bad{index}.yaml"
        path.write_text(text)
        line = eo.fails(
            "topics", "update", "orders", "--message-transforms-file", str(path), code=2
        )
        assert says in line, (text, line)
    missing = eo.fails(
        "topics", "create", "other", "--message-transforms-file", str(tmp_path / "nope"), code=2
    )
    assert "nope" in missing
    broken = tmp_path / "broken.yaml"
    broken.write_text("- javascriptUdf: {functionName: f, code: 'function f( {'}")
    line = eo.fails("topics", "update", "orders", "--message-transforms-file", str(broken))
    assert "does not parse" in line
    both = eo.fails(
        "topics",
        "update",
        "orders",
        "--message-transforms-file",
        str(broken),
        "--clear-message-transforms",
        code=2,
    )
    assert "contradict" in both
