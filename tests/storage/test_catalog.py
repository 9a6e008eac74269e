"""The catalog: checksummed records, damage skipped and reported (never the whole catalog lost), torn tails
dropped, writes refused by the disk change nothing, and the partition limit (issue 13, items 6 and 8)."""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

import pytest
from faults import WRITE_FAULTS, Faults, refused

from walgate.storage import lines
from walgate.storage.catalog import Catalog
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.errors import LimitExceeded, StorageUnavailable, TopicCollision
from walgate.storage.names import new_db_id
from walgate.storage.producers import ProducerIds
from walgate.storage.sql import ast

DBS = [f"d{i}" for i in range(6)]


def make(tmp_path: Path) -> Path:
    e = Engine.open(tmp_path)
    for name in DBS:
        e.execute(f"CREATE DATABASE {name} VGROUPS 1")
    e.execute("CREATE STABLE d2.st (ts TIMESTAMP, v INT) TAGS (t INT)")
    e.execute("CREATE TOPIC tp AS STABLE d2.st")
    e.close()
    return tmp_path / "catalog.log"


def test_one_nul_byte_loses_one_record_not_the_catalog(tmp_path: Path):
    path = make(tmp_path)
    data = bytearray(path.read_bytes())
    line = data.split(b"\n")[3]  # the create_db of d3
    pos = data.index(line) + 20
    data[pos] = 0
    path.write_bytes(bytes(data))
    e = Engine.open(tmp_path)
    assert sorted(e.catalog.databases) == [d for d in DBS if d != "d3"]
    assert "tp" in e.catalog.topics and ("d2", "st") in e.catalog.stables
    damage, orphan = e.damage()  # the record, and the directory of d3 that no record names now
    assert damage.file == "catalog.log" and damage.action == "skipped" and "checksum" in damage.reason
    assert (tmp_path / damage.kept).read_bytes() == bytes(data[damage.start : damage.end])
    assert orphan.file == "catalog.log" and orphan.action == "not served" and "is named by no catalog record" in orphan.reason
    assert e.show.show(ast.Show("QUARANTINE", None), None).rows == [[d.file, d.start, d.end, d.reason, d.action, d.kept, -1, -1]
                                                                  for d in (damage, orphan)]
    e.execute("CREATE DATABASE later VGROUPS 1")
    e.close()
    again = Engine.open(tmp_path)  # reported once: the catalog was rewritten without the damaged record
    assert again.damage() == [orphan] and sorted(again.catalog.databases) == sorted([d for d in DBS if d != "d3"] + ["later"])
    again.close()


