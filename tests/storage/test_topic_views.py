"""The engine's per-partition statistics (``Engine.partitions.stats``, what ``/metrics`` exports) and the topic-id
index storage keeps across create, drop and restart."""

from __future__ import annotations

import uuid
from pathlib import Path

from walgate.storage.engine import Engine, PartitionStats
from walgate.wire import encode_batch


def _batch(n: int) -> bytes:
    return encode_batch(0, [1_700_000_000_000 + i for i in range(n)], [b"k"] * n, [b"v%d" % i for i in range(n)],
                        [[] for _ in range(n)])


def _on_disk(vnode_dir: Path) -> tuple[int, int]:
    """(bytes, segments) of a vnode's WAL as the files say."""
    logs = list((vnode_dir / "wal").glob("*.log"))
    return sum(p.stat().st_size for p in logs), len(logs)


def test_partition_stats_cover_every_partition_of_every_topic(tmp_path: Path) -> None:
    e = Engine.open(tmp_path)
    try:
        e.execute("CREATE DATABASE db VGROUPS 2 WAL_SEGMENT_SIZE 1")  # 1 MB segments
        e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (s INT)")
        e.execute("CREATE TOPIC rows AS SELECT ts, v FROM db.st WHERE v > 0")
        e.execute("INSERT INTO db.a USING db.st TAGS (1) VALUES (1, 5) (2, 0) (3, 6)")
        e.create_kafka_topic("native", 2, {"segment.bytes": "1048576"})
        for _ in range(3):
            e.append_batches("native", 1, [_batch(4)])
        e.delete_records("native", 1, 5)
        stats = e.partitions.stats()
        assert [(s.topic, s.partition) for s in stats] == [("native", 0), ("native", 1), ("rows", 0), ("rows", 1)]
        by_key = {(s.topic, s.partition): s for s in stats}
        assert (by_key["native", 0].log_start, by_key["native", 0].high_watermark) == (0, 0)
        assert (by_key["native", 1].log_start, by_key["native", 1].high_watermark) == (5, 12)
        for s in stats:
            assert (s.log_start, s.high_watermark) == e.watermarks(s.topic, s.partition)
            db = e.catalog.topics[s.topic].db
            assert (s.size_bytes, s.segments) == _on_disk(e.vnodes[db][s.partition].dir)
            assert s.segments == 1
        assert sum(s.high_watermark for s in stats if s.topic == "rows") == 2  # v > 0: two of the three rows
        rows_stats = [s for s in stats if s.topic == "rows"]
        assert sum(s.size_bytes for s in rows_stats) > 0 and by_key["native", 1].size_bytes > by_key["native", 0].size_bytes
    finally:
        e.close()
    reopened = Engine.open(tmp_path)
    try:
        assert reopened.partitions.stats() == stats
        assert isinstance(stats[0], PartitionStats)
    finally:
        reopened.close()


def test_the_topic_id_index_follows_create_drop_and_restart(tmp_path: Path) -> None:
    e = Engine.open(tmp_path)
    try:
        e.execute("CREATE DATABASE db VGROUPS 1")
        e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (s INT)")
        e.execute("CREATE TOPIC sql_topic AS STABLE db.st")
        native = e.create_kafka_topic("native", 1, {})
        ids = {name: uuid.UUID(t.topic_id) for name, t in e.catalog.topics.items()}
        assert set(ids) == {"sql_topic", "native"} and ids["native"] == uuid.UUID(native.topic_id)
        for name, topic_id in ids.items():
            assert e.topic_id(name) == topic_id and e.topic_name(topic_id) == name
        assert dict(e.topics_by_id()) == {v: k for k, v in ids.items()}
        e.drop_topic("native")
        e.execute("DROP TOPIC sql_topic")
        assert e.topic_id("native") is None and e.topic_name(ids["native"]) is None
        assert e.topic_name(ids["sql_topic"]) is None and dict(e.topics_by_id()) == {}
        e.execute("CREATE TOPIC again AS STABLE db.st")
        again = uuid.UUID(e.catalog.topics["again"].topic_id)
    finally:
        e.close()
    reopened = Engine.open(tmp_path)
    try:
        assert reopened.topic_id("again") == again and reopened.topic_name(again) == "again"
        assert dict(reopened.topics_by_id()) == {again: "again"}
    finally:
        reopened.close()


class Appended:
    """A RecordsListener that remembers what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def records_appended(self, topic: str, partition: int) -> None:
        self.calls.append((topic, partition))

    def vnode_appended(self, db: str, index: int) -> None:
        pass


def test_the_records_listener_given_to_open_hears_of_every_append_with_records(tmp_path: Path) -> None:
    listener = Appended()
    e = Engine.open(tmp_path, listener=listener)
    try:
        e.execute("CREATE DATABASE db VGROUPS 1")
        e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (s INT)")
        e.execute("CREATE TOPIC positive AS SELECT ts, v FROM db.st WHERE v > 0")
        e.execute("INSERT INTO db.a USING db.st TAGS (1) VALUES (1, 0)")  # no record for the topic
        assert listener.calls == []
        e.execute("INSERT INTO db.a VALUES (2, 7)")
        e.create_kafka_topic("native", 2, {})
        e.append_batches("native", 1, [_batch(2)])
        assert listener.calls == [("positive", 0), ("native", 1)]
    finally:
        e.close()
