"""The ack ledger (``subscriber/ledger.py``): records, routing, confirmations, unary answers,
retries — by tables, and by Hypothesis against a model server. No event loop except for the
retry loop, driven on a FakeClock (a 600 s deadline in a few loop turns)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2
from eoclient._retrying import retry_delay
from eoclient.errors import RpcError
from eoclient.subscriber.ack_records import ACK_IDS_PER_REQUEST, AckRecord, Operation
from eoclient.subscriber.ack_results import (
    PERMANENT_FAILURE_INVALID_ACK_ID,
    TEMPORARY_FAILURE,
    AcknowledgeStatus,
    AckResult,
)
from eoclient.subscriber.ledger import CONFIRMATION_TIMEOUT, PROBE_TIMEOUT, AckLedger, AckMode
from eoclient.subscriber.sender import AckSender
from eoclient.subscriber.settings import AckRetrySettings
from eoclient.subscriber.unary_acks import UnaryCall

from .fake_transport import ACKNOWLEDGE, FakeTransport, eod_ack_failure, rpc_error

SUB = "projects/p/subscriptions/s"
T0 = 1000.0
ACK, NACK, MODACK = Operation.ACK, Operation.NACK, Operation.MODACK
SUCCESS = AckResult(AcknowledgeStatus.SUCCESS)


class NoJitter(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return a


def eod_ledger(mode: AckMode = AckMode.STREAM, **kwargs: object) -> AckLedger:
    ledger = AckLedger(AckRetrySettings(), exactly_once=True, **kwargs)  # type: ignore[arg-type]
    ledger.mode = mode
    return ledger


def wire(requests: list[pubsub_pb2.StreamingPullRequest]) -> list[tuple[str, str, int]]:
    """Stream requests as (kind, ack id, seconds)."""
    out: list[tuple[str, str, int]] = []
    for request in requests:
        out += [("ack", ack_id, 0) for ack_id in request.ack_ids]
        out += [
            ("modack", ack_id, seconds)
            for ack_id, seconds in zip(
                request.modify_deadline_ack_ids, request.modify_deadline_seconds, strict=True
            )
        ]
    return out


def confirmation(
    *,
    acks: list[str] | None = None,
    modacks: list[str] | None = None,
    invalid_acks: list[str] | None = None,
    temporary_acks: list[str] | None = None,
) -> pubsub_pb2.StreamingPullResponse:
    response = pubsub_pb2.StreamingPullResponse()
    if acks is not None or invalid_acks or temporary_acks:
        c = response.acknowledge_confirmation
        c.ack_ids.extend(acks or [])
        c.invalid_ack_ids.extend(invalid_acks or [])
        c.temporary_failed_ack_ids.extend(temporary_acks or [])
    if modacks is not None:
        response.modify_ack_deadline_confirmation.ack_ids.extend(modacks)
    return response


def statuses(record: AckRecord) -> list[AcknowledgeStatus | None]:
    return [None if r is None else r.status for r in (record.result(i) for i in range(len(record)))]


# ---------------------------------------------------------------- records


def test_settlements_between_two_takes_share_one_record_per_kind() -> None:
    ledger = AckLedger(AckRetrySettings())
    a = ledger.submit("a", ACK)
    b = ledger.submit("b", ACK)
    n = ledger.submit("n", NACK)
    m = ledger.submit("m", MODACK, 30)
    assert a[0] is b[0]
    assert (a[1], b[1]) == (0, 1)
    assert n[0] is not a[0]
    assert m[0] is not n[0]
    ledger.take(T0, stream_open=True, stopping=False)
    c = ledger.submit("c", ACK)
    assert c[0] is not a[0]  # taken: the next ack starts a new record


def test_a_record_holds_at_most_one_request_of_ids() -> None:
    ledger = AckLedger(AckRetrySettings())
    positions = [ledger.submit(f"a{i}", ACK) for i in range(ACK_IDS_PER_REQUEST + 1)]
    assert positions[-1][0] is not positions[0][0]
    assert positions[-1][1] == 0
    records = ledger.submit_many([f"r{i}" for i in range(2 * ACK_IDS_PER_REQUEST + 1)], MODACK, 60)
    assert [len(r) for r in records] == [ACK_IDS_PER_REQUEST, ACK_IDS_PER_REQUEST, 1]


def test_requests_pack_whole_records_and_group_modacks_by_deadline() -> None:
    ledger = AckLedger(AckRetrySettings())
    ledger.submit_many(["r1", "r2"], MODACK, 60)
    ledger.submit("x", NACK)
    ledger.submit("a", ACK)
    ledger.submit("e", MODACK, 60)
    requests = ledger.take(T0, stream_open=True, stopping=False).stream
    assert len(requests) == 1
    # Grouped by deadline, first-seen order: the 60 s group (both of its records), then 0.
    assert wire(requests) == [
        ("ack", "a", 0),
        ("modack", "r1", 60),
        ("modack", "r2", 60),
        ("modack", "e", 60),
        ("modack", "x", 0),
    ]


def test_without_exactly_once_written_is_success_for_the_whole_record() -> None:
    ledger = AckLedger(AckRetrySettings())
    record, _ = ledger.submit("a", ACK)
    ledger.submit("b", ACK)
    outgoing = ledger.take(T0, stream_open=True, stopping=False)
    assert outgoing.resolved == [record]
    assert statuses(record) == [AcknowledgeStatus.SUCCESS] * 2
    assert ledger.stats.ack_results == {"SUCCESS": 2}
    assert ledger.idle()


# (exactly_once, mode, stream_open, stopping) -> (on the stream, by unary, left pending)
ROUTES = [
    (False, AckMode.UNKNOWN, True, False, ("all", "none", "none")),
    (False, AckMode.UNKNOWN, False, False, ("none", "none", "all")),
    (False, AckMode.UNKNOWN, False, True, ("none", "all", "none")),
    (True, AckMode.STREAM, True, False, ("all", "none", "none")),
    (True, AckMode.STREAM, False, False, ("none", "none", "all")),
    (True, AckMode.STREAM, False, True, ("none", "all", "none")),
    (True, AckMode.UNARY, True, False, ("none", "all", "none")),
    (True, AckMode.UNARY, False, False, ("none", "all", "none")),
    (True, AckMode.UNKNOWN, True, False, ("modacks", "all", "none")),
    (True, AckMode.UNKNOWN, False, False, ("none", "all", "none")),
]


@pytest.mark.parametrize(("exactly_once", "mode", "stream_open", "stopping", "expected"), ROUTES)
def test_routing_table(
    exactly_once: bool,
    mode: AckMode,
    stream_open: bool,
    stopping: bool,
    expected: tuple[str, str, str],
) -> None:
    ledger = AckLedger(AckRetrySettings(), exactly_once=exactly_once)
    ledger.mode = mode
    ledger.submit("a", ACK)
    ledger.submit("n", NACK)
    ledger.submit("m", MODACK, 30)
    outgoing = ledger.take(T0, stream_open=stream_open, stopping=stopping)
    on_stream = sorted(i for _, i, _ in wire(outgoing.stream))
    by_unary = sorted(i for call in outgoing.unary for i in call.ack_ids())
    parts = {"all": ["a", "m", "n"], "none": [], "modacks": ["m"]}
    assert (on_stream, by_unary) == (parts[expected[0]], parts[expected[1]])
    assert ledger.has_pending is (expected[2] == "all")


# ---------------------------------------------------------- confirmations


def test_a_confirmation_listing_the_oldest_records_resolves_them_whole() -> None:
    ledger = eod_ledger(AckMode.UNKNOWN)
    ledger.mode = AckMode.STREAM
    first, _ = ledger.submit("a", ACK)
    ledger.submit("b", ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    second, _ = ledger.submit("c", ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    resolved, retry = ledger.on_confirmation(confirmation(acks=["a", "b", "c"]))
    assert (resolved, retry) == ([first, second], [])
    assert statuses(first) == [AcknowledgeStatus.SUCCESS] * 2
    assert ledger.idle()


def test_confirmations_in_another_order_or_split_are_matched_id_by_id() -> None:
    ledger = eod_ledger()
    record = ledger.submit_many(["a", "b", "c"], MODACK, 60)[0]
    ledger.take(T0, stream_open=True, stopping=False)
    resolved, _ = ledger.on_confirmation(confirmation(modacks=["c"]))
    assert resolved == [record]
    assert statuses(record) == [None, None, AcknowledgeStatus.SUCCESS]
    ledger.on_confirmation(confirmation(modacks=["b", "a"]))
    assert record.resolved
    assert ledger.idle()
    # Nothing awaits any more: the next confirmation is matched whole again.
    again = ledger.submit_many(["d"], MODACK, 60)[0]
    ledger.take(T0, stream_open=True, stopping=False)
    assert ledger.on_confirmation(confirmation(modacks=["d"]))[0] == [again]


def test_failures_listed_in_a_confirmation() -> None:
    ledger = eod_ledger()
    record, _ = ledger.submit("ok", ACK)
    for ack_id in ("bad", "later", "unheard"):
        ledger.submit(ack_id, ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    resolved, retry = ledger.on_confirmation(
        confirmation(acks=["ok"], invalid_acks=["bad"], temporary_acks=["later"])
    )
    assert resolved == [record]
    assert statuses(record) == [
        AcknowledgeStatus.SUCCESS,
        AcknowledgeStatus.INVALID_ACK_ID,
        None,
        None,
    ]
    assert retry == [(record, 2)]  # "unheard" keeps waiting for its confirmation
    assert ledger.awaiting_confirmation()


def test_a_confirmation_of_ids_nobody_awaits_changes_nothing() -> None:
    ledger = eod_ledger()
    record, _ = ledger.submit("a", ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    assert ledger.on_confirmation(confirmation(acks=["zzz"])) == ([], [])
    assert statuses(record) == [None]


def test_the_first_confirmation_makes_the_mode_stream_and_probes_stand_first() -> None:
    ledger = eod_ledger(AckMode.UNKNOWN)
    record = ledger.submit_many(["r"], MODACK, 60)[0]
    outgoing = ledger.take(T0, stream_open=True, stopping=False)
    assert wire(outgoing.stream) == [("modack", "r", 60)]
    (call,) = outgoing.unary
    assert ledger.unary.apply_answer(call, None) == [record]  # the unary copy answers first
    assert ledger.on_confirmation(confirmation(modacks=["r"])) == ([], [])
    assert ledger.mode is AckMode.STREAM
    assert ledger.idle()


@pytest.mark.parametrize(
    ("mode", "elapsed", "late", "mode_after"),
    [
        (AckMode.UNKNOWN, PROBE_TIMEOUT - 0.1, [], AckMode.UNKNOWN),
        (AckMode.UNKNOWN, PROBE_TIMEOUT, ["a", "m"], AckMode.UNARY),
        (AckMode.STREAM, PROBE_TIMEOUT, [], AckMode.STREAM),
        (AckMode.STREAM, CONFIRMATION_TIMEOUT, ["a", "m"], AckMode.STREAM),
    ],
)
def test_overdue_table(mode: AckMode, elapsed: float, late: list[str], mode_after: AckMode) -> None:
    ledger = eod_ledger(AckMode.STREAM)
    ledger.submit("a", ACK)
    ledger.submit("m", MODACK, 60)
    ledger.take(T0, stream_open=True, stopping=False)
    ledger.mode = mode
    positions = ledger.overdue(T0 + elapsed)
    assert sorted(record.ack_ids[index] for record, index in positions) == late
    assert ledger.mode is mode_after
    assert ledger.awaiting_confirmation() is not late


def test_only_the_late_records_are_overdue() -> None:
    ledger = eod_ledger()
    ledger.submit("old", ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    ledger.submit("new", ACK)
    ledger.take(T0 + 10, stream_open=True, stopping=False)
    late = ledger.overdue(T0 + CONFIRMATION_TIMEOUT)
    assert [r.ack_ids[i] for r, i in late] == ["old"]
    assert ledger.awaiting_confirmation()


def test_an_ack_lost_with_its_stream_never_reports_a_wrong_invalid_ack_id() -> None:
    ledger = eod_ledger()
    record, _ = ledger.submit("a", ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    (call,) = ledger.unary.plan(ledger.stream_lost(), T0, ambiguous=True)
    ledger.unary.apply_answer(call, eod_ack_failure({"a": PERMANENT_FAILURE_INVALID_ACK_ID}))
    result = record.result(0)
    assert result is not None
    assert result.status is AcknowledgeStatus.OTHER
    assert "earlier attempt may have been applied" in result.info


def test_fail_all_resolves_pending_awaiting_and_unary() -> None:
    ledger = eod_ledger()
    on_stream, _ = ledger.submit("s", ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    ledger.mode = AckMode.UNARY
    by_unary, _ = ledger.submit("u", ACK)
    ledger.take(T0, stream_open=True, stopping=False)
    pending, _ = ledger.submit("p", ACK)
    resolved = ledger.fail_all("closed")
    assert set(resolved) == {on_stream, by_unary, pending}
    assert all(r.result(0) == AckResult(AcknowledgeStatus.OTHER, "closed") for r in resolved)
    assert ledger.idle()
    assert ledger.stats.ack_results == {"OTHER": 3}


# ---------------------------------------------------------------- retries


class TopJitter(random.Random):
    """Full jitter draws from 0 to the bound; this one always draws the bound."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.mark.parametrize(
    ("attempt", "elapsed", "expected"),
    [
        (1, 0.0, 0.1),
        (2, 0.3, 0.2),
        (5, 3.0, 1.6),
        (20, 100.0, 10.0),  # capped at max_backoff
        (3, 599.5, 0.4),
        (3, 599.7, None),  # the retry would start after the deadline: give up now
        (3, 600.0, None),
    ],
)
def test_ack_retry_delay_table(attempt: int, elapsed: float, expected: float | None) -> None:
    """Ack retries wait what the SDK's one backoff says (``_retrying.retry_delay``)."""
    delay = retry_delay(AckRetrySettings(), attempt, elapsed, TopJitter())
    assert delay == (pytest.approx(expected) if expected is not None else None)


