"""The ``place_vgroup`` catalog record (issue 26: a replica move places one vgroup anew, written by the controller
with the partition state it moves): applied through the cluster's stream, kept across restarts, rewrites and
snapshots, undone by a record placing the vgroup as the database was made; any damaged one refused as a record that
cannot apply; a move in progress kept with its adding and removing replicas. A data dir without such records
reads as before (the other catalog tests)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walgate.cluster.partition_codec import PartitionId, ReplicatedVnode
from walgate.cluster.placement import place_vgroup_record
from walgate.replication.partition import moves_valid
from walgate.storage import lines
from walgate.storage.catalog import DB_DEFAULTS, Catalog
from walgate.storage.names import new_db_id


def _cluster_catalog(path: Path) -> Catalog:
    catalog = Catalog.open(path)
    catalog.cluster, catalog.node_id = True, 1
    return catalog


def _topic(catalog: Catalog) -> str:
    """A Kafka-native topic ``t`` of two partitions on nodes (1, 2) and (2, 1), through the stream; its db id."""
    db_id = new_db_id()
    assert catalog.apply_shared(catalog.shared_seq + 1, {
        "op": "create_kafka_topic", "name": "t", "db": "kafka_t", "db_id": db_id, "topic_id": str(uuid.uuid4()),
        "options": {**DB_DEFAULTS, "VGROUPS": 2}, "configs": {"min.insync.replicas": "2"}, "created_ms": 0,
        "nodes": [1, 2], "replicas": [[1, 2], [2, 1]]})
    return db_id


def test_a_move_places_one_vgroup_anew_and_the_placement_survives_restarts_and_snapshots(tmp_path: Path) -> None:
    """The union while a move is in progress, the target once completed: each vgroup's replicas, first replica,
    the controller's replicated vnodes and the snapshot follow; the other vgroup and the made placement stay."""
    path = tmp_path / "catalog.log"
    catalog = _cluster_catalog(path)
    db_id = _topic(catalog)
    assert catalog.apply_shared(catalog.shared_seq + 1, place_vgroup_record(db_id, 0, [2, 3, 1]))
    db = catalog.databases["kafka_t"]
    assert (db.replicas_of(0, 1), db.replicas_of(1, 1), db.nodes, db.replication_factor) == ((2, 3, 1), (2, 1),
                                                                                            (2, 2), 2)
    assert catalog.apply_shared(catalog.shared_seq + 1, place_vgroup_record(db_id, 0, [2, 3]))
    assert catalog.replicated_vnodes() == {PartitionId(db_id, 0): ReplicatedVnode((2, 3), 2),
                                           PartitionId(db_id, 1): ReplicatedVnode((2, 1), 2)}
    reopened = _cluster_catalog(path)  # replayed from catalog.log
    assert reopened.databases["kafka_t"].replicas_of(0, 1) == (2, 3) and reopened.shared_seq == 3
    reopened.rewrite()
    assert _cluster_catalog(path).databases["kafka_t"].placed_anew == {0: (2, 3)}
    other = _cluster_catalog(tmp_path / "other.log")  # a node that reads the stream's snapshot
    other.restore_shared(reopened.shared_seq, reopened.shared_records())
    assert other.databases["kafka_t"].replicas_of(0, 1) == (2, 3)
    assert other.shared_records() == reopened.shared_records()
    assert other.apply_shared(other.shared_seq + 1, place_vgroup_record(db_id, 0, [1, 2]))  # back as made
    assert other.databases["kafka_t"].placed_anew == {}
    assert not [r for r in other.shared_records() if r["op"] == "place_vgroup"]


def test_a_move_in_progress_is_kept_with_its_placement_until_a_record_without_one(tmp_path: Path) -> None:
    """A record of a move begun names its adding and removing replicas (KIP-455): the controller's replicated vnodes
    carry them (a state made again from them keeps the adding replica out of the ISR), across a restart, a rewrite
    and a snapshot, also when the union is the placement as made; the record of the move completed ends it."""
    path = tmp_path / "catalog.log"
    catalog = _cluster_catalog(path)
    db_id = _topic(catalog)
    assert catalog.apply_shared(catalog.shared_seq + 1, place_vgroup_record(db_id, 0, [3, 2, 1], [3], [1]))
    assert catalog.apply_shared(catalog.shared_seq + 1, place_vgroup_record(db_id, 1, [2, 1], [], [1]))  # as made
    moving = {PartitionId(db_id, 0): ReplicatedVnode((3, 2, 1), 2, False, (3,), (1,)),
              PartitionId(db_id, 1): ReplicatedVnode((2, 1), 2, False, (), (1,))}
    assert catalog.replicated_vnodes() == moving
    reopened = _cluster_catalog(path)
    assert reopened.replicated_vnodes() == moving
    reopened.rewrite()
    assert _cluster_catalog(path).replicated_vnodes() == moving
    other = _cluster_catalog(tmp_path / "other.log")
    other.restore_shared(reopened.shared_seq, reopened.shared_records())
    assert other.replicated_vnodes() == moving and other.shared_records() == reopened.shared_records()
    assert other.apply_shared(other.shared_seq + 1, place_vgroup_record(db_id, 0, [3, 2]))  # completed
    assert other.replicated_vnodes()[PartitionId(db_id, 0)] == ReplicatedVnode((3, 2), 2)
    assert other.databases["kafka_t"].moves == {1: ((), (1,))}


