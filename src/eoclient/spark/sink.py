"""The sink: DataFrame rows → messages on a topic, published by the asyncio PublisherClient.

Rows need a ``data`` column (binary or string: a string is UTF-8 encoded); optional columns
``attributes`` (map<string,string>; a null value drops that attribute, as Pub/Sub has no null
attribute) and ``ordering_key`` (string) are used when present; other columns are ignored, as
Spark's Kafka sink ignores its extra ones. A schema that does not fit fails the write (a
batch ``save()``, or a streaming query before its first batch is published) naming the column.
Every write task runs its own event loop (``asyncio.run``) and client, publishes its rows and
returns a commit message with the count once every publish is confirmed; a failed publish
fails the task (Spark retries it). Publishing is not transactional, so the sink is
at-least-once; ``idAttribute`` adds a deterministic key per row for consumer-side dedup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from eoclient.publisher import PublisherClient

# Futures awaited together: bounds a task's memory, keeps batches full.
PUBLISH_WINDOW = 1000


@dataclass
class PublishedCommit(WriterCommitMessage):
    partition_id: int
    count: int


class SinkSettings:
    def __init__(self, options: Mapping[str, str]) -> None:
        topic = options.get("topic")
        if not topic:
            raise ValueError('the eoclient sink needs .option("topic", ...)')
        self.topic = topic
        self.endpoint = options.get("endpoint") or None
        self.id_attribute = options.get("idattribute") or None


def check_sink_schema(schema: StructType) -> None:
    """Raise ``ValueError`` naming the column unless the rows can be published."""
    columns = {field.name: field.dataType for field in schema.fields}
    data = columns.get("data")
    if data is None:
        raise ValueError(
            "the eoclient sink needs a 'data' column (string or binary) holding each "
            f"message's payload; the rows have {sorted(columns)}"
        )
    if not isinstance(data, StringType | BinaryType):
        raise ValueError(
            f"the eoclient sink's 'data' column must be string or binary, not "
            f"{data.simpleString()}; cast it, e.g. to_json(...) or .cast('string')"
        )
    attributes = columns.get("attributes")
    if attributes is not None and not (
        isinstance(attributes, MapType)
        and isinstance(attributes.keyType, StringType)
        and isinstance(attributes.valueType, StringType)
    ):
        raise ValueError(
            "the eoclient sink's 'attributes' column must be map<string,string>, not "
            f"{attributes.simpleString()}"
        )
    ordering_key = columns.get("ordering_key")
    if ordering_key is not None and not isinstance(ordering_key, StringType):
        raise ValueError(
            "the eoclient sink's 'ordering_key' column must be string, not "
            f"{ordering_key.simpleString()}"
        )


def message_attributes(value: Mapping[Any, Any] | None) -> dict[str, str]:
    """A row's ``attributes`` map as message attributes (null values dropped).

    Raises ``ValueError`` for an attribute named ``ordering_key``: ``PublisherClient.publish``
    takes attributes as keywords, where that name is the ordering key itself.
    """
    attributes = {str(k): str(v) for k, v in (value or {}).items() if v is not None}
    if "ordering_key" in attributes:
        raise ValueError(
            "the eoclient sink cannot publish an attribute named 'ordering_key' (the name of "
            "the ordering key parameter); rename it, or use the ordering_key column for the key"
        )
    return attributes


def _data(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


async def _publish(settings: SinkSettings, rows: Iterator[Any], key_prefix: str) -> int:
    count = 0
    async with PublisherClient(settings.endpoint, enable_message_ordering=True) as client:
        window: list[asyncio.Future[str]] = []
        for index, row in enumerate(rows):
            fields = row.asDict() if hasattr(row, "asDict") else dict(row)
            attributes = message_attributes(fields.get("attributes"))
            if settings.id_attribute:
                attributes[settings.id_attribute] = f"{key_prefix}:{index}"
            window.append(
                client.publish_nowait(
                    settings.topic,
                    _data(fields.get("data")),
                    fields.get("ordering_key") or "",
                    **attributes,
                )
            )
            if len(window) >= PUBLISH_WINDOW:
                await asyncio.gather(*window)
                count += len(window)
                window = []
        await asyncio.gather(*window)
        count += len(window)
    return count


def _task_ids() -> tuple[int, str, str]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, "", ""
    return (
        context.partitionId(),
        context.getLocalProperty("sql.streaming.queryId") or "",
        context.getLocalProperty("streaming.sql.batchId") or "",
    )


class EoclientBatchWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_sink_schema(schema)
        self.settings = SinkSettings(options)

    def write(self, iterator: Iterator[Any]) -> PublishedCommit:
        partition, _, _ = _task_ids()
        count = asyncio.run(_publish(self.settings, iterator, f"batch:{partition}"))
        return PublishedCommit(partition, count)


class EoclientStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_sink_schema(schema)
        self.settings = SinkSettings(options)

    def write(self, iterator: Iterator[Any]) -> PublishedCommit:
        partition, query, batch = _task_ids()
        prefix = f"{query}:{batch}:{partition}"
        count = asyncio.run(_publish(self.settings, iterator, prefix))
        return PublishedCommit(partition, count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Every row is already published (write returns only then): nothing to finish.
        return None

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Published messages cannot be withdrawn; a retried batch publishes again
        # (at-least-once; idAttribute keys are deterministic for consumer-side dedup).
        return None
