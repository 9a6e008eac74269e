"""A new topic's catalog checks (its topic and database ids unused, the partition limit, Kafka's name collisions)
look up what is taken instead of scanning every topic and database: a CreateTopics of thousands of topics made each
creation cost O(topics) of Python under the GIL (issue 23, step 7), and the replay at start O(topics²). What is
taken follows every change: creations, drops, a write the disk refused, a record that does not apply."""

from __future__ import annotations

from pathlib import Path

import pytest
from faults import Faults, refused

import walgate.storage.catalog as catalog_module
from walgate.storage.catalog import Catalog, DatabaseDef
from walgate.storage.errors import LimitExceeded, TopicCollision

TOPICS = 200


def _kafka_topic(cat: Catalog, name: str, partitions: int = 1) -> None:
    cat.create_kafka_topic(name, f"kafka_{name.replace('.', '_')}", {"VGROUPS": partitions}, {}, 0)


def test_a_creation_does_not_scan_every_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cat = Catalog.open(tmp_path / "catalog.log", max_partitions=TOPICS + 10)
    for i in range(TOPICS):
        _kafka_topic(cat, f"t_{i}")
    looked_at: list[str] = []
    real_key, real_vgroups = catalog_module.collision_key, DatabaseDef.vgroups

    def collision_key(name: str) -> str | None:
        looked_at.append(name)
        return real_key(name)

    monkeypatch.setattr(catalog_module, "collision_key", collision_key)
    monkeypatch.setattr(DatabaseDef, "vgroups", property(lambda d: looked_at.append(d.name) or real_vgroups.fget(d)))
    _kafka_topic(cat, "x_y")
    assert len(looked_at) <= 3  # the new topic's own name and partitions (main: every topic's, 400 and more)
    assert cat.partitions() == TOPICS + 1 and len(looked_at) <= 3
    with pytest.raises(TopicCollision, match="Topic 't.7' collides with existing topic: t_7"):
        cat.check_collision("t.7")


def test_what_is_taken_follows_every_change(tmp_path: Path):
    path = tmp_path / "catalog.log"
    cat = Catalog.open(path, max_partitions=6)
    _kafka_topic(cat, "a.b", 2)
    _kafka_topic(cat, "c", 2)
    assert cat.partitions() == 4
    with pytest.raises(LimitExceeded):
        _kafka_topic(cat, "d", 3)
    with pytest.raises(TopicCollision):
        cat.check_collision("a_b")
    taken = cat.topics["c"].topic_id
    with pytest.raises(ValueError, match="bad topic id"):  # a record reusing a topic id made in the same burst
        cat.apply({"op": "create_kafka_topic", "name": "e", "db": "kafka_e", "db_id": "0" * 32, "topic_id": taken,
                   "options": {**cat.databases["kafka_c"].options}, "configs": {}, "created_ms": 0})
    faults = Faults()
    with faults.active():
        refused(faults, "write", "enospc", lambda: _kafka_topic(cat, "f", 2))  # applied, then undone
    assert "f" not in cat.topics and cat.partitions() == 4
    _kafka_topic(cat, "f", 2)
    assert cat.partitions() == 6
    cat.drop_database("kafka_a_b")  # a Kafka-native topic's drop: its database's, the topic with it
    assert cat.partitions() == 4
    cat.check_collision("a_b")  # no collision once a.b is gone
    _kafka_topic(cat, "a_b", 2)
    reopened = Catalog.open(path, max_partitions=6)
    assert reopened.partitions() == cat.partitions() == 6
    assert sorted(reopened.topics) == sorted(cat.topics) == ["a_b", "c", "f"]
