"""A single node's catalog taken into a cluster (walgate.gateway.single_node_upgrade): what it names, the snapshot it
becomes (nothing changed by making it), and taking it (every database placed on the node, one replica per vgroup,
the sequence number recorded, durable, or nothing changed when the disk refuses)."""

from __future__ import annotations

from pathlib import Path

import pytest
from faults import WRITE_FAULTS, Faults, refused

from walgate.storage.catalog import Catalog
from walgate.storage.engine import Engine


def single_node(tmp_path: Path) -> Engine:
    e = Engine.open(tmp_path / "single", node_id=7)
    e.execute("CREATE DATABASE power VGROUPS 2")
    e.execute("CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (t INT)")
    e.execute("CREATE TOPIC tm AS SELECT ts, v FROM power.meters")
    e.create_kafka_topic("orders", 3, {})
    e.execute("CREATE USER alice PASS 'wonderland'")
    return e


def test_a_new_or_cluster_data_dir_names_nothing_a_single_nodes_names_what_it_holds(tmp_path: Path) -> None:
    assert Catalog.open(tmp_path / "new.log").single_node_objects() == []
    e = single_node(tmp_path)
    assert e.catalog.single_node_objects() == ["database power", "topic tm", "topic orders", "users: 1"]
    e.catalog.take_into_cluster(1)
    assert e.catalog.single_node_objects() == [], "a cluster node's data dir"
    e.close()


def test_the_snapshot_it_becomes_places_every_database_on_the_node_and_changes_nothing(tmp_path: Path) -> None:
    e = single_node(tmp_path)
    file = tmp_path / "single" / "catalog.log"
    before = file.read_bytes()
    records = e.catalog.taken_into_cluster()
    [db] = [r for r in records if r["op"] == "create_db"]
    assert db["name"] == "power" and db["replicas"] == [[7], [7]] and db["nodes"] == [7, 7]
    [topic] = [r for r in records if r["op"] == "create_kafka_topic"]
    assert topic["name"] == "orders" and topic["replicas"] == [[7]] * 3
    assert {r["op"] for r in records} >= {"create_db", "create_stable", "create_topic", "create_kafka_topic", "put_user"}
    assert e.catalog.databases["power"].replicas is None and not e.catalog.cluster and file.read_bytes() == before
    other = Catalog.open(tmp_path / "other.log")  # another node reads it as any snapshot
    other.cluster = True
    other.restore_shared(1, records)
    assert other.databases["power"].replicas == ((7,), (7,)) and "tm" in other.topics and "alice" in other.users
    e.catalog.take_into_cluster(1)
    e.catalog.cluster = True
    assert e.catalog.shared_records() == other.shared_records(), "the node holds what the others read"
    e.close()


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_taking_it_is_durable_or_changes_nothing(tmp_path: Path, op: str, kind: str) -> None:
    e = single_node(tmp_path)
    file = tmp_path / "single" / "catalog.log"
    before = file.read_bytes()
    faults = Faults()
    with faults.active():
        refused(faults, op, kind, lambda: e.catalog.take_into_cluster(1))
    assert e.catalog.shared_seq == 0 and e.catalog.databases["power"].replicas is None
    assert file.read_bytes() == before
    e.catalog.take_into_cluster(1)
    e.close()
    again = Engine.open(tmp_path / "single", node_id=7)
    assert again.catalog.shared_seq == 1 and again.catalog.databases["power"].replicas == ((7,), (7,))
    assert again.catalog.single_node_objects() == []
    again.close()
