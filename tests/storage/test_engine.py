"""The engine end to end through its public API (SQL, line protocol, CSV, topics, recovery)."""

from __future__ import annotations

import pytest

from walgate.storage.engine import Engine
from walgate.storage.errors import AlreadyExists, InvalidValue, NotFound, RequestTooLarge, SqlSyntaxError, StorageError
from walgate.storage.partitions import MAX_TIMESTAMP
from walgate.storage.vnode import vnode_of
from walgate.wire.errors import ErrorCode

METERS = (
    "CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
    "TAGS (location VARCHAR(64), groupid INT)"
)


@pytest.fixture
def engine(tmp_path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE power VGROUPS 4")
    e.execute(METERS)
    yield e
    e.close()


def rows(e: Engine, sql: str) -> list[list]:
    return e.execute(sql).rows


def total_rows(e: Engine, table: str) -> int:
    return len(rows(e, f"SELECT * FROM {table}"))


def test_insert_auto_create_and_select(engine):
    r = engine.execute(
        "INSERT INTO power.d1001 USING power.meters TAGS ('California.SanFrancisco', 2) "
        "VALUES ('2018-10-03 14:38:05.000', 10.3, 219, 0.31) ('2018-10-03 14:38:15.000', 12.6, 218, 0.33) "
        "power.d1002 USING power.meters TAGS ('California.LosAngeles', 3) VALUES (1538548685000, 10.2, 220, 0.23)"
    )
    assert r.affected_rows == 3
    got = rows(engine, "SELECT ts, current, voltage, location, tbname FROM power.meters WHERE groupid = 2")
    assert got == [
        ["2018-10-03T14:38:05.000Z", pytest.approx(10.3, rel=1e-6), 219, "California.SanFrancisco", "d1001"],
        ["2018-10-03T14:38:15.000Z", pytest.approx(12.6, rel=1e-6), 218, "California.SanFrancisco", "d1001"],
    ]
    tables = rows(engine, "SHOW power.TABLES")
    assert [(t[0], t[4], t[5]) for t in tables] == [
        ("d1001", "meters", vnode_of("power", "d1001", 4)),
        ("d1002", "meters", vnode_of("power", "d1002", 4)),
    ]


def test_use_makes_names_optional_but_never_required(engine):
    assert engine.execute("USE power").database == "power"
    engine.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)", db="power")
    engine.execute("INSERT INTO d1 VALUES (now, 1.0, 2, 3.0)", db="power")
    assert total_rows(engine, "power.d1") == 1
    with pytest.raises(InvalidValue, match="Database not specified"):
        engine.execute("INSERT INTO d1 VALUES (now, 1.0, 2, 3.0)")


def test_multi_table_insert_is_all_or_nothing(engine):
    engine.execute("CREATE TABLE power.d1 USING power.meters TAGS ('a', 1)")
    with pytest.raises(InvalidValue):
        engine.execute(
            "INSERT INTO power.d1 VALUES (now, 1.0, 1, 1.0) "
            "power.d2 USING power.meters TAGS ('b', 2) VALUES (now, 2.0, 2, 2.0) "
            "power.d1 VALUES (now + 1s, 'not a float', 1, 1.0)"
        )
    assert total_rows(engine, "power.meters") == 0
    assert [t[0] for t in rows(engine, "SHOW power.TABLES")] == ["d1"]  # d2 was not auto-created