def test_ack_retry_jitter_is_full() -> None:
    settings = AckRetrySettings(initial_backoff=0.5, max_backoff=4, deadline=60)
    rng = random.Random(7)
    delays = [retry_delay(settings, 3, 1.0, rng) for _ in range(200)]
    assert all(d is not None and 0.0 <= d <= 2.0 for d in delays)
    assert min(d for d in delays if d is not None) < 0.5 < max(d for d in delays if d is not None)


@pytest.mark.parametrize(
    ("ambiguous", "error", "expected"),
    [
        (False, None, AcknowledgeStatus.SUCCESS),
        (False, "invalid", AcknowledgeStatus.INVALID_ACK_ID),
        # An earlier attempt may have been applied: never a wrong INVALID_ACK_ID.
        (True, "invalid", AcknowledgeStatus.OTHER),
        (False, "denied", AcknowledgeStatus.PERMISSION_DENIED),
        (False, "unavailable", None),  # retried
        (False, "transient", None),
    ],
)
def test_what_a_unary_answer_settles(
    ambiguous: bool, error: str | None, expected: AcknowledgeStatus | None
) -> None:
    ledger = eod_ledger(AckMode.UNARY)
    record, _ = ledger.submit("a", ACK)
    (call,) = ledger.unary.plan([(record, 0)], T0, ambiguous=ambiguous)
    errors: dict[str | None, RpcError | None] = {
        None: None,
        "invalid": eod_ack_failure({"a": PERMANENT_FAILURE_INVALID_ACK_ID}),
        "transient": eod_ack_failure({"a": TEMPORARY_FAILURE}),
        "denied": rpc_error("PERMISSION_DENIED"),
        "unavailable": rpc_error("UNAVAILABLE"),
    }
    resolved = ledger.unary.apply_answer(call, errors[error])
    if expected is None:
        assert resolved == []
        assert call.positions == [(record, 0)]
        # A failed whole call may have been applied: the ack becomes ambiguous.
        assert call.ambiguous is (error == "unavailable")
    else:
        assert resolved == [record]
        assert call.positions == []
        assert statuses(record) == [expected]


