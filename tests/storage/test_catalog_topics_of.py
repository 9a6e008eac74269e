"""The catalog's topics by database (:meth:`Catalog.topics_of`), which the WalFetch answer, a follower's append and a
local write look a vnode's topics up with instead of scanning every topic, are always what that scan finds, in its
order: after any sequence of creations, drops, alters, forgotten topics, changes undone, cluster records and
snapshots applied, and reopens."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import walgate.storage.catalog as catalog_module
from walgate.storage.catalog import Catalog
from walgate.storage.errors import StorageError

OPS = ("kafka", "sql_db", "sql_topic", "drop_kafka", "drop_topic", "drop_db", "alter", "forget", "undone", "snapshot",
       "reopen")
DBS = ("kafka_k0", "kafka_k1", "s0", "s1", "none")  # every database the steps name, and one more


def _open(path: Path) -> Catalog:
    cat = Catalog.open(path)
    cat.node_id = 1
    return cat


def _check(cat: Catalog) -> None:
    for db in DBS:
        assert cat.topics_of(db) == [t for t in cat.topics.values() if t.db == db], db


def _step(cat: Catalog, path: Path, op: str, i: int, j: int) -> Catalog:
    """Apply one operation ``op`` to ``cat`` (of Kafka-native topic ``k<i>``, database ``s<i>``, its TDengine topic
    ``q<i><j>``); the catalog to go on with. Cluster mode for a Kafka-native topic's creation (placed on this node)
    and a snapshot; the node's own databases and TDengine topics are made and dropped as a single node does."""
    seq = cat.shared_seq + 1
    cat.cluster = op in ("kafka", "snapshot")
    kafka, sql = f"k{i}", f"q{i}{j}"
    try:
        if op == "kafka":  # through the cluster's stream
            db, topic = cat.new_kafka_topic(kafka, f"kafka_{kafka}", {"VGROUPS": 1}, {}, 0)
            cat.apply_shared(seq, catalog_module._kafka_topic_record(db, topic))
        elif op == "sql_db":
            cat.create_database(f"s{i}", {"VGROUPS": 1}, 0)
        elif op == "sql_topic":
            cat.create_topic(sql, "database", f"s{i}", "", False, f"CREATE TOPIC {sql} AS DATABASE s{i}", 0)
        elif op == "drop_kafka":  # its database's drop
            cat.apply_shared(seq, {"op": "drop_db", "name": f"kafka_{kafka}"})
        elif op == "drop_topic":
            cat.drop_topic(sql)
        elif op == "drop_db":  # its topics with it
            cat.drop_database(f"s{i}")
        elif op == "alter":  # the topic's definition replaced where it is
            options = dict(cat.databases[f"kafka_{kafka}"].options)
            cat.apply_shared(seq, {"op": "alter_kafka_topic", "name": kafka, "options": options, "configs": {"x": sql}})
        elif op == "forget":
            cat.forget_topic(kafka if j == 0 else sql)
        elif op == "undone":  # applied, then undone
            cat.validate_shared([{"op": "drop_db", "name": f"kafka_{kafka}"}])
        elif op == "snapshot":  # the cluster's databases and topics: the snapshot's
            cat.restore_shared(seq, cat.shared_records()[:j])
        elif op == "reopen":
            return _open(path)
    except (StorageError, ValueError, KeyError):  # a name taken, a database or topic not there: nothing changed
        pass
    return cat


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 1), st.integers(0, 1)), max_size=40))
def test_topics_of_is_the_scan_after_any_operations(steps: list[tuple[str, int, int]]) -> None:
    """Looked up after every step: each step begins with them valid (kept by the records it applies, or derived
    again after a change undone or the dict replaced)."""
    tmp = Path(tempfile.mkdtemp())
    try:
        path = tmp / "catalog.log"
        cat = _open(path)
        for i in range(2):
            cat.create_database(f"s{i}", {"VGROUPS": 1}, 0)
        _check(cat)
        for op, i, j in steps:
            cat = _step(cat, path, op, i, j)
            _check(cat)
    finally:
        shutil.rmtree(tmp)


def test_a_lookup_does_not_scan_every_topic(tmp_path: Path) -> None:
    """The topics of one database among many are found without reading the others' (the scan read them all)."""
    cat = Catalog.open(tmp_path / "catalog.log")
    for i in range(50):
        cat.create_kafka_topic(f"t{i}", f"kafka_t{i}", {"VGROUPS": 1}, {}, 0)
    cat.topics_of("kafka_t0")
    read: list[str] = []

    class Counted(dict[str, catalog_module.TopicDef]):
        def values(self):  # type: ignore[override]
            read.append("values")
            return super().values()

        def items(self):  # type: ignore[override]
            read.append("items")
            return super().items()

    cat.topics = Counted(cat.topics)
    assert [t.name for t in cat.topics_of("kafka_t7")] == ["t7"] and read == ["items"]  # a replaced dict: derived
    cat.create_kafka_topic("u", "kafka_u", {"VGROUPS": 1}, {}, 0)  # kept by the record applied
    read.clear()
    assert [t.name for t in cat.topics_of("kafka_u")] == ["u"] and [t.name for t in cat.topics_of("kafka_t7")] == ["t7"]
    assert read == []
