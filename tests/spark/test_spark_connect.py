"""The source and the sink through Spark Connect (``SparkSession.builder.remote(...)``).

The Connect server is the one the pyspark wheel ships (``spark-connect_*.jar``), started as
Spark starts it for ``remote("local")``: a regular session with the Connect plugin, here on
an ephemeral port of 127.0.0.1 (``remote("local")`` would take the fixed port 15002, which
another session on the machine may hold). The client is a Connect session of its own, which
registers the ``eoclient`` format over the wire (the data source class is pickled by
reference: the server's Python workers import it). Needs the Connect client's extra
dependencies (``pyspark[connect]``: grpcio-status, zstandard, ...).
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._crash import drain, exactly_once_errors, make_subscription, publish
from ._server import ThreadedServer

pytest.importorskip(
    "pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')"
)
pytest.importorskip("zstandard", reason="Spark Connect's client needs zstandard (pyspark[connect])")
pytest.importorskip("grpc_status", reason="Spark Connect's client needs grpcio-status")
if shutil.which("java") is None:  # pragma: no cover - Java 17 is installed here
    pytest.skip("Spark needs java on PATH", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def remote() -> Iterator[Any]:
    """A Spark Connect session on a Connect server started in this process."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from eoclient.spark import local_session, register

    server = local_session(
        "eoclient-connect-server",
        conf={
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
        },
    )
    server.sparkContext.setLogLevel("ERROR")
    # The port it bound: SparkConnectService (a Scala object) holds it.
    service = getattr(
        server.sparkContext._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"
    )
    port = service.__getattr__("MODULE$").localPort()
    session = RemoteSparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    try:
        register(session)  # no SparkContext in a Connect session: numPartitions defaults to 2
        yield session
    finally:
        session.stop()
        server.stop()


@pytest.mark.timeout(300)
def test_the_source_streams_exactly_once_through_connect(
    remote: Any, spark_server: ThreadedServer, tmp_path: Path
) -> None:
    served = spark_server.address
    topic, subscription = make_subscription(served)
    published = publish(served, topic, 3000)

    query = (
        remote.readStream.format("eoclient")
        .option("subscription", subscription)
        .option("endpoint", served)
        .option("journalPath", str(tmp_path / "journal"))
        .option("maxMessagesPerTrigger", "1000")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None

    rows = remote.read.parquet(str(tmp_path / "out")).select("message_id").collect()
    found = Counter(row.message_id for row in rows)
    assert exactly_once_errors(found, published) == []
    assert spark_server.backlog(subscription) == 0
    assert list((tmp_path / "journal").glob("batch-*")) == []


@pytest.mark.timeout(180)
def test_the_sink_publishes_through_connect(remote: Any, spark_server: ThreadedServer) -> None:
    served = spark_server.address
    topic, subscription = make_subscription(served)
    frame = remote.createDataFrame(
        [(f"row-{i}", {"n": str(i)}) for i in range(40)],
        "data string, attributes map<string,string>",
    )
    frame.write.format("eoclient").option("topic", topic).option("endpoint", served).mode(
        "append"
    ).save()

    received = drain(served, subscription, 40)
    assert sorted(m.data for m in received) == sorted(f"row-{i}".encode() for i in range(40))
    assert all(m.attributes["n"] == m.data.decode().removeprefix("row-") for m in received)
