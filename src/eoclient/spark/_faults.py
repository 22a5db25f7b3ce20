"""Crash points for the connector's crash tests (the server has ``services.faults``).

The source options ``faultPoints="after_journal:2,before_settle:1"`` and ``faultDir=<dir>``
make the source stop at the 2nd batch planned / the 1st committed part settled by the
process. Points: ``after_journal`` on the driver (a batch planned, latestOffset about to
return); on an executor ``read`` (a read task starting), ``before_settle`` (a read task, or
a worker settling early, about to ack a committed part: ``_settle``), ``after_settle`` (one
that acked a committed part and wrote its pending ids, not yet marked it settled),
``before_claim`` (a read task about to journal what it pulled), ``after_claim`` (a read
task about to return its journaled rows), ``read_ahead`` (a worker holding a read-ahead's
answers, its pull over: ``_ahead``), ``before_adopt`` (a read task holding its worker's
read-ahead, its log not yet renamed) and ``after_adopt`` (the read-ahead's log renamed to
the task's attempt log, nothing admitted).
The process writes ``<dir>/<point>`` (holding its pid) and then hangs, so the test can
``kill -9`` the driver or the executor at exactly that point. ``read:1:pause`` instead writes
``<dir>/<point>.paused`` and waits there until the test creates ``<dir>/<point>.resume``, then
goes on: the test can change the world (the checkpoint) at a known moment. Each point fires
once per fault dir and mode (its marker file exists after), so a restarted driver runs
through. (Options, not environment variables: Spark's Python source runner does not see
the driver's environment.)
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

# Calls of each point by this process, per fault dir (a process may serve several tests).
_seen: Counter[tuple[str, str]] = Counter()


def fault_point(name: str, spec: str | None, directory: str | None) -> None:
    if not spec or not directory:
        return
    wanted = {
        point: (int(count), mode[0] if mode else "hang")
        for point, count, *mode in (item.split(":") for item in spec.split(",") if item)
    }
    if name not in wanted:
        return
    count, mode = wanted[name]
    _seen[directory, name] += 1
    marker = Path(directory) / (name if mode == "hang" else f"{name}.paused")
    if _seen[directory, name] != count:
        return
    try:
        # Created exclusively: of several processes (read tasks) reaching the point at
        # once, one stops there.
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    if mode == "pause":
        resume = Path(directory) / f"{name}.resume"
        while not resume.exists():
            time.sleep(0.05)
        return
    # Hang until the test kills the driver. An executor worker is not in the driver's process
    # group (pyspark.daemon calls setpgid): it exits once its parent is gone.
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)
