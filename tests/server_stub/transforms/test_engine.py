"""The engine with real V8 isolates: batches, the time and memory limits, isolation of
one UDF from another, and the load check the create/update calls run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from eoclient.server_stub.transforms.engine import Chain, MessageIn, check_udf
from eoclient.server_stub.transforms.rules import (
    Failed,
    Filtered,
    Transformed,
    TransformLimits,
    Udf,
)

LIMITS = TransformLimits(time_per_message=0.2, memory_bytes=32 * 2**20)
# For the cases that must run out of memory: filling 32 MiB takes V8 well under 0.2 s on an
# idle machine but not on a loaded one, where the time limit would end the code first.
MEMORY_LIMITS = TransformLimits(time_per_message=30.0, memory_bytes=32 * 2**20)


@pytest.fixture
def chains() -> Iterator[list[Chain]]:
    made: list[Chain] = []
    yield made
    for chain in made:
        chain.close()


def chain(made: list[Chain], *udfs: Udf, limits: TransformLimits = LIMITS) -> Chain:
    c = Chain(udfs, limits)
    made.append(c)
    return c


def test_the_load_check() -> None:
    assert check_udf(Udf("f", "function f(m) { return m; }"), LIMITS) is None
    assert check_udf(Udf("f", "const f = (m) => m;"), LIMITS) is None
    problems = {
        "function f( {": "does not parse: line 1: SyntaxError",
        "function g() {}": "does not define the function f",
        "var f = 1;": "f is not a function in the code (it is a number)",
        "throw new Error('at load');": "threw when loaded: line 1: Error: at load",
        "while (true) {}": "top level ran longer than 0.2 s",
    }
    for code, says in problems.items():
        problem = check_udf(Udf("f", code), LIMITS)
        assert problem is not None, code
        assert says in problem, (code, problem)
    hog = "let a = []; while (true) { a.push(new Array(1e5).fill(1)); }"
    problem = check_udf(Udf("f", hog), MEMORY_LIMITS)
    assert problem is not None
    assert "ran out of memory" in problem, problem


def test_a_batch_goes_through_in_order_with_metadata(chains: list[Chain]) -> None:
    c = chain(
        chains,
        Udf(
            "tag",
            "function tag(m, md) { if (m.data === 'drop') return null;"
            " m.attributes.id = md.message_id || ''; m.attributes.key = md.ordering_key || '';"
            " return m; }",
        ),
    )
    outcomes = c.apply_blocking(
        [
            MessageIn(b"a", {}, "1", 1.0, "k"),
            MessageIn(b"drop", {}),
            MessageIn(b"\xff", {}),
            MessageIn(b"b", {"x": "y"}, "2"),
        ]
    )
    assert outcomes[0] == Transformed(b"a", {"id": "1", "key": "k"})
    assert outcomes[1] == Filtered()
    assert isinstance(outcomes[2], Failed)
    assert "UTF-8" in outcomes[2].reason
    assert outcomes[3] == Transformed(b"b", {"x": "y", "id": "2", "key": ""})


def test_a_runaway_message_costs_one_time_limit_and_fails_alone(chains: list[Chain]) -> None:
    c = chain(
        chains,
        Udf("spin", "function spin(m) { if (m.data === 'spin') { while (true) {} } return m; }"),
    )
    started = time.monotonic()
    outcomes = c.apply_blocking([MessageIn(p, {}) for p in (b"a", b"spin", b"b", b"spin", b"c")])
    took = time.monotonic() - started
    assert [type(o).__name__ for o in outcomes] == [
        "Transformed",
        "Failed",
        "Transformed",
        "Failed",
        "Transformed",
    ]
    assert "longer than the server's limit of 0.2 s" in outcomes[1].reason  # type: ignore[union-attr]
    assert took < 2.0  # two timeouts, not a timeout per message of the batch


def test_running_out_of_memory_fails_that_message_and_the_udf_goes_on(chains: list[Chain]) -> None:
    c = chain(
        chains,
        Udf(
            "hog",
            "function hog(m) { if (m.data === 'hog') { let a = [];"
            " while (true) { a.push(new Array(1e5).fill(1)); } } return m; }",
        ),
        limits=MEMORY_LIMITS,
    )
    outcomes = c.apply_blocking([MessageIn(p, {}) for p in (b"a", b"hog", b"b")])
    assert outcomes[0] == Transformed(b"a", {})
    assert outcomes[2] == Transformed(b"b", {})
    assert isinstance(outcomes[1], Failed)
    assert "out of memory" in outcomes[1].reason
    assert c.apply_blocking([MessageIn(b"again", {})]) == [Transformed(b"again", {})]


def test_each_udf_has_its_own_globals(chains: list[Chain]) -> None:
    counting = "var n = 0; function count(m) { n += 1; m.data = String(n); return m; }"
    first = chain(chains, Udf("count", counting))
    second = chain(chains, Udf("count", counting))
    assert first.apply_blocking([MessageIn(b"", {"a": "b"})] * 2)[1] == Transformed(
        b"2", {"a": "b"}
    )
    assert second.apply_blocking([MessageIn(b"", {"a": "b"})]) == [Transformed(b"1", {"a": "b"})]


def test_a_chain_stops_a_message_at_its_first_filter_or_failure(chains: list[Chain]) -> None:
    c = chain(
        chains,
        Udf("one", "function one(m) { if (m.data === 'x') throw new Error('x!'); return m; }"),
        Udf("two", "function two(m) { return m.data === 'y' ? null : {data: m.data + '2'}; }"),
    )
    outcomes = c.apply_blocking([MessageIn(p, {}) for p in (b"x", b"y", b"z")])
    assert isinstance(outcomes[0], Failed)
    assert outcomes[0].reason.startswith("message transform one:")
    assert outcomes[1:] == [Filtered(), Transformed(b"z2", {})]


def test_code_that_stops_loading_fails_every_message(chains: list[Chain]) -> None:
    c = chain(chains, Udf("f", "function f( {"))
    outcomes = c.apply_blocking([MessageIn(b"a", {}), MessageIn(b"b", {})])
    assert all(isinstance(o, Failed) and "does not load" in o.reason for o in outcomes)
