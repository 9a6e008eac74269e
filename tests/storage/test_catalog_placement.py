"""Placement as catalog data: in cluster mode each database's record carries the node of each vgroup
(walgate.cluster.placement), kept across restarts and rewrites and extended by CreatePartitions; a single node's
records carry none (every vgroup is the node's own), nor do those of data dirs made before placement existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from walgate.storage import lines
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound
from walgate.storage.show import Dnode


def _records(data_dir: Path) -> list[dict[str, Any]]:
    scan = lines.scan((data_dir / "catalog.log").read_bytes())
    assert not scan.bad
    return [record for _, _, record in scan.records]


def _with_op(data_dir: Path, op: str) -> list[dict[str, Any]]:
    return [r for r in _records(data_dir) if r.get("op") == op]


def test_a_cluster_node_records_itself_as_the_node_of_every_new_vgroup(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=3)
    e.cluster_mode()
    e.execute("CREATE DATABASE d VGROUPS 2")
    e.create_kafka_topic("events", 2, {})
    e.create_partitions("events", 4)
    e.alter_topic_configs("events", {"retention.ms": "60000"})  # configs alone: the placement stays
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
    e.create_partitions("old_events", 3)  # its new partition is placed, the old ones are this node's
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
    e.create_kafka_topic("events", 1, {})
    events = e.catalog.topics["events"].db
    assert [r[3:] for r in e.execute(f"SHOW {events}.VGROUPS").rows] == [[4, "leader"]]
    assert [r[3:] for r in e.execute("SHOW d.VGROUPS").rows] == [[4, "leader"], [4, "leader"]]
    with pytest.raises(NotFound, match="Database not exist: nowhere"):
        e.execute("SHOW nowhere.VGROUPS")
    e.close()


def test_show_vgroups_says_offline_for_a_vgroup_placed_on_a_node_not_registered_now(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode()
    e.execute("CREATE DATABASE d VGROUPS 2")
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
