"""``EoclientDataSource``: the ``eoclient`` format (source: see ``source``, sink: ``sink``)."""

from __future__ import annotations

from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from eoclient.spark._errors import one_line_errors
from eoclient.spark._options import SourceSettings
from eoclient.spark.sink import EoclientBatchWriter, EoclientStreamWriter
from eoclient.spark.source import EoclientStreamReader

# The source's rows (publish_time in UTC, microseconds).
SCHEMA = (
    "message_id string, data binary, attributes map<string,string>, ordering_key string, "
    "publish_time timestamp, delivery_attempt int"
)


class EoclientDataSource(DataSource):
    """``spark.readStream.format("eoclient")`` and ``df.write[Stream].format("eoclient")``."""

    # The session's parallelism, the default of the source's numPartitions: set by
    # eoclient.spark.register on the class it registers (the options do not carry it).
    default_partitions: ClassVar[int | None] = None

    @classmethod
    def name(cls) -> str:
        return "eoclient"

    def schema(self) -> str:
        # Spark asks for the schema in `spark.readStream...load()`, not for writes: the
        # source's options are checked there, so a mistake fails load() at once, not later
        # the started query (which checks again, for a schema given with .schema()).
        with one_line_errors():
            SourceSettings(self.options)
        return SCHEMA

    def streamReader(self, schema: Any) -> EoclientStreamReader:
        options = dict(self.options)
        if "numpartitions" not in options and self.default_partitions:
            options["numpartitions"] = str(self.default_partitions)
        return EoclientStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> EoclientBatchWriter:
        return EoclientBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> EoclientStreamWriter:
        return EoclientStreamWriter(self.options, schema)
