"""``--message-transforms-file``: a topic's or subscription's message transforms, read from
a YAML or JSON file as gcloud reads it (``gcloud pubsub topics create
--message-transforms-file``): a list of ``MessageTransform`` objects in the REST form, e.g.

.. code-block:: yaml

    - javascriptUdf:
        functionName: redactSSN
        code: |
          function redactSSN(message, metadata) {
            const data = JSON.parse(message.data);
            delete data['ssn'];
            message.data = JSON.stringify(data);
            return message;
          }
      disabled: false

The proto's snake_case names (``javascript_udf``, ``function_name``) are read too. The
deprecated ``enabled`` is accepted and ignored (``disabled`` says whether one runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from eoclient.admin import JavaScriptUdf, MessageTransform
from eoclient.cli.errors import UsageProblem

__all__ = [
    "clear_transforms_option",
    "read_transforms",
    "transforms_change",
    "transforms_file_option",
]

_TRANSFORM_KEYS = {"javascriptUdf", "javascript_udf", "disabled", "enabled"}
_UDF_KEYS = {"functionName", "function_name", "code"}

transforms_file_option = click.option(
    "--message-transforms-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="YAML or JSON file with a list of message transforms (JavaScript UDFs), as gcloud "
    "reads it: [{javascriptUdf: {functionName, code}, disabled}].",
)
clear_transforms_option = click.option(
    "--clear-message-transforms",
    is_flag=True,
    help="Remove every message transform.",
)


def read_transforms(path: Path) -> tuple[MessageTransform, ...]:
    """The transforms in ``path`` (UsageProblem naming what is wrong with it)."""
    import yaml  # type: ignore[import-untyped]  # the cli extra; only this flag needs it

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageProblem(f"cannot read message transforms file [{path}]: {error}") from None
    if not text.strip():
        raise UsageProblem(f"message transforms file [{path}] is empty")
    try:
        loaded = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as error:
        raise UsageProblem(
            f"message transforms file [{path}] is not valid YAML or JSON: {error}"
        ) from None
    if not isinstance(loaded, list):
        raise UsageProblem(
            f"message transforms file [{path}] must hold a list of message transforms"
        )
    return tuple(_transform(path, index, item) for index, item in enumerate(loaded))


def _transform(path: Path, index: int, item: Any) -> MessageTransform:
    where = f"message transforms file [{path}], item {index}"
    if not isinstance(item, dict):
        raise UsageProblem(f"{where}: a message transform is a mapping")
    unknown = sorted(set(item) - _TRANSFORM_KEYS)
    if unknown:
        raise UsageProblem(f"{where}: unrecognized fields {unknown}")
    udf = item.get("javascriptUdf", item.get("javascript_udf"))
    if not isinstance(udf, dict):
        raise UsageProblem(f"{where}: javascriptUdf (functionName, code) is required")
    unknown = sorted(set(udf) - _UDF_KEYS)
    if unknown:
        raise UsageProblem(f"{where}: unrecognized fields of javascriptUdf {unknown}")
    name = udf.get("functionName", udf.get("function_name", ""))
    code = udf.get("code", "")
    disabled = item.get("disabled", False)
    if not isinstance(name, str) or not isinstance(code, str) or not isinstance(disabled, bool):
        raise UsageProblem(f"{where}: functionName and code are strings, disabled true or false")
    return MessageTransform(JavaScriptUdf(name, code), disabled=disabled)


def transforms_change(path: Path | None, clear: bool) -> tuple[MessageTransform, ...] | None:
    """An update's new transforms: from ``path``, none (``clear``), or None (unchanged)."""
    if path is not None and clear:
        raise UsageProblem(
            "--message-transforms-file and --clear-message-transforms contradict each other"
        )
    if clear:
        return ()
    return read_transforms(path) if path is not None else None
