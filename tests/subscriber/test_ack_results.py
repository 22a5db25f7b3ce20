"""Exactly-once result classification: one table row per status code / metadata value."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.errors import InvalidArgument, PermissionDenied, Unavailable
from eoclient.subscriber.ack_results import (
    EXACTLY_ONCE_ACKID_FAILURE,
    AcknowledgeStatus,
    AckOutcome,
    AckResult,
    classify_confirmation,
    classify_unary,
    classify_unary_error,
)

S = AcknowledgeStatus
RETRY = "retry"

ALL_CODES = [
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
]
RETRYABLE = {
    "DEADLINE_EXCEEDED",
    "RESOURCE_EXHAUSTED",
    "ABORTED",
    "INTERNAL",
    "UNAVAILABLE",
    "UNKNOWN",
}


def _summary(outcome: AckOutcome) -> dict[str, object]:
    """ack id -> status, or RETRY."""
    summary: dict[str, object] = {ack_id: result.status for ack_id, result in outcome.final.items()}
    summary.update(dict.fromkeys(outcome.retry, RETRY))
    return summary


# --- whole-request status, no per-id information -------------------------------------------


def _expected_for_code(code: str) -> object:
    if code in RETRYABLE:
        return RETRY
    if code == "PERMISSION_DENIED":
        return S.PERMISSION_DENIED
    if code == "FAILED_PRECONDITION":
        return S.FAILED_PRECONDITION
    return S.OTHER


@pytest.mark.parametrize("code", ALL_CODES)
def test_status_code_without_error_info(code: str) -> None:
    expected = _expected_for_code(code)
    outcome = classify_unary(["a", "b"], code=code, message="boom", exactly_once=True)
    assert _summary(outcome) == {"a": expected, "b": expected}
    if expected is RETRY:
        assert outcome.retry == {"a": f"{code}: boom", "b": f"{code}: boom"}
    else:
        assert outcome.final["a"].info == f"{code}: boom"


def test_retryable_codes_are_exactly_the_documented_set() -> None:
    assert {c for c in ALL_CODES if _expected_for_code(c) is RETRY} == RETRYABLE


@pytest.mark.parametrize("code", [None, "OK"])
def test_success(code: str | None) -> None:
    outcome = classify_unary(["a", "b"], code=code, exactly_once=True)
    assert outcome == AckOutcome(final={"a": AckResult(S.SUCCESS), "b": AckResult(S.SUCCESS)})


@pytest.mark.parametrize("code", [None, "OK", *ALL_CODES, "NOT_A_CODE"])
def test_without_exactly_once_everything_succeeds(code: str | None) -> None:
    outcome = classify_unary(
        ["a"],
        code=code,
        error_info_reason=EXACTLY_ONCE_ACKID_FAILURE,
        error_info={"a": "PERMANENT_FAILURE_INVALID_ACK_ID"},
        exactly_once=False,
    )
    assert outcome == AckOutcome(final={"a": AckResult(S.SUCCESS)})


def test_emulator_malformed_ack_id_is_other_with_code_and_message() -> None:
    # docs/protocol.md#validation-and-error-texts: plain INVALID_ARGUMENT, no ErrorInfo.
    outcome = classify_unary(
        ["bogus"],
        code="INVALID_ARGUMENT",
        message="Invalid ack id (ack_id=bogus)",
        exactly_once=True,
    )
    assert outcome.final == {
        "bogus": AckResult(S.OTHER, "INVALID_ARGUMENT: Invalid ack id (ack_id=bogus)")
    }


def test_unrecognised_code_is_other_not_retry() -> None:
    outcome = classify_unary(["a"], code="NOT_A_CODE", exactly_once=True)
    assert outcome.final == {"a": AckResult(S.OTHER, "NOT_A_CODE")}


# --- per-id ErrorInfo metadata --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("TRANSIENT_FAILURE_UNORDERED_ACK_ID", RETRY),
        ("TRANSIENT_FAILURE_OTHER", RETRY),
        ("TRANSIENT_SOMETHING_NEW", RETRY),
        ("PERMANENT_FAILURE_INVALID_ACK_ID", S.INVALID_ACK_ID),
        ("PERMANENT_FAILURE_OTHER", S.OTHER),
        ("SOMETHING_ELSE", S.OTHER),
        ("", S.OTHER),
    ],
)
@pytest.mark.parametrize("code", ["INVALID_ARGUMENT", "UNAVAILABLE", "PERMISSION_DENIED"])
def test_metadata_value_decides_for_listed_ids(value: str, expected: object, code: str) -> None:
    outcome = classify_unary(
        ["listed"],
        code=code,
        error_info_reason=EXACTLY_ONCE_ACKID_FAILURE,
        error_info={"listed": value},
        exactly_once=True,
    )
    assert _summary(outcome) == {"listed": expected}
    if expected is RETRY:
        assert outcome.retry == {"listed": value}
    else:
        assert outcome.final["listed"].info == value


def test_partial_success_unlisted_ids_succeed() -> None:
    # docs/protocol.md#exactly-once-error-details: the server lists exactly the failed ids and
    # applied the rest.
    outcome = classify_unary(
        ["stale", "valid", "unordered"],
        code="INVALID_ARGUMENT",
        message="Some acknowledgement ids in the request were invalid.",
        error_info_reason=EXACTLY_ONCE_ACKID_FAILURE,
        error_info={
            "stale": "PERMANENT_FAILURE_INVALID_ACK_ID",
            "unordered": "TRANSIENT_FAILURE_UNORDERED_ACK_ID",
        },
        exactly_once=True,
    )
    assert _summary(outcome) == {"stale": S.INVALID_ACK_ID, "valid": S.SUCCESS, "unordered": RETRY}
    assert outcome.final["valid"] == AckResult(S.SUCCESS)
    assert set(outcome.retry) == {"unordered"}


@pytest.mark.parametrize(
    ("reason", "metadata", "expected_unlisted"),
    [
        # Metadata under another reason is still read for the listed ids (Python reads the
        # first ErrorInfo without checking its reason), but unlisted ones fall back to the code.
        ("SOME_OTHER_REASON", {"listed": "PERMANENT_FAILURE_INVALID_ACK_ID"}, S.OTHER),
        # The right reason with nothing listed says nothing per id: fall back to the code.
        (EXACTLY_ONCE_ACKID_FAILURE, {}, S.OTHER),
    ],
)
def test_unlisted_ids_without_partial_success_fall_back_to_the_code(
    reason: str, metadata: Mapping[str, str], expected_unlisted: AcknowledgeStatus
) -> None:
    outcome = classify_unary(
        ["listed", "unlisted"],
        code="INVALID_ARGUMENT",
        error_info_reason=reason,
        error_info=metadata,
        exactly_once=True,
    )
    assert outcome.final["unlisted"].status is expected_unlisted
    if metadata:
        assert outcome.final["listed"].status is S.INVALID_ACK_ID


def test_duplicate_input_ids_collapse() -> None:
    outcome = classify_unary(["a", "a"], code="ABORTED", exactly_once=True)
    assert outcome.retry == {"a": "ABORTED"}


# --- adapter from the exception tree --------------------------------------------------------


def test_classify_unary_error_reads_the_rpc_error() -> None:
    error = InvalidArgument(
        "",
        reason=EXACTLY_ONCE_ACKID_FAILURE,
        error_info={"x": "PERMANENT_FAILURE_INVALID_ACK_ID"},
    )
    outcome = classify_unary_error(["x", "y"], error, exactly_once=True)
    assert _summary(outcome) == {"x": S.INVALID_ACK_ID, "y": S.SUCCESS}
    assert _summary(classify_unary_error(["x"], Unavailable("gone"), exactly_once=True)) == {
        "x": RETRY
    }
    assert classify_unary_error(["x"], PermissionDenied("no"), exactly_once=True).final == {
        "x": AckResult(S.PERMISSION_DENIED, "PERMISSION_DENIED: no")
    }
    assert _summary(classify_unary_error(["x"], None, exactly_once=True)) == {"x": S.SUCCESS}


# --- stream confirmations -------------------------------------------------------------------


def test_confirmation_maps_each_list() -> None:
    outcome = classify_confirmation(
        ["ok", "bad", "unordered", "temp", "unmentioned"],
        confirmed=["ok", "not-ours"],
        invalid=["bad"],
        unordered=["unordered"],
        temporary_failed=["temp"],
    )
    assert _summary(outcome) == {
        "ok": S.SUCCESS,
        "bad": S.INVALID_ACK_ID,
        "unordered": RETRY,
        "temp": RETRY,
    }
    assert outcome.retry == {
        "unordered": "TRANSIENT_FAILURE_UNORDERED_ACK_ID",
        "temp": "TRANSIENT_FAILURE_OTHER",
    }


def test_confirmation_listing_an_id_twice_takes_the_least_favourable() -> None:
    outcome = classify_confirmation(
        ["a", "b", "c"],
        confirmed=["a", "b", "c"],
        invalid=["a"],
        temporary_failed=["a", "b"],
        unordered=["c"],
    )
    assert _summary(outcome) == {"a": S.INVALID_ACK_ID, "b": RETRY, "c": RETRY}


def test_empty_confirmation_decides_nothing() -> None:
    assert classify_confirmation(["a"]) == AckOutcome()


# --- properties -----------------------------------------------------------------------------

ack_ids = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]) | st.text(max_size=4), max_size=8)
metadata_values = st.sampled_from(
    [
        "TRANSIENT_FAILURE_UNORDERED_ACK_ID",
        "TRANSIENT_FAILURE_OTHER",
        "PERMANENT_FAILURE_INVALID_ACK_ID",
        "PERMANENT_FAILURE_OTHER",
    ]
) | st.text(max_size=6)


@given(
    ids=ack_ids,
    code=st.none() | st.sampled_from(["OK", *ALL_CODES]) | st.text(max_size=10),
    message=st.text(max_size=10),
    reason=st.sampled_from([EXACTLY_ONCE_ACKID_FAILURE, ""]) | st.text(max_size=10),
    metadata=st.none()
    | st.dictionaries(st.sampled_from(["a", "b", "c", "z"]) | st.text(max_size=4), metadata_values),
    exactly_once=st.booleans(),
)
def test_unary_is_total_and_partitions_the_input(
    ids: list[str],
    code: str | None,
    message: str,
    reason: str,
    metadata: dict[str, str] | None,
    exactly_once: bool,
) -> None:
    outcome = classify_unary(
        ids,
        code=code,
        message=message,
        error_info_reason=reason,
        error_info=metadata,
        exactly_once=exactly_once,
    )
    assert set(outcome.final) | set(outcome.retry) == set(ids)
    assert not set(outcome.final) & set(outcome.retry)
    if not exactly_once or code in (None, "OK"):
        assert all(result.status is S.SUCCESS for result in outcome.final.values())
    # A SUCCESS is only ever reported for an id the server did not name as failed.
    for ack_id, result in outcome.final.items():
        if result.status is S.SUCCESS and exactly_once and code not in (None, "OK"):
            assert ack_id not in (metadata or {})


@given(
    ids=ack_ids,
    confirmed=ack_ids,
    invalid=ack_ids,
    unordered=ack_ids,
    temporary_failed=ack_ids,
)
def test_confirmation_is_total_and_only_covers_mentioned_ids(
    ids: list[str],
    confirmed: list[str],
    invalid: list[str],
    unordered: list[str],
    temporary_failed: list[str],
) -> None:
    outcome = classify_confirmation(
        ids,
        confirmed=confirmed,
        invalid=invalid,
        unordered=unordered,
        temporary_failed=temporary_failed,
    )
    mentioned = set(confirmed) | set(invalid) | set(unordered) | set(temporary_failed)
    assert set(outcome.final) | set(outcome.retry) == set(ids) & mentioned
    assert not set(outcome.final) & set(outcome.retry)
    for ack_id, result in outcome.final.items():
        if result.status is S.SUCCESS:
            assert ack_id not in set(invalid) | set(unordered) | set(temporary_failed)
