"""Import topics through google-cloud-pubsub's own clients (gRPC and REST): every source of
``IngestionDataSourceSettings`` accepted and kept, its fields checked as the service
checks them, the output-only states filled in (a source in another cloud shows its
PERMISSION_DENIED state and the topic INGESTION_RESOURCE_ERROR), UpdateTopic switching a
topic to ingestion and back, and the settings surviving a restart with a data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from google.api_core import exceptions as api_exceptions
from google.pubsub_v1.types import IngestionDataSourceSettings, PlatformLogsSettings, Topic
from support.official_clients import OfficialClients, in_thread
from support.wire import unique

from eoclient.server_stub.server import ReferenceServer, run_server

Settings = IngestionDataSourceSettings
SERVICE_ACCOUNT = "fake-service-account@fake-gcp-project.iam.gserviceaccount.com"
STREAM = "arn:aws:kinesis:us-west-2:111111111111:stream/fake-stream-name"
KINESIS = Settings.AwsKinesis(
    stream_arn=STREAM,
    consumer_arn=f"{STREAM}/consumer/consumer-1:1111111111",
    aws_role_arn="arn:aws:iam::111111111111:role/fake-role-name",
    gcp_service_account=SERVICE_ACCOUNT,
)
MSK = Settings.AwsMsk(
    cluster_arn="arn:aws:kafka:us-east-1:111111111111:cluster/fake-cluster-name/11111111-1111-1",
    topic="fake-msk-topic-name",
    aws_role_arn="arn:aws:iam::111111111111:role/fake-role-name",
    gcp_service_account=SERVICE_ACCOUNT,
)
EVENT_HUBS = Settings.AzureEventHubs(
    resource_group="fake-resource-group",
    namespace="fake-namespace",
    event_hub="fake-event-hub",
    client_id="fake-client-id",
    tenant_id="fake-tenant-id",
    subscription_id="fake-subscription-id",
    gcp_service_account=SERVICE_ACCOUNT,
)
CONFLUENT = Settings.ConfluentCloud(
    bootstrap_server="fake-bootstrap-server-id.us-south1.gcp.confluent.cloud:9092",
    cluster_id="fake-cluster-id",
    topic="fake-confluent-topic-name",
    identity_pool_id="fake-identity-pool-id",
    gcp_service_account=SERVICE_ACCOUNT,
)
# (source field, settings, the state the source shows on this server)
TEXT = Settings.CloudStorage.TextFormat()
UNREACHABLE = [
    ("aws_kinesis", KINESIS, "KINESIS_PERMISSION_DENIED"),
    ("aws_msk", MSK, "MSK_PERMISSION_DENIED"),
    ("azure_event_hubs", EVENT_HUBS, "EVENT_HUBS_PERMISSION_DENIED"),
    ("confluent_cloud", CONFLUENT, "CONFLUENT_CLOUD_PERMISSION_DENIED"),
]


def _unreachable_sources(c: OfficialClients) -> None:
    for field, source, state in UNREACHABLE:
        name = unique("topic")
        settings = Settings(
            **{field: source},
            platform_logs_settings=PlatformLogsSettings(
                severity=PlatformLogsSettings.Severity.WARNING
            ),
        )
        created = c.publisher.create_topic(
            request={"name": name, "ingestion_data_source_settings": settings}
        )
        for topic in (created, c.publisher.get_topic(topic=name)):
            shown = getattr(topic.ingestion_data_source_settings, field)
            assert shown.state.name == state, (field, topic)
            assert topic.state == Topic.State.INGESTION_RESOURCE_ERROR
            # Everything else as given.
            type(shown).pb(shown).ClearField("state")
            assert shown == source
            assert topic.ingestion_data_source_settings.platform_logs_settings.severity == (
                PlatformLogsSettings.Severity.WARNING
            )
        listed = [t for t in c.publisher.list_topics(project="projects/p1") if t.name == name]
        assert getattr(listed[0].ingestion_data_source_settings, field).state.name == state
        # The topic works otherwise: a subscription gets what is published to it.
        sub = unique("sub")
        c.subscriber.create_subscription(name=sub, topic=name)
        c.publisher.publish(name, b"direct").result(timeout=10)
        pulled = c.subscriber.pull(subscription=sub, max_messages=1, timeout=10)
        assert pulled.received_messages[0].message.data == b"direct"


async def test_sources_in_other_clouds_show_permission_denied(clients: OfficialClients) -> None:
    await in_thread(lambda: _unreachable_sources(clients))


def _refused(c: OfficialClients, settings: Settings, match: str) -> None:
    name = unique("topic")
    with pytest.raises(api_exceptions.BadRequest, match=match):
        c.publisher.create_topic(request={"name": name, "ingestion_data_source_settings": settings})
    with pytest.raises(api_exceptions.NotFound):
        c.publisher.get_topic(topic=name)  # nothing was stored


def _copy(message: Any, **changes: Any) -> Any:
    made = type(message)(type(message).pb(message))
    for key, value in changes.items():
        setattr(made, key, value)
    return made


def _refusals(c: OfficialClients) -> None:
    _refused(
        c,
        Settings(platform_logs_settings=PlatformLogsSettings(severity="INFO")),
        "No ingestion source provided",
    )
    _refused(
        c,
        Settings(aws_kinesis=_copy(KINESIS, stream_arn="")),
        "required fields for AwsKinesis ingestion settings: stream_arn$",
    )
    _refused(
        c, Settings(aws_kinesis=_copy(KINESIS, stream_arn="arn:aws:s3:::bucket")), "stream_arn"
    )
    other = "arn:aws:kinesis:us-west-2:111111111111:stream/other/consumer/c:1"
    _refused(c, Settings(aws_kinesis=_copy(KINESIS, consumer_arn=other)), "not a consumer of")
    _refused(c, Settings(aws_kinesis=_copy(KINESIS, aws_role_arn="role")), "aws_role_arn")
    _refused(
        c, Settings(aws_kinesis=_copy(KINESIS, gcp_service_account="nobody")), "gcp_service_account"
    )
    _refused(c, Settings(aws_msk=_copy(MSK, cluster_arn="arn:aws:kafka:x")), "cluster_arn")
    _refused(c, Settings(aws_msk=_copy(MSK, topic="bad topic")), "Kafka topic")
    _refused(
        c,
        Settings(azure_event_hubs=_copy(EVENT_HUBS, tenant_id="")),
        "AzureEventHubs ingestion settings: tenant_id",
    )
    _refused(c, Settings(confluent_cloud=_copy(CONFLUENT, bootstrap_server="nohost")), "HOST:PORT")
    _refused(
        c,
        Settings(cloud_storage=Settings.CloudStorage()),
        "CloudStorage ingestion settings: bucket, input_format",
    )
    _refused(
        c,
        Settings(cloud_storage=Settings.CloudStorage(bucket="gs://b", text_format=TEXT)),
        "without the gs://",
    )
    _refused(
        c,
        Settings(cloud_storage=Settings.CloudStorage(bucket="Upper", text_format=TEXT)),
        "bucket name",
    )
    _refused(
        c,
        Settings(
            cloud_storage=Settings.CloudStorage(
                bucket="bucket-a", text_format=TEXT, match_glob="a[b"
            )
        ),
        "never closed",
    )
    for delimiter in ("", "ab"):
        text = Settings.CloudStorage.TextFormat(delimiter=delimiter)
        two = Settings.CloudStorage(bucket="bucket-a", text_format=text)
        _refused(c, Settings(cloud_storage=two), "must be a single character")


async def test_settings_the_service_refuses(clients: OfficialClients) -> None:
    await in_thread(lambda: _refusals(clients))


def _update_type(c: OfficialClients) -> None:
    """Google's sample ``update_topic_type``: a plain topic becomes an import topic, and an
    UpdateTopic whose mask names the settings while the request leaves them out makes it
    plain again."""
    name = unique("topic")
    c.publisher.create_topic(name=name)
    updated = c.publisher.update_topic(
        request={
            "topic": {
                "name": name,
                "ingestion_data_source_settings": Settings(aws_kinesis=KINESIS),
            },
            "update_mask": {"paths": ["ingestion_data_source_settings"]},
        }
    )
    assert updated.ingestion_data_source_settings.aws_kinesis.stream_arn == STREAM
    assert updated.state == Topic.State.INGESTION_RESOURCE_ERROR
    # A path into the settings is refused (they are updated whole), and changes nothing.
    with pytest.raises(api_exceptions.BadRequest, match="not a known Topic field"):
        c.publisher.update_topic(
            request={
                "topic": {"name": name},
                "update_mask": {"paths": ["ingestion_data_source_settings.aws_kinesis.stream_arn"]},
            }
        )
    with pytest.raises(api_exceptions.BadRequest, match="stream_arn"):
        c.publisher.update_topic(
            request={
                "topic": {
                    "name": name,
                    "ingestion_data_source_settings": Settings(
                        aws_kinesis=_copy(KINESIS, stream_arn="nope")
                    ),
                },
                "update_mask": {"paths": ["ingestion_data_source_settings"]},
            }
        )
    kept = c.publisher.get_topic(topic=name)
    assert kept.ingestion_data_source_settings.aws_kinesis.stream_arn == STREAM
    plain = c.publisher.update_topic(
        request={
            "topic": {"name": name},
            "update_mask": {"paths": ["ingestion_data_source_settings"]},
        }
    )
    assert not Topic.pb(plain).HasField("ingestion_data_source_settings")
    assert plain.state == Topic.State.ACTIVE
    assert c.publisher.get_topic(topic=name) == plain


async def test_update_to_ingestion_and_back(clients: OfficialClients) -> None:
    await in_thread(lambda: _update_type(clients))


async def test_settings_survive_a_restart(tmp_path: Path) -> None:
    """Kept in the topic's extras: a data directory brings them back, states still filled."""
    name = unique("topic")
    body = {
        "ingestionDataSourceSettings": {
            "awsMsk": {
                "clusterArn": MSK.cluster_arn,
                "topic": MSK.topic,
                "awsRoleArn": MSK.aws_role_arn,
                "gcpServiceAccount": SERVICE_ACCOUNT,
                "state": "ACTIVE",  # output only: ignored
            },
            "platformLogsSettings": {"severity": "ERROR"},
        }
    }
    async with (
        run_server(data_dir=tmp_path) as first,
        aiohttp.ClientSession(first.rest_url) as http,
        http.put(f"/v1/{name}", json=body) as response,
    ):
        created = await response.json()
        assert response.status == 200, created
    assert created["state"] == "INGESTION_RESOURCE_ERROR"
    assert created["ingestionDataSourceSettings"]["awsMsk"]["state"] == "MSK_PERMISSION_DENIED"
    async with (
        run_server(data_dir=tmp_path) as second,
        aiohttp.ClientSession(second.rest_url) as http,
        http.get(f"/v1/{name}") as response,
    ):
        assert await response.json() == created


async def test_rest_refusal_names_the_field(server: ReferenceServer) -> None:
    name = unique("topic")
    body = {"ingestionDataSourceSettings": {"awsKinesis": {"streamArn": STREAM}}}
    async with (
        aiohttp.ClientSession(server.rest_url) as http,
        http.put(f"/v1/{name}", json=body) as response,
    ):
        error = await response.json()
    assert response.status == 400
    assert error["error"]["status"] == "INVALID_ARGUMENT"
    assert (
        "Missing required fields for AwsKinesis ingestion settings: "
        "consumer_arn, aws_role_arn, gcp_service_account" in error["error"]["message"]
    )
