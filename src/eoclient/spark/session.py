"""A SparkSession with Spark's known pitfalls handled.

See docs/protocol.md#spark-session-environment.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from eoclient.spark.datasource import EoclientDataSource


def register(spark: Any) -> None:
    """Register the ``eoclient`` format on ``spark``.

    The source's ``numPartitions`` then defaults to the session's parallelism (its
    ``defaultParallelism``: the cores of ``local[n]`` or of the cluster's executors).
    """
    source: type[EoclientDataSource] = EoclientDataSource
    try:
        parallelism = int(spark.sparkContext.defaultParallelism)
    except Exception:  # e.g. a Spark Connect session: no SparkContext; numPartitions = 2
        parallelism = 0
    if parallelism > 0:
        # A subclass made here is not importable, so Spark's cloudpickle sends it to the
        # Python workers by value, this default included.
        source = type(
            "EoclientDataSource", (EoclientDataSource,), {"default_partitions": parallelism}
        )
    spark.dataSource.register(source)


def local_session(
    app_name: str = "eoclient",
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Build (or get) a SparkSession and register the ``eoclient`` format.

    ``master`` is ``local[2]`` by default; ``local-cluster[2,1,1024]`` runs two executors in
    processes of their own on this machine (set ``spark.executor.memory`` to 512m so they
    fit). A cluster's URL works too: then the driver binds as Spark decides (not loopback),
    and this interpreter's path must hold a Python with ``eoclient[spark]`` on every node.

    * ``PYSPARK_PYTHON`` = this interpreter: the default is ``python3`` from PATH, which may
      lack pyarrow, and the failure then shows only as "Python worker failed to connect back".
    * local masters: ``SPARK_LOCAL_IP`` = 127.0.0.1 (unless set) and the driver on loopback:
      otherwise Spark binds the eth0 address.
    * the UI is off, and shuffles use 2 partitions.
    * ``local-cluster``'s executor directories go to ``$TMPDIR/eoclient-spark-workers``
      unless ``SPARK_WORKER_DIR`` says otherwise.
    * adaptive query execution is off: Spark turns it off for every streaming query anyway,
      warning each time that it "is not supported in streaming DataFrames/Datasets". Pass
      ``conf={"spark.sql.adaptive.enabled": "true"}`` for a session that runs batch jobs.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if master.startswith("local-cluster"):
        # Its workers keep each executor's directory (logs, files) under SPARK_WORKER_DIR,
        # by default inside the installed pyspark package.
        os.environ.setdefault(
            "SPARK_WORKER_DIR", os.path.join(tempfile.gettempdir(), "eoclient-spark-workers")
        )
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "false")
    )
    if local:
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
