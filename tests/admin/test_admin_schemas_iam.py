"""``AdminClient`` for schemas, IAM policies and push configs, and
``PublisherClient`` raising the typed ``SchemaValidationError`` — against the in-process
reference server, and the Avro parts against Google's emulator too."""

from __future__ import annotations

import json
import uuid

import pytest

from eoclient.admin import (
    AdminClient,
    Binding,
    Condition,
    Encoding,
    Policy,
    PushConfig,
    SchemaSettings,
    SchemaType,
    SchemaView,
    schema_path,
    subscription_path,
    topic_path,
)
from eoclient.errors import (
    Aborted,
    AlreadyExists,
    InvalidArgument,
    NotFound,
    SchemaValidationError,
    rpc_error_class,
)
from eoclient.publisher import PublisherClient
from eoclient.server_stub.server import ReferenceServer

AVRO = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}],
    }
)
PROTO = 'syntax = "proto3";\nmessage Order { int32 id = 1; string item = 2; }\n'


def new_project() -> str:
    return f"admin-{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["reference", pytest.param("emulator", marks=pytest.mark.emulator)])
def address(request: pytest.FixtureRequest) -> str:
    if request.param == "emulator":
        value: str = request.getfixturevalue("emulator")
        return value
    server: ReferenceServer = request.getfixturevalue("reference")
    return server.address


def test_schema_mismatch_texts_map_to_the_typed_error() -> None:
    for text in (
        "Invalid data in message: Message failed schema validation.",  # the service's
        "Could not parse message",  # the emulator's Publish
        "Could not parse JSON Avro message",  # the emulator's ValidateMessage
    ):
        assert rpc_error_class("INVALID_ARGUMENT", text) is SchemaValidationError
    assert rpc_error_class("INVALID_ARGUMENT", "No max_messages specified") is InvalidArgument
    assert issubclass(SchemaValidationError, InvalidArgument)
    assert not SchemaValidationError.retryable


async def test_avro_schema_topic_and_publisher(address: str) -> None:
    project = new_project()
    async with AdminClient(address) as admin, PublisherClient(address) as publisher:
        schema = await admin.create_schema(project, "orders", SchemaType.AVRO, AVRO)
        assert schema.name == schema_path(project, "orders")
        assert schema.type is SchemaType.AVRO
        assert schema.definition == AVRO
        assert schema.revision_create_time is not None
        with pytest.raises(AlreadyExists):
            await admin.create_schema(project, "orders", SchemaType.AVRO, AVRO)
        with pytest.raises(InvalidArgument):
            await admin.validate_schema(project, SchemaType.AVRO, "{nope")
        await admin.validate_message(
            project, b'{"id": 1, "item": "tea"}', Encoding.JSON, schema=schema.name
        )
        with pytest.raises(SchemaValidationError):
            await admin.validate_message(
                project, b'{"id": "x"}', Encoding.JSON, definition=(SchemaType.AVRO, AVRO)
            )
        second = await admin.commit_schema(schema.name, SchemaType.AVRO, AVRO)
        revisions = await admin.list_schema_revisions(schema.name, view=SchemaView.FULL).collect()
        assert [r.revision_id for r in revisions] == [schema.revision_id, second.revision_id]

        topic = topic_path(project, "orders")
        settings = SchemaSettings(schema.name, Encoding.JSON)
        created = await admin.create_topic(topic, schema_settings=settings)
        assert created.schema_settings == settings
        assert (await admin.get_topic(topic)).schema_settings == settings
        await publisher.publish(topic, b'{"id": 1, "item": "tea"}')
        with pytest.raises(SchemaValidationError) as caught:
            await publisher.publish(topic, b'{"id": "one"}')
        assert caught.value.code == "INVALID_ARGUMENT"

        await admin.delete_schema(schema.name)
        with pytest.raises(NotFound):
            await admin.get_schema(schema.name)
        gone = await admin.get_topic(topic)
        assert gone.schema_settings is not None
        assert gone.schema_settings.schema == "_deleted-schema_"


