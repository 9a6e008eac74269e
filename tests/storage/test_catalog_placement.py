"""Placement as catalog data: in cluster mode each database's record carries the node of each vgroup
(walgate.cluster.placement), kept across restarts and rewrites and extended by CreatePartitions; a single node's
records carry none (every vgroup is the node's own), nor do those of data dirs made before placement existed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from walgate.storage import lines
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound, NotHere
from walgate.storage.lineproto import child_table_name
from walgate.storage.show import Dnode
from walgate.storage.vnode import vnode_of
from walgate.storage.write_plan import SchemaChangeNeeded
from walgate.wire import encode_batch

T = TypeVar("T")


def _records(data_dir: Path) -> list[dict[str, Any]]:
    scan = lines.scan((data_dir / "catalog.log").read_bytes())
    assert not scan.bad
    return [record for _, _, record in scan.records]


def _through_stream(e: Engine, fn: Callable[..., T], *args: Any) -> T:
    """``fn(e, *args)`` as a cluster node runs a Kafka-native topic's DDL: staged, then each record it made applied
    through the one apply path every node takes for the cluster's stream (:meth:`Engine.apply_shared`)."""
    result, records = e.staged(fn, e, *args)
    assert records, "the change went to the stream"
    for record in records:
        assert e.apply_shared(e.catalog.shared_seq + 1, record)
    return result


def _with_op(data_dir: Path, op: str) -> list[dict[str, Any]]:
    return [r for r in _records(data_dir) if r.get("op") == op]


def test_a_cluster_node_records_itself_as_the_node_of_every_new_vgroup(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=3)
    e.cluster_mode()
    _through_stream(e, Engine.execute, "CREATE DATABASE d VGROUPS 2")
    _through_stream(e, Engine.create_kafka_topic, "events", 2, {})
    _through_stream(e, Engine.create_partitions, "events", 4)
    _through_stream(e, Engine.alter_topic_configs, "events", {"retention.ms": "60000"})  # configs alone: the placement stays
    assert [r["nodes"] for r in _with_op(tmp_path, "create_db")] == [[3, 3]]
    assert [r["nodes"] for r in _with_op(tmp_path, "create_kafka_topic")] == [[3, 3]]
    assert [r.get("nodes") for r in _with_op(tmp_path, "alter_kafka_topic")] == [[3, 3, 3, 3], None]
    e.close()
    e = Engine.open(tmp_path)  # replayed: the same placement
    events = e.catalog.databases[e.catalog.topics["events"].db]
    assert e.catalog.databases["d"].nodes == (3, 3) and events.nodes == (3, 3, 3, 3)
    e.catalog.rewrite()  # a rewrite (damage, repair) keeps it
    e.close()
    e = Engine.open(tmp_path)
    assert e.catalog.databases["d"].nodes == (3, 3)
    assert e.catalog.databases[e.catalog.topics["events"].db].nodes == (3, 3, 3, 3)
    e.close()


def test_a_single_node_and_an_old_data_dir_hold_every_vgroup_themselves(tmp_path: Path) -> None:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE old VGROUPS 2")
    e.create_kafka_topic("old_events", 1, {})
    e.create_partitions("old_events", 2)
    assert not any("nodes" in r for r in _records(tmp_path))  # the single node's format is unchanged
    e.close()
    e = Engine.open(tmp_path, node_id=5)  # the same data dir, now a cluster node
    e.cluster_mode()
    old = e.catalog.databases["old"]
    assert old.nodes is None and [old.node_of(i, 5) for i in range(2)] == [5, 5]
    _through_stream(e, Engine.create_partitions, "old_events", 3)  # its new partition is placed, the old ones are this node's
    assert e.catalog.databases[e.catalog.topics["old_events"].db].nodes == (5, 5, 5)
    e.close()


