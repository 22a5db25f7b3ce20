"""SchemaService and topics bound to a schema, through both doors, with
google-cloud-pubsub's own SchemaServiceClient / PublisherClient (gRPC and REST) and plain
HTTP/JSON: Avro and Protocol Buffer schemas, revisions, validation, Publish refused for a
message that does not match, and the ``googclient_schema*`` attributes delivered."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import pytest
from google.api_core import exceptions as api_exceptions
from google.pubsub_v1.types import Encoding, Schema
from support.official_clients import OfficialClients, in_thread
from support.wire import unique

from eoclient.server_stub.server import ReferenceServer, run_server

PROJECT = "projects/p1"
AVRO = json.dumps(
    {
        "type": "record",
        "name": "State",
        "fields": [{"name": "name", "type": "string"}, {"name": "post_abbr", "type": "string"}],
    }
)
PROTO = """syntax = "proto3";
message State {
  string name = 1;
  string post_abbr = 2;
}
"""


def schema_id() -> str:
    return unique("schema").rsplit("/", 1)[1]


def _schema_flow(c: OfficialClients, kind: Schema.Type, definition: str) -> None:
    sid = schema_id()
    name = f"{PROJECT}/schemas/{sid}"
    created = c.schemas.create_schema(
        parent=PROJECT, schema=Schema(type_=kind, definition=definition), schema_id=sid
    )
    assert (created.name, created.type_, created.definition) == (name, kind, definition)
    assert len(created.revision_id) == 8
    assert created.revision_create_time.timestamp() > 0
    assert c.schemas.get_schema(name=name) == created
    listed = [s for s in c.schemas.list_schemas(parent=PROJECT) if s.name == name]
    assert [(s.type_, s.definition) for s in listed] == [(kind, "")]  # BASIC view
    second = c.schemas.commit_schema(
        name=name, schema=Schema(name=name, type_=kind, definition=definition)
    )
    revisions = [
        r.revision_id
        for r in c.schemas.list_schema_revisions(request={"name": name, "view": "FULL"})
    ]
    assert revisions == [created.revision_id, second.revision_id]
    rolled = c.schemas.rollback_schema(name=name, revision_id=created.revision_id)
    assert rolled.definition == definition
    deleted = c.schemas.delete_schema_revision(name=f"{name}@{second.revision_id}")
    assert deleted.revision_id == second.revision_id
    good = json.dumps({"name": "Alaska", "post_abbr": "AK"}).encode()
    c.schemas.validate_message(
        request={"parent": PROJECT, "name": name, "message": good, "encoding": Encoding.JSON}
    )
    with pytest.raises(api_exceptions.BadRequest, match="failed schema validation"):
        c.schemas.validate_message(
            request={
                "parent": PROJECT,
                "name": name,
                "message": b'{"name": 5}',
                "encoding": Encoding.JSON,
            }
        )
    c.schemas.validate_schema(parent=PROJECT, schema=Schema(type_=kind, definition=definition))
    with pytest.raises(api_exceptions.BadRequest, match="Invalid schema definition"):
        c.schemas.validate_schema(
            parent=PROJECT, schema=Schema(type_=kind, definition=definition[:-3])
        )
    c.schemas.delete_schema(name=name)
    with pytest.raises(api_exceptions.NotFound):
        c.schemas.get_schema(name=name)


async def test_avro_schema_admin(clients: OfficialClients) -> None:
    await in_thread(lambda: _schema_flow(clients, Schema.Type.AVRO, AVRO))


async def test_protobuf_schema_admin(clients: OfficialClients) -> None:
    await in_thread(lambda: _schema_flow(clients, Schema.Type.PROTOCOL_BUFFER, PROTO))


def _publish_flow(c: OfficialClients) -> None:
    sid = schema_id()
    name = f"{PROJECT}/schemas/{sid}"
    c.schemas.create_schema(
        parent=PROJECT, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO), schema_id=sid
    )
    topic, sub = unique("topic"), unique("sub")
    with pytest.raises(api_exceptions.NotFound):
        c.publisher.create_topic(
            request={
                "name": topic,
                "schema_settings": {"schema": f"{PROJECT}/schemas/nope", "encoding": "JSON"},
            }
        )
    with pytest.raises(api_exceptions.BadRequest, match="encoding"):
        c.publisher.create_topic(request={"name": topic, "schema_settings": {"schema": name}})
    created = c.publisher.create_topic(
        request={"name": topic, "schema_settings": {"schema": name, "encoding": "JSON"}}
    )
    assert created.schema_settings.schema == name
    c.subscriber.create_subscription(name=sub, topic=topic)
    good = json.dumps({"name": "Alaska", "post_abbr": "AK"}).encode()
    c.publisher.publish(topic, good).result(timeout=10)
    with pytest.raises(api_exceptions.BadRequest, match="failed schema validation"):
        c.publisher.publish(topic, b'{"name": "Alaska"}').result(timeout=10)
    received = c.subscriber.pull(subscription=sub, max_messages=10, timeout=10).received_messages
    assert len(received) == 1  # the refused message was not stored
    message = received[0].message
    assert message.data == good
    revision = c.schemas.get_schema(name=name).revision_id
    assert dict(message.attributes) == {
        "googclient_schemaname": name,
        "googclient_schemaencoding": "JSON",
        "googclient_schemarevisionid": revision,
    }
    c.schemas.delete_schema(name=name)
    assert c.publisher.get_topic(topic=topic).schema_settings.schema == "_deleted-schema_"
    with pytest.raises(api_exceptions.NotFound, match="Schema associated with topic deleted"):
        c.publisher.publish(topic, good).result(timeout=10)


async def test_publish_is_validated_against_the_topics_schema(clients: OfficialClients) -> None:
    await in_thread(lambda: _publish_flow(clients))


async def test_binary_protobuf_topic_with_a_revision_range_over_rest_json(
    server: ReferenceServer,
) -> None:
    """curl's view: CreateSchema's body is the Schema, schemaId in the query."""
    sid = schema_id()
    name = f"{PROJECT}/schemas/{sid}"
    topic = unique("topic")
    async with aiohttp.ClientSession(
        server.rest_url, headers={"Content-Type": "application/json"}
    ) as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            data = None if body is None else json.dumps(body)
            async with http.request(method, path, data=data) as response:
                return response.status, await response.json()

        status, created = await call(
            "POST",
            f"/v1/{PROJECT}/schemas?schemaId={sid}",
            {"type": "PROTOCOL_BUFFER", "definition": PROTO},
        )
        assert status == 200, created
        assert created["type"] == "PROTOCOL_BUFFER"
        status, second = await call(
            "POST",
            f"/v1/{name}:commit",
            {"schema": {"type": "PROTOCOL_BUFFER", "definition": PROTO + "// v2\n"}},
        )
        assert status == 200, second
        settings = {
            "schema": name,
            "encoding": "BINARY",
            "firstRevisionId": second["revisionId"],
            "lastRevisionId": second["revisionId"],
        }
        status, bound = await call("PUT", f"/v1/{topic}", {"schemaSettings": settings})
        assert status == 200, bound
        assert bound["schemaSettings"] == settings
        status, refused = await call(
            "PUT", f"/v1/{unique('topic')}", {"schemaSettings": {**settings, "lastRevisionId": "x"}}
        )
        assert status == 404
        assert "Last revision could not be found" in refused["error"]["message"]
        binary = b"\x0a\x06Alaska\x12\x02AK"
        status, published = await call(
            "POST",
            f"/v1/{topic}:publish",
            {"messages": [{"data": base64.b64encode(binary).decode()}]},
        )
        assert status == 200, published
        status, refused = await call(
            "POST",
            f"/v1/{topic}:publish",
            {"messages": [{"data": base64.b64encode(b"\x0a\x40A").decode()}]},
        )
        assert status == 400
        assert refused["error"]["message"] == (
            "Invalid data in message: Message failed schema validation."
        )
        status, revisions = await call("GET", f"/v1/{name}:listRevisions?view=FULL")
        assert [r["revisionId"] for r in revisions["schemas"]] == [
            created["revisionId"],
            second["revisionId"],
        ]
        status, error = await call("DELETE", f"/v1/{name}:deleteRevision?revisionId=zzzzzzzz")
        assert (status, error["error"]["status"]) == (404, "NOT_FOUND")


async def test_schemas_survive_a_restart(tmp_path: Any) -> None:
    sid = schema_id()
    async with (
        run_server(data_dir=tmp_path) as first,
        aiohttp.ClientSession(first.rest_url) as http,
        http.post(
            f"/v1/{PROJECT}/schemas?schemaId={sid}", json={"type": "AVRO", "definition": AVRO}
        ) as response,
    ):
        created = await response.json()
        assert response.status == 200, created
    async with (
        run_server(data_dir=tmp_path) as second,
        aiohttp.ClientSession(second.rest_url) as http,
        http.get(f"/v1/{PROJECT}/schemas/{sid}") as response,
    ):
        assert await response.json() == created


def _revision_mask_flow(c: OfficialClients) -> None:
    """Google's own sample (schema.py ``update_topic_schema``): a ``schema_settings``
    holding only the revision ids and a mask naming just them. The mask names what
    changes; the stored schema and encoding stay, and the merged settings are checked."""
    sid = schema_id()
    name = f"{PROJECT}/schemas/{sid}"
    first = c.schemas.create_schema(
        parent=PROJECT, schema=Schema(type_=Schema.Type.AVRO, definition=AVRO), schema_id=sid
    )
    second = c.schemas.commit_schema(
        name=name, schema=Schema(name=name, type_=Schema.Type.AVRO, definition=AVRO)
    )
    topic = unique("topic")
    c.publisher.create_topic(
        request={"name": topic, "schema_settings": {"schema": name, "encoding": "BINARY"}}
    )
    mask = "schemaSettings.firstRevisionId,schemaSettings.lastRevisionId"
    updated = c.publisher.update_topic(
        request={
            "topic": {
                "name": topic,
                "schema_settings": {
                    "first_revision_id": first.revision_id,
                    "last_revision_id": second.revision_id,
                },
            },
            "update_mask": mask,
        }
    )
    settings = updated.schema_settings
    assert (settings.schema, settings.encoding) == (name, Encoding.BINARY)
    assert (settings.first_revision_id, settings.last_revision_id) == (
        first.revision_id,
        second.revision_id,
    )
    assert c.publisher.get_topic(topic=topic).schema_settings == settings
    # The merged result is what is checked: a revision the schema lacks is refused and
    # nothing changes; a path naming no field of schema_settings is refused.
    with pytest.raises(api_exceptions.NotFound):
        c.publisher.update_topic(
            request={
                "topic": {"name": topic, "schema_settings": {"last_revision_id": "zzzzzzzz"}},
                "update_mask": "schemaSettings.lastRevisionId",
            }
        )
    with pytest.raises(api_exceptions.BadRequest, match="not a known Topic field"):
        c.publisher.update_topic(
            request={"topic": {"name": topic}, "update_mask": "schemaSettings.nope"}
        )
    assert c.publisher.get_topic(topic=topic).schema_settings == settings
    # One path clears one field; the whole field cleared unbinds the schema.
    cleared = c.publisher.update_topic(
        request={"topic": {"name": topic}, "update_mask": "schemaSettings.firstRevisionId"}
    )
    assert (cleared.schema_settings.schema, cleared.schema_settings.first_revision_id) == (
        name,
        "",
    )
    unbound = c.publisher.update_topic(
        request={"topic": {"name": topic}, "update_mask": "schemaSettings"}
    )
    assert not unbound.schema_settings.schema


async def test_a_mask_of_revision_ids_keeps_the_schema(clients: OfficialClients) -> None:
    await in_thread(lambda: _revision_mask_flow(clients))
