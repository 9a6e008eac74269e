"""A data dir of format 2 (walgate before issue 23: committed offsets in each vnode's ``commits.log``, group records in
``groups.log``), and a summary of what it holds, for the format 2 -> 3 migration tests.

``format2_datadir.tar.gz`` beside this file was made by running this script with the code of commit d5aba2f (the
last commit writing format 2) first on ``PYTHONPATH``::

    git archive d5aba2f walgate | tar -x -C /tmp/walgate-format2
    PYTHONPATH=/tmp/walgate-format2 python tests/storage/format2_datadir.py OUT_DIR

It writes ``OUT_DIR/data`` (the data dir) and ``OUT_DIR/expected.json`` (:func:`summary` of it, as the old code
answers). :func:`summary` uses only engine calls both formats have.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

OLD_COMMIT = "d5aba2f"
GROUPS = 12  # groups committing, spread over every vnode of both topics


def make(data: Path) -> None:
    from walgate.storage.engine import Engine

    e = Engine.open(data)
    e.execute("CREATE DATABASE power VGROUPS 3 WAL_RETENTION_PERIOD -1")
    e.execute("CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT) TAGS (location VARCHAR(64))")
    e.execute("CREATE TOPIC topic_meters AS STABLE power.meters")
    e.create_kafka_topic("orders", 4, {"retention.ms": "-1"})
    for g in range(GROUPS):
        e.commit_offsets(f"group-{g}", [("topic_meters", g % 3, g, 0, f"m{g}"), ("orders", g % 4, 10 * g, 1, None)],
                         1_700_000_000_000 + g)
    e.commit_offsets("group-0", [("orders", 0, 99, 2, "later")], 1_700_000_001_000)  # a superseded line
    e.commit_offsets("gone", [("orders", 1, 5, 0, None)], 1_700_000_002_000)
    e.delete_offsets("gone")  # a tombstone
    e.write_group_records([(f"group-{g}", {"type": "classic", "generation": g, "é": "ü"}) for g in range(4)])
    e.write_group_records([("group-1", None), ("group-2", {"type": "consumer", "epoch": 7})])
    e.close()


def summary(e: Any) -> dict[str, Any]:
    """Committed offsets and group records, as the engine answers them."""
    return {
        "committed": sorted([g, t, p, c.offset, c.leader_epoch, c.metadata, c.commit_ms]
                            for g, t, p, c in e.all_committed()),
        "groups": dict(sorted(e.group_records().items())),
        "topics": sorted([t, e.partition_count(t)] for t in ("topic_meters", "orders")),
    }


if __name__ == "__main__":
    from old_release import main

    main(Path(sys.argv[1]), make, summary)