async def test_unary_retries_wait_on_the_clock_and_give_up_at_the_deadline() -> None:
    clock = FakeClock()
    transport = FakeTransport()
    transport.on_acknowledge = lambda call: rpc_error("UNAVAILABLE", "down")
    ledger = eod_ledger(AckMode.UNARY)
    sender = AckSender(
        ledger, transport, SUB, clock=clock, rng=TopJitter(), spawn=print, fail=print
    )
    record, _ = ledger.submit("a", ACK)
    start = clock.now()
    outgoing = ledger.take(clock.now(), stream_open=False, stopping=True)
    await sender.send_unary(outgoing.unary)  # no real waiting: the fake clock jumps
    result = record.result(0)
    assert result is not None
    assert result.status is AcknowledgeStatus.OTHER
    assert "600 s retry deadline" in result.info
    # No retry starts past the deadline: it gives up when the next wait would end there.
    assert 590 <= clock.now() - start < 600
    calls = transport.calls(ACKNOWLEDGE)
    # 0.1, 0.2, ..., 6.4 s, then 10 s each until 600 s: about 66 attempts, not thousands.
    assert 50 <= len(calls) <= 80
    assert ledger.idle()


# ------------------------------------------------------------- Hypothesis


@dataclass
class ModelServer:
    """The server's side of exactly-once acks, as far as the ledger can tell: an ack id is
    applied at most once, and later attempts find it invalid."""

    applied: set[str] = field(default_factory=set)  # ack ids whose ack the server applied
    written: list[pubsub_pb2.StreamingPullRequest] = field(default_factory=list)

    def ack(self, ack_id: str, fail: bool) -> str:
        """One attempt: 'ok', 'invalid' or 'temporary'."""
        if ack_id in self.applied:
            return "invalid"
        if fail:
            return "temporary"
        self.applied.add(ack_id)
        return "ok"