def test_a_place_record_of_an_unknown_vgroup_is_passed_over(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                            ) -> None:
    """A record naming no placed vgroup, or fewer replicas than the database's MIN_INSYNC, is passed over (logged,
    its sequence number kept), as every node refuses it alike."""
    catalog = _cluster_catalog(tmp_path / "catalog.log")
    db_id = _topic(catalog)
    assert catalog.apply_shared(catalog.shared_seq + 1, {
        "op": "create_db", "name": "x", "id": new_db_id(), "options": {**DB_DEFAULTS, "MIN_INSYNC": 2},
        "created_ms": 0, "nodes": [1, 1], "replicas": [[1, 2], [1, 2]]})
    for record in (place_vgroup_record(db_id, 2, [1, 2]), place_vgroup_record(new_db_id(), 0, [1, 2]),
                   place_vgroup_record(catalog.databases["x"].id, 0, [3]), place_vgroup_record(db_id, 0, [3, 1], [9]),
                   {**place_vgroup_record(db_id, 0, [3, 1, 2]), "adding": [3], "removing": 2}):
        assert catalog.apply_shared(catalog.shared_seq + 1, record)
    assert [(d.placed_anew, d.moves) for d in catalog.databases.values()] == [({}, {}), ({}, {})]
    assert catalog.shared_seq == 7 and caplog.text.count("passed over") == 5


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 9) | st.text(max_size=3),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
                     max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.fixed_dictionaries({}, optional={
    "db_id": _JSON | st.just("known"), "vgroup": _JSON | st.integers(-1, 3),
    "replicas": _JSON | st.lists(st.integers(-1, 4), max_size=4),
    "adding": _JSON | st.lists(st.integers(-1, 4), max_size=2),
    "removing": _JSON | st.lists(st.integers(-1, 4), max_size=2)}))
def test_any_place_record_applies_as_a_valid_placement_or_is_refused(tmp_path: Path, fields: dict[str, Any]) -> None:
    """Whatever a ``place_vgroup`` record holds (damage, another writer), it applies as distinct node ids of a placed
    vgroup, or is refused as a record that cannot apply (ValueError), the catalog unchanged; never another error.
    Replayed from a file, a refused one is reported and skipped, the others kept."""
    path = tmp_path / f"{uuid.uuid4()}.log"
    catalog = _cluster_catalog(path)
    db_id = _topic(catalog)
    record = {"op": "place_vgroup", **fields}
    if record.get("db_id") == "known":
        record["db_id"] = db_id
    before = catalog.databases["kafka_t"]
    try:
        catalog.apply(record)
    except ValueError:
        assert catalog.databases["kafka_t"] == before
        return
    db = catalog.databases["kafka_t"]
    for vgroup in range(db.vgroups):
        replicas = db.replicas_of(vgroup, 1)
        assert replicas and len(set(replicas)) == len(replicas) and all(n >= 0 for n in replicas)
        assert moves_valid(replicas, *db.moves.get(vgroup, ((), ()))), "a move of its replicas"
    path.write_bytes(path.read_bytes() + lines.encode(record))
    assert _cluster_catalog(path).databases["kafka_t"] == db