@pytest.mark.parametrize(
    "sql, error",
    [
        ("INSERT INTO power.nope VALUES (now, 1)", NotFound),
        ("INSERT INTO nodb.t VALUES (now, 1)", NotFound),
        ("CREATE STABLE power.meters (ts TIMESTAMP, a INT) TAGS (t INT)", AlreadyExists),
        ("CREATE TABLE power.d9 USING power.meters TAGS ('a')", InvalidValue),
        ("CREATE TABLE power.d9 USING power.meters TAGS ('a', 'not-int')", InvalidValue),
        ("CREATE STABLE power.s2 (c1 INT, ts TIMESTAMP) TAGS (t INT)", SqlSyntaxError),
        ("CREATE STABLE power.s3 (ts TIMESTAMP, tbname INT) TAGS (t INT)", StorageError),
        ("SELEC * FROM power.meters", SqlSyntaxError),
        ("CREATE TOPIC t1 AS SELECT nope FROM power.meters", InvalidValue),
        ("CREATE TOPIC t1 AS STABLE power.meters WHERE current > 1", InvalidValue),
    ],
)
def test_bad_statements_raise_and_change_nothing(engine, sql, error):
    before = (rows(engine, "SHOW power.TABLES"), rows(engine, "SHOW power.STABLES"), rows(engine, "SHOW TOPICS"))
    with pytest.raises(error):
        engine.execute(sql)
    assert (rows(engine, "SHOW power.TABLES"), rows(engine, "SHOW power.STABLES"), rows(engine, "SHOW TOPICS")) == before


def test_request_size_limit(tmp_path):
    e = Engine.open(tmp_path, max_request_bytes=100)
    with pytest.raises(RequestTooLarge):
        e.execute("SHOW DATABASES -- " + "x" * 200)
    e.close()


