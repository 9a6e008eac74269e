"""A data dir whose vnodes' ``meta.db`` have the first row format (the create version inside each row's ``def``, no
``version`` column: walgate before issue 23's step 5), and a summary of the tables it holds, for the meta store
migration tests (tests/storage/test_meta_store_format.py).

``meta_v1_datadir.tar.gz`` beside this file was made by running this script with the code of commit 97bd1df (the
last commit writing that format) first on ``PYTHONPATH``::

    git archive 97bd1df walgate | tar -x -C /tmp/walgate-meta1
    PYTHONPATH=/tmp/walgate-meta1 python tests/storage/meta_v1_datadir.py OUT_DIR

It writes ``OUT_DIR/data`` (the data dir) and ``OUT_DIR/expected.json`` (:func:`summary` of it, as the old code
answers). :func:`summary` uses only calls both formats have.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

OLD_COMMIT = "97bd1df"
VGROUPS = 2


def make(data: Path) -> None:
    from walgate.storage.engine import Engine

    e = Engine.open(data)
    e.execute(f"CREATE DATABASE db VGROUPS {VGROUPS} WAL_RETENTION_PERIOD -1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT, name VARCHAR(16))")
    e.execute("CREATE STABLE db.old (ts TIMESTAMP, v INT) TAGS (site INT)")
    e.execute("CREATE TABLE db.plain (ts TIMESTAMP, v INT, s VARCHAR(8))")
    for i in range(40):
        e.execute(f"INSERT INTO db.t{i} USING db.st TAGS ({i}, 'n\u00e9{i}') VALUES ({1000 + i}, {i})")
    for i in range(6):
        e.execute(f"CREATE TABLE db.o{i} USING db.old TAGS ({i})")
    e.execute("DROP TABLE db.t3")
    e.execute("DROP STABLE db.old")
    e.execute("INSERT INTO db.t3 USING db.st TAGS (33, 'again') VALUES (2000, 3)")  # created again, a new version
    e.close()  # meta.db written and fsynced, covering every meta entry


def summary(e: Any) -> list[list[Any]]:
    """Every table of every vnode (dropped ones too), as the engine answers it."""
    return [[v.index, t.name, t.stable, t.tags, t.version, t.created_ts, t.dropped,
             [[c.name, c.type.name, c.type.length] for c in t.columns] if t.columns is not None else None]
            for v in e.vnodes["db"] for t in v.tables()]


if __name__ == "__main__":
    from old_release import main

    main(Path(sys.argv[1]), make, summary)
