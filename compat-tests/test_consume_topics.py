"""walgate only: a `WITH META AS DATABASE` topic carries the data rows (columns then tags) and meta records.

Meta records (one per CREATE TABLE made after the topic) are marked by the ``meta``
header and share the partition's dense offsets with the data records. (`AS STABLE`
is read side by side with Tansu in test_consume_assign.py.)
"""

from __future__ import annotations

import json

import compat_data as data
import pytest
from compat_data import H_META, H_TABLE, check_dense, check_exactly, records, split_meta

TOPIC = "topic_db"


@pytest.fixture(scope="module")
def broker(walgate):
    return walgate


@pytest.fixture(scope="module")
def db_topic_read(power, pyclient):
    return pyclient("ck_assign.py", power.bootstrap, TOPIC, "--start", "beginning")


def test_database_topic_has_every_row_once(power, db_topic_read):
    run = db_topic_read
    got = records(run.json_lines())
    marks = {d["partition"]: (d["low"], d["high"]) for d in run.events("watermarks")}
    check_dense(got, {p: lo for p, (lo, _) in marks.items()})
    assert {p: hi - lo for p, (lo, hi) in marks.items()} == {p: len(rs) for p, rs in data.by_partition(got).items()}, \
        run.describe()
    rows, _meta = split_meta(got)
    check_exactly(rows, power.expected[TOPIC], dense=False)


def test_database_topic_has_create_table_meta_records(db_topic_read):
    run = db_topic_read
    got = records(run.json_lines())
    _rows, meta = split_meta(got)
    created = {r.headers.get(H_TABLE): r for r in meta if r.headers.get(H_META) == "create_table"}
    assert set(created) == set(data.TABLES), f"create_table meta records for {sorted(created)}\n{run.describe()}"
    for table, rec in created.items():
        assert rec.partition == data.vnode_of(data.DB, table, data.VGROUPS), rec.brief()
        first_row = min(r.offset for r in got if r.partition == rec.partition and r.key == table and H_META not in r.headers)
        assert rec.offset < first_row, f"meta record after the table's first row: {rec.brief()}"
        assert isinstance(rec.value, dict), f"meta value is not a JSON object: {rec.brief()}"
    print(json.dumps(next(iter(created.values())).value))


def test_spark_source_reads_database_topic(power, java):
    run = java("SparkSource.java", "--bootstrap", power.bootstrap, "--topic", TOPIC, check=False)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    got = records(run.json_lines())
    rows, meta = split_meta(got)
    check_exactly(rows, power.expected[TOPIC], dense=False)
    assert len(meta) >= len(data.TABLES), run.describe()
    (summary,) = run.events("summary")
    assert summary["records"] == len(got), run.describe()
