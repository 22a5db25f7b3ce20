"""Broker core: the schema registry (core/schemas.py, core/schema_codecs.py) — Avro
definitions parsed by fastavro and messages checked in both encodings, Protocol Buffer
definitions compiled by protoc, revisions (commit, rollback, delete, ``name@revision``,
the 20-revision limit, revision ranges), refusals that store nothing, and schemas kept
across a restart of a durable store."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eoclient._clock import FakeClock
from eoclient.errors import AlreadyExists, InvalidArgument, NotFound
from eoclient.server_stub.core import Broker
from eoclient.server_stub.core.schema_codecs import SchemaError, compile_definition
from eoclient.server_stub.core.schemas import MAX_REVISIONS, SchemaRevision
from eoclient.server_stub.storage.sqlite import SqliteStore

from .support import PROJECT, Env

NAME = f"{PROJECT}/schemas/people"
PERSON = {
    "type": "record",
    "name": "Person",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
AVRO_DEFINITION = json.dumps(PERSON)
PROTO_DEFINITION = """
syntax = "proto3";
package demo;
import "google/protobuf/timestamp.proto";
message Person {
  string name = 1;
  int32 age = 2;
  google.protobuf.Timestamp born = 3;
}
"""


def avro_binary(record: dict[str, object], schema: dict[str, object] = PERSON) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def create(env: Env, kind: str = "AVRO", definition: str = AVRO_DEFINITION) -> SchemaRevision:
    return env.broker.schemas.create(PROJECT, "people", kind, definition)


# ------------------------------------------------------------------ Avro


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b'{"name": "Ada", "age": 36, "email": null}', "JSON"),
        (b'{"name": "Ada", "age": 36, "email": {"string": "a@x.org"}}', "JSON"),
        (b'{"name": "Ada", "age": 36}', "JSON"),  # a field with a default may be absent
        (avro_binary({"name": "Ada", "age": 36, "email": "a@x.org"}), "BINARY"),
    ],
)
def test_avro_messages_that_match(data: bytes, encoding: str) -> None:
    compile_definition("AVRO", AVRO_DEFINITION).check(data, encoding)


@pytest.mark.parametrize(
    ("data", "encoding", "reason"),
    [
        (b'{"name": 1, "age": 36}', "JSON", "expected string"),
        (b'{"age": 36}', "JSON", "no value and no default"),
        (b'{"name": "Ada", "age": "old"}', "JSON", "Avro JSON datum"),
        (b"[1, 2]", "JSON", "Avro JSON datum"),
        (b"not json", "JSON", "not JSON"),
        (b"\xff\xfe", "JSON", "not JSON"),
        (avro_binary({"name": "Ada", "age": 36}) + b"\x00", "BINARY", "1 bytes follow"),
        (b"\x10Ad", "BINARY", "Avro binary datum"),
        (b'{"name": "Ada", "age": 36}', "BINARY", "Expected -62 bytes"),
    ],
)
def test_avro_messages_that_do_not_match(data: bytes, encoding: str, reason: str) -> None:
    codec = compile_definition("AVRO", AVRO_DEFINITION)
    with pytest.raises(SchemaError, match=reason):
        codec.check(data, encoding)


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ("", "empty"),
        ("{nope", "not JSON"),
        ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "strin"}]}', "strin"),
        ('{"type": "record"}', "not valid"),
    ],
)
def test_bad_avro_definitions(definition: str, reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        compile_definition("AVRO", definition)


# -------------------------------------------------------------- protobuf


def test_protobuf_messages_in_both_encodings() -> None:
    codec = compile_definition("PROTOCOL_BUFFER", PROTO_DEFINITION)
    codec.check(b'{"name": "Ada", "age": 36, "born": "1815-12-10T00:00:00Z"}', "JSON")
    codec.check(b"\x0a\x03Ada\x10\x24", "BINARY")
    for data, encoding in (
        (b'{"name": "Ada", "shoe": 3}', "JSON"),
        (b'{"age": "old"}', "JSON"),
        (b"\x0a\x10Ada", "BINARY"),  # a length running past the end
    ):
        with pytest.raises(SchemaError):
            codec.check(data, encoding)


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ('syntax = "proto3"; message A {} message B {}', "exactly one top-level message"),
        ('syntax = "proto3"; message A { strin x = 1; }', r'"strin" is not defined'),
        ('syntax = "proto3"; import "other.proto"; message A {}', "other.proto"),
        ('syntax = "proto3"; enum E { X = 0; }', r"\(it has 0\)"),
    ],
)
def test_bad_protobuf_definitions(definition: str, reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        compile_definition("PROTOCOL_BUFFER", definition)


# ------------------------------------------------------------- registry


def test_create_get_list_and_refusals() -> None:
    env = Env()
    created = create(env)
    assert created.name == NAME
    assert created.type == "AVRO"
    assert len(created.revision_id) == 8
    assert created.revision_create_time == env.clock.now()
    assert env.broker.schemas.get(NAME) == created
    page = env.broker.schemas.list_schemas(PROJECT, 0, "")
    assert page.items == (created,)
    with pytest.raises(AlreadyExists, match="Schema already exists"):
        create(env)
    with pytest.raises(InvalidArgument, match="AVRO or PROTOCOL_BUFFER"):
        env.broker.schemas.create(PROJECT, "other", "TYPE_UNSPECIFIED", AVRO_DEFINITION)
    with pytest.raises(InvalidArgument, match="Invalid schema definition"):
        env.broker.schemas.create(PROJECT, "other", "AVRO", "{")
    with pytest.raises(InvalidArgument, match="Invalid resource name"):
        env.broker.schemas.create(PROJECT, "x", "AVRO", AVRO_DEFINITION)
    with pytest.raises(InvalidArgument, match="schema_id is required"):
        env.broker.schemas.create(PROJECT, "", "AVRO", AVRO_DEFINITION)
    with pytest.raises(NotFound, match="Schema does not exist"):
        env.broker.schemas.get(f"{PROJECT}/schemas/other")
    assert [s.name for s in env.broker.schemas.list_schemas(PROJECT, 0, "").items] == [NAME]


def test_revisions_commit_rollback_delete() -> None:
    env = Env()
    first = create(env)
    env.advance(1)
    widened = dict(PERSON, fields=[*PERSON["fields"], {"name": "x", "type": "int", "default": 0}])  # type: ignore[list-item]
    second = env.broker.schemas.commit(NAME, "AVRO", json.dumps(widened))
    assert second.revision_id != first.revision_id
    assert env.broker.schemas.get(NAME) == second
    assert env.broker.schemas.get(f"{NAME}@{first.revision_id}") == first
    env.advance(1)
    third = env.broker.schemas.rollback(NAME, first.revision_id)
    assert third.definition == first.definition
    assert third.revision_id not in (first.revision_id, second.revision_id)
    revisions = env.broker.schemas.list_revisions(NAME, 0, "").items
    assert [r.revision_id for r in revisions] == [
        first.revision_id,
        second.revision_id,
        third.revision_id,
    ]
    page = env.broker.schemas.list_revisions(NAME, 2, "")
    rest = env.broker.schemas.list_revisions(NAME, 2, page.next_page_token)
    assert [*page.items, *rest.items] == list(revisions)
    assert env.broker.schemas.delete_revision(f"{NAME}@{second.revision_id}") == second
    assert env.broker.schemas.delete_revision(NAME, first.revision_id) == first
    with pytest.raises(InvalidArgument, match="Cannot delete last revision"):
        env.broker.schemas.delete_revision(NAME, third.revision_id)
    with pytest.raises(NotFound, match="does not exist"):
        env.broker.schemas.rollback(NAME, second.revision_id)
    with pytest.raises(InvalidArgument, match="of type AVRO"):
        env.broker.schemas.commit(NAME, "PROTOCOL_BUFFER", PROTO_DEFINITION)
    env.broker.schemas.delete(NAME)
    with pytest.raises(NotFound):
        env.broker.schemas.get(NAME)


def test_a_schema_has_at_most_twenty_revisions() -> None:
    env = Env()
    create(env)
    for _ in range(MAX_REVISIONS - 1):
        env.broker.schemas.commit(NAME, "AVRO", AVRO_DEFINITION)
    with pytest.raises(Exception, match="20 revisions"):
        env.broker.schemas.commit(NAME, "AVRO", AVRO_DEFINITION)
    assert len(env.broker.schemas.list_revisions(NAME, 0, "").items) == MAX_REVISIONS


def test_messages_match_the_newest_revision_of_the_range() -> None:
    env = Env()
    old = create(env)
    renamed = dict(PERSON, fields=[{"name": "title", "type": "string"}])
    new = env.broker.schemas.commit(NAME, "AVRO", json.dumps(renamed))
    old_style, new_style = b'{"name": "Ada", "age": 36}', b'{"title": "Countess"}'
    assert env.broker.schemas.check_message(NAME, new_style, "JSON") == new
    assert env.broker.schemas.check_message(NAME, old_style, "JSON") == old
    with pytest.raises(SchemaError):
        env.broker.schemas.check_message(NAME, old_style, "JSON", new.revision_id)
    with pytest.raises(SchemaError):
        env.broker.schemas.check_message(NAME, new_style, "JSON", "", old.revision_id)
    with pytest.raises(NotFound, match="First revision could not be found"):
        env.broker.schemas.revision_range(NAME, "deadbeef", "")
    with pytest.raises(InvalidArgument, match="newer than"):
        env.broker.schemas.revision_range(NAME, new.revision_id, old.revision_id)


def test_schemas_survive_a_restart_of_a_durable_store(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SqliteStore(tmp_path)
    broker = Broker(clock, store=store)
    first = broker.schemas.create(PROJECT, "people", "PROTOCOL_BUFFER", PROTO_DEFINITION)
    second = broker.schemas.commit(NAME, "PROTOCOL_BUFFER", PROTO_DEFINITION)
    broker.schemas.create(PROJECT, "gone", "AVRO", AVRO_DEFINITION)
    broker.schemas.delete(f"{PROJECT}/schemas/gone")
    store.commit()
    store.close()
    store = SqliteStore(tmp_path)
    try:
        again = Broker(clock, store=store)
        assert [r.revision_id for r in again.schemas.list_revisions(NAME, 0, "").items] == [
            first.revision_id,
            second.revision_id,
        ]
        assert again.schemas.get(NAME) == second
        assert [s.name for s in again.schemas.list_schemas(PROJECT, 0, "").items] == [NAME]
        # Compiled again on first use.
        assert again.schemas.check_message(NAME, b'{"name": "Ada"}', "JSON") == second
    finally:
        store.close()


_avro_values = st.fixed_dictionaries(
    {
        "name": st.text(max_size=20),
        "age": st.integers(-(2**31), 2**31 - 1),
        "email": st.none() | st.text(max_size=20),
    }
)


@settings(max_examples=50, deadline=None)
@given(_avro_values)
def test_every_record_of_the_schema_matches_in_both_encodings(record: dict[str, object]) -> None:
    codec = compile_definition("AVRO", AVRO_DEFINITION)
    codec.check(avro_binary(record), "BINARY")
    email = record["email"]
    as_json = dict(record, email=None if email is None else {"string": email})
    codec.check(json.dumps(as_json).encode(), "JSON")
