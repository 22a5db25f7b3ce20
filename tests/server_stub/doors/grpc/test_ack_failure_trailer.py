"""The trailer of an exactly-once ack failure stays under what every client reads
(doors/grpc/ack_failure_trailer.py): which failed ids fit, in what order, and what the
message says about the rest."""

from __future__ import annotations

import base64

from google.rpc import code_pb2, error_details_pb2, status_pb2

from eoclient.server_stub.doors.grpc.ack_failure_trailer import (
    DECLARED_BUDGET_KEY,
    MAX_DECLARED_BUDGET,
    STATUS_DETAILS_KEY,
    TRAILER_BUDGET,
    UNLISTED_KEY,
    budget,
    fit,
    trailer_size,
)
from eoclient.server_stub.services.errors import INVALID_ACK_IDS_MESSAGE

INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"
UNORDERED = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"


def ack_ids(count: int, start: int = 1) -> list[str]:
    """Ids shaped like the server's: a 12-hex-digit uid, a seq, a generation."""
    return [f"5f3a9c0e41d2-{seq}-{seq % 7 + 1}" for seq in range(start, start + count)]


def error_info(status: status_pb2.Status) -> dict[str, str]:
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("EXACTLY_ONCE_ACKID_FAILURE", "pubsub.googleapis.com")
    return dict(info.metadata)


def encoded_trailers(message: str, status: status_pb2.Status) -> int:
    """The trailers as gRPC sends them (binary metadata base64-encoded without padding),
    counted as HTTP/2 counts a header list: name + value + 32 a field."""
    details = base64.b64encode(status.SerializeToString()).rstrip(b"=")
    return (
        len("grpc-status") + 1 + 32
        + len("grpc-message") + len(message) + 32
        + len(STATUS_DETAILS_KEY) + len(details) + 32
    )  # fmt: skip


def test_failures_that_fit_are_all_listed_and_the_message_is_the_service_s() -> None:
    failures = dict.fromkeys(ack_ids(40), INVALID)
    message, status = fit(failures, INVALID_ACK_IDS_MESSAGE)
    assert message == INVALID_ACK_IDS_MESSAGE
    assert error_info(status) == failures
    assert (status.code, status.message) == (code_pb2.INVALID_ARGUMENT, message)


def test_three_thousand_expired_ids_fit_in_under_eight_kib() -> None:
    failures = dict.fromkeys(ack_ids(3000), INVALID)
    message, status = fit(failures, INVALID_ACK_IDS_MESSAGE)
    listed = error_info(status)
    unlisted = int(listed.pop(UNLISTED_KEY))
    assert 50 <= len(listed) < 3000
    assert len(listed) + unlisted == 3000
    assert listed == dict.fromkeys(ack_ids(len(listed)), INVALID)  # request order
    assert status.message == message
    assert message.startswith(INVALID_ACK_IDS_MESSAGE)
    assert f"{unlisted} of the 3000 failed ack ids are not listed" in message
    size = encoded_trailers(message, status)
    assert size <= trailer_size(message, status) <= TRAILER_BUDGET < 8 * 1024
    # Nearly full: less room is left than two more ids would take (~80 bytes each).
    assert TRAILER_BUDGET - trailer_size(message, status) < 2 * 80


def test_temporary_failures_are_listed_before_permanent_ones() -> None:
    ids = ack_ids(3000)
    failures = {ack_id: INVALID if n % 100 else UNORDERED for n, ack_id in enumerate(ids)}
    _, status = fit(failures, "Some acknowledgement ids failed")
    listed = error_info(status)
    listed.pop(UNLISTED_KEY)
    transient = [i for i in ids if failures[i] == UNORDERED]
    permanent = [i for i in ids if failures[i] == INVALID]
    # (A map: which ids, not in which order.) Every temporary one, then the first
    # permanent ones in request order.
    assert {i for i, v in listed.items() if v == UNORDERED} == set(transient)
    chosen = {i for i, v in listed.items() if v == INVALID}
    assert chosen == set(permanent[: len(chosen)])
    assert len(chosen) > 0


def test_a_long_id_set_of_any_size_stays_within_the_budget() -> None:
    for count in (1, 90, 100, 120, 500, 2500, 20_000):
        failures = dict.fromkeys((f"{'x' * 150}-{n}" for n in range(count)), INVALID)
        message, status = fit(failures, INVALID_ACK_IDS_MESSAGE)
        assert encoded_trailers(message, status) <= TRAILER_BUDGET, count
        listed = error_info(status)
        assert len(listed) - (UNLISTED_KEY in listed) >= min(count, 20)


def test_a_client_that_declares_a_larger_limit_gets_every_failure() -> None:
    assert budget(None) == budget([("x-goog-request-params", "a=b")]) == TRAILER_BUDGET
    assert budget([(DECLARED_BUDGET_KEY, "4194304")]) == 4 * 1024 * 1024
    assert budget([(DECLARED_BUDGET_KEY, b"99999999999")]) == MAX_DECLARED_BUDGET
    for nonsense in ("", "-5", "1e9", "100", "²", "1" * 40):  # never below the default
        assert budget([(DECLARED_BUDGET_KEY, nonsense)]) == TRAILER_BUDGET
    failures = dict.fromkeys(ack_ids(3000), INVALID)
    message, status = fit(
        failures, INVALID_ACK_IDS_MESSAGE, budget([(DECLARED_BUDGET_KEY, "4194304")])
    )
    assert message == INVALID_ACK_IDS_MESSAGE
    assert error_info(status) == failures
