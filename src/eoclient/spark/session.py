"""A local SparkSession with this machine's pitfalls handled (spark-notes §2, §5)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from eoclient.spark.datasource import EoclientDataSource


def register(spark: Any) -> None:
    """Register the ``eoclient`` format on ``spark``."""
    spark.dataSource.register(EoclientDataSource)


def local_session(
    app_name: str = "eoclient",
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Build (or get) a local SparkSession and register the ``eoclient`` format.

    * ``PYSPARK_PYTHON`` = this interpreter: the default is ``python3`` from PATH, which may
      lack pyarrow, and the failure then shows only as "Python worker failed to connect back".
    * ``SPARK_LOCAL_IP`` = 127.0.0.1, unless set: otherwise Spark binds the eth0 address.
    * the UI is off, and shuffles use 2 partitions (a local job, not a cluster).
    * adaptive query execution is off: Spark turns it off for every streaming query anyway,
      warning each time that it "is not supported in streaming DataFrames/Datasets". Pass
      ``conf={"spark.sql.adaptive.enabled": "true"}`` for a session that runs batch jobs.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
