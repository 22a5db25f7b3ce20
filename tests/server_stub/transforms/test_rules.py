"""The pure rules of message transforms: the static checks and what a UDF's result means."""

from __future__ import annotations

import pytest

from eoclient.server_stub.transforms.rules import (
    MAX_CODE_BYTES,
    Failed,
    Filtered,
    Transformed,
    TransformLimits,
    Udf,
    enabled,
    interpret,
    publish_time_text,
    static_problem,
    udf_input,
)

OK = "function f(m) { return m; }"


def test_enabled_keeps_order_and_skips_disabled() -> None:
    a, b, c = Udf("a", OK), Udf("b", OK, disabled=True), Udf("c", OK)
    assert enabled([a, b, c]) == (a, c)


@pytest.mark.parametrize(
    ("udfs", "says"),
    [
        ([Udf(f"f{i}", OK) for i in range(6)], "at most 5"),
        ([Udf("", OK)], "function_name is required"),
        ([Udf("1f", OK)], "not a JavaScript function name"),
        ([Udf("return", OK)], "not a JavaScript function name"),
        ([Udf("f", "  ")], "code is required"),
        ([Udf("f", "x" * (MAX_CODE_BYTES + 1))], "the limit is 20480 bytes"),
        ([Udf("f", OK), Udf("f", OK, disabled=True)], "unique function_name"),
    ],
)
def test_static_problems(udfs: list[Udf], says: str) -> None:
    problem = static_problem(udfs)
    assert problem is not None
    assert says in problem


def test_five_transforms_of_the_largest_size_are_fine() -> None:
    code = "x" * MAX_CODE_BYTES
    assert static_problem([Udf(f"f{i}", code) for i in range(5)]) is None
    assert static_problem([Udf("$_ok9", OK)]) is None


def test_udf_input_gives_metadata_only_when_known() -> None:
    assert udf_input(b"hi", {"k": "v"}) == {"d": "hi", "a": {"k": "v"}, "m": {}}
    full = udf_input(b"hi", {}, message_id="7", publish_time=0.5, ordering_key="key")
    assert full == {
        "d": "hi",
        "a": {},
        "m": {"message_id": "7", "publish_time": "1970-01-01T00:00:00Z", "ordering_key": "key"},
    }
    assert isinstance(udf_input(b"\xff\xfe", {}), Failed)
    assert publish_time_text(1_700_000_000.9) == "2023-11-14T22:13:20Z"


ATTRS = {"old": "1"}


@pytest.mark.parametrize(
    ("raw", "outcome"),
    [
        ({"v": None}, Filtered()),
        ({"v": {"data": "x"}}, Transformed(b"x", ATTRS)),  # no attributes: kept
        ({"v": {"data": "x", "attributes": {}}}, Transformed(b"x", {})),  # empty: all removed
        ({"v": {"data": "é", "attributes": {"n": "2"}}}, Transformed("é".encode(), {"n": "2"})),
        ({"v": {"data": "", "attributes": {"n": "2"}}}, Transformed(b"", {"n": "2"})),
    ],
)
def test_results_that_are_messages(raw: dict[str, object], outcome: object) -> None:
    assert interpret(raw, ATTRS) == outcome


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"e": "Error: boom"}, "threw: Error: boom"),
        ({}, "returned undefined"),
        ({"v": "text"}, "returned a string"),
        ({"v": [1]}, "returned an array"),
        ({"v": {"attributes": {}}}, "no 'data'"),
        ({"v": {"data": 5}}, "'data' is a number"),
        ({"v": {"data": "x", "attributes": [1]}}, "'attributes' is an array"),
        ({"v": {"data": "x", "attributes": {"n": 1}}}, "attribute 'n' is a number"),
        ({"v": {"data": "", "attributes": {}}}, "empty message"),
        ({"v": {"data": "x", "attributes": {"": "v"}}}, "empty key"),
        ({"v": {"data": "x", "attributes": {"k": "v" * 1025}}}, "over 1024 bytes"),
        ({"v": {"data": "x", "attributes": {"k" * 257: "v"}}}, "over 256 bytes"),
        ({"v": {"data": "x", "attributes": {str(i): "v" for i in range(101)}}}, "101 attributes"),
    ],
)
def test_results_that_fail(raw: dict[str, object], says: str) -> None:
    outcome = interpret(raw, ATTRS)
    assert isinstance(outcome, Failed)
    assert says in outcome.reason


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="positive"):
        TransformLimits(time_per_message=0)
    with pytest.raises(ValueError, match="1 MiB"):
        TransformLimits(memory_bytes=1000)
