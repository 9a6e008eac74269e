"""A replica move's vnodes on the nodes it adds and removes (issue 26): the ``place_vgroup`` record applied opens the
vnode empty on a node newly placed (a Kafka-native topic's partition with its offset index, an SQL database's
vgroup); on a node no longer placed, the vnode is listed as moved away and, dropped, closed and its files deleted;
a crash at any step of the delete (walgate.storage.moved_vnodes) is finished by the next start. A Kafka-native
partition's copy started anew at a version (Kafka's ``truncateFullyAndStartAt``: ``Engine.start_vnode_at``) opens
there again, and a crash while its old files are deleted opens it empty."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from walgate.cluster.placement import place_vgroup_record
from walgate.storage.catalog import DB_DEFAULTS
from walgate.storage.engine import Engine
from walgate.storage.errors import Unsupported
from walgate.storage.moved_vnodes import DELETED
from walgate.storage.names import new_db_id


def _node(data_dir: Path, node_id: int) -> Engine:
    e = Engine.open(data_dir, node_id=node_id)
    e.cluster_mode(True)
    return e


def _apply(e: Engine, record: dict[str, object]) -> None:
    assert e.apply_shared(e.catalog.shared_seq + 1, record)


def _made(e: Engine, topic_db_id: str, sql_db_id: str) -> None:
    """A Kafka-native topic ``t`` (two partitions on nodes 1, 2) and an SQL database ``s`` (one vgroup on 1, 2)."""
    _apply(e, {"op": "create_kafka_topic", "name": "t", "db": "kafka_t", "db_id": topic_db_id,
               "topic_id": str(uuid.uuid4()), "options": {**DB_DEFAULTS, "VGROUPS": 2}, "configs": {},
               "created_ms": 0, "nodes": [1, 2], "replicas": [[1, 2], [2, 1]]})
    _apply(e, {"op": "create_db", "name": "s", "id": sql_db_id, "options": {**DB_DEFAULTS, "VGROUPS": 1},
               "created_ms": 0, "nodes": [1], "replicas": [[1, 2]]})


def test_a_node_newly_placed_opens_the_vnodes_empty_and_a_node_moved_away_deletes_them(tmp_path: Path) -> None:
    topic_db, sql_db = new_db_id(), new_db_id()
    one, three = _node(tmp_path / "n1", 1), _node(tmp_path / "n3", 3)
    for e in (one, three):
        _made(e, topic_db, sql_db)
    assert (three.vnodes["kafka_t"], three.vnodes["s"]) == ([], [])
    for e in (one, three):  # a move begun: the union, the target first
        _apply(e, place_vgroup_record(topic_db, 0, [2, 3, 1]))
        _apply(e, place_vgroup_record(sql_db, 0, [2, 3, 1]))
    assert [v.index for v in three.vnodes["kafka_t"]] == [0] and [v.index for v in three.vnodes["s"]] == [0]
    added = three.vnodes["kafka_t"][0]
    assert (added.wal.first_version, added.wal.next_version) == (0, 0)
    assert ("t", 0) in three.store.indexes and ("t", 1) not in three.store.indexes
    assert one.moved_away() == []
    for e in (one, three):  # completed: node 1 no longer holds the vgroups
        _apply(e, place_vgroup_record(topic_db, 0, [2, 3]))
        _apply(e, place_vgroup_record(sql_db, 0, [2, 3]))
    assert three.moved_away() == []
    assert sorted(one.moved_away()) == [("kafka_t", topic_db, 0), ("s", sql_db, 0)]
    gone = [v.dir for v in (*one.vnodes["kafka_t"][:1], *one.vnodes["s"])]
    assert one.drop_moved_vnode("kafka_t", 0) and one.drop_moved_vnode("s", 0)
    assert not one.drop_moved_vnode("kafka_t", 1)  # still placed here
    assert [v.index for v in one.vnodes["kafka_t"]] == [1] and one.vnodes["s"] == []
    assert ("t", 0) not in one.store.indexes and ("t", 1) in one.store.indexes
    assert not any(d.exists() or d.with_name(d.name + DELETED).exists() for d in gone)
    one.close()
    three.close()
    one = _node(tmp_path / "n1", 1)  # a restart opens what the catalog places here
    assert [v.index for v in one.vnodes["kafka_t"]] == [1] and one.vnodes["s"] == []
    assert one.damage_log.records == []
    one.close()


@pytest.mark.parametrize("crash", ["before the rename", "after the rename", "during the removal"])
def test_a_crash_at_any_step_of_the_delete_is_finished_by_the_next_start(tmp_path: Path, crash: str) -> None:
    """The record applied (durable), then a kill -9 before the vnode directory's rename, after it, or while the
    renamed directory was being removed: the next start deletes what is left, opens the rest, reports no damage."""
    topic_db, sql_db = new_db_id(), new_db_id()
    e = _node(tmp_path, 1)
    _made(e, topic_db, sql_db)
    _apply(e, place_vgroup_record(topic_db, 0, [2, 3]))
    vnode_dir = next(v.dir for v in e.vnodes["kafka_t"] if v.index == 0)
    e.close()  # (the crash: nothing after the record was done)
    renamed = vnode_dir.with_name(vnode_dir.name + DELETED)
    if crash != "before the rename":
        vnode_dir.rename(renamed)
    if crash == "during the removal":
        for f in sorted(p for p in renamed.rglob("*") if p.is_file())[::2]:
            f.unlink()
    e = _node(tmp_path, 1)
    assert not vnode_dir.exists() and not renamed.exists()
    assert [v.index for v in e.vnodes["kafka_t"]] == [1] and [v.index for v in e.vnodes["s"]] == [0]
    assert e.moved_away() == []
    assert e.damage_log.records == []
    e.close()


def test_a_copy_started_at_the_leaders_log_start_holds_nothing_below_it_and_reopens_there(tmp_path: Path) -> None:
    """Kafka's ``truncateFullyAndStartAt`` (:meth:`Engine.start_vnode_at`): a Kafka-native partition's copy emptied
    and started at version 7 (its offset index and producer state anew, no epoch); a restart opens it there. An SQL
    vgroup's copy is refused (Unsupported) and a copy reaching the version too (ValueError), nothing changed."""
    topic_db, sql_db = new_db_id(), new_db_id()
    e = _node(tmp_path, 1)
    _made(e, topic_db, sql_db)
    old = next(v for v in e.vnodes["kafka_t"] if v.index == 0)
    new = e.start_vnode_at("kafka_t", 0, 7)
    assert new is not old and [v.index for v in e.vnodes["kafka_t"]] == [0, 1]
    assert (new.wal.first_version, new.wal.next_version, new.epochs.entries) == (7, 7, ())
    assert e.store.indexes[("t", 0)].end_offset == 0 and e.native.active_producers("t", 0) == []
    with pytest.raises(Unsupported):
        e.start_vnode_at("s", 0, 7)
    with pytest.raises(ValueError):
        e.start_vnode_at("kafka_t", 0, 7)
    e.close()
    e = _node(tmp_path, 1)
    reopened = next(v for v in e.vnodes["kafka_t"] if v.index == 0)
    assert (reopened.wal.first_version, reopened.wal.next_version) == (7, 7)
    assert e.damage_log.records == []
    e.close()


