"""``python -m bench [--quick] [--only NAME]``: run the benchmark scenarios and print one table.

Every number is the median of ``--repeat`` runs; ratios compare measurements
taken in the same run. Nothing here asserts a speed. Rows that need a program
that is not installed (kcat, a peer broker, the C consumer's build tools) are
left out with a printed message (bench/tools.py); the Python clients come with
the ``[test]`` extra, which ``./run`` installs.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

try:
    from bench import (
        cleaner,
        cluster,
        commits,
        consume,
        failover,
        follower,
        groups,
        ingest,
        latency,
        memory,
        produce,
        reassign,
        replicated,
        rolling,
        shares,
        stalls,
        subtables,
        transactions,
        txnread,
    )
    from bench.report import print_table
except ModuleNotFoundError as missing:  # run without the [test] extra
    sys.exit(f"bench: {missing}: install the [test] extra (pip install -e '.[test]'), which ./run bench does")

SCENARIOS = {"ingest": ingest.run, "consume": consume.run, "produce": produce.run, "groups": groups.run,
             "commits": commits.run, "latency": latency.run, "memory": memory.run, "txnread": txnread.run,
             "cleaner": cleaner.run, "transactions": transactions.run,
             "stalls": stalls.run, "shares": shares.run, "subtables": subtables.run,
             "cluster": cluster.run, "replicated": replicated.run,
             "rolling": rolling.run, "reassign": reassign.run, "failover": failover.run, "follower": follower.run}


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    return f"{len(os.sched_getaffinity(0))} x {cpu}, Python {platform.python_version()}"


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat (CI smoke)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=sorted(SCENARIOS), help="these scenarios only")
    args = p.parse_args()
    repeat = 1 if args.quick else args.repeat
    print(f"machine: {machine()}", flush=True)
    rows = []
    for name, scenario in SCENARIOS.items():
        if args.only is None or name in args.only:
            rows += scenario(quick=args.quick, repeat=repeat)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
