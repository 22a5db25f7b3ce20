"""SchemaService and topics bound to an Avro schema, against ``eoclient serve`` and Google's
emulator (0.8.20; it has no Protocol Buffer schemas, answering UNIMPLEMENTED).

The same scenario runs on both and must give the same status codes (texts differ:
docs/protocol.md#where-the-emulator-differs), the same revisions and the same delivered
attributes. Where the emulator departs from the proto (ListSchemas without a view answers
FULL, the proto says BASIC), the test pins each answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb
from eoclient._proto import schema_pb2 as sp

pytestmark = pytest.mark.emulator

PROJECT = "projects/p1"
AVRO = json.dumps(
    {
        "type": "record",
        "name": "Reading",
        "fields": [
            {"name": "sensor", "type": "string"},
            {"name": "celsius", "type": "double"},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)
GOOD = b'{"sensor": "s1", "celsius": 21.5, "note": null}'


@pytest.fixture(params=["reference", "emulator"])
def target(request: pytest.FixtureRequest, wire_factory: Callable[[str], Wire]) -> Wire:
    address = request.getfixturevalue("served" if request.param == "reference" else "emulator")
    return wire_factory(address)


async def schema_call(wire: Wire, method: str, request: Any, response: Any) -> Any:
    call = wire.channel.unary_unary(
        f"/google.pubsub.v1.SchemaService/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response.FromString,
    )
    return await call(request)


async def code_of(call: Any) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return str(caught.value.code().name)


def avro(definition: str = AVRO) -> sp.Schema:
    return sp.Schema(type_=sp.Schema.AVRO, definition=definition)


async def test_schema_revisions_and_refusals(target: Wire) -> None:
    sid = unique("schema").rsplit("/", 1)[1]
    name = f"{PROJECT}/schemas/{sid}"
    create = sp.CreateSchemaRequest(parent=PROJECT, schema=avro(), schema_id=sid)
    first = await schema_call(target, "CreateSchema", create, sp.Schema)
    assert (first.name, first.type_, first.definition) == (name, sp.Schema.AVRO, AVRO)
    assert len(first.revision_id) == 8
    assert await code_of(schema_call(target, "CreateSchema", create, sp.Schema)) == (
        "ALREADY_EXISTS"
    )
    for schema in (avro("{nope"), sp.Schema(definition=AVRO)):
        request = sp.CreateSchemaRequest(parent=PROJECT, schema=schema, schema_id=sid + "x")
        assert await code_of(schema_call(target, "CreateSchema", request, sp.Schema)) == (
            "INVALID_ARGUMENT"
        )
    missing = sp.GetSchemaRequest(name=f"{PROJECT}/schemas/nope")
    assert await code_of(schema_call(target, "GetSchema", missing, sp.Schema)) == "NOT_FOUND"

    commit = sp.CommitSchemaRequest(name=name, schema=avro())
    second = await schema_call(target, "CommitSchema", commit, sp.Schema)
    listed = await schema_call(
        target,
        "ListSchemaRevisions",
        sp.ListSchemaRevisionsRequest(name=name, view=sp.FULL),
        sp.ListSchemaRevisionsResponse,
    )
    assert [s.revision_id for s in listed.schemas] == [first.revision_id, second.revision_id]
    at = sp.GetSchemaRequest(name=f"{name}@{first.revision_id}")
    assert (await schema_call(target, "GetSchema", at, sp.Schema)).revision_id == (
        first.revision_id
    )
    rollback = sp.RollbackSchemaRequest(name=name, revision_id="nope")
    assert await code_of(schema_call(target, "RollbackSchema", rollback, sp.Schema)) == (
        "NOT_FOUND"
    )
    delete = sp.DeleteSchemaRevisionRequest(name=f"{name}@{second.revision_id}")
    deleted = await schema_call(target, "DeleteSchemaRevision", delete, sp.Schema)
    assert deleted.revision_id == second.revision_id
    last = sp.DeleteSchemaRevisionRequest(name=f"{name}@{first.revision_id}")
    assert await code_of(schema_call(target, "DeleteSchemaRevision", last, sp.Schema)) == (
        "INVALID_ARGUMENT"
    )

    validate = sp.ValidateMessageRequest(parent=PROJECT, name=name, encoding=sp.JSON)
    validate.message = GOOD
    await schema_call(target, "ValidateMessage", validate, sp.ValidateMessageResponse)
    validate.message = b'{"sensor": 3}'
    assert await code_of(
        schema_call(target, "ValidateMessage", validate, sp.ValidateMessageResponse)
    ) == ("INVALID_ARGUMENT")
    bad = sp.ValidateSchemaRequest(parent=PROJECT, schema=avro('{"type": "record"}'))
    assert await code_of(schema_call(target, "ValidateSchema", bad, sp.ValidateSchemaResponse)) == (
        "INVALID_ARGUMENT"
    )


async def test_publish_through_an_avro_topic(target: Wire) -> None:
    sid = unique("schema").rsplit("/", 1)[1]
    name = f"{PROJECT}/schemas/{sid}"
    created = await schema_call(
        target,
        "CreateSchema",
        sp.CreateSchemaRequest(parent=PROJECT, schema=avro(), schema_id=sid),
        sp.Schema,
    )
    topic = unique("topic")
    for settings, code in (
        (pb.SchemaSettings(schema=name), "INVALID_ARGUMENT"),  # no encoding
        (pb.SchemaSettings(schema=f"{PROJECT}/schemas/nope", encoding=sp.JSON), "NOT_FOUND"),
        (pb.SchemaSettings(schema=name, encoding=sp.JSON, first_revision_id="zz"), "NOT_FOUND"),
    ):
        refused = target.CreateTopic(pb.Topic(name=topic, schema_settings=settings))
        assert await code_of(refused) == code
    settings = pb.SchemaSettings(schema=name, encoding=sp.JSON)
    await target.CreateTopic(pb.Topic(name=topic, schema_settings=settings))
    _, sub = await target.subscription(topic)
    await target.publish(topic, GOOD)
    bad = pb.PublishRequest(topic=topic, messages=[pb.PubsubMessage(data=b'{"sensor": 1}')])
    assert await code_of(target.Publish(bad)) == "INVALID_ARGUMENT"
    received = await target.pull(sub, 1)
    assert received[0].message.data == GOOD
    attributes = dict(received[0].message.attributes)
    assert attributes["googclient_schemaname"] == name
    assert attributes["googclient_schemarevisionid"] == created.revision_id
    assert attributes.get("googclient_schemaencoding", "JSON") == "JSON"
    await target.pull_nothing(sub)  # the refused message was not stored

    await schema_call(target, "DeleteSchema", sp.DeleteSchemaRequest(name=name), empty_pb2.Empty)
    shown = await target.GetTopic(pb.GetTopicRequest(topic=topic))
    assert shown.schema_settings.schema == "_deleted-schema_"
    again = pb.PublishRequest(topic=topic, messages=[pb.PubsubMessage(data=GOOD)])
    assert await code_of(target.Publish(again)) == "NOT_FOUND"


async def test_emulator_lists_schemas_in_full_by_default(
    served: str, emulator: str, wire_factory: Callable[[str], Wire]
) -> None:
    """ListSchemas without a view: the proto's SchemaView says "The default / unset value.
    The API will default to the BASIC view" (name and type, no definition). Ours answers
    BASIC; the emulator answers FULL. Ours is right. With view=FULL both give the
    definition."""
    for address in (served, emulator):
        wire = wire_factory(address)
        sid = unique("schema").rsplit("/", 1)[1]
        name = f"{PROJECT}/schemas/{sid}"
        create = sp.CreateSchemaRequest(parent=PROJECT, schema=avro(), schema_id=sid)
        await schema_call(wire, "CreateSchema", create, sp.Schema)
        for view in (sp.SchemaView.SCHEMA_VIEW_UNSPECIFIED, sp.SchemaView.FULL):
            listed: list[sp.Schema] = []
            token = ""
            while True:
                request = sp.ListSchemasRequest(parent=PROJECT, view=view, page_token=token)
                page = await schema_call(wire, "ListSchemas", request, sp.ListSchemasResponse)
                listed.extend(s for s in page.schemas if s.name == name)
                token = page.next_page_token
                if not token:
                    break
            [schema] = listed
            assert schema.type_ == sp.Schema.AVRO
            full = view == sp.SchemaView.FULL or address == emulator
            assert schema.definition == (AVRO if full else "")
        await schema_call(wire, "DeleteSchema", sp.DeleteSchemaRequest(name=name), empty_pb2.Empty)


async def test_a_mask_of_revision_ids_keeps_the_schema(target: Wire) -> None:
    """UpdateTopic with ``schema_settings`` holding only the revision ids and a mask naming
    them (Google's schema sample does this): both keep the schema and the encoding."""
    sid = unique("schema").rsplit("/", 1)[1]
    name = f"{PROJECT}/schemas/{sid}"
    create = sp.CreateSchemaRequest(parent=PROJECT, schema=avro(), schema_id=sid)
    first = await schema_call(target, "CreateSchema", create, sp.Schema)
    commit = sp.CommitSchemaRequest(name=name, schema=avro())
    second = await schema_call(target, "CommitSchema", commit, sp.Schema)
    topic = unique("topic")
    settings = pb.SchemaSettings(schema=name, encoding=sp.JSON)
    await target.CreateTopic(pb.Topic(name=topic, schema_settings=settings))
    revisions = pb.SchemaSettings(
        first_revision_id=first.revision_id, last_revision_id=second.revision_id
    )
    update = pb.UpdateTopicRequest(
        topic=pb.Topic(name=topic, schema_settings=revisions),
        update_mask={
            "paths": ["schema_settings.first_revision_id", "schema_settings.last_revision_id"]
        },
    )
    updated = await target.UpdateTopic(update)
    expected = pb.SchemaSettings(
        schema=name,
        encoding=sp.JSON,
        first_revision_id=first.revision_id,
        last_revision_id=second.revision_id,
    )
    assert updated.schema_settings == expected
    shown = await target.GetTopic(pb.GetTopicRequest(topic=topic))
    assert shown.schema_settings == expected