ids = st.sampled_from([f"id{i}" for i in range(6)])
steps = st.lists(
    st.one_of(
        # Acks of fresh ids (one delivery, one ack id); "reack" acks an earlier one again.
        st.tuples(st.just("submit"), st.integers(1, 3), st.just(ACK)),
        st.tuples(st.just("reack"), st.integers(0, 100), st.just(ACK)),
        st.tuples(st.just("submit"), ids, st.sampled_from([NACK, MODACK])),
        st.tuples(st.just("submit_many"), st.integers(1, 4), st.just(ACK)),
        st.tuples(st.just("take"), st.booleans(), st.just(ACK)),
        st.tuples(st.just("take"), st.just(True), st.just(ACK)),
        # Answer the oldest written request: as is, reordered, failed, applied without a
        # confirmation, or lost before the server.
        st.tuples(
            st.just("confirm"),
            st.sampled_from(["as is", "reversed", "fail", "drop", "lose"]),
            st.just(ACK),
        ),
        st.tuples(st.just("unary"), st.booleans(), st.just(ACK)),
        st.tuples(st.just("stream_lost"), st.just(""), st.just(ACK)),
        st.tuples(st.just("overdue"), st.just(""), st.just(ACK)),
    ),
    min_size=10,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps, start_mode=st.sampled_from([AckMode.UNKNOWN, AckMode.STREAM]))