def test_a_one_copy_vgroup_once_moved_stays_replicated(tmp_path: Path) -> None:
    """Issue 26: a vgroup of a database of one copy has no partition state (``one_copy_vnodes``, with replication)
    until a move places it anew; from then on it is replicated (``replicated_vnodes``), even once moved back where
    it was made, across a restart and a snapshot, so its state lives on; the other vgroup stays one copy."""
    path = tmp_path / "catalog.log"
    catalog = _cluster_catalog(path)
    catalog.replication = True
    db_id = new_db_id()
    assert catalog.apply_shared(catalog.shared_seq + 1, {
        "op": "create_kafka_topic", "name": "s", "db": "kafka_s", "db_id": db_id, "topic_id": str(uuid.uuid4()),
        "options": {**DB_DEFAULTS, "VGROUPS": 2}, "configs": {}, "created_ms": 0, "nodes": [1, 2],
        "replicas": [[1], [2]]})
    assert catalog.controller_vnodes().vnodes == {}
    assert catalog.controller_vnodes().one_copy == {PartitionId(db_id, 0): ReplicatedVnode((1,), 1),
                                                    PartitionId(db_id, 1): ReplicatedVnode((2,), 1)}
    assert catalog.apply_shared(catalog.shared_seq + 1, place_vgroup_record(db_id, 0, [3, 1], [3], [1]))
    assert catalog.apply_shared(catalog.shared_seq + 1, place_vgroup_record(db_id, 0, [3]))
    assert catalog.apply_shared(catalog.shared_seq + 1, place_vgroup_record(db_id, 0, [1]))  # back where it was made
    for c in (catalog, _cluster_catalog(path)):
        db = c.databases["kafka_s"]
        assert (db.replicated(0), db.replicated(1), db.replication_factor) == (True, False, 1)
        assert c.replicated_vnodes() == {PartitionId(db_id, 0): ReplicatedVnode((1,), 1)}
    assert catalog.controller_vnodes().one_copy == {PartitionId(db_id, 1): ReplicatedVnode((2,), 1)}
    catalog.replication = False  # (without replication.enable no move of one copy is made)
    assert catalog.controller_vnodes().one_copy == {}
    other = _cluster_catalog(tmp_path / "other.log")
    other.restore_shared(catalog.shared_seq, catalog.shared_records())
    assert other.databases["kafka_s"].replicated(0) and not other.databases["kafka_s"].replicated(1)


def test_a_topic_made_with_states_has_a_partition_state_for_each_vgroup_of_one_copy(tmp_path: Path) -> None:
    """A replicated cluster's ``__consumer_offsets`` at ``offsets.topic.replication.factor`` 1 (its leaders are the
    group coordinators): its ``create_kafka_topic`` record's ``states`` makes every vgroup replicated from the start
    (the controller creates their states), across a restart, a rewrite and a snapshot; a record whose ``states`` is
    not a boolean is passed over; a topic made without it stays one copy."""
    path = tmp_path / "catalog.log"
    catalog = _cluster_catalog(path)
    catalog.replication = True
    db, topic = catalog.new_kafka_topic("__consumer_offsets", "kafka___consumer_offsets",
                                        {**DB_DEFAULTS, "VGROUPS": 2}, {}, 0, ((1,), (1,)), states=True)
    record = {"op": "create_kafka_topic", "name": topic.name, "db": db.name, "db_id": db.id,
              "topic_id": topic.topic_id, "options": db.options, "configs": {}, "created_ms": 0, "nodes": [1, 1],
              "replicas": [[1], [1]]}
    assert catalog.apply_shared(catalog.shared_seq + 1, {**record, "name": "bad", "db": "kafka_bad",
                                                         "db_id": new_db_id(), "states": "yes"})
    assert "bad" not in catalog.topics
    assert catalog.apply_shared(catalog.shared_seq + 1, {**record, "states": True})
    assert catalog.apply_shared(catalog.shared_seq + 1, {**record, "name": "plain", "db": "kafka_plain",
                                                         "db_id": new_db_id(), "topic_id": str(uuid.uuid4())})
    made = {PartitionId(db.id, 0): ReplicatedVnode((1,), 1), PartitionId(db.id, 1): ReplicatedVnode((1,), 1)}
    plain = catalog.databases["kafka_plain"].id
    for c in (catalog, _cluster_catalog(path)):
        assert c.replicated_vnodes() == made
        assert c.databases[db.name].states and not c.databases["kafka_plain"].states
    assert catalog.controller_vnodes().one_copy == {PartitionId(plain, 0): ReplicatedVnode((1,), 1),
                                                    PartitionId(plain, 1): ReplicatedVnode((1,), 1)}
    catalog.rewrite()
    assert _cluster_catalog(path).replicated_vnodes() == made
    other = _cluster_catalog(tmp_path / "other.log")
    other.restore_shared(catalog.shared_seq, catalog.shared_records())
    assert other.replicated_vnodes() == made and other.shared_records() == catalog.shared_records()