def test_everything_survives_reopen(tmp_path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE power VGROUPS 2 PRECISION 'us' WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
    e.execute(METERS)
    e.execute("INSERT INTO power.d1 USING power.meters TAGS ('a', 1) VALUES ('2024-01-01 00:00:00.000001', 1.5, 1, 0.5)")
    e.execute("CREATE TOPIC tp AS SELECT ts, voltage, location FROM power.meters")
    e.close()
    e = Engine.open(tmp_path)
    assert rows(e, "SELECT ts, voltage, location FROM power.meters") == [["2024-01-01T00:00:00.000001Z", 1, "a"]]
    db = [d for d in rows(e, "SHOW DATABASES") if d[0] == "power"][0]
    assert db[2:6] == [2, "us", 2, 0] and db[-1] == 1  # vgroups, precision, wal_level, wal_fsync_period; replica
    assert [t[0] for t in rows(e, "SHOW TOPICS")] == ["tp"]
    e.execute("INSERT INTO power.d1 VALUES ('2024-01-01 00:00:01', 2.5, 2, 0.5)")
    assert total_rows(e, "power.d1") == 2
    e.close()


def test_topic_offsets_are_dense_over_sparse_versions(engine):
    engine.execute("CREATE TOPIC hi AS SELECT ts, voltage FROM power.meters WHERE voltage > 200")
    engine.execute("CREATE TABLE power.d1 USING power.meters TAGS ('a', 1)")  # meta entry: a version, no record
    part = vnode_of("power", "d1", 4)
    for v in (100, 210, 220, 150, 230):
        engine.execute(f"INSERT INTO power.d1 VALUES (now, 1.0, {v}, 1.0)")
    idx = engine.indexes[("hi", part)]
    assert (idx.start_offset, idx.end_offset) == (0, 3)
    seen = []
    for offset in range(3):
        version, pos = idx.locate(offset)
        recs = engine.views.topic_records("hi", part, version)
        seen.append(recs[0].values.column("voltage")[pos].as_py())
    assert seen == [210, 220, 230]
    assert idx.locate(3) is None
    # the versions behind the offsets are not contiguous (meta + filtered rows took some)
    assert list(idx.versions) == [2, 3, 5]


def test_topic_created_late_indexes_existing_wal_and_survives_index_loss(tmp_path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site VARCHAR(8))")
    for i in range(5):
        e.execute(f"INSERT INTO db.a USING db.st TAGS ('x') VALUES ({1000 + i}, {i}) db.b USING db.st TAGS ('y') VALUES ({1000 + i}, {i})")
    e.execute("CREATE TOPIC onlyx AS STABLE db.st WHERE site = 'x'")
    e.execute("CREATE TOPIC everything WITH META AS DATABASE db")
    assert e.indexes[("onlyx", 0)].end_offset == 5
    assert e.indexes[("everything", 0)].end_offset == 12  # 10 rows + 2 create-table meta records
    oidx = e.indexes[("onlyx", 0)].path
    e.close()
    oidx.unlink()
    e = Engine.open(tmp_path)
    assert e.indexes[("onlyx", 0)].end_offset == 5
    e.execute("INSERT INTO db.a VALUES (2000, 9)")
    assert e.indexes[("onlyx", 0)].end_offset == 6
    assert e.indexes[("onlyx", 0)].entry_for_timestamp(1500) == (5, e.indexes[("onlyx", 0)].versions[-1])
    e.close()


def test_line_protocol_schemaless(engine):
    n = engine.write_lines(
        "power",
        b"cpu,host=a,region=eu usage=0.5,count=3i,ok=t 1700000000000000000\n"
        b"cpu,host=b usage=1.5,note=\"hello\" 1700000001000000000\n",
    )
    assert n == 2
    desc = {r[0]: (r[1], r[3]) for r in rows(engine, "DESCRIBE power.cpu")}
    assert desc["_ts"] == ("TIMESTAMP", "")
    assert desc["usage"] == ("DOUBLE", "")
    assert desc["count"] == ("BIGINT", "")
    assert desc["note"] == ("VARCHAR", "")
    assert desc["host"][1] == "TAG"
    got = rows(engine, "SELECT _ts, usage, count, note, host, region FROM power.cpu")
    assert sorted(got, key=lambda r: r[0]) == [
        ["2023-11-14T22:13:20.000Z", 0.5, 3, None, "a", "eu"],
        ["2023-11-14T22:13:21.000Z", 1.5, None, "hello", "b", None],
    ]
    # a new field later adds a column; a bad line writes nothing at all
    engine.write_lines("power", b"cpu,host=a usage=2.0,extra=1i 1700000002000000000")
    with pytest.raises(StorageError, match="line 2"):
        engine.write_lines("power", b"cpu,host=a usage=3.0 1700000003000000000\ncpu,host=a usage= 1\n")
    assert total_rows(engine, "power.cpu") == 3
    with pytest.raises(InvalidValue):
        engine.write_lines("power", b"cpu,host=a usage=\"text\" 1700000004000000000")
    assert total_rows(engine, "power.cpu") == 3


def test_csv_import(engine):
    engine.execute("CREATE TABLE power.d1 USING power.meters TAGS ('a', 1)")
    n = engine.write_csv("power", b"ts,current,voltage\n2024-01-01 00:00:00,1.5,220\n1704067201000,2.5,\n", table="d1")
    assert n == 2
    assert rows(engine, "SELECT voltage, phase FROM power.d1") == [[220, None], [None, None]]
    n = engine.write_csv("power", b"tbname,ts,voltage,location,groupid\nd7,1704067200000,1,x,7\nd8,1704067200000,2,y,8\n", stable="meters")
    assert n == 2
    assert rows(engine, "SELECT tbname, groupid FROM power.meters WHERE voltage < 3 AND groupid > 1") in (
        [["d7", 7], ["d8", 8]],
        [["d8", 8], ["d7", 7]],
    )
    with pytest.raises(StorageError, match="line 3"):
        engine.write_csv("power", b"ts,voltage\n1704067200000,1\n1704067200001\n", table="d1")
    with pytest.raises(InvalidValue, match="line 2"):
        engine.write_csv("power", b"ts,voltage\n1704067200000,x\n", table="d1")
    with pytest.raises(InvalidValue, match="line 5"):  # blank lines count: errors name the file's line
        engine.write_csv("power", b"ts,voltage\n\n1704067200000,1\n\n1704067200001,x\n", table="d1")
    assert total_rows(engine, "power.d1") == 2


def test_alter_and_drop(engine):
    engine.execute("INSERT INTO power.d1 USING power.meters TAGS ('a', 1) VALUES (1000, 1.0, 1, 1.0)")
    engine.execute("ALTER STABLE power.meters ADD COLUMN note NCHAR(10)")
    engine.execute("INSERT INTO power.d1 VALUES (2000, 1.0, 1, 1.0, 'n')")
    assert rows(engine, "SELECT note FROM power.d1") == [[None], ["n"]]
    engine.execute("ALTER STABLE power.meters DROP COLUMN note")
    assert "note" not in [r[0] for r in rows(engine, "DESCRIBE power.meters")]
    engine.execute("DROP TABLE power.d1")
    assert rows(engine, "SHOW power.TABLES") == []
    with pytest.raises(NotFound):
        engine.execute("INSERT INTO power.d1 VALUES (3000, 1.0, 1, 1.0)")
    engine.execute("CREATE TOPIC t AS STABLE power.meters")
    with pytest.raises(InvalidValue, match="topic"):
        engine.execute("DROP STABLE power.meters")
    engine.execute("DROP TOPIC t")
    engine.execute("DROP STABLE power.meters")
    engine.execute("DROP DATABASE power")
    assert "power" not in [d[0] for d in rows(engine, "SHOW DATABASES")]


def test_retention_moves_topic_log_start(tmp_path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1 WAL_SEGMENT_SIZE 1 WAL_RETENTION_SIZE 1 WAL_RETENTION_PERIOD -1")
    e.execute("CREATE TABLE db.t (ts TIMESTAMP, s VARCHAR(1000))")
    e.execute("CREATE TOPIC tt AS SELECT * FROM db.t")
    big = "x" * 900
    for i in range(60):
        values = " ".join(f"({i * 100 + j}, '{big}')" for j in range(40))
        e.execute(f"INSERT INTO db.t VALUES {values}")
    idx = e.indexes[("tt", 0)]
    assert idx.start_offset == 0
    e.apply_retention(0)
    assert idx.start_offset > 0
    assert idx.end_offset == 2400
    first = e.vnodes["db"][0].wal.first_version
    assert idx.versions[0] >= first
    assert e.vnodes["db"][0].wal.size_bytes <= 2 << 20
    e.close()
    e = Engine.open(tmp_path)
    assert e.indexes[("tt", 0)].start_offset == idx.start_offset
    assert e.indexes[("tt", 0)].end_offset == 2400
    e.close()


def test_select_result_metadata(engine):
    engine.execute("INSERT INTO power.d1 USING power.meters TAGS ('a', 1) VALUES (1000, 10.3, 219, 0.31)")
    r = engine.execute("SELECT ts, current, voltage, location, voltage * 2 AS v2 FROM power.meters")
    assert r.columns == [
        ("ts", "TIMESTAMP", 8), ("current", "FLOAT", 4), ("voltage", "INT", 4), ("location", "VARCHAR", 64), ("v2", "BIGINT", 8)
    ]
    assert r.rows == [["1970-01-01T00:00:01.000Z", 10.3, 219, "a", 438]]  # FLOAT at its shortest form
    empty = engine.execute("SELECT ts, location FROM power.meters WHERE voltage > 1000")
    assert empty.rows == [] and empty.columns == [("ts", "TIMESTAMP", 8), ("location", "VARCHAR", 64)]


def test_kafka_view_of_a_topic(engine):
    engine.execute("CREATE TOPIC tv AS SELECT ts, voltage, location FROM power.meters WHERE voltage > 200")
    engine.execute("INSERT INTO power.d1 USING power.meters TAGS ('a', 1) VALUES (1000, 1.0, 210, 1.0) (3000, 1.0, 100, 1.0) (2000, 1.0, 220, 1.0)")
    engine.execute("INSERT INTO power.d1 VALUES (5000, 1.0, 230, 1.0)")
    p = vnode_of("power", "d1", 4)
    assert engine.partition_count("tv") == 4
    assert engine.watermarks("tv", p) == (0, 3)
    entries = list(engine.index_entries("tv", p, 1))
    assert [(base, count) for base, _, count in entries] == [(0, 2), (2, 1)]
    rows = engine.kafka_rows("tv", p, entries[0][1])
    assert rows.keys == [b"d1", b"d1"]
    assert rows.timestamps == [1000, 2000]
    assert rows.values[1] == b'{"ts":"1970-01-01T00:00:02.000Z","voltage":220,"location":"a"}'
    assert dict(rows.headers[0]) == {"db": b"power", "stable": b"meters", "table": b"d1", "version": b"1"}
    assert engine.offset_for_timestamp("tv", p, 1500) == (1, 2000)
    assert engine.offset_for_timestamp("tv", p, 2001) == (2, 5000)
    assert engine.offset_for_timestamp("tv", p, 5001) is None
    assert engine.partitions.list_offset("tv", p, MAX_TIMESTAMP, read_committed=False) == (2, 5000)
    assert list(engine.index_entries("tv", p, 3)) == []
    with pytest.raises(NotFound):
        engine.watermarks("nope", 0)
    with pytest.raises(NotFound):
        engine.watermarks("tv", 4)


def test_show_topics_lists_kafka_native_topics(engine):
    """SHOW TOPICS answered KeyError 'kafka' once a Kafka-native topic existed (issue 13, item 10)."""
    engine.create_kafka_topic("native.t", 3, {})
    shown = {r[0]: r for r in rows(engine, "SHOW TOPICS")}
    assert shown["native.t"][5] == "kafka"


def test_show_subscriptions_with_offsets_on_a_kafka_native_topic(engine):
    """SHOW SUBSCRIPTIONS raised KeyError once a group committed on a Kafka-native topic (no evaluator)."""
    from walgate.wire import encode_batch

    engine.create_kafka_topic("native.s", 1, {})
    engine.append_batches("native.s", 0, [encode_batch(0, [1000 + i for i in range(5)], [b"k"] * 5,
                                                       [b"v%d" % i for i in range(5)], [[]] * 5)])
    engine.commit_offsets("g", [("native.s", 0, 2, -1, None)], 0)
    (row,) = rows(engine, "SHOW SUBSCRIPTIONS")
    assert row[:3] == ["native.s", "g", 0] and row[4:] == [2, row[5], 3]
    assert row[5] is not None


@pytest.mark.parametrize("sql", ["ALTER STABLE db.st ADD COLUMN w INT", "DROP STABLE db.st"])
def test_supertable_ddl_is_all_or_nothing_when_the_disk_refuses_any_write(tmp_path, sql):
    """The catalog change and the vnodes' meta entries of ALTER / DROP STABLE land together or not at all: the
    catalog record used to be written first, so a refused meta append left the catalog changed (issue 13, item 3)."""
    import errno
    import shutil

    from faults import Faults

    from walgate.storage.errors import StorageUnavailable

    template = tmp_path / "template"
    e = Engine.open(template)
    e.execute("CREATE DATABASE db VGROUPS 2")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site VARCHAR(8))")
    e.execute("INSERT INTO db.a USING db.st TAGS ('x') VALUES (1000, 1) db.b USING db.st TAGS ('y') VALUES (1000, 2)")
    e.close()

    def state(engine: Engine) -> tuple:
        return (rows(engine, "SHOW db.STABLES"), rows(engine, "DESCRIBE db.st") if rows(engine, "SHOW db.STABLES") else [],
                sorted(r[0] for r in rows(engine, "SHOW db.TABLES")), [v.wal.next_version for v in engine.vnodes["db"]])

    clean = tmp_path / "clean"
    shutil.copytree(template, clean)
    e = Engine.open(clean)
    before = state(e)
    faults = Faults()
    with faults.active():
        e.execute(sql)
    writes = faults.calls["write"]
    after = state(e)
    e.close()
    assert writes >= 3 and after != before
    for at in range(1, writes + 1):
        work = tmp_path / f"at{at}"
        shutil.copytree(template, work)
        e = Engine.open(work)
        faults = Faults()
        faults.fail("write", at=at, error=errno.ENOSPC)
        with faults.active(), pytest.raises(StorageUnavailable):
            e.execute(sql)
        assert state(e)[:3] == before[:3], f"write {at} of {writes} refused, yet the statement was applied"
        e.close()
        e = Engine.open(work)
        assert state(e)[:3] == before[:3], f"write {at} of {writes} refused, yet the statement is there after a reopen"
        e.execute(sql)  # the retry succeeds once the disk has room
        assert state(e)[:3] == after[:3]
        e.close()


@pytest.mark.parametrize("precision", ["ms", "us", "ns"])
def test_rows_of_every_precision_and_before_1970_render_as_kafka_records(tmp_path, precision):
    """A row before 1970 made every Fetch of its entry fail (Kafka record timestamps cannot be negative): it is
    stamped 0 and keeps its real ts in the value."""
    from walgate.wire import encode_batch

    e = Engine.open(tmp_path)
    e.execute(f"CREATE DATABASE d VGROUPS 1 PRECISION '{precision}'")
    e.execute("CREATE TABLE d.t (ts TIMESTAMP, v INT)")
    e.execute("CREATE TOPIC tp AS SELECT ts, v FROM d.t")
    e.execute("INSERT INTO d.t VALUES ('1950-01-01 00:00:00', 1) ('2024-01-01 00:00:00.123', 2)")
    ((base, version, _),) = list(e.index_entries("tp", 0, 0))
    rows = e.kafka_rows("tp", 0, version)
    assert rows.timestamps == [0, 1704067200123]
    assert rows.values[0].startswith(b'{"ts":"1950-01-01T00:00:00.000')
    assert encode_batch(base, rows.timestamps, rows.keys, rows.values, rows.headers)
    e.close()


def test_append_partitions_answers_each_partition_on_its_own(engine):
    """One call appends several partitions' batches; a partition refused (a sequence gap, no such partition) is
    not written and answers its exception, its siblings are appended as usual."""
    from walgate.storage.producers import SequenceError
    from walgate.wire import encode_batch

    engine.create_kafka_topic("native.m", 3, {})
    two = encode_batch(0, [1, 2], [None] * 2, [b"a", b"b"])
    first, gap = (encode_batch(0, [1], [None], [b"c"], producer_id=7, producer_epoch=0, base_sequence=s)
                  for s in (0, 5))
    results = engine.native.append_partitions("native.m", [(0, [two]), (1, [first]), (2, [two, two]), (1, [gap]),
                                                           (3, [two])])
    assert results[:3] == [0, 0, 0]
    assert isinstance(results[3], SequenceError) and results[3].error_code is ErrorCode.out_of_order_sequence_number
    assert isinstance(results[4], NotFound)
    assert [engine.watermarks("native.m", p)[1] for p in range(3)] == [2, 1, 4]
    assert engine.native.append_partitions("native.m", [(1, [first])]) == [0]  # a retry: its original offset


def test_drop_table_of_a_supertable_among_other_names_is_refused_whole(engine):
    """TDengine refuses a DROP TABLE naming a supertable among other names ("Cannot drop super table in batch",
    0x263A): so does walgate, dropping nothing. It used to drop the supertable alone, answer 0, and never look at
    the other names (issue: reviewer finding 1). A supertable named alone is dropped, as DROP STABLE."""
    from walgate.storage.errors import BatchDropStable

    engine.execute("CREATE TABLE power.n1 (ts TIMESTAMP, v INT)")
    engine.execute("CREATE TABLE power.n2 (ts TIMESTAMP, v INT)")
    for names in ("power.n1, power.meters, power.n2", "power.meters, power.n1", "power.n1, power.nope, power.meters"):
        with pytest.raises(BatchDropStable, match="Cannot drop super table in batch: power.meters") as e:
            engine.execute(f"DROP TABLE IF EXISTS {names}")
        assert e.value.code == 0x263A
        assert sorted(r[0] for r in rows(engine, "SHOW power.TABLES")) == ["n1", "n2"]
        assert [r[0] for r in rows(engine, "SHOW power.STABLES")] == ["meters"]
    engine.execute("DROP TABLE power.meters")  # alone: the supertable is dropped
    assert rows(engine, "SHOW power.STABLES") == []
    engine.execute("DROP TABLE power.n1, power.n2")
    assert rows(engine, "SHOW power.TABLES") == []
