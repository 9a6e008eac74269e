"""Placement as catalog data: in cluster mode each database's record carries the node of each vgroup
(walgate.cluster.placement), kept across restarts and rewrites and extended by CreatePartitions; a single node's
records carry none (every vgroup is the node's own), nor do those of data dirs made before placement existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from walgate.storage import lines
from walgate.storage.engine import Engine


def _records(data_dir: Path) -> list[dict[str, Any]]:
    scan = lines.scan((data_dir / "catalog.log").read_bytes())
    assert not scan.bad
    return [record for _, _, record in scan.records]


def _with_op(data_dir: Path, op: str) -> list[dict[str, Any]]:
    return [r for r in _records(data_dir) if r.get("op") == op]


def test_a_cluster_node_records_itself_as_the_node_of_every_new_vgroup(tmp_path: Path) -> None:
    e = Engine.open(tmp_path)
    e.cluster_mode(3)
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
    e = Engine.open(tmp_path)  # the same data dir, now a cluster node
    e.cluster_mode(5)
    old = e.catalog.databases["old"]
    assert old.nodes is None and [old.node_of(i, 5) for i in range(2)] == [5, 5]
    e.create_partitions("old_events", 3)  # its new partition is placed, the old ones are this node's
    assert e.catalog.databases[e.catalog.topics["old_events"].db].nodes == (5, 5, 5)
    e.close()
