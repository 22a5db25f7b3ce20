"""Change data capture through the BigQuery subscription writer: UPSERT and DELETE by the
table's primary key, ``_CHANGE_SEQUENCE_NUMBER`` ordering (a lower number is stale, an
equal one falls back to arrival order), kept across batches and a reopen."""

from __future__ import annotations

import pytest

from eoclient.server_stub.bigquery import ACTIVE, BigQueryStandIn, BigQueryTarget, cdc

from .conftest import make_table, message, rows

SUB = "projects/p/subscriptions/cdc"
ACCOUNTS = [
    {"name": "id", "type": "STRING", "mode": "REQUIRED"},
    {"name": "region", "type": "STRING", "mode": "REQUIRED"},
    {"name": "balance", "type": "INT64"},
]
TARGET = BigQueryTarget(SUB, "p.ds.accounts", use_table_schema=True)


def change(
    mid: str, kind: str, key: str, balance: int | None = None, seq: str | None = None
) -> object:
    body: dict[str, object] = {"id": key, "region": "eu", "_CHANGE_TYPE": kind}
    if balance is not None:
        body["balance"] = balance
    if seq is not None:
        body["_CHANGE_SEQUENCE_NUMBER"] = seq
    return message(mid, body)


@pytest.fixture
def accounts(standin: BigQueryStandIn) -> BigQueryStandIn:
    make_table(standin, "accounts", ACCOUNTS, ("id", "region"))
    return standin


def state(store: BigQueryStandIn) -> list[tuple[object, ...]]:
    return rows(store, "SELECT id, balance FROM ds.accounts ORDER BY id")


def test_upserts_and_deletes_by_key_in_arrival_order(accounts: BigQueryStandIn) -> None:
    result = accounts.write(
        TARGET,
        [
            change("1", "UPSERT", "a", 10),
            change("2", "UPSERT", "b", 20),
            change("3", "upsert", "a", 11),
            change("4", "DELETE", "b"),
            change("5", "UPSERT", "c", 30),
        ],
    )
    assert result.state == ACTIVE
    assert len(result.written) == 5
    assert state(accounts) == [("a", 11), ("c", 30)]
    accounts.write(TARGET, [change("6", "DELETE", "a"), change("7", "UPSERT", "b", 21)])
    assert state(accounts) == [("b", 21), ("c", 30)]


def test_sequence_numbers_order_changes_and_a_lower_one_is_ignored(
    accounts: BigQueryStandIn,
) -> None:
    accounts.write(
        TARGET, [change("1", "UPSERT", "a", 5, "00A"), change("2", "UPSERT", "a", 4, "9")]
    )
    assert state(accounts) == [("a", 5)]  # 9 < A: stale, though it came later
    result = accounts.write(TARGET, [change("3", "UPSERT", "a", 3, "A/1")])
    assert "3" in result.written
    assert state(accounts) == [("a", 3)]
    accounts.write(TARGET, [change("4", "DELETE", "a", seq="A/0")])
    assert state(accounts) == [("a", 3)]  # a stale delete deletes nothing
    accounts.write(TARGET, [change("5", "UPSERT", "a", 7, "a/1")])  # equal: the later wins
    assert state(accounts) == [("a", 7)]
    accounts.write(TARGET, [change("6", "DELETE", "a", seq="FFFF")])
    accounts.write(TARGET, [change("7", "UPSERT", "a", 1, "FFFE")])
    assert state(accounts) == []  # the delete's number keeps an older upsert out


def test_numbers_survive_a_reopen(accounts: BigQueryStandIn) -> None:
    accounts.write(TARGET, [change("1", "UPSERT", "a", 5, "10")])
    path = accounts.path
    accounts.close()
    again = BigQueryStandIn(path)
    try:
        again.write(TARGET, [change("2", "UPSERT", "a", 1, "0F")])
        assert state(again) == [("a", 5)]
    finally:
        again.close()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"id": "a", "region": "eu", "_CHANGE_TYPE": "MERGE"}, "UPSERT or DELETE"),
        (
            {"id": "a", "region": "eu", "_CHANGE_TYPE": "UPSERT", "_CHANGE_SEQUENCE_NUMBER": "xyz"},
            "hexadecimal",
        ),
        (
            {
                "id": "a",
                "region": "eu",
                "_CHANGE_TYPE": "UPSERT",
                "_CHANGE_SEQUENCE_NUMBER": "1/2/3/4/5",
            },
            "4 sections",
        ),
        ({"id": "a", "region": "eu", "_CHANGE_SEQUENCE_NUMBER": "1"}, "no _CHANGE_TYPE"),
        ({"region": "eu", "_CHANGE_TYPE": "DELETE"}, "REQUIRED"),
    ],
)
def test_a_change_that_is_not_one_is_unwritable(
    accounts: BigQueryStandIn, body: dict[str, object], why: str
) -> None:
    result = accounts.write(TARGET, [message("x", body)])
    assert why in result.unwritable["x"]


def test_a_change_to_a_table_without_a_primary_key_is_unwritable(
    standin: BigQueryStandIn,
) -> None:
    make_table(standin, "accounts", ACCOUNTS)
    result = standin.write(TARGET, [change("1", "UPSERT", "a", 1)])
    assert "no primary key" in result.unwritable["1"]


def test_a_message_without_a_change_type_is_appended(accounts: BigQueryStandIn) -> None:
    accounts.write(TARGET, [message("1", {"id": "a", "region": "eu", "balance": 1})] * 2)
    assert state(accounts) == [("a", 1), ("a", 1)]  # BigQuery does not enforce the key


def test_sequence_numbers_parse_and_compare() -> None:
    assert cdc.sequence("ff/0") == (255, 0)
    assert cdc.sequence(None) is None
    assert cdc.sequence("FFFFFFFFFFFFFFFF/1") == (2**64 - 1, 1)
    with pytest.raises(cdc.ChangeError):
        cdc.sequence("1" * 17)
    assert cdc.decode(cdc.encode((10, 3))) == (10, 3)
    assert cdc.sequence("A") < cdc.sequence("A/0") < cdc.sequence("B")  # type: ignore[operator]
