"""Push flow control (push/flow.py), pure: the window grows on success and halves on
failure, push backoff doubles from 100 ms to 60 s and ends with a success, one message
per ordering key in flight and a failure releasing the key's later messages, leases
renewed at half-life — by tables, and Hypothesis for the invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.server_stub.push.flow import Failure, PushFlow, PushSettings


def test_window_starts_small_grows_by_one_and_halves() -> None:
    flow = PushFlow(PushSettings(initial_window=3, max_window=5))
    assert flow.room(0) == 3
    sent = flow.admit([("a", ""), ("b", ""), ("c", "")], 0, 10)
    assert sent == ["a", "b", "c"]
    assert flow.room(0) == 0
    assert flow.succeeded("a", 1) == []
    assert (flow.window, flow.room(1)) == (4, 2)
    flow.succeeded("b", 1)
    flow.succeeded("c", 1)
    assert flow.window == 5  # capped at max_window
    flow.admit([("d", "")], 1, 10)
    flow.succeeded("d", 1)
    assert flow.window == 5
    for item in ("e", "f", "g"):
        flow.admit([(item, "")], 2, 10)
        flow.failed(item, 2, backoff=False)
    assert flow.window == 1  # 5 -> 2 -> 1 -> 1


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(1, 0.1), (2, 0.2), (3, 0.4), (8, 12.8), (10, 51.2), (11, 60.0), (30, 60.0)],
)
def test_push_backoff_doubles_from_100ms_to_60s(failures: int, delay: float) -> None:
    flow = PushFlow()
    now = 100.0
    for i in range(failures):
        flow.admit([(f"m{i}", "")], now, 10)
        flow.failed(f"m{i}", now, backoff=True)
    assert flow.not_before == pytest.approx(now + delay)
    assert flow.room(now) == 0
    assert flow.room(now + delay) > 0
    assert flow.next_wakeup(now) == pytest.approx(now + delay)


def test_a_success_ends_the_backoff_and_a_retry_policy_means_none() -> None:
    flow = PushFlow()
    flow.admit([("a", ""), ("b", "")], 0, 10)
    flow.failed("a", 0, backoff=True)
    assert flow.room(0.05) == 0
    flow.succeeded("b", 0.05)
    assert flow.not_before == 0.0
    assert flow.room(0.05) > 0
    flow.admit([("c", "")], 1, 10)
    flow.failed("c", 1, backoff=False)  # the broker's retry policy delays the message
    assert flow.room(1) > 0


def test_one_message_per_key_in_flight_and_the_next_after_success() -> None:
    flow = PushFlow(PushSettings(initial_window=10))
    sent = flow.admit([("k1", "K"), ("k2", "K"), ("x", ""), ("j1", "J"), ("k3", "K")], 0, 10)
    assert sent == ["k1", "x", "j1"]
    assert flow.outstanding == 5
    assert flow.in_flight == 3
    assert flow.succeeded("k1", 1) == ["k2"]
    assert flow.succeeded("k2", 1) == ["k3"]
    assert flow.succeeded("k3", 1) == []
    # The key is free again: a new message of it goes at once.
    assert flow.admit([("k4", "K")], 2, 10) == ["k4"]


def test_a_failure_releases_the_later_messages_of_its_key() -> None:
    flow = PushFlow(PushSettings(initial_window=10))
    flow.admit([("k1", "K"), ("k2", "K"), ("k3", "K"), ("j1", "J")], 0, 10)
    assert flow.failed("k1", 1, backoff=False) == Failure("k1", ("k2", "k3"))
    assert flow.outstanding == 1
    # Redelivered from the failed message on: k1 goes first again.
    assert flow.admit([("k1b", "K"), ("k2b", "K")], 2, 10) == ["k1b"]
    assert flow.failed("j1", 2, backoff=False) == Failure("j1")


def test_held_leases_are_renewed_at_half_life() -> None:
    flow = PushFlow(PushSettings(initial_window=10))
    flow.admit([("a", "K"), ("b", "K")], 0, 10)
    assert flow.leases_to_extend(4.9) == []
    assert flow.next_wakeup(0) == 5
    assert sorted(flow.leases_to_extend(5)) == [("a", 10), ("b", 10)]
    assert flow.leases_to_extend(9) == []  # renewed at 5: next due at 10
    assert flow.next_wakeup(9) == 10


def test_forget_releases_what_waits_and_keeps_what_flies() -> None:
    flow = PushFlow(PushSettings(initial_window=10))
    flow.admit([("k1", "K"), ("k2", "K"), ("x", "")], 0, 10)
    assert flow.forget() == ["k2"]
    assert flow.outstanding == 2


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        PushSettings(initial_window=0)
    with pytest.raises(ValueError):
        PushSettings(min_backoff=2, max_backoff=1)


_events = st.lists(
    st.tuples(st.sampled_from(["lease", "ok", "fail", "fail_backoff", "tick"]), st.integers(0, 5)),
    max_size=80,
)


@given(_events)
def test_invariants_under_any_sequence(events: list[tuple[str, int]]) -> None:
    """The window stays in [1, max]; no two messages of a key fly together; a key's
    messages are pushed in lease order; nothing is held that was not admitted."""
    settings = PushSettings(initial_window=3, max_window=8)
    flow = PushFlow(settings)
    now = 0.0
    counter = 0
    flying: dict[str, str] = {}  # item -> key
    order: dict[str, list[str]] = {}  # key -> items admitted, in order
    pushed: dict[str, list[str]] = {}
    for action, n in events:
        now += 0.05
        if action == "lease":
            items = []
            for _ in range(min(n, flow.room(now))):
                counter += 1
                key = f"k{counter % 3}" if counter % 2 else ""
                items.append((f"m{counter}", key))
                if key:
                    order.setdefault(key, []).append(f"m{counter}")
            keys = dict(items)
            for item in flow.admit(items, now, 10):
                flying[item] = keys[item]
                if keys[item]:
                    pushed.setdefault(keys[item], []).append(item)
        elif action in ("ok", "fail", "fail_backoff") and flying:
            item = sorted(flying)[n % len(flying)]
            key = flying.pop(item)
            if action == "ok":
                for following in flow.succeeded(item, now):
                    flying[following] = key
                    pushed[key].append(following)
            else:
                failure = flow.failed(item, now, backoff=action == "fail_backoff")
                # Released and failed messages leave the key's expected order: the
                # broker redelivers them as new leases.
                gone = {failure.item, *failure.released}
                if key:
                    order[key] = [m for m in order[key] if m not in gone]
                    pushed[key] = [m for m in pushed[key] if m not in gone]
        assert 1 <= flow.window <= settings.max_window
        keys_flying = [k for k in flying.values() if k]
        assert len(keys_flying) == len(set(keys_flying))
        assert flow.in_flight == len(flying)
        assert flow.outstanding <= settings.max_window
        for key, items in pushed.items():
            expected = [m for m in order.get(key, []) if m in items]
            assert items == expected
