"""Crash points for the connector's crash tests (like ``server_stub.faults`` for the server).

The source options ``faultPoints="after_journal:2,before_ack:1"`` and ``faultDir=<dir>`` make
the source stop at the 2nd journal write / the 1st ack of the process (points: ``after_journal``,
``before_ack``, ``read``): it writes
``<dir>/<point>`` and then hangs, so the test can ``kill -9`` the driver at exactly that point.
Each point fires once per fault dir (its marker file exists after), so a restarted driver runs
through. (Options, not environment variables: Spark's Python source runner does not see the
driver's environment.)
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

_seen: Counter[str] = Counter()


def fault_point(name: str, spec: str | None, directory: str | None) -> None:
    if not spec or not directory:
        return
    wanted = dict(item.split(":") for item in spec.split(",") if item)
    if name not in wanted:
        return
    _seen[name] += 1
    marker = Path(directory) / name
    if _seen[name] != int(wanted[name]) or marker.exists():
        return
    marker.write_text(str(os.getpid()))
    # Hang until the test kills the driver. An executor worker is not in the driver's process
    # group (pyspark.daemon calls setpgid): it exits once its parent is gone.
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)
