"""Committed consumer-group offsets in the coordinator log (walgate/storage/coordinator_log.py, once each vnode's
commits.log): durable, compacted while running, torn tails dropped, damage skipped line by line, and never lost or
rewound by a disk that refuses a write (issue 13, item 5)."""

from __future__ import annotations

import errno
import os

import pytest
from faults import WRITE_FAULTS, Faults, refused

from walgate.storage import coordinator_log, lines
from walgate.storage.coordinator_log import COMPACT_FLOOR, Committed, CoordinatorLog
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound, StorageUnavailable


def test_commit_get_delete_and_reopen(tmp_path):
    path = tmp_path / "offsets.jsonl"
    store = CoordinatorLog.open(path)
    store.commit("g1", [("t", 0, Committed(5, 0, "meta", 1000)), ("t", 1, Committed(7, -1, None, 1000))])
    store.commit("g2", [("t", 0, Committed(1, 0, "", 1001))])
    store.commit("g1", [("t", 0, Committed(6, 0, "later", 1002))])
    assert store.get("g1", "t", 0) == Committed(6, 0, "later", 1002)
    assert store.delete(group="g2") == 1
    again = CoordinatorLog.open(path)
    assert again.get("g1", "t", 0) == Committed(6, 0, "later", 1002)
    assert again.get("g1", "t", 1) == Committed(7, -1, None, 1000)
    assert again.get("g2", "t", 0) is None
    assert sorted(k for k, _ in again.items()) == [("g1", "t", 0), ("g1", "t", 1)]


def test_torn_last_line_is_dropped_and_log_compacts(tmp_path):
    path = tmp_path / "offsets.jsonl"
    store = CoordinatorLog.open(path)
    for i in range(10):
        store.commit("g", [("t", 0, Committed(i, 0, None, i))])
    with open(path, "ab") as f:
        f.write(lines.encode({"g": "g", "t": "t", "p": 0, "o": 99, "e": 0, "m": None, "ts": 99})[:30])  # a crash
    damage = DamageLog(tmp_path)
    again = CoordinatorLog.open(path, damage)
    assert damage.records == []
    assert again.get("g", "t", 0) == Committed(9, 0, None, 9)
    assert path.read_bytes().count(b"\n") == 1  # 10 superseded lines compacted to the live one


def test_engine_commits_per_partition_and_forgets_dropped_topics(tmp_path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 2")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (s INT)")
    e.execute("CREATE TOPIC tp AS STABLE db.st")
    errors = e.commit_offsets("g", [("tp", 0, 3, 0, "m"), ("tp", 1, 4, 0, None), ("tp", 2, 1, 0, None), ("nope", 0, 1, 0, None)], 5)
    assert errors[:2] == [None, None] and all(isinstance(x, NotFound) for x in errors[2:])
    e.close()
    e = Engine.open(tmp_path)
    assert e.committed("g", "tp", 0) == Committed(3, 0, "m", 5)
    assert e.committed("g", "tp", 1).offset == 4
    assert [(g, t, p) for g, t, p, _ in sorted(e.all_committed(), key=lambda x: x[2])] == [("g", "tp", 0), ("g", "tp", 1)]
    e.execute("DROP TOPIC tp")
    assert list(e.all_committed()) == []
    e.close()


