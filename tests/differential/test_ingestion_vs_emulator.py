"""Import topics on ``eoclient serve`` and on Google's emulator: the same requests to both.

Both refuse the same settings with the same texts (missing required fields, a delimiter
that is not one character, platform logs without a source, a mask path into the
settings), keep the settings they accept, make the text format's default delimiter
explicit, and switch a topic to ingestion and back. Where they differ, the test pins each
side (docs/emulator-differences.md, "Import topics"):

* states: the emulator fills none (a Kinesis source shows STATE_UNSPECIFIED and the topic
  no state) and echoes a state a request sets, though the field is output only; ours
  drops a request's state and shows the one the service would (a source in another cloud:
  its PERMISSION_DENIED state, the topic INGESTION_RESOURCE_ERROR);
* formats: the emulator accepts any string as an ARN, a bucket name or a glob; ours
  checks their forms.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb

pytestmark = pytest.mark.emulator

S = pb.IngestionDataSourceSettings
TEXT = S.CloudStorage.TextFormat
STREAM = "arn:aws:kinesis:us-west-2:111111111111:stream/fake-stream-name"
KINESIS = S.AwsKinesis(
    stream_arn=STREAM,
    consumer_arn=f"{STREAM}/consumer/consumer-1:1111111111",
    aws_role_arn="arn:aws:iam::111111111111:role/fake-role-name",
    gcp_service_account="fake-service-account@fake-gcp-project.iam.gserviceaccount.com",
)
# settings -> the text both answer with (INVALID_ARGUMENT).
REFUSED = [
    (
        S(aws_kinesis=S.AwsKinesis(stream_arn=STREAM)),
        "Missing required fields for AwsKinesis ingestion settings: "
        "consumer_arn, aws_role_arn, gcp_service_account",
    ),
    (
        S(aws_msk=S.AwsMsk()),
        "Missing required fields for AwsMsk ingestion settings: "
        "cluster_arn, topic, aws_role_arn, gcp_service_account",
    ),
    (
        S(azure_event_hubs=S.AzureEventHubs(namespace="n")),
        "Missing required fields for AzureEventHubs ingestion settings: resource_group, "
        "event_hub, client_id, tenant_id, subscription_id, gcp_service_account",
    ),
    (
        S(confluent_cloud=S.ConfluentCloud(bootstrap_server="host:9092")),
        "Missing required fields for ConfluentCloud ingestion settings: "
        "cluster_id, topic, identity_pool_id, gcp_service_account",
    ),
    (
        S(cloud_storage=S.CloudStorage()),
        "Missing required fields for CloudStorage ingestion settings: bucket, input_format",
    ),
    (
        S(cloud_storage=S.CloudStorage(bucket="bucket-a", text_format=TEXT(delimiter="ab"))),
        "Delimiter for Cloud Storage ingestion text format must be a single character. "
        "Delimiter provided: ab",
    ),
    (
        S(platform_logs_settings=pb.PlatformLogsSettings(severity=pb.PlatformLogsSettings.INFO)),
        "No ingestion source provided",
    ),
]


@pytest.fixture(params=["reference", "emulator"])
def target(request: pytest.FixtureRequest, wire_factory: Callable[[str], Wire]) -> Wire:
    address = request.getfixturevalue("served" if request.param == "reference" else "emulator")
    wire = wire_factory(address)
    wire.kind = request.param  # type: ignore[attr-defined]
    return wire


async def refusal(call: object) -> tuple[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value.code().name, caught.value.details() or ""


async def test_both_refuse_the_same_settings(target: Wire) -> None:
    for settings, text in REFUSED:
        name = unique("topic")
        call = target.CreateTopic(pb.Topic(name=name, ingestion_data_source_settings=settings))
        assert await refusal(call) == ("INVALID_ARGUMENT", text)
        assert (await refusal(target.GetTopic(pb.GetTopicRequest(topic=name))))[0] == "NOT_FOUND"


async def test_both_keep_the_settings_and_show_the_default_delimiter(target: Wire) -> None:
    storage = S.CloudStorage(bucket="bucket-a", text_format=TEXT(), match_glob="**.txt")
    name = unique("topic")
    created = await target.CreateTopic(
        pb.Topic(name=name, ingestion_data_source_settings=S(cloud_storage=storage))
    )
    shown = created.ingestion_data_source_settings.cloud_storage
    assert (shown.bucket, shown.match_glob, shown.text_format.delimiter) == (
        "bucket-a",
        "**.txt",
        "\n",
    )
    assert shown.text_format.HasField("delimiter")


async def test_update_to_ingestion_and_back(target: Wire) -> None:
    name = unique("topic")
    await target.CreateTopic(pb.Topic(name=name))
    mask = {"paths": ["ingestion_data_source_settings"]}
    topic = pb.Topic(name=name, ingestion_data_source_settings=S(aws_kinesis=KINESIS))
    updated = await target.UpdateTopic(pb.UpdateTopicRequest(topic=topic, update_mask=mask))
    kinesis = updated.ingestion_data_source_settings.aws_kinesis
    assert kinesis.stream_arn == STREAM
    if target.kind == "emulator":  # type: ignore[attr-defined]
        assert (kinesis.state, updated.state) == (0, 0)
    else:
        assert kinesis.state == S.AwsKinesis.KINESIS_PERMISSION_DENIED
        assert updated.state == pb.Topic.INGESTION_RESOURCE_ERROR
    inner = {"paths": ["ingestion_data_source_settings.aws_kinesis.stream_arn"]}
    code, text = await refusal(
        target.UpdateTopic(pb.UpdateTopicRequest(topic=pb.Topic(name=name), update_mask=inner))
    )
    assert code == "INVALID_ARGUMENT"
    assert text.startswith(
        "Invalid update_mask provided in the UpdateTopicRequest: "
        "ingestion_data_source_settings.aws_kinesis.stream_arn is not a known Topic field."
    )
    plain = await target.UpdateTopic(
        pb.UpdateTopicRequest(topic=pb.Topic(name=name), update_mask=mask)
    )
    assert not plain.HasField("ingestion_data_source_settings")


async def test_emulator_echoes_output_only_states(
    served: str, emulator: str, wire_factory: Callable[[str], Wire]
) -> None:
    """A request's state is output only: the emulator keeps what was sent, ours drops it
    and shows its own."""
    sent = S.AwsKinesis()
    sent.CopyFrom(KINESIS)
    sent.state = S.AwsKinesis.ACTIVE
    for address in (served, emulator):
        wire = wire_factory(address)
        name = unique("topic")
        created = await wire.CreateTopic(
            pb.Topic(name=name, ingestion_data_source_settings=S(aws_kinesis=sent))
        )
        state = created.ingestion_data_source_settings.aws_kinesis.state
        expected = (
            S.AwsKinesis.ACTIVE if address == emulator else S.AwsKinesis.KINESIS_PERMISSION_DENIED
        )
        assert state == expected


async def test_emulator_accepts_any_form(
    served: str, emulator: str, wire_factory: Callable[[str], Wire]
) -> None:
    """An ARN that is no ARN, a bucket name with gs://, a glob that does not parse: the
    emulator keeps them, ours refuses each (INVALID_ARGUMENT naming the field)."""
    bad_arn = S.AwsKinesis()
    bad_arn.CopyFrom(KINESIS)
    bad_arn.stream_arn = "not-an-arn"
    cases = [
        (S(aws_kinesis=bad_arn), "aws_kinesis.stream_arn"),
        (S(cloud_storage=S.CloudStorage(bucket="gs://b", text_format=TEXT())), "bucket"),
        (
            S(
                cloud_storage=S.CloudStorage(
                    bucket="bucket-a", text_format=TEXT(), match_glob="a[b"
                )
            ),
            "match_glob",
        ),
    ]
    reference, google = wire_factory(served), wire_factory(emulator)
    for settings, field in cases:
        topic = pb.Topic(name=unique("topic"), ingestion_data_source_settings=settings)
        await google.CreateTopic(topic)
        code, text = await refusal(reference.CreateTopic(topic))
        assert code == "INVALID_ARGUMENT"
        assert field in text