def test_a_torn_last_record_is_dropped_silently_and_cut_off(tmp_path: Path):
    path = make(tmp_path)
    record = lines.encode({"op": "create_db", "name": "torn", "id": new_db_id(), "options": {}, "created_ms": 0})
    with open(path, "ab") as f:
        f.write(record[: len(record) // 2])
    e = Engine.open(tmp_path)
    assert e.damage() == [] and sorted(e.catalog.databases) == DBS
    e.execute("CREATE DATABASE after_tear VGROUPS 1")  # lands on its own line, not behind the torn bytes
    e.close()
    e = Engine.open(tmp_path)
    assert e.damage() == [] and "after_tear" in e.catalog.databases
    e.close()


def test_a_flipped_last_newline_keeps_the_last_record(tmp_path: Path):
    """The sweep's template lost its Kafka-native topic (its create record is the last) unreported: the record
    looked like a torn tail."""
    path = make(tmp_path)
    e = Engine.open(tmp_path)
    e.create_kafka_topic("orders.v1", 2, {})
    e.close()
    data = bytearray(path.read_bytes())
    for bit in range(8):
        flipped = bytearray(data)
        flipped[-1] ^= 1 << bit
        path.write_bytes(bytes(flipped))
        e = Engine.open(tmp_path)
        assert "orders.v1" in e.catalog.topics and sorted(e.catalog.databases) == sorted(DBS + [e.catalog.topics["orders.v1"].db])
        [damage] = e.damage()
        assert (damage.file, damage.end, damage.action) == ("catalog.log", len(data), "newline restored")
        assert (tmp_path / damage.kept).read_bytes() == flipped[damage.start :]
        e.close()
        e = Engine.open(tmp_path)  # rewritten with the newline back: nothing more to report
        assert e.damage() == [] and "orders.v1" in e.catalog.topics
        e.close()


@pytest.mark.parametrize("how", ["zero-filled", "zero-filled tail", "garbage tail"])
def test_zeros_or_garbage_are_reported_and_kept_never_taken_for_a_torn_tail(tmp_path: Path, how: str):
    """Issue 13's first symptom: a zero-filled catalog opened empty, silently, and was cut to 0 bytes."""
    path = make(tmp_path)
    data = path.read_bytes()
    bad = {"zero-filled": bytes(len(data)), "zero-filled tail": data + bytes(4096),
           "garbage tail": data + b"\x00\x07" + data[:40]}[how]
    path.write_bytes(bad)
    e = Engine.open(tmp_path)
    kept = [d for d in e.damage() if d.kept]
    assert [(d.file, d.action) for d in kept] == [("catalog.log", "skipped")]
    assert (tmp_path / kept[0].kept).read_bytes() == bad[kept[0].start : kept[0].end]
    if how == "zero-filled":
        assert kept[0].start == 0 and kept[0].end == len(bad) and not e.catalog.databases
        assert len([d for d in e.damage() if d.action == "not served"]) == len(DBS)  # every db/<id> reported
    else:
        assert sorted(e.catalog.databases) == DBS and len(e.damage()) == 1
    e.close()


def test_a_lost_catalog_reports_the_directories_it_named_and_keeps_them(tmp_path: Path):
    make(tmp_path)
    dirs = sorted(os.listdir(tmp_path / "db"))
    (tmp_path / "catalog.log").unlink()
    e = Engine.open(tmp_path)
    assert not e.catalog.databases
    assert sorted(d.reason.split()[0] for d in e.damage()) == [f"db/{d}" for d in dirs]
    assert all(d.file == "catalog.log" and d.action == "not served" for d in e.damage())
    e.close()
    assert sorted(os.listdir(tmp_path / "db")) == dirs


def test_records_that_verify_but_cannot_be_applied_are_skipped_and_reported(tmp_path: Path):
    good = {"op": "create_db", "name": "ok", "id": new_db_id(), "options": {"VGROUPS": 1, "PRECISION": "ms", "WAL_LEVEL": 1,
            "WAL_FSYNC_PERIOD": 3000, "WAL_RETENTION_PERIOD": -1, "WAL_RETENTION_SIZE": -1, "WAL_SEGMENT_SIZE": 1}, "created_ms": 0}
    topic = {"op": "create_topic", "name": "t0", "kind": "database", "db": "ok", "source": "", "with_meta": False,
             "sql": "CREATE TOPIC t0 AS DATABASE ok", "topic_id": str(uuid.uuid4()), "created_ms": 0}
    bad = [
        {**topic, "name": "same_id"},  # two topics' files would be one
        {"op": "format_disk"},
        {"op": "create_db", "name": "noopts"},
        {**good, "name": "evil", "id": "../../x"},
        {**good, "name": "dup_id"},  # the id of "ok" again
        {**good, "name": "zero", "id": new_db_id(), "options": {**good["options"], "VGROUPS": 0}},
        {"op": "drop_db", "name": "never_created"},
        {"op": "drop_topic", "name": "never_created"},
        {"op": "create_stable", "db": "nowhere", "name": "st", "columns": [], "tags": [], "created_ms": 0},
        {"op": "create_topic", "name": "t", "kind": "database", "db": "ok", "source": "", "with_meta": False,
         "sql": "CREATE TOPIC t AS DATABASE ok", "topic_id": "../../x", "created_ms": 0},
        {"op": "alter_kafka_topic", "name": "ghost", "options": {}, "configs": {}},
        {**good, "name": "short_placement", "id": new_db_id(), "nodes": []},  # a vgroup without a node
        {**good, "name": "bad_node", "id": new_db_id(), "nodes": ["n1"]},
        [1, 2, 3],
    ]
    (tmp_path / "walgate.json").write_bytes(lines.encode({"format": 2}))
    ProducerIds.create(tmp_path / "producer_ids.log")
    (tmp_path / "catalog.log").write_bytes(b"".join(lines.encode(r) for r in [good, topic, *bad]))
    e = Engine.open(tmp_path)
    assert list(e.catalog.databases) == ["ok"] and list(e.catalog.topics) == ["t0"]
    assert len(e.damage()) == len(bad) and all(d.action == "skipped" for d in e.damage())
    assert not (tmp_path.parent / "x").exists()
    e.close()


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_catalog_write_changes_nothing(tmp_path: Path, op: str, kind: str):
    path = make(tmp_path)
    cat = Catalog.open(path)
    state, size = (dict(cat.databases), dict(cat.stables), dict(cat.topics)), path.stat().st_size
    generation = cat.generation
    faults = Faults()
    with faults.active():
        for change in (lambda: cat.create_database("refused", {}, 0), lambda: cat.drop_topic("tp"),
                       lambda: cat.drop_database("d1"), lambda: cat.create_kafka_topic("k", "kafka_k", {}, {}, 0)):
            refused(faults, op, kind, change)
            assert (cat.databases, cat.stables, cat.topics) == state and path.stat().st_size == size
            assert cat.generation == generation  # a snapshot taken before the refusal is still current
        faults.clear()
        cat.create_database("accepted", {}, 0)  # the disk has room again: service resumes by itself
        assert cat.generation == generation + 1  # any snapshot taken before it is stale
    assert sorted(Catalog.open(path).databases) == sorted(DBS + ["accepted"])


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_ddl_on_a_disk_that_refuses_everything_keeps_nothing(tmp_path: Path, op: str, kind: str):
    path = make(tmp_path)
    e = Engine.open(tmp_path)
    dirs, size = sorted(os.listdir(tmp_path / "db")), path.stat().st_size
    faults = Faults()
    with faults.active():
        faults.fail_kind(op, kind, times=10_000)
        for ddl in ("CREATE DATABASE refused VGROUPS 2", "DROP TOPIC tp"):
            with pytest.raises(StorageUnavailable):
                e.execute(ddl)
        with pytest.raises(StorageUnavailable):
            e.create_kafka_topic("k", 2, {})
        assert "refused" not in e.catalog.databases and "refused" not in e.vnodes and "k" not in e.catalog.topics
        assert "tp" in e.catalog.topics and ("tp", 0) in e.indexes
        assert sorted(os.listdir(tmp_path / "db")) == dirs and path.stat().st_size == size
        faults.clear()
        e.execute("CREATE DATABASE accepted VGROUPS 1")
        e.create_kafka_topic("k", 2, {})
    e.close()
    e = Engine.open(tmp_path)
    assert "accepted" in e.catalog.databases and "tp" in e.catalog.topics and "k" in e.catalog.topics
    assert e.damage() == []
    e.close()


def test_a_torn_tail_the_disk_would_not_cut_back_does_not_swallow_the_next_record(tmp_path: Path):
    path = make(tmp_path)
    cat = Catalog.open(path, DamageLog(tmp_path))
    faults = Faults()
    with faults.active():
        faults.fail("write", short=True)
        faults.fail("ftruncate", error=errno.EIO)
        with pytest.raises(StorageUnavailable):
            cat.create_database("half", {}, 0)
        faults.clear()
        cat.create_database("whole", {}, 0)
    damage = DamageLog(tmp_path)
    again = Catalog.open(path, damage)
    assert "whole" in again.databases and "half" not in again.databases
    assert len(damage.records) == 1  # the half record, now a complete bad line: reported, nothing else lost


def test_partition_limit(tmp_path: Path):
    e = Engine.open(tmp_path, max_partitions=6)
    e.execute("CREATE DATABASE a VGROUPS 3")
    size = (tmp_path / "catalog.log").stat().st_size
    with pytest.raises(LimitExceeded, match="Too many partitions: database b needs 4 more, 3 of at most 6"):
        e.execute("CREATE DATABASE b VGROUPS 4")
    with pytest.raises(LimitExceeded):
        e.create_kafka_topic("k", 4, {})
    e.create_kafka_topic("k", 2, {})
    with pytest.raises(LimitExceeded, match="topic k needs 2 more"):
        e.create_partitions("k", 4)
    e.create_partitions("k", 3)
    with pytest.raises(LimitExceeded):
        e.execute("CREATE DATABASE c VGROUPS 1")
    assert sorted(e.catalog.databases) == ["a", e.catalog.topics["k"].db] and e.partition_count("k") == 3
    assert not list(tmp_path.glob("db/*/vnode3"))
    assert (tmp_path / "catalog.log").stat().st_size > size
    e.close()
    e = Engine.open(tmp_path, max_partitions=1)  # a data dir that was accepted always opens again
    assert e.catalog.partitions() == 6 and e.partition_count("k") == 3
    with pytest.raises(LimitExceeded):
        e.execute("CREATE DATABASE d VGROUPS 1")
    e.close()


def test_a_topic_whose_source_record_was_lost_is_reported_and_the_rest_served(tmp_path: Path):
    path = make(tmp_path)
    data = path.read_bytes()
    line = next(x for x in data.split(b"\n") if b'"create_stable"' in x)
    path.write_bytes(data.replace(line, line.replace(b'"st"', b'"sT"', 1)))  # fails its checksum
    e = Engine.open(tmp_path)
    assert "tp" not in e.catalog.topics and sorted(e.catalog.databases) == DBS
    assert [d.action for d in e.damage()] == ["skipped", "not served"]
    e.close()


def test_topic_names_that_collide_on_dot_and_underscore_are_refused_and_nothing_is_written(tmp_path: Path):
    """Kafka's Topic.hasCollision: 'a.b' beside 'a_b' (either way, Kafka-native or TDengine topic); a name with
    neither character, and the same name (TopicExists), are not collisions."""
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1")
    e.execute("CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (g INT)")
    e.create_kafka_topic("a.b", 1, {})
    size = (tmp_path / "catalog.log").stat().st_size
    with pytest.raises(TopicCollision, match=r"^Topic 'a_b' collides with existing topic: a\.b$"):
        e.create_kafka_topic("a_b", 1, {})
    with pytest.raises(TopicCollision, match="Topic 'a_b' collides with existing topic: a.b"):
        e.execute("CREATE TOPIC a_b AS SELECT ts, v FROM d.m")
    assert (tmp_path / "catalog.log").stat().st_size == size  # nothing written for a refused name
    e.execute("CREATE TOPIC c_d AS SELECT ts, v FROM d.m")
    with pytest.raises(TopicCollision, match="Topic 'c.d' collides with existing topic: c_d"):
        e.create_kafka_topic("c.d", 1, {})
    e.create_kafka_topic("ab", 1, {})
    e.create_kafka_topic("a-b", 1, {})
    assert sorted(e.catalog.topics) == ["a-b", "a.b", "ab", "c_d"]
    e.close()