def test_commit_is_fsynced_before_returning(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    store = CoordinatorLog.open(tmp_path / "o.jsonl")
    store.commit("g", [("t", 0, Committed(1, 0, None, 0))])
    assert synced, "commit returned without fsync"


class Members:
    """A ConsumersView over a list the test fills (the gateway's is the group coordinator)."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    def consumers(self) -> list:
        return list(self.rows)


def test_show_subscriptions_and_consumers(tmp_path):
    from walgate.storage.engine import ConsumerRow

    members: list[ConsumerRow] = []
    e = Engine.open(tmp_path, consumers=Members(members))
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (s INT)")
    e.execute("CREATE TOPIC tp AS SELECT ts, v FROM db.st WHERE v > 0")
    e.execute("INSERT INTO db.a USING db.st TAGS (1) VALUES (1, 5) (2, 0) (3, 6) (4, 7)")  # versions 1..4, v=0 filtered
    e.commit_offsets("g", [("tp", 0, 1, 0, None)], 10)
    members.append(ConsumerRow("g", "m-1", "cli", "127.0.0.1", "ready", {"tp": (0,)}, 1000))
    subs = e.execute("SHOW SUBSCRIPTIONS")
    assert subs.rows == [["tp", "g", 0, "m-1", 1, 3, 2]]  # offset 1 = the row at version 3; 3 records - 1 = lag 2
    consumers = e.execute("SHOW CONSUMERS").rows
    assert consumers == [["m-1", "g", "cli", "127.0.0.1", "ready", "tp", "tp:0", "1970-01-01T00:00:01.000Z"]]
    e.close()


def test_drop_consumer_group_forgets_its_progress_on_a_topic(tmp_path):
    from walgate.storage.engine import ConsumerRow
    from walgate.storage.errors import InvalidValue

    members: list[ConsumerRow] = []
    e = Engine.open(tmp_path, consumers=Members(members))
    e.execute("CREATE DATABASE db VGROUPS 2")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (s INT)")
    e.execute("CREATE TOPIC t1 AS STABLE db.st")
    e.execute("CREATE TOPIC t2 AS STABLE db.st")
    e.commit_offsets("spark-1.x", [("t1", 0, 1, 0, None), ("t1", 1, 1, 0, None), ("t2", 0, 5, 0, None)], 1)
    e.execute("DROP CONSUMER GROUP 'spark-1.x' ON t1")
    assert [(t, p) for g, t, p, _ in e.all_committed()] == [("t2", 0)]
    with pytest.raises(NotFound):
        e.execute("DROP CONSUMER GROUP `spark-1.x` ON t1")
    e.execute("DROP CONSUMER GROUP IF EXISTS `spark-1.x` ON t1")
    members.append(ConsumerRow("spark-1.x", "m", "c", "h", "ready", {}, 0))
    with pytest.raises(InvalidValue, match="active members"):
        e.execute("DROP CONSUMER GROUP `spark-1.x` ON t2")
    e.close()


# ------------------------------------------------------- issue 13, item 5: a full disk never loses a commit

@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_fault_at_any_commit_never_loses_or_rewinds_an_acknowledged_commit(tmp_path, op, kind):
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path)
    acked: dict[tuple[str, int], int] = {}
    faults = Faults()
    with faults.active():
        for i in range(60):
            key = ("t", i % 3)
            if i % 4 == 1:  # every 4th commit meets a full disk
                refused(faults, op, kind,
                        lambda: store.commit("g", [(key[0], key[1], Committed(1000 + i, 0, None, i))]))
            else:
                store.commit("g", [(key[0], key[1], Committed(1000 + i, 0, None, i))])
                acked[key] = 1000 + i
            assert {k[1:]: c.offset for k, c in store.items()} == acked  # nothing refused is visible
    damage = DamageLog(tmp_path)
    again = CoordinatorLog.open(path, damage)
    assert {k[1:]: c.offset for k, c in again.items()} == acked and damage.records == []


def test_a_torn_line_left_in_the_middle_does_not_drop_the_commits_after_it(tmp_path):
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path)
    store.commit("g", [("t", 0, Committed(10, 0, None, 0))])
    faults = Faults()
    with faults.active():
        faults.fail("write", short=True)  # half a line written ...
        faults.fail("ftruncate", error=errno.EIO)  # ... and the disk would not cut it back
        with pytest.raises(StorageUnavailable):
            store.commit("g", [("t", 0, Committed(11, 0, None, 1))])
        faults.clear()
        for o in range(12, 40):
            store.commit("g", [("t", 0, Committed(o, 0, None, o))])
    damage = DamageLog(tmp_path)
    again = CoordinatorLog.open(path, damage)
    assert again.get("g", "t", 0).offset == 39  # 20,450 -> 2,850 was this bug
    assert [d.reason for d in damage.records] == ["coordinator log: checksum mismatch" + CoordinatorLog.CONSEQUENCE]  # the half line, kept aside


def test_a_corrupt_line_in_the_middle_costs_that_line_only(tmp_path):
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path)
    for p in range(10):
        store.commit("g", [("t", p, Committed(p, 0, None, 0))])
    data = bytearray(path.read_bytes())
    data[data.index(b'"p":3') + 3] ^= 0x01
    path.write_bytes(bytes(data))
    damage = DamageLog(tmp_path)
    again = CoordinatorLog.open(path, damage)
    assert sorted(k[2] for k, _ in again.items()) == [p for p in range(10) if p != 3]
    assert len(damage.records) == 1 and damage.records[0].kept
    assert CoordinatorLog.open(path, DamageLog(tmp_path)).get("g", "t", 9).offset == 9  # rewritten clean


def test_a_flipped_last_newline_keeps_the_last_commit(tmp_path):
    """The sweep: the last commit silently went back (the line looked like a torn tail)."""
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path)
    for o in range(3):
        store.commit("g", [("t", 0, Committed(o, 0, None, o))])
    data = path.read_bytes()
    for bit in range(8):
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1 << bit]))
        damage = DamageLog(tmp_path)
        assert CoordinatorLog.open(path, damage).get("g", "t", 0).offset == 2
        [record] = damage.records
        assert record.end == len(data) and record.action == "newline restored" and record.kept
        again = DamageLog(tmp_path)
        assert CoordinatorLog.open(path, again).get("g", "t", 0).offset == 2 and again.records == []


@pytest.mark.parametrize("how", ["zero-filled", "zero-filled tail"])
def test_zeros_are_reported_and_kept_never_taken_for_a_torn_line(tmp_path, how):
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path)
    for p in range(3):
        store.commit("g", [("t", p, Committed(p, 0, None, 0))])
    data = path.read_bytes()
    bad = bytes(len(data)) if how == "zero-filled" else data + bytes(512)
    path.write_bytes(bad)
    damage = DamageLog(tmp_path)
    again = CoordinatorLog.open(path, damage)
    assert len(list(again.items())) == (0 if how == "zero-filled" else 3)
    [record] = damage.records
    assert "zero bytes" in record.reason and (tmp_path / record.kept).read_bytes() == bad[record.start :]


def test_the_log_is_compacted_while_running(tmp_path, monkeypatch):
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path)
    n = 3 * COMPACT_FLOOR
    for i in range(n):
        store.commit("g", [("t", i % 2, Committed(i, 0, None, i))])
        if i % 100 == 0:
            assert path.read_bytes().count(b"\n") <= COMPACT_FLOOR + 3
    monkeypatch.setattr(coordinator_log, "COMPACT_FLOOR", 5)
    faults = Faults()
    with faults.active():  # a compaction the disk refuses loses nothing: the commit itself was durable
        faults.fail("replace", error=errno.ENOSPC, times=1000)
        for i in range(n, n + 50):
            store.commit("g", [("t", 0, Committed(i, 0, None, i))])
        assert faults.injected >= 40 and path.read_bytes().count(b"\n") >= 50
        faults.clear()
        store.commit("g", [("t", 1, Committed(7, 0, None, 0))])
    assert path.read_bytes().count(b"\n") == 2
    again = CoordinatorLog.open(path)
    assert again.get("g", "t", 0).offset == n + 49 and again.get("g", "t", 1).offset == 7


def test_offsets_and_group_records_share_one_log_and_survive_its_compaction(tmp_path, monkeypatch):
    """One record stream, one replay: both kinds are kept by the rewrite that compacts the log."""
    monkeypatch.setattr(coordinator_log, "COMPACT_FLOOR", 5)
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path)
    for i in range(20):
        store.commit("g", [("t", i % 2, Committed(i, 0, None, i))])
        store.write_groups([("g", {"generation": i}), ("h", {"generation": -i})])
    store.write_groups([("h", None)])
    assert path.read_bytes().count(b"\n") < 20  # compacted while running
    again = CoordinatorLog.open(path, DamageLog(tmp_path))
    assert {k: c.offset for k, c in again.items()} == {("g", "t", 0): 18, ("g", "t", 1): 19}
    assert again.groups() == {"g": {"generation": 19}}
    assert again.get("g", "t", 1) == Committed(19, 0, None, 19) and again.get("h", "t", 0) is None


def test_deleting_a_kafka_native_topic_drops_its_offsets_in_every_coordinator_partition(tmp_path):
    """DeleteTopics as today: the topic's committed offsets go with it (in every group's partition), other topics'
    stay, and a topic created again under the name starts with none."""
    e = Engine.open(tmp_path, coordinator_partitions=4)
    e.create_kafka_topic("orders", 2, {})
    e.create_kafka_topic("other", 1, {})
    groups = [f"g{i}" for i in range(8)]
    for g in groups:
        assert e.commit_offsets(g, [("orders", 0, 5, 0, None), ("orders", 1, 6, 0, None), ("other", 0, 7, 0, None)],
                                1) == [None] * 3
    assert len({e.store.coordinator.logs.index(e.store.coordinator.of(g)) for g in groups}) > 1
    e.drop_topic("orders")
    assert sorted((g, t) for g, t, _, _ in e.all_committed()) == [(g, "other") for g in groups]
    e.create_kafka_topic("orders", 2, {})
    e.close()
    e = Engine.open(tmp_path)
    assert e.committed("g0", "orders", 0) is None and e.committed("g0", "other", 0).offset == 7
    e.close()


@pytest.mark.parametrize("create", ["kafka", "sql"])
def test_a_topic_created_after_a_refused_offsets_deletion_never_starts_with_its_namesakes_offsets(tmp_path, create):
    """The disk refuses the deletion of a dropped topic's offsets (the drop itself is recorded): a topic created
    under the name deletes them first, or is refused while the disk still refuses; other topics' offsets stay."""
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d")
    e.execute("CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (k INT)")
    make = ((lambda: e.create_kafka_topic("t", 1, {})) if create == "kafka"
            else (lambda: e.execute("CREATE TOPIC t AS STABLE d.m")))
    make()
    e.create_kafka_topic("other", 1, {})
    assert e.commit_offsets("g", [("t", 0, 5, 0, None), ("other", 0, 7, 0, None)], 1) == [None, None]
    faults = Faults()
    with faults.active():
        faults.fail("write", at=2)  # the catalog's drop record is written; the offsets' deletion is refused
        e.drop_topic("t")
        assert faults.injected == 1 and "t" not in e.catalog.topics
        assert sorted(t for _, t, _, _ in e.all_committed()) == ["other", "t"]  # left behind
        faults.fail("write", times=1000)  # the disk is full: the re-creation cannot delete them, so it is refused
        with pytest.raises(StorageUnavailable):
            make()
        faults.clear()
    assert "t" not in e.catalog.topics
    make()
    assert e.committed("g", "t", 0) is None and e.committed("g", "other", 0).offset == 7
    e.close()
    e = Engine.open(tmp_path)
    assert sorted(t for _, t, _, _ in e.all_committed()) == ["other"]
    e.close()
