"""Kafka-native topics as the cluster's (cluster mode): a node stages the DDL (nothing of it on disk), and every
node applies the stream's records through one path (:meth:`Engine.apply_shared`), which opens the vnodes placed on
it and closes and deletes those of a dropped topic. Two engines with their own data dirs stand for two nodes
applying the same stream; the apply path is swept with write faults and a snapshot restore follows it too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faults import WRITE_FAULTS, Faults

from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, NotHere, StorageUnavailable
from walgate.storage.show import Dnode
from walgate.wire import encode_batch

LIVE = (Dnode(1, "127.0.0.1:9092", "ready"), Dnode(2, "127.0.0.1:9093", "ready"))
BATCH = encode_batch(0, [1_700_000_000_000], [b"k"], [b"v"], [[]])


def cluster_node(data_dir: Path, node_id: int) -> Engine:
    e = Engine.open(data_dir, node_id=node_id)
    e.cluster_mode()
    e.set_dnodes(LIVE, {1: None, 2: None})
    return e


def staged(e: Engine, fn: Callable[..., object], *args: Any) -> list[dict[str, Any]]:
    """The records ``fn(e, *args)`` stages (what the node asked hands to the controller)."""
    _, records = e.staged(fn, e, *args)
    return records


def apply(nodes: list[Engine], records: list[dict[str, Any]]) -> None:
    """``records`` appended to the stream and applied by every node, in order."""
    for record in records:
        seq = nodes[0].catalog.shared_seq + 1
        for e in nodes:
            assert e.apply_shared(seq, record)


def local(e: Engine, topic: str) -> list[int]:
    return [v.index for v in e.vnodes[e.catalog.topics[topic].db]]


def vnode_dirs(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "db").glob("*/vnode*"))


def test_each_node_opens_the_vnodes_placed_on_it_and_a_drop_deletes_them_everywhere(tmp_path: Path) -> None:
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    records = staged(n2, Engine.create_kafka_topic, "t", 4, {})
    assert [r["op"] for r in records] == ["create_kafka_topic"] and records[0]["nodes"] == [1, 2, 1, 2]
    assert "t" not in n2.catalog.topics and vnode_dirs(tmp_path / "n2") == [], "staged: nothing kept, nothing made"
    apply([n1, n2], records)
    assert local(n1, "t") == [0, 2] and local(n2, "t") == [1, 3]
    assert vnode_dirs(tmp_path / "n1") == ["vnode0", "vnode2"] and vnode_dirs(tmp_path / "n2") == ["vnode1", "vnode3"]
    assert n1.append_batches("t", 0, [BATCH]) == 0
    with pytest.raises(NotHere, match="is on node 1"):
        n2.append_batches("t", 0, [BATCH])

    apply([n1, n2], staged(n1, Engine.create_partitions, "t", 6))  # balanced: one more on each node
    assert local(n1, "t") == [0, 2, 4] and local(n2, "t") == [1, 3, 5]
    assert n2.append_batches("t", 5, [BATCH]) == 0
    apply([n1, n2], staged(n2, Engine.alter_topic_configs, "t", {"retention.ms": "60000"}))
    assert n1.catalog.topics["t"].configs == {"retention.ms": "60000"}
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)  # restarted: the same vnodes, from its catalog.log
    assert local(n2, "t") == [1, 3, 5] and n2.watermarks("t", 5) == (0, 1)

    apply([n1, n2], staged(n1, Engine.drop_topic, "t"))
    for e, d in ((n1, tmp_path / "n1"), (n2, tmp_path / "n2")):
        assert "t" not in e.catalog.topics and e.vnodes.keys() == set() and vnode_dirs(d) == []
        assert e.topic_id("t") is None
    for e in (n1, n2):
        e.close()


def test_a_change_refused_by_the_controllers_catalog_changes_nothing(tmp_path: Path) -> None:
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    first, second = staged(n1, Engine.create_kafka_topic, "t", 1, {}), staged(n2, Engine.create_kafka_topic, "t", 1, {})
    apply([n1, n2], first)
    with pytest.raises(InvalidValue, match="changed meanwhile"):  # the controller's check of the second
        n1.catalog.validate_shared(second)
    assert n2.apply_shared(2, second[0]) and local(n2, "t") == [], "passed over: the first one's topic stays"
    with pytest.raises(InvalidValue, match="Kafka-native topics, which are the cluster's"):
        n1.execute("CREATE DATABASE kafka_mine")  # a node's own database never takes one of their names
    for e in (n1, n2):
        e.close()


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_the_apply_path_under_write_faults_is_taken_again_and_ends_whole(tmp_path: Path, op: str, kind: str) -> None:
    clean = cluster_node(tmp_path / "clean", 1)
    records = staged(clean, Engine.create_kafka_topic, "t", 2, {})
    faults = Faults()
    with faults.active():
        clean.apply_shared(1, records[0])
        calls = faults.calls[op]
    clean.close()
    for at in range(1, calls + 1):  # the at-th write (or fsync) of the apply refused
        d = tmp_path / f"n{at}"
        e = cluster_node(d, 1)
        with faults.active():
            faults.fail_kind(op, kind, at=at)
            try:
                e.apply_shared(1, records[0])
            except StorageUnavailable:
                pass
            faults.clear()
            e.apply_shared(1, records[0])  # the stream's retry: the record once, its vnodes opened
        assert local(e, "t") == [0] and e.catalog.shared_seq == 1
        assert e.append_batches("t", 0, [BATCH]) == 0
        e.close()
        again = cluster_node(d, 1)
        assert local(again, "t") == [0] and again.watermarks("t", 0) == (0, 1)
        again.close()


def test_a_snapshot_brings_the_topics_in_and_drops_those_it_no_longer_has(tmp_path: Path) -> None:
    single = Engine.open(tmp_path / "n2", node_id=2)  # n2's data dir was a single node's: its topic stays its own
    single.create_kafka_topic("legacy", 1, {})
    single.close()
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    apply([n1, n2], staged(n1, Engine.create_kafka_topic, "gone", 2, {}))
    apply([n1], staged(n1, Engine.drop_topic, "gone"))  # n2 was away meanwhile
    apply([n1], staged(n1, Engine.create_kafka_topic, "kept", 2, {}))
    assert [r["name"] for r in n2.catalog.shared_records() if r["op"] == "create_kafka_topic"] == ["gone"]
    n2.restore_shared(n1.catalog.shared_seq, n1.catalog.shared_records())
    assert sorted(n2.catalog.topics) == ["kept", "legacy"] and local(n2, "kept") == [1] and local(n2, "legacy") == [0]
    assert len(vnode_dirs(tmp_path / "n2")) == 2
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)  # the rewritten catalog.log holds both
    assert sorted(n2.catalog.topics) == ["kept", "legacy"] and n2.catalog.shared_seq == n1.catalog.shared_seq
    for e in (n1, n2):
        e.close()


def test_a_kafka_native_topic_and_a_nodes_own_change_are_never_one_staged_call(tmp_path: Path) -> None:
    single = Engine.open(tmp_path / "n1", node_id=1)  # a single node's data dir: its SQL objects stay its own
    single.execute("CREATE DATABASE d")
    single.execute("CREATE TOPIC s AS DATABASE d")
    single.close()
    n1 = cluster_node(tmp_path / "n1", 1)
    apply([n1], staged(n1, Engine.create_kafka_topic, "k", 1, {}))

    def both(e: Engine, first: str, second: str) -> None:
        e.drop_topic(first)
        e.drop_topic(second)

    for first, second in (("k", "s"), ("s", "k")):  # either order: refused before the second is kept
        with pytest.raises(InvalidValue, match="not in the same call as a change of this node's own catalog"):
            n1.staged(both, n1, first, second)
        assert {"k"} <= set(n1.catalog.topics)
    n1.close()
    n1 = cluster_node(tmp_path / "n1", 1)
    assert "k" in n1.catalog.topics
    n1.close()


def test_a_vnode_that_cannot_be_made_fails_the_apply_which_is_retried_until_it_opens(tmp_path: Path) -> None:
    n1 = cluster_node(tmp_path / "n1", 1)
    [record] = staged(n1, Engine.create_kafka_topic, "t", 1, {})
    blocker = tmp_path / "n1" / "db" / record["db_id"]
    blocker.parent.mkdir(exist_ok=True)
    blocker.write_bytes(b"")  # a file where the topic's database directory goes: its vnode cannot be made
    with pytest.raises(StorageUnavailable, match="could not be opened"):
        n1.apply_shared(1, record)
    assert n1.catalog.shared_seq == 1 and n1.vnodes.keys() == set(), "the record is durable, the vnode not yet"
    with pytest.raises(StorageUnavailable, match="not open yet"):  # a produce meanwhile: a retriable error
        n1.append_batches("t", 0, [BATCH])
    blocker.unlink()
    assert not n1.apply_shared(1, record)  # the stream's retry: the record was taken, the vnode is made now
    assert local(n1, "t") == [0] and n1.append_batches("t", 0, [BATCH]) == 0
    n1.close()


def test_a_topic_deleted_while_the_node_was_down_leaves_no_meta_store_check_behind(tmp_path: Path) -> None:
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    apply([n1, n2], staged(n1, Engine.create_kafka_topic, "t", 2, {}))
    n2.close()
    apply([n1], staged(n1, Engine.drop_topic, "t"))
    n2 = Engine.open(tmp_path / "n2", node_id=2, whole_stores=False)  # as the server opens it: checks left
    n2.cluster_mode()
    assert n2.apply_shared(n1.catalog.shared_seq, {"op": "drop_db", "name": "kafka_t"})
    assert n2.meta_checks() == [] and vnode_dirs(tmp_path / "n2") == []
    for e in (n1, n2):
        e.close()
