"""Placement as catalog data: in cluster mode each database's record carries the replicas of each vgroup
(walgate.cluster.placement; ``replicas``, and ``nodes``, their first, for a release before replicas), kept across
restarts and rewrites and extended by CreatePartitions; a record with ``nodes`` alone (written before replicas)
reads as one replica each; a single node's records carry none (every vgroup is the node's own), nor do those of data
dirs made before placement existed. SQL ``REPLICA`` is checked against the live nodes (above 1 in cluster mode only)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walgate.cluster.partition_codec import PartitionId, ReplicatedVnode
from walgate.replication.partition import initial_state
from walgate.storage import lines
from walgate.storage.catalog import DB_DEFAULTS, Catalog
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, NotFound, NotHere
from walgate.storage.lineproto import child_table_name
from walgate.storage.names import new_db_id
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
    records = [_old_format(r, [4, 5]) if r.get("op") == "create_db" else r for r in _records(tmp_path)]
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
    records = [_old_format(r, nodes) if r.get("op") == op else r for r in _records(data_dir)]
    (data_dir / "catalog.log").write_bytes(b"".join(lines.encode(r) for r in records))


def _old_format(record: dict[str, Any], nodes: list[int]) -> dict[str, Any]:
    """``record`` placing its vgroups on ``nodes`` as a record written before replicas did: ``nodes`` alone."""
    return {**{k: v for k, v in record.items() if k != "replicas"}, "nodes": nodes}


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


def _three_racks(e: Engine) -> None:
    e.set_dnodes(tuple(Dnode(n, f"127.0.0.1:{9090 + n}", "ready") for n in (4, 5, 6)), {4: "a", 5: "b", 6: "c"})


def test_replicas_are_placed_recorded_and_read_back(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode()
    _three_racks(e)
    db = e.catalog.new_database("r", {"VGROUPS": 3, "REPLICA": 3}, 0)  # below the serving path's check
    _through_stream(e, lambda e: e.catalog.add_database(db))
    configs = {"min.insync.replicas": "3", "unclean.leader.election.enable": "true"}
    topic_db, topic = e.catalog.new_kafka_topic("events", "kafka_events", {"VGROUPS": 2}, configs, 0,
                                                replication_factor=2)
    _through_stream(e, lambda e: e.catalog.add_kafka_topic(topic_db, topic))
    grown = e.catalog.grown(e.catalog.databases["kafka_events"], 3)  # as many replicas as its others
    _through_stream(e, lambda e: e.catalog.alter_kafka_topic("events", grown.options, configs, grown.replicas))
    _through_stream(e, Engine.execute, "CREATE DATABASE single VGROUPS 2")  # one replica: no partition state
    vnodes = e.catalog.replicated_vnodes()  # what the controller creates partition states of
    r, events = e.catalog.databases["r"], e.catalog.databases["kafka_events"]
    assert vnodes == {**{PartitionId(r.id, v): ReplicatedVnode(r.replicas_of(v, 4), 2) for v in range(3)},
                      **{PartitionId(events.id, v): ReplicatedVnode(events.replicas_of(v, 4), 2, True)
                         for v in range(3)}}  # min.insync.replicas 3: at most the topic's 2 replicas
    created = _with_op(tmp_path, "create_db")[0]
    assert all(sorted(r) == [4, 5, 6] for r in created["replicas"])
    assert created["nodes"] == [r[0] for r in created["replicas"]]  # what a release before replicas reads
    assert sorted(created["nodes"]) == [4, 5, 6]  # each node the preferred leader of one
    assert created["options"]["MIN_INSYNC"] == 2  # the majority of 3
    e.close()
    for _ in range(2):  # replayed, then rewritten (damage, repair) and replayed: the same replicas
        e = Engine.open(tmp_path, node_id=4)
        r, events = e.catalog.databases["r"], e.catalog.databases["kafka_events"]
        assert r.replicas == tuple(tuple(v) for v in created["replicas"]) and r.replication_factor == 3
        assert events.replication_factor == 2 and len(events.replicas or ()) == 3
        assert all(len(set(v)) == 2 for v in events.replicas or ())
        e.catalog.rewrite()
        e.close()
    e = Engine.open(tmp_path, node_id=4)
    _three_racks(e)
    assert [[d[2], d[-1]] for d in e.execute("SHOW DATABASES").rows if d[0] == "r"] == [[3, 3]]  # vgroups, replica
    shown = e.execute("SHOW r.VGROUPS")
    assert [c[0] for c in shown.columns][3:] == ["v1_dnode", "v1_status", "v2_dnode", "v2_status", "v3_dnode",
                                                  "v3_status"]
    assert [row[3:] for row in shown.rows] == [[x for k, n in enumerate(v) for x in (n, "follower" if k else "leader")]
                                               for v in created["replicas"]]
    r = e.catalog.databases["r"]  # the partition states the replica manager read: vgroup 0 failed over to its
    states = {(r.id, 0): r.replicas_of(0, 4)[2], (r.id, 1): -1}  # third replica, 1 has no leader, 2 none read yet
    e.set_leaders(lambda db_id, vgroup: states.get((db_id, vgroup)))
    leaders = [r.replicas_of(0, 4)[2], None, r.replicas_of(2, 4)[0]]
    assert [row[3:] for row in e.execute("SHOW r.VGROUPS").rows] == [
        [x for n in v for x in (n, "leader" if n == leader else "follower")]
        for v, leader in zip(created["replicas"], leaders)]
    e.set_dnodes((Dnode(4, "", "ready"), Dnode(5, "", "ready"), Dnode(6, "", "offline")))
    assert {x for row in e.execute("SHOW r.VGROUPS").rows for n, x in zip(row[3::2], row[4::2]) if n == 6} == {
        "offline"}, "a node not registered now is offline, whatever it leads"
    e.close()


def test_a_record_whose_replicas_are_not_a_placement_is_refused(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    record = {"op": "create_db", "name": "x", "id": new_db_id(), "options": {**DB_DEFAULTS, "VGROUPS": 2},
              "created_ms": 0}
    for bad in ({"replicas": [[4, 4], [5, 6]]}, {"replicas": [[4, 5], [6]]}, {"replicas": [[4, 5]]},
                {"replicas": [[4, 5], [5, 6]], "nodes": [5, 5]}, {"replicas": [[], []]}, {"replicas": [[-1], [4]]}):
        with pytest.raises(ValueError, match="'replicas' is"):
            e.catalog.apply({**record, **bad})
    e.catalog.apply({**record, "nodes": [4, 5]})  # an old record: one replica each
    assert e.catalog.databases["x"].replicas == ((4,), (5,))
    e.close()


def test_sql_replica_is_checked_against_the_live_nodes(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    with pytest.raises(InvalidValue, match="Out of dnodes: REPLICA 3 of database d: The target replication factor of 3 "
                                           "cannot be reached because only 1 broker\\(s\\) are registered."):
        e.execute("CREATE DATABASE d REPLICA 3")  # a single node
    e.execute("CREATE DATABASE d REPLICA 1")
    e.close()
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode()
    _three_racks(e)
    with pytest.raises(InvalidValue, match="Invalid option replications: 2, only 1, 3 allowed"):
        e.execute("CREATE DATABASE c REPLICA 2")
    with pytest.raises(InvalidValue, match="Invalid option MIN_INSYNC 4: expected an integer in \\[1, 3\\]"):
        e.execute("CREATE DATABASE c REPLICA 3 MIN_INSYNC 4")
    assert "c" not in e.catalog.databases and not _with_op(tmp_path, "create_db")[1:]
    _through_stream(e, Engine.execute, "CREATE DATABASE c REPLICA 1")
    assert e.catalog.databases["c"].replication_factor == 1
    with pytest.raises(InvalidValue, match="this cluster runs without replicas \\(replication.enable=false on its nodes"):
        e.execute("CREATE DATABASE r REPLICA 3")  # off unless the node enables it
    assert "r" not in e.catalog.databases
    e.cluster_mode(replication=True)
    _through_stream(e, Engine.execute, "CREATE DATABASE r REPLICA 3")  # served (issue 25): copied by replication
    r = e.catalog.databases["r"]
    assert r.replication_factor == 3 and r.options["MIN_INSYNC"] == 2
    e.close()


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 9) | st.text(max_size=3),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
                     max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(placement=st.fixed_dictionaries({}, optional={"nodes": _JSON | st.lists(st.integers(0, 3), max_size=3),
                                                     "replicas": _JSON | st.lists(st.lists(st.integers(0, 3),
                                                                                           max_size=3), max_size=3)}))
def test_any_placement_in_a_record_applies_as_a_valid_one_or_is_refused(tmp_path: Path,
                                                                         placement: dict[str, Any]) -> None:
    """A record's ``nodes`` / ``replicas`` (damage, another writer): applied only as distinct node ids per vgroup,
    as many for each, ``nodes`` their first; anything else is refused as a record that cannot apply (ValueError),
    never another exception."""
    catalog = Catalog.open(tmp_path / "catalog.log")  # none written: each example applies to an empty catalog
    record = {"op": "create_db", "name": "x", "id": new_db_id(), "options": {**DB_DEFAULTS, "VGROUPS": 2},
              "created_ms": 0, **placement}
    try:
        catalog.apply(record)
    except ValueError:
        assert "x" not in catalog.databases
        return
    replicas = catalog.databases["x"].replicas
    if replicas is not None:
        assert len(replicas) == 2 and len({len(r) for r in replicas}) == 1
        assert all(r and len(set(r)) == len(r) and all(n >= 0 for n in r) for r in replicas)
        if "nodes" in placement and placement["nodes"] is not None:
            assert [r[0] for r in replicas] == placement["nodes"]


def _replicated_records(db_options: dict[str, Any], configs: dict[str, Any], n: int = 0) -> list[dict[str, Any]]:
    """A ``create_db`` of two replicas with ``db_options`` (database ``x<n>``) and a ``create_kafka_topic`` of two
    with ``configs`` (topic ``t<n>``)."""
    placed = {"nodes": [1, 2], "replicas": [[1, 2], [2, 1]]}
    return [{"op": "create_db", "name": f"x{n}", "id": new_db_id(), "created_ms": 0,
             "options": {**DB_DEFAULTS, **db_options}, **placed},
            {"op": "create_kafka_topic", "name": f"t{n}", "db": f"kafka_t{n}", "db_id": new_db_id(),
             "topic_id": str(uuid.uuid4()), "options": DB_DEFAULTS, "configs": configs, "created_ms": 0, **placed}]


def test_a_record_with_a_damaged_min_insync_or_replication_config_is_skipped_as_damage(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """MIN_INSYNC outside 1..the replicas, or a ``min.insync.replicas`` / ``unclean.leader.election.enable`` Kafka
    refuses, is a record that cannot apply, skipped and reported when replayed; the catalog's replicated vnodes
    (what the controller builds partition states from) are those of the valid records only."""
    damaged = [({"MIN_INSYNC": 3}, {"min.insync.replicas": "-1"}),
               ({"MIN_INSYNC": "x"}, {"min.insync.replicas": "abc"}),
               ({"MIN_INSYNC": 0}, {"min.insync.replicas": "0"}), ({"MIN_INSYNC": [1]}, {"min.insync.replicas": 2}),
               ({"MIN_INSYNC": True}, {"unclean.leader.election.enable": 1}),
               ({"MIN_INSYNC": None}, {"unclean.leader.election.enable": "yes"})]
    bad = [r for n, (options, configs) in enumerate(damaged, 1) for r in _replicated_records(options, configs, n)]
    good = _replicated_records({"MIN_INSYNC": 2},
                               {"min.insync.replicas": " 3 ", "unclean.leader.election.enable": "TRUE"})
    path = tmp_path / "catalog.log"
    path.write_bytes(b"".join(lines.encode(r) for r in [*bad, *good]))
    caplog.set_level(logging.WARNING, "walgate.catalog")
    catalog = Catalog.open(path)
    refused = [r.getMessage() for r in caplog.records if "catalog record cannot be applied" in r.getMessage()]
    assert len(refused) == len(bad) and all("MIN_INSYNC" in m or "config" in m for m in refused), refused
    ids = {d.name: d.id for d in catalog.databases.values()}
    assert sorted(ids) == ["kafka_t0", "x0"]
    assert catalog.replicated_vnodes() == {
        PartitionId(ids["x0"], 0): ReplicatedVnode((1, 2), 2), PartitionId(ids["x0"], 1): ReplicatedVnode((2, 1), 2),
        PartitionId(ids["kafka_t0"], 0): ReplicatedVnode((1, 2), 2, True),
        PartitionId(ids["kafka_t0"], 1): ReplicatedVnode((2, 1), 2, True)}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(min_insync=st.none() | _JSON | st.integers(-1, 4) | st.just("2"),
       configs=st.dictionaries(st.sampled_from(["min.insync.replicas", "unclean.leader.election.enable"]),
                               _JSON | st.sampled_from(["1", "2", "3", "0", " 2", "true", "False", "x"]), max_size=2))
def test_any_replication_setting_in_a_record_applies_as_a_valid_one_or_is_refused(
        tmp_path: Path, min_insync: Any, configs: dict[str, Any]) -> None:
    """Whatever a record's MIN_INSYNC and replication configs (damage, another writer), it is refused as a record
    that cannot apply (ValueError), or the catalog gives the controller partition states it can build."""
    catalog = Catalog.open(tmp_path / "catalog.log")  # none written: each example applies to an empty catalog
    options = {} if min_insync is None else {"MIN_INSYNC": min_insync}
    for record in _replicated_records(options, configs):
        try:
            catalog.apply(record)
        except ValueError:
            assert record.get("name") not in catalog.databases and record["name"] not in catalog.topics
    for vnode in catalog.replicated_vnodes().values():
        initial_state(vnode.replicas, {}, vnode.min_isr, vnode.unclean_election)


def test_an_alter_record_that_changes_the_replication_factor_is_refused(tmp_path: Path) -> None:
    """An ``alter_kafka_topic`` record (damage, another writer) may add vgroups with as many replicas as the others,
    never change their count: from no placement (one copy) to several, from several to ``nodes`` alone (one each)
    or to another count; a growth keeping the count applies."""
    catalog = Catalog.open(tmp_path / "catalog.log")  # none written
    unplaced, placed = _replicated_records({}, {}, 1)[1], _replicated_records({}, {}, 2)[1]
    del unplaced["nodes"], unplaced["replicas"]
    catalog.apply(unplaced)
    catalog.apply(placed)
    three = {"options": {**DB_DEFAULTS, "VGROUPS": 3}, "configs": {}, "op": "alter_kafka_topic"}
    for name, bad in (("t1", {"nodes": [1, 2, 1], "replicas": [[1, 2], [2, 1], [1, 2]]}),
                      ("t2", {"nodes": [1, 2, 1]}), ("t2", {"replicas": [[1, 2, 3], [2, 1, 3], [3, 1, 2]]})):
        with pytest.raises(ValueError, match=f"alter of {name} changes its replication factor"):
            catalog.apply({**three, "name": name, **bad})
    assert catalog.databases["kafka_t1"].replicas is None and catalog.databases["kafka_t2"].vgroups == 2
    catalog.apply({**three, "name": "t1", "nodes": [0, 0, 1]})  # grown as a cluster node grows an unplaced one
    catalog.apply({**three, "name": "t2", "replicas": [[1, 2], [2, 1], [2, 3]]})
    assert catalog.databases["kafka_t1"].replicas == ((0,), (0,), (1,))
    assert catalog.databases["kafka_t2"].replicas == ((1, 2), (2, 1), (2, 3))


def test_a_topic_without_min_insync_replicas_takes_the_cluster_wide_dynamic_default(tmp_path: Path) -> None:
    """Kafka's ``min.insync.replicas`` broker config (a dynamic cluster-wide default, its topic config's synonym) is
    the min ISR of a replicated topic that sets none, else the controller's static setting (at most the replication
    factor, Kafka's effective min ISR); a node's own broker resource is not the controller's."""
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode(True)
    _three_racks(e)
    for name, configs in (("own", {"min.insync.replicas": "1"}), ("defaulted", {})):
        db, topic = e.catalog.new_kafka_topic(name, f"kafka_{name}", {"VGROUPS": 1}, configs, 0, replication_factor=3)
        _through_stream(e, lambda e, db=db, topic=topic: e.catalog.add_kafka_topic(db, topic))

    def min_isr(static: int = 1) -> dict[str, int]:
        ids = {e.catalog.databases[f"kafka_{n}"].id: n for n in ("own", "defaulted")}
        return {ids[pid.db_id]: v.min_isr for pid, v in e.catalog.replicated_vnodes(static).items()}

    assert min_isr() == {"own": 1, "defaulted": 1}
    assert min_isr(2) == {"own": 1, "defaulted": 2}
    assert min_isr(5) == {"own": 1, "defaulted": 3}  # at most the factor
    _through_stream(e, lambda e: e.catalog.set_resource_configs("broker", "4", {"min.insync.replicas": "3"}))
    assert min_isr() == {"own": 1, "defaulted": 1}  # this node's own: not the cluster's
    _through_stream(e, lambda e: e.catalog.set_resource_configs("broker", "", {"min.insync.replicas": "2"}))
    assert min_isr() == {"own": 1, "defaulted": 2}
    assert min_isr(3) == {"own": 1, "defaulted": 2}  # the dynamic default before the static setting
    e.close()
