"""The source's pure decisions: admission, settlement, leases, claims, plans, leftovers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.spark._decisions import (
    CLOCK_SKEW_SECONDS,
    PENDING_TTL_SECONDS,
    Admission,
    Known,
    Leases,
    Settlement,
    Verdict,
    expire_pending,
    leftovers,
    may_claim_unverified,
    plan_partitions,
)
from eoclient.subscriber.ack_results import AcknowledgeStatus

OK, INVALID = AcknowledgeStatus.SUCCESS, AcknowledgeStatus.INVALID_ACK_ID


def _admit(admission: Admission, *deliveries: tuple[str, str, int]) -> list[Verdict]:
    message_ids, ack_ids, published = zip(*deliveries, strict=True) if deliveries else ((), (), ())
    return admission.admit(list(message_ids), list(ack_ids), list(published))


@pytest.mark.parametrize(
    ("known", "message_id", "published", "verdict"),
    [
        (Known(), "m", 5, Verdict.EMIT),
        (Known(committed={"m"}), "m", 5, Verdict.ACK_NOW),
        (Known(uncommitted={"m"}), "m", 5, Verdict.ACK_AFTER_COMMIT),
        (Known(cutoff_ns=4), "m", 5, Verdict.RELEASE),
        (Known(cutoff_ns=5), "m", 5, Verdict.EMIT),  # published at the cutoff: this run's
        # committed wins over the cutoff: a committed message is acked whatever its time
        (Known(committed={"m"}, cutoff_ns=0), "m", 5, Verdict.ACK_NOW),
        # the negative control emits redeliveries again
        (Known(committed={"m"}, dedupe=False), "m", 5, Verdict.EMIT),
        (Known(uncommitted={"m"}, dedupe=False), "m", 5, Verdict.EMIT),
    ],
)
def test_admission_table(known: Known, message_id: str, published: int, verdict: Verdict) -> None:
    assert _admit(Admission(known), (message_id, "a1", published)) == [verdict]


def test_a_message_delivered_twice_in_one_pull_keeps_its_newest_delivery() -> None:
    admission = Admission(Known())
    _admit(admission, ("m", "a1", 1), ("n", "b1", 1))
    _admit(admission, ("m", "a2", 1))
    assert admission.emitted == {"m": (1, 0), "n": (0, 1)}
    assert admission.emitted_ack_ids == {"m": "a2", "n": "b1"}
    assert admission.superseded == ["a1"]
    assert sorted(admission.leased()) == ["a2", "b1"]


def test_withdraw_and_drop() -> None:
    admission = Admission(Known())
    _admit(admission, ("m", "a1", 1), ("n", "b1", 1), ("o", "c1", 1))
    assert admission.withdraw({"n", "x"}) == ["n"]  # journaled by another part meanwhile
    assert admission.after_commit == {"b1": "n"}
    assert admission.drop(["o", "x"]) == ["c1"]  # its lease was lost
    assert admission.emitted == {"m": (0, 0)}
    assert Admission(Known(dedupe=False)).withdraw({"m"}) == []


_ids = st.sampled_from([f"m{i}" for i in range(8)])


@given(
    st.lists(st.lists(st.tuples(_ids, st.integers(0, 9)), max_size=6), max_size=5),
    st.frozensets(_ids),
    st.frozensets(_ids),
    st.one_of(st.none(), st.integers(0, 9)),
)
def test_every_delivery_is_accounted_for_once(
    chunks: list[list[tuple[str, int]]],
    committed: frozenset[str],
    uncommitted: frozenset[str],
    cutoff: int | None,
) -> None:
    admission = Admission(Known(committed, uncommitted, cutoff))
    ack_ids = []
    for c, chunk in enumerate(chunks):
        deliveries = [(m, f"{m}-{c}-{r}", t) for r, (m, t) in enumerate(chunk)]
        ack_ids += [a for _, a, _ in deliveries]
        _admit(admission, *deliveries)
    # Each ack id ends up in exactly one place ...
    places = [
        *admission.emitted_ack_ids.values(),
        *admission.ack_now,
        *admission.after_commit,
        *admission.release,
        *admission.superseded,
    ]
    assert sorted(places) == sorted(ack_ids)
    # ... a message is emitted at most once, never a committed or uncommitted one.
    assert not set(admission.emitted) & (committed | uncommitted)
    assert set(admission.emitted) == set(admission.emitted_ack_ids)


def test_settlement_confirms_with_any_ack_id_and_keeps_the_rest_pending() -> None:
    settlement = Settlement.from_rows(["m", "n", "n", "o"], ["a1", "b1", "b2", "c1"])
    sent = settlement.next_round()
    assert sent == {"a1": "m", "b1": "n", "b2": "n", "c1": "o"}
    settlement.record(sent, {"a1": OK, "b1": INVALID, "b2": OK})  # c1: no answer
    assert settlement.unconfirmed == {"o"}
    assert settlement.next_round() == {}  # nothing new to send: over


def test_a_redelivery_during_a_round_joins_the_next() -> None:
    settlement = Settlement({"m": ["a1"], "n": ["b1"]})
    sent = settlement.next_round()
    assert settlement.redelivered("m", "a2")
    assert not settlement.redelivered("x", "z1")  # not being settled
    settlement.record(sent, {"a1": INVALID, "b1": OK})
    assert settlement.next_round() == {"a2": "m"}
    settlement.record({"a2": "m"}, {"a2": OK})
    assert settlement.unconfirmed == set()
    other = Settlement({"m": ["a1"]})
    other.confirmed("m")  # acked elsewhere (a probe acked its redelivery)
    assert other.unconfirmed == set()


def test_leases_extend_a_group_before_its_deadline_by_the_sdk_rules() -> None:
    leases = Leases(lease_seconds=60)
    leases.add("0/1", ["a", "b"], leased_until=110.0, now=100.0)
    assert "0/1" in leases
    # 10 s until the end (9 counting the clock skew); the SDK's renewal margin for a 9 s
    # lease is 4.5 s: due from 104.5.
    assert leases.due(104.0) == {}
    assert leases.due(104.6) == {"0/1": ["a", "b"]}
    assert leases.due(105.0) == {}  # extended to 164.6
    leases.lost("0/1", ["a"])
    assert leases.due(160.0) == {"0/1": ["b"]}
    leases.remove("0/1")
    assert len(leases) == 0
    # A group found with its lease already over is due at once (its modack will tell).
    leases.add("0/2", ["c"], leased_until=50.0, now=100.0)
    assert leases.next_wakeup(100.0) == pytest.approx(100.0, abs=1e-3)
    assert leases.due(100.001) == {"0/2": ["c"]}
    assert CLOCK_SKEW_SECONDS == 1.0


@pytest.mark.parametrize(
    ("elapsed", "deadline", "unverified"),
    [(0.0, 10, True), (4.9, 10, True), (5.0, 10, False), (53.9, 60, True), (54.0, 60, False)],
)
def test_a_part_may_be_claimed_unverified_within_the_deadline_less_the_margin(
    elapsed: float, deadline: int, unverified: bool
) -> None:
    assert may_claim_unverified(1000.0 + elapsed, 1000.0, deadline) is unverified


@pytest.mark.parametrize(
    ("probed", "asked", "max_rows", "partitions", "quotas"),
    [
        (2000, 2000, 50_000, 4, (12_000, 12_000, 12_000, 12_000)),
        (2000, 2000, 8001, 3, (2001, 2000, 2000)),
        (1500, 2000, 50_000, 4, ()),  # the probe found the subscription nearly drained
        (2000, 2000, 2000, 4, ()),  # max_rows fits the probe
        (2000, 2000, 2002, 4, (1, 1)),  # never a task with nothing to pull
    ],
)
def test_plan_partitions(
    probed: int, asked: int, max_rows: int, partitions: int, quotas: tuple[int, ...]
) -> None:
    plan = plan_partitions(probed, asked, max_rows, partitions)
    assert plan == quotas
    assert probed + sum(plan) <= max_rows


def test_leftovers_release_unjournaled_and_wait_for_calls_in_flight() -> None:
    plan = leftovers(["a", "b", "c", "a"], [100.0, 90.0], journaled={"b"}, ack_deadline=10)
    assert plan.release == ["a", "c"]
    assert plan.wait_until == 112.0  # the latest call in flight + deadline + 2 s
    assert leftovers([], [], set(), 10).wait_until == 0.0


def test_pending_ids_expire_after_the_retention() -> None:
    now = 10 * PENDING_TTL_SECONDS
    pending = {"old": now - PENDING_TTL_SECONDS - 1, "new": now - 5}
    assert expire_pending(pending, now) == {"new": now - 5}