@pytest.mark.parametrize("crash", ["after the rename", "during the removal"])
def test_a_crash_while_a_copy_is_started_anew_opens_it_empty(tmp_path: Path, crash: str) -> None:
    """A kill -9 after the old copy's rename, or while it was being removed: the next start deletes what is left and
    opens the vnode (placed here) empty from version 0, which its fetcher then starts anew again; no damage."""
    topic_db, sql_db = new_db_id(), new_db_id()
    e = _node(tmp_path, 1)
    _made(e, topic_db, sql_db)
    vnode_dir = next(v.dir for v in e.vnodes["kafka_t"] if v.index == 0)
    e.close()  # (the crash: the copy closed, then)
    renamed = vnode_dir.with_name(vnode_dir.name + DELETED)
    vnode_dir.rename(renamed)
    if crash == "during the removal":
        for f in sorted(p for p in renamed.rglob("*") if p.is_file())[::2]:
            f.unlink()
    e = _node(tmp_path, 1)
    assert not renamed.exists()
    copy = next(v for v in e.vnodes["kafka_t"] if v.index == 0)
    assert (copy.wal.first_version, copy.wal.next_version) == (0, 0)
    assert e.start_vnode_at("kafka_t", 0, 7).wal.first_version == 7
    assert e.damage_log.records == []
    e.close()
