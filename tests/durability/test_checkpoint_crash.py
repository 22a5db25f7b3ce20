"""SIGKILL while the store's WAL is being checkpointed (``sqlite_checkpoints.py``): a
process commits batches through a WAL bound small enough that passive checkpoints and
RESTARTs run all the time, reporting each commit once it returned; it is killed at random
moments and the store reopened. Everything reported committed is there, byte for byte."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

from eoclient.server_stub.storage.sqlite import SqliteStore

SUB = "projects/p/subscriptions/s"
BATCH = 20

_WRITER = f"""
import sys
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.storage.sqlite import SqliteStore

store = SqliteStore(sys.argv[1], checkpoint_bytes=16 * 1024)
seq = store._messages.last_seq
while True:
    messages = [
        (s, StoredMessage(str(s), s.to_bytes(8, "big") * 128, {{}}, "", 1e9, 1024))
        for s in range(seq + 1, seq + {BATCH} + 1)
    ]
    seq += {BATCH}
    store.publish("projects/p/topics/t", messages, {{{SUB!r}: [s for s, _ in messages]}})
    store.commit()
    print(seq, flush=True)
"""


def _run_until_killed(directory: Path, commits: int) -> int:
    """The last seq the writer reported committed before its SIGKILL."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    last = 0
    try:
        for _ in range(commits):
            line = writer.stdout.readline()
            assert line, "the writer stopped before it was killed"
            last = int(line)
        time.sleep(random.uniform(0, 0.02))  # mid-commit or mid-checkpoint, or between
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    return last


def test_a_store_killed_while_checkpointing_keeps_every_commit(tmp_path: Path) -> None:
    for _ in range(4):
        reported = _run_until_killed(tmp_path, random.randint(60, 160))
        store = SqliteStore(tmp_path)
        try:
            rows = store.backlog(SUB, 0, 1_000_000)
        finally:
            store.close()
        seqs = [row.seq for row in rows]
        # Every reported commit is there (and maybe later ones), each whole: no gap, no
        # part of a batch.
        assert seqs == list(range(1, len(seqs) + 1))
        assert len(seqs) >= reported
        assert len(seqs) % BATCH == 0
        for row in rows:
            assert row.message.data == row.seq.to_bytes(8, "big") * 128