def test_show_vgroups_names_each_vgroups_node_and_whether_it_is_registered(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    e.execute("CREATE DATABASE d VGROUPS 2")
    e.execute("CREATE TABLE d.t (ts TIMESTAMP, v INT)")
    rows = e.execute("SHOW d.VGROUPS").rows
    assert sorted(r[2] for r in rows) == [0, 1] and [r[:2] + r[3:] for r in rows] == [
        [0, "d", 4, "leader"], [1, "d", 4, "leader"]]
    assert e.execute("SHOW VGROUPS", "d").rows == rows
    e.close()
    e = Engine.open(tmp_path, node_id=4)  # an old record (no placement) opened in cluster mode
    e.cluster_mode()
    e.set_dnodes((Dnode(4, "127.0.0.1:9092", "ready"), Dnode(5, "", "offline")))
    _through_stream(e, Engine.create_kafka_topic, "events", 1, {})
    events = e.catalog.topics["events"].db
    assert [r[3:] for r in e.execute(f"SHOW {events}.VGROUPS").rows] == [[4, "leader"]]
    assert [r[3:] for r in e.execute("SHOW d.VGROUPS").rows] == [[4, "leader"], [4, "leader"]]
    with pytest.raises(NotFound, match="Database not exist: nowhere"):
        e.execute("SHOW nowhere.VGROUPS")
    e.close()


def test_show_vgroups_says_offline_for_a_vgroup_placed_on_a_node_not_registered_now(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode()
    _through_stream(e, Engine.execute, "CREATE DATABASE d VGROUPS 2")
    e.close()
    # as the cluster's stream will place them: vgroup 1 on node 5
    records = [{**r, "nodes": [4, 5]} if r.get("op") == "create_db" else r for r in _records(tmp_path)]
    (tmp_path / "catalog.log").write_bytes(b"".join(lines.encode(r) for r in records))
    e = Engine.open(tmp_path, node_id=4)
    e.set_dnodes((Dnode(4, "127.0.0.1:9092", "ready"), Dnode(5, "", "offline")))
    assert [r[3:] for r in e.execute("SHOW d.VGROUPS").rows] == [[4, "leader"], [5, "offline"]]
    e.set_dnodes((Dnode(4, "127.0.0.1:9092", "ready"), Dnode(5, "127.0.0.1:9093", "ready")))
    assert [r[3:] for r in e.execute("SHOW d.VGROUPS").rows] == [[4, "leader"], [5, "leader"]]
    e.close()


def _place(data_dir: Path, op: str, nodes: list[int]) -> None:
    """Rewrite ``data_dir``'s catalog so the records ``op`` place their vgroups on ``nodes`` (as the cluster's
    stream will)."""
    records = [{**r, "nodes": nodes} if r.get("op") == op else r for r in _records(data_dir)]
    (data_dir / "catalog.log").write_bytes(b"".join(lines.encode(r) for r in records))


def _table_in(db: str, vgroup: int, vgroups: int) -> str:
    return next(f"t{i}" for i in range(1000) if vnode_of(db, f"t{i}", vgroups) == vgroup)


def test_a_node_opens_only_the_vnodes_placed_on_it_and_refuses_the_others_naming_their_node(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode()
    _through_stream(e, Engine.execute, "CREATE DATABASE d VGROUPS 2")
    _through_stream(e, Engine.execute, "CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    _through_stream(e, Engine.create_kafka_topic, "events", 2, {})
    e.close()
    _place(tmp_path, "create_db", [4, 5])
    _place(tmp_path, "create_kafka_topic", [5, 4])
    here, there = _table_in("d", 0, 2), _table_in("d", 1, 2)
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode()
    assert [v.index for v in e.vnodes["d"]] == [0]
    assert e.execute(f"INSERT INTO d.{here} USING d.st TAGS (1) VALUES (now, 1)").affected_rows == 1
    elsewhere = "vgroup 1 of database d is on node 5, not on this node \\(4\\)"
    with pytest.raises(NotHere, match=elsewhere) as refused:
        e.execute(f"INSERT INTO d.{there} USING d.st TAGS (2) VALUES (now, 2)")
    assert refused.value.node == 5
    with pytest.raises(NotHere, match=elsewhere):  # one statement over both vgroups: nothing of it is written
        e.execute(f"INSERT INTO d.{here} VALUES (now + 1s, 3) d.{there} USING d.st TAGS (2) VALUES (now, 4)")
    site = next(s for s in range(1000) if vnode_of("d", child_table_name("lp", (("site", str(s)),)), 2) == 1)
    with pytest.raises(SchemaChangeNeeded):  # its new supertable goes through the cluster's stream first: not made here
        e.write_lines("d", f"lp,site={site} v=5i 1700000000000000000".encode())
    assert ("d", "lp") not in e.catalog.stables
    with pytest.raises(NotHere, match=elsewhere):  # never a partial answer
        e.execute("SELECT * FROM d.st")
    with pytest.raises(NotHere, match=elsewhere):
        e.execute("SHOW d.TABLES")
    with pytest.raises(NotHere, match=elsewhere):  # a query reads every vgroup of its database, as today
        e.execute(f"SELECT * FROM d.{here}")
    events = e.catalog.topics["events"]
    assert e.partition_count("events") == 2 and e.has_partition("events", 0)
    batch = encode_batch(0, [1_700_000_000_000], [b"k"], [b"v"], [[]])
    assert e.append_batches("events", 1, [batch]) == 0  # partition 1 is here
    with pytest.raises(NotHere, match=f"vgroup 0 of database {events.db} is on node 5"):
        e.append_batches("events", 0, [batch])
    with pytest.raises(NotHere):
        e.watermarks("events", 0)
    assert e.watermarks("events", 1) == (0, 1)
    _through_stream(e, Engine.create_partitions, "events", 3)  # placed here, beside the two it had
    assert e.catalog.databases[events.db].nodes == (5, 4, 4)
    assert e.append_batches("events", 2, [batch]) == 0
    e.close()
