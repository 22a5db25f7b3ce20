"""Google's Node.js client (@google-cloud/pubsub), installed once for the contract tests
into a cache shared by every test process (one ``npm install`` at a time: a lock file)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

NODE_HOME = Path.home() / ".cache" / "eoclient-tests" / "node-pubsub"
# The major version the scripts are written for (createSchema, iam, modifyPushConfig).
PACKAGE = "@google-cloud/pubsub@5"


def node_client() -> Path:
    """The directory whose node_modules holds the Node client (installed if missing)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: Google's Node.js client cannot run")
    installed = NODE_HOME / "node_modules" / "@google-cloud" / "pubsub" / "package.json"
    NODE_HOME.mkdir(parents=True, exist_ok=True)
    # Parallel test processes (pytest -n) may both find it missing: one installs, the
    # other waits on the lock and then finds it there.
    with (NODE_HOME.parent / "node-pubsub.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed.exists():
            (NODE_HOME / "package.json").write_text('{"name": "eoclient-node-contract"}\n')
            result = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", PACKAGE],
                cwd=NODE_HOME,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
            if result.returncode != 0 or not installed.exists():
                pytest.skip(f"npm install {PACKAGE} failed: {result.stderr.strip()[-300:]}")
    return NODE_HOME