def test_an_ack_reported_success_was_applied_and_one_reported_invalid_never_was(
    steps: list[tuple[str, object, Operation]], start_mode: AckMode
) -> None:
    """Against a server that applies each ack at most once, whatever the interleaving of
    settlements, confirmations (reordered, failed, lost), unary answers, broken streams and
    timeouts: SUCCESS only for an applied ack, INVALID_ACK_ID only for one never applied by
    any attempt, each position's first result stands, and once every request has been
    answered, every position has exactly one result."""
    ledger = eod_ledger(start_mode)
    server = ModelServer()
    records: list[AckRecord] = []
    calls: list[UnaryCall] = []
    now = T0
    first_results: dict[tuple[int, int], AckResult] = {}

    def answer_unary(call: UnaryCall, fail: bool) -> None:
        if call.kind is not ACK:
            ledger.unary.apply_answer(call, None)  # modacks: always applied
            return
        failures = {}
        for ack_id in call.ack_ids():
            outcome = server.ack(ack_id, fail)
            if outcome != "ok":
                failures[ack_id] = (
                    PERMANENT_FAILURE_INVALID_ACK_ID if outcome == "invalid" else TEMPORARY_FAILURE
                )
        ledger.unary.apply_answer(call, eod_ack_failure(failures) if failures else None)

    fresh = iter(range(10_000))
    acked: list[str] = []

    def new_ids(count: object) -> list[str]:
        made = [f"a{next(fresh)}" for _ in range(int(str(count)))]
        acked.extend(made)
        return made

    for action, arg, operation in steps:
        now += 1
        if action == "submit" and operation is ACK:
            for ack_id in new_ids(arg):
                record = ledger.submit(ack_id, ACK)[0]
                if record not in records:
                    records.append(record)
        elif action == "submit":
            seconds = 30 if operation is MODACK else 0
            record = ledger.submit(str(arg), operation, seconds)[0]
            if record not in records:
                records.append(record)
        elif action == "reack" and acked:
            record = ledger.submit(acked[int(str(arg)) % len(acked)], ACK)[0]
            if record not in records:
                records.append(record)
        elif action == "submit_many":
            records += ledger.submit_many(new_ids(arg), ACK)
        elif action == "take":
            outgoing = ledger.take(now, stream_open=bool(arg), stopping=False)
            server.written += outgoing.stream
            calls += outgoing.unary
        elif action == "confirm" and server.written:
            request = server.written.pop(0)
            if arg == "lose":
                continue  # the request never reached the server
            acked, invalid, temporary = [], [], []
            for ack_id in request.ack_ids:
                outcome = server.ack(ack_id, fail=arg == "fail")
                {"ok": acked, "invalid": invalid, "temporary": temporary}[outcome].append(ack_id)
            if arg == "drop":
                continue  # applied, but its confirmation never arrives
            if arg == "reversed":
                acked.reverse()
            response = confirmation(acks=acked, invalid_acks=invalid, temporary_acks=temporary)
            response.modify_ack_deadline_confirmation.ack_ids.extend(
                request.modify_deadline_ack_ids
            )
            _, retry = ledger.on_confirmation(response)
            calls += ledger.unary.plan(retry, now, ambiguous=False)
        elif action == "unary" and calls:
            call = calls[0]
            answer_unary(call, fail=bool(arg))
            if not call.positions:
                calls.pop(0)
        elif action == "stream_lost":
            server.written.clear()
            calls += ledger.unary.plan(ledger.stream_lost(), now, ambiguous=True)
        elif action == "overdue":
            now += CONFIRMATION_TIMEOUT
            calls += ledger.unary.plan(ledger.overdue(now), now, ambiguous=True)
        check(records, server, first_results)

    # Answer everything: what is pending goes by unary call, every call until it is done.
    calls += ledger.take(now, stream_open=False, stopping=True).unary
    calls += ledger.unary.plan(ledger.stream_lost(), now, ambiguous=True)
    for call in calls:
        while call.positions:
            answer_unary(call, fail=False)
    check(records, server, first_results)
    assert ledger.idle()
    for record in records:
        assert record.resolved, record


def check(
    records: list[AckRecord],
    server: ModelServer,
    first_results: dict[tuple[int, int], AckResult],
) -> None:
    for number, record in enumerate(records):
        known = [record.result(i) for i in range(len(record))]
        assert record.unresolved == known.count(None)
        for index, result in enumerate(known):
            if result is None:
                continue
            assert first_results.setdefault((number, index), result) is result  # first stands
            if record.operation is not ACK:
                continue
            ack_id = record.ack_ids[index]
            if result.status is AcknowledgeStatus.SUCCESS:
                assert ack_id in server.applied
            if result.status is AcknowledgeStatus.INVALID_ACK_ID:
                # Only an id another settlement's ack applied: never this one's own attempt.
                assert ack_id in server.applied
                assert any(
                    other.operation is ACK and ack_id == other.ack_ids[at]
                    for other in records
                    for at in range(len(other))
                    if (other, at) != (record, index)
                )
