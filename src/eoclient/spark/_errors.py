"""User-facing errors of the connector as one line, not the last line of a traceback.

A Python data source's error reaches the user inside the JVM's exception text: PySpark's
worker sends the JVM the *formatted traceback* (``pyspark.util.handle_worker_exception``), so
"the subscription does not exist" came as the last of 40 lines of frames from the SDK, after
"Traceback (most recent call last):", inside a Py4J stack trace. The worker sends only
``Type: message`` when ``SPARK_HIDE_TRACEBACK`` is set (what Spark sets for
``spark.sql.execution.pyspark.udf.hideTraceback.enabled``). ``one_line_errors`` sets it when a
:class:`~eoclient.errors.SparkConnectorError` leaves a Spark entry point. That changes nothing
else: every worker that runs these entry points (the planner of ``load()``, the streaming
source runner) reports the error and exits (``sys.exit(-1)`` after
``handle_worker_exception``), so no later error of that process loses its traceback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from eoclient.errors import SparkConnectorError

HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Around a method Spark calls in a Python worker: a ``SparkConnectorError`` raised
    inside reaches the user as its one-line message."""
    try:
        yield
    except SparkConnectorError:
        os.environ[HIDE_TRACEBACK] = "1"
        raise