async def test_protobuf_schemas_and_revision_ranges(reference: ReferenceServer) -> None:
    project = new_project()
    async with AdminClient(reference.address) as admin:
        first = await admin.create_schema(project, "orders", SchemaType.PROTOCOL_BUFFER, PROTO)
        second = await admin.commit_schema(
            first.name, SchemaType.PROTOCOL_BUFFER, PROTO.replace("item", "product")
        )
        listed = await admin.list_schemas(project).collect()
        assert [(s.name, s.definition) for s in listed] == [(first.name, "")]  # BASIC
        rolled = await admin.rollback_schema(first.name, first.revision_id)
        assert rolled.definition == PROTO
        removed = await admin.delete_schema_revision(first.name, second.revision_id)
        assert removed.revision_id == second.revision_id
        at = await admin.get_schema(f"{first.name}@{first.revision_id}")
        assert at.revision_id == first.revision_id
        topic = topic_path(project, "binary")
        settings = SchemaSettings(first.name, Encoding.BINARY, first_revision_id=rolled.revision_id)
        await admin.create_topic(topic)
        updated = await admin.update_topic(topic, schema_settings=settings)
        assert updated.schema_settings == settings
        cleared = await admin.update_topic(topic, schema_settings=None)
        assert cleared.schema_settings is None


async def test_iam_policies_read_modify_write(reference: ReferenceServer) -> None:
    project = new_project()
    async with AdminClient(reference.address) as admin:
        topic = topic_path(project, "things")
        await admin.create_topic(topic)
        policy = await admin.get_iam_policy(topic)
        assert policy.bindings == ()
        assert policy.etag == b"\x00\x20\x01"
        wanted = policy.with_binding("roles/pubsub.publisher", "user:a@example.com")
        wanted = wanted.with_binding("roles/pubsub.publisher", "user:b@example.com")
        stored = await admin.set_iam_policy(topic, wanted)
        assert stored.bindings == (
            Binding("roles/pubsub.publisher", ("user:a@example.com", "user:b@example.com")),
        )
        with pytest.raises(Aborted):  # based on the outdated read
            await admin.set_iam_policy(
                topic, policy.with_binding("roles/pubsub.viewer", "allUsers")
            )
        conditional = Policy(
            bindings=(
                *stored.bindings,
                Binding(
                    "roles/pubsub.subscriber",
                    ("group:g@example.com",),
                    Condition("request.time < timestamp('2030-01-01T00:00:00Z')", "until 2030"),
                ),
            ),
            version=3,
            etag=stored.etag,
        )
        again = await admin.set_iam_policy(topic, conditional)
        assert (await admin.get_iam_policy(topic)) == again
        assert again.version == 3
        old_reader = await admin.get_iam_policy(topic, requested_policy_version=1)
        assert old_reader.bindings[1].condition is None
        trimmed = again.without_member("roles/pubsub.publisher", "user:a@example.com")
        final = await admin.set_iam_policy(topic, trimmed)
        assert final.bindings[0].members == ("user:b@example.com",)
        held = await admin.test_iam_permissions(
            topic, ["pubsub.topics.publish", "pubsub.topics.get"]
        )
        assert held == ["pubsub.topics.publish", "pubsub.topics.get"]
        schema = await admin.create_schema(project, "schm", SchemaType.AVRO, AVRO)
        schema_policy = await admin.set_iam_policy(
            schema.name, Policy().with_binding("roles/pubsub.viewer", "allUsers")
        )
        assert schema_policy.bindings[0].role == "roles/pubsub.viewer"
        with pytest.raises(NotFound):
            await admin.get_iam_policy(topic_path(project, "missing"))


async def test_modify_push_config(reference: ReferenceServer) -> None:
    project = new_project()
    async with AdminClient(reference.address) as admin:
        topic = topic_path(project, "things")
        await admin.create_topic(topic)
        name = subscription_path(project, "subs")
        await admin.create_subscription(name, topic)
        config = PushConfig("http://127.0.0.1:9/push", no_wrapper=True, write_metadata=True)
        await admin.modify_push_config(name, config)
        assert (await admin.get_subscription(name)).push_config == config
        await admin.modify_push_config(name, None)
        assert (await admin.get_subscription(name)).push_config is None
        eod = subscription_path(project, "eods")
        await admin.create_subscription(eod, topic, enable_exactly_once_delivery=True)
        with pytest.raises(InvalidArgument, match="not supported for push"):
            await admin.modify_push_config(eod, config)
