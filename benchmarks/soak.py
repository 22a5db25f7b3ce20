"""The long exactly-once soak: ``python benchmarks/soak.py --messages 1000000``.

The same engine as the CI soak (tests/soak/_engine.py): a reference server in a thread,
an exactly-once subscription, several SubscriberClients, every stream dropped each
second, transient and permanent ack faults, failing handlers; the invariants are checked
at the end (no delivery after SUCCESS, nothing lost) and the counts printed. Results are
recorded in docs/soak.md.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from soak._engine import SoakPlan, run_soak, summary_lines

from eoclient.pytest_plugin.server_thread import ServerThread


async def main(plan: SoakPlan) -> int:
    with ServerThread(record_history=plan.check_server_history) as server:
        report = await run_soak(server, plan)
    for line in summary_lines(report):
        print(line)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MiB")
    return 1 if report.violations else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--subscribers", type=int, default=4)
    parser.add_argument("--drop-interval", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument(
        "--no-server-history",
        action="store_true",
        help="skip the server-side check (its history costs ~1 KB a message)",
    )
    options = parser.parse_args()
    plan = SoakPlan(
        messages=options.messages,
        subscribers=options.subscribers,
        drop_interval=options.drop_interval,
        timeout=options.timeout,
        check_server_history=not options.no_server_history,
    )
    sys.exit(asyncio.run(main(plan)))
