"""A data dir of format 1 (walgate before issue 13: no ``walgate.json``, ``db/<name>/``, ``topics/<topic>.oidx``,
catalog and commit lines without checksums), and a summary of what it holds, for the migration tests.

``format1_datadir.tar.gz`` beside this file was made by running this script with the code of commit 5852923 (the
last release writing format 1) first on ``PYTHONPATH``::

    git archive 5852923 walgate | tar -x -C /tmp/walgate-format1
    PYTHONPATH=/tmp/walgate-format1 python tests/storage/format1_datadir.py OUT_DIR

It writes ``OUT_DIR/data`` (the data dir) and ``OUT_DIR/expected.json`` (:func:`summary` of it, as the old code
answers). :func:`summary` uses only engine calls both formats have, so the test compares it after the migration.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

OLD_COMMIT = "5852923"
TOPICS = ("topic_meters", "topic_db", "orders.v1")
FORMAT1_DATABASE_COLUMNS = ("name", "vgroups", "precision", "wal_level", "wal_fsync_period", "wal_retention_period",
                            "wal_retention_size", "wal_segment_size")
"""The columns of SHOW DATABASES the summary holds, by name: those of the format 1 release but ``create_time``."""


def make(data: Path) -> None:
    from walgate.storage.engine import Engine
    from walgate.wire import encode_batch

    e = Engine.open(data)
    e.execute("CREATE DATABASE power VGROUPS 2 WAL_RETENTION_PERIOD -1")
    e.execute("CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (location VARCHAR(64), groupid INT)")
    for i in range(6):
        e.execute(f"INSERT INTO power.d{i} USING power.meters TAGS ('site{i}', {i % 3}) "
                  f"VALUES ({1_700_000_000_000 + i}, {i}.5, {195 + 3 * i}) ({1_700_000_001_000 + i}, {i}.25, {230 + i})")
    e.execute("CREATE TABLE power.plain (ts TIMESTAMP, v INT, s VARCHAR(8))")
    e.execute("INSERT INTO power.plain VALUES (1700000000000, 1, 'a') (1700000000001, 2, NULL)")
    e.execute("CREATE TOPIC topic_meters AS SELECT ts, current, voltage FROM power.meters WHERE voltage > 200")
    e.execute("CREATE TOPIC topic_db WITH META AS DATABASE power")
    e.execute("INSERT INTO power.d0 VALUES (1700000002000, 9.5, 240)")
    e.write_lines("power", b"cpu,host=a usage=1.5 1700000000000000000\ncpu,host=b usage=2.25 1700000000000000000\n")
    e.execute("CREATE DATABASE `odd-name` VGROUPS 1 WAL_RETENTION_PERIOD -1")  # a name walgate no longer accepts: it must migrate anyway
    e.execute("CREATE TABLE `odd-name`.t (ts TIMESTAMP, v INT)")
    e.execute("INSERT INTO `odd-name`.t VALUES (1700000000000, 7)")
    e.commit_offsets("g1", [("topic_meters", 0, 2, 0, "m0"), ("topic_meters", 1, 1, 0, None), ("topic_db", 0, 5, 0, None)], 1000)
    e.commit_offsets("g1", [("topic_meters", 0, 3, 0, "m1")], 1001)
    e.create_kafka_topic("orders.v1", 2, {"retention.ms": "-1"})
    pid = e.producer_ids.allocate()
    for k in range(3):
        e.append_batches("orders.v1", 0, [encode_batch(0, [1000 + k, 1001 + k], [b"k", None], [b"a%d" % k, b"b%d" % k],
                                                       producer_id=pid, producer_epoch=0, base_sequence=2 * k)])
    e.append_batches("orders.v1", 1, [encode_batch(0, [5000], [b"x"], [b"only"])])
    e.delete_records("orders.v1", 0, 3)
    e.commit_offsets("g2", [("orders.v1", 0, 4, 0, None)], 1002)
    e.close()


def summary(e: Any) -> dict[str, Any]:
    """What a data dir holds, as the engine answers it (no timestamps of creation, no paths)."""
    shown = e.execute("SHOW DATABASES")
    at = [[c[0] for c in shown.columns].index(name) for name in FORMAT1_DATABASE_COLUMNS]
    out: dict[str, Any] = {"databases": sorted([r[i] for i in at] for r in shown.rows)}
    out["topics"] = sorted([r[0], r[1], r[3], r[4], r[5], r[6]] for r in e.execute("SHOW TOPICS").rows)
    for db in sorted(e.catalog.databases):
        if db.startswith("kafka_"):
            continue
        out[f"{db}.stables"] = sorted([r[0], r[3], r[4]] for r in e.execute("SHOW STABLES", db).rows)
        out[f"{db}.tables"] = sorted([r[0], r[3], r[4], r[5], r[6]] for r in e.execute("SHOW TABLES", db).rows)
        for name in [r[0] for r in out[f"{db}.stables"]] + [r[0] for r in out[f"{db}.tables"] if r[2] is None]:
            out[f"{db}.{name}.rows"] = sorted(e.execute(f"SELECT * FROM `{db}`.`{name}`").rows, key=repr)
    for topic in TOPICS:
        for p in range(e.partition_count(topic)):
            start, end = e.watermarks(topic, p)
            out[f"{topic}-{p}.watermarks"] = [start, end]
            out[f"{topic}-{p}.entries"] = [list(x) for x in e.index_entries(topic, p, start)]
            if e.is_native(topic):
                out[f"{topic}-{p}.batches"] = [e.kafka_batch(topic, p, v).hex() for _, v, _ in e.index_entries(topic, p, start)]
            else:
                out[f"{topic}-{p}.records"] = [repr(e.kafka_rows(topic, p, v)) for _, v, _ in e.index_entries(topic, p, start)]
    out["committed"] = sorted([g, t, p, c.offset, c.leader_epoch, c.metadata, c.commit_ms] for g, t, p, c in e.all_committed())
    return orjson.loads(orjson.dumps(out, option=orjson.OPT_NON_STR_KEYS))


if __name__ == "__main__":
    from old_release import main

    main(Path(sys.argv[1]), make, summary)
