"""Committed consumer-group offsets: durable, per vnode, compacted, torn tails dropped."""

from __future__ import annotations

import os

import pytest

from walgate.storage.committed import Committed, CommittedOffsets
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound


def test_commit_get_delete_and_reopen(tmp_path):
    path = tmp_path / "offsets.jsonl"
    store = CommittedOffsets.open(path)
    store.commit("g1", [("t", 0, Committed(5, 0, "meta", 1000)), ("t", 1, Committed(7, -1, None, 1000))])
    store.commit("g2", [("t", 0, Committed(1, 0, "", 1001))])
    store.commit("g1", [("t", 0, Committed(6, 0, "later", 1002))])
    assert store.get("g1", "t", 0) == Committed(6, 0, "later", 1002)
    assert store.delete(group="g2") == 1
    again = CommittedOffsets.open(path)
    assert again.get("g1", "t", 0) == Committed(6, 0, "later", 1002)
    assert again.get("g1", "t", 1) == Committed(7, -1, None, 1000)
    assert again.get("g2", "t", 0) is None
    assert sorted(k for k, _ in again.items()) == [("g1", "t", 0), ("g1", "t", 1)]


def test_torn_last_line_is_dropped_and_log_compacts(tmp_path):
    path = tmp_path / "offsets.jsonl"
    store = CommittedOffsets.open(path)
    for i in range(10):
        store.commit("g", [("t", 0, Committed(i, 0, None, i))])
    with open(path, "ab") as f:
        f.write(b'{"g":"g","t":"t","p":0,"o":99')  # a crash in the middle of a line
    again = CommittedOffsets.open(path)
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
    store = CommittedOffsets.open(tmp_path / "o.jsonl")
    store.commit("g", [("t", 0, Committed(1, 0, None, 0))])
    assert synced, "commit returned without fsync"


def test_show_subscriptions_and_consumers(tmp_path):
    from walgate.storage.engine import ConsumerRow

    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (s INT)")
    e.execute("CREATE TOPIC tp AS SELECT ts, v FROM db.st WHERE v > 0")
    e.execute("INSERT INTO db.a USING db.st TAGS (1) VALUES (1, 5) (2, 0) (3, 6) (4, 7)")  # versions 1..4, v=0 filtered
    e.commit_offsets("g", [("tp", 0, 1, 0, None)], 10)
    e.consumers_view = lambda: [ConsumerRow("g", "m-1", "cli", "127.0.0.1", "ready", {"tp": (0,)}, 1000)]
    subs = e.execute("SHOW SUBSCRIPTIONS")
    assert subs.rows == [["tp", "g", 0, "m-1", 1, 3, 2]]  # offset 1 = the row at version 3; 3 records - 1 = lag 2
    consumers = e.execute("SHOW CONSUMERS").rows
    assert consumers == [["m-1", "g", "cli", "127.0.0.1", "ready", "tp", "tp:0", "1970-01-01T00:00:01.000Z"]]
    e.close()


def test_drop_consumer_group_forgets_its_progress_on_a_topic(tmp_path):
    from walgate.storage.engine import ConsumerRow
    from walgate.storage.errors import InvalidValue

    e = Engine.open(tmp_path)
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
    e.consumers_view = lambda: [ConsumerRow("spark-1.x", "m", "c", "h", "ready", {}, 0)]
    with pytest.raises(InvalidValue, match="active members"):
        e.execute("DROP CONSUMER GROUP `spark-1.x` ON t2")
    e.close()
