"""Kafka-native topics in the engine: batches stored as produced, idempotence, configs, partitions, log start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from walgate.storage.engine import Engine
from walgate.storage.errors import AlreadyExists, InvalidValue, NotFound, OffsetOutOfRange
from walgate.storage.producers import SequenceError
from walgate.storage.topic_configs import (
    TOPIC_CONFIG_DEFAULTS,
    CleanerSettings,
    backing_database,
    cleaner_settings,
    topic_configs,
    validate_configs,
    wal_options,
)
from walgate.wire import batch_header, decode_batches, encode_batch


def batch(n: int, *, start_ts: int = 1_000, pid: int = -1, epoch: int = -1, seq: int = -1, codec: str | None = None,
          tag: str = "v") -> bytes:
    return encode_batch(0, [start_ts + i for i in range(n)], [b"k"] * n, [f"{tag}{i}".encode() for i in range(n)],
                        [[("h", b"1")]] * n, compression=codec, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq)


@pytest.fixture
def engine(tmp_path: Path):
    e = Engine.open(tmp_path)
    yield e
    e.close()


def read(engine: Engine, topic: str, partition: int) -> list[tuple[int, bytes | None]]:
    out = []
    for base, version, _ in engine.index_entries(topic, partition, engine.watermarks(topic, partition)[0]):
        stored = engine.kafka_batch(topic, partition, version)
        assert batch_header(stored).base_offset == base and batch_header(stored).partition_leader_epoch == 0
        out += [(r.offset, r.value) for b in decode_batches(stored) for r in b.records]
    return out


def test_batches_are_stored_as_produced_with_their_offsets(engine: Engine):
    engine.create_kafka_topic("orders.v1", 2, {})
    assert engine.partition_count("orders.v1") == 2 and engine.is_native("orders.v1")
    assert engine.append_batches("orders.v1", 1, [batch(3)]) == 0
    assert engine.append_batches("orders.v1", 1, [batch(2, codec="zstd", tag="z"), batch(1, tag="w")]) == 3
    assert engine.watermarks("orders.v1", 1) == (0, 6)
    assert read(engine, "orders.v1", 1) == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"z0"), (4, b"z1"), (5, b"w0")]
    assert engine.watermarks("orders.v1", 0) == (0, 0)
    assert engine.offset_for_timestamp("orders.v1", 1, 1_001) == (1, 1_001)


def test_a_topic_survives_a_restart_with_its_producer_state(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {"retention.ms": "3600000"})
    e.append_batches("t", 0, [batch(2, pid=9, epoch=0, seq=0)])
    e.close()
    e = Engine.open(tmp_path)
    try:
        assert e.catalog.topics["t"].configs == {"retention.ms": "3600000"}
        assert e.watermarks("t", 0) == (0, 2)
        assert e.append_batches("t", 0, [batch(2, pid=9, epoch=0, seq=0)]) == 0  # a retry: nothing written
        assert e.watermarks("t", 0) == (0, 2)
        with pytest.raises(SequenceError):
            e.append_batches("t", 0, [batch(1, pid=9, epoch=0, seq=5)])
        assert e.append_batches("t", 0, [batch(1, pid=9, epoch=0, seq=2)]) == 2
    finally:
        e.close()


def test_several_batches_of_one_producer_in_one_request(engine: Engine):
    engine.create_kafka_topic("t", 1, {})
    assert engine.append_batches("t", 0, [batch(2, pid=1, epoch=0, seq=0), batch(2, pid=1, epoch=0, seq=2)]) == 0
    with pytest.raises(SequenceError):  # the second is out of order: nothing of the request is written
        engine.append_batches("t", 0, [batch(1, pid=1, epoch=0, seq=4), batch(1, pid=1, epoch=0, seq=9)])
    assert engine.watermarks("t", 0) == (0, 4)


def test_names_configs_and_duplicates_are_checked(engine: Engine):
    with pytest.raises(InvalidValue):
        engine.create_kafka_topic("bad name", 1, {})
    with pytest.raises(InvalidValue):
        engine.create_kafka_topic("t", 1, {"cleanup.policy": "compacted"})
    with pytest.raises(InvalidValue):
        engine.create_kafka_topic("t", 1, {"no.such.config": "1"})
    engine.create_kafka_topic("t", 1, {})
    with pytest.raises(AlreadyExists):
        engine.create_kafka_topic("t", 1, {})
    assert "t" not in engine.catalog.databases and "kafka_t" in engine.catalog.databases


def test_tdengine_topics_do_not_take_batches(engine: Engine):
    engine.execute("CREATE DATABASE d VGROUPS 1")
    engine.execute("CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (s INT)")
    engine.execute("CREATE TOPIC td AS STABLE d.m")
    with pytest.raises(InvalidValue):
        engine.append_batches("td", 0, [batch(1)])
    with pytest.raises(NotFound):
        engine.append_batches("nope", 0, [batch(1)])


def test_configs_follow_to_the_wal(engine: Engine):
    engine.create_kafka_topic("t", 1, {})
    engine.alter_topic_configs("t", {"retention.ms": "1000", "segment.bytes": "1048576"})
    vnode = engine.vnodes[engine.catalog.topics["t"].db][0]
    assert vnode.wal.options.retention_period_s == 1 and vnode.wal.options.segment_bytes == 1 << 20
    assert topic_configs("kafka", engine.catalog.topics["t"].configs, {})["retention.ms"] == ("1000", True)


def test_partitions_grow_and_keep_their_data(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {})
    e.append_batches("t", 0, [batch(2)])
    e.create_partitions("t", 3)
    e.append_batches("t", 2, [batch(1)])
    with pytest.raises(InvalidValue):
        e.create_partitions("t", 2)
    e.close()
    e = Engine.open(tmp_path)
    try:
        assert e.partition_count("t") == 3
        assert [e.watermarks("t", p) for p in range(3)] == [(0, 2), (0, 0), (0, 1)]
    finally:
        e.close()


def test_delete_records_moves_the_log_start_durably(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {})
    for _ in range(3):
        e.append_batches("t", 0, [batch(2)])
    assert e.delete_records("t", 0, 3) == 3
    assert e.watermarks("t", 0) == (3, 6)
    assert [b for b, _, _ in e.index_entries("t", 0, 3)] == [2, 4]  # the batch holding offset 3 is served whole
    with pytest.raises(OffsetOutOfRange):
        e.delete_records("t", 0, 7)
    e.close()
    e = Engine.open(tmp_path)
    try:
        assert e.watermarks("t", 0) == (3, 6)
        assert e.delete_records("t", 0, -1) == 6
        assert e.watermarks("t", 0) == (6, 6)
        assert e.append_batches("t", 0, [batch(1)]) == 6  # offsets go on, never restart
    finally:
        e.close()


def test_drop_topic_takes_its_database_along(engine: Engine):
    engine.create_kafka_topic("t", 2, {})
    db = engine.catalog.topics["t"].db
    engine.execute("DROP TOPIC t")
    assert "t" not in engine.catalog.topics and db not in engine.catalog.databases
    engine.create_kafka_topic("t", 1, {})  # the name is free again
    assert engine.watermarks("t", 0) == (0, 0)


def test_backing_database_names_are_valid_and_unique():
    assert backing_database("orders", {}) == "kafka_orders"
    assert backing_database("orders", {"kafka_orders": 1}).startswith("kafka_orders_")
    assert backing_database("a.b-c", {}) != backing_database("a_b_c", {})
    assert backing_database("a.b-c", {}).replace("_", "").isalnum()


def test_wal_options_round_up_to_wal_units():
    assert wal_options({"retention.ms": "1500", "retention.bytes": "1", "segment.bytes": "1"}) == {
        "WAL_RETENTION_PERIOD": 2, "WAL_RETENTION_SIZE": 1, "WAL_SEGMENT_SIZE": 1, "WAL_LEVEL": 1,
        "WAL_FSYNC_PERIOD": 3000, "WAL_SEGMENT_MS": -1}
    assert wal_options({"flush.messages": "1"})["WAL_LEVEL"] == 2  # fsync before every answer
    assert wal_options({"retention.ms": "-1"})["WAL_RETENTION_PERIOD"] == -1
    with pytest.raises(InvalidValue):
        validate_configs({"retention.ms": "soon"})
    with pytest.raises(InvalidValue):
        validate_configs({"message.timestamp.type": "Whenever"})


@pytest.mark.parametrize(("configs", "message"), [
    ({"compression.type": "brotli"}, "compression.type"),
    ({"delete.retention.ms": "-1"}, "at least 0"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "between 0 and 1"),
    ({"min.cleanable.dirty.ratio": "nan"}, "DOUBLE"),
    ({"preallocate": "yes"}, "true or false"),
    ({"max.compaction.lag.ms": "0"}, "at least 1"),
    ({"segment.ms": "9223372036854775808"}, "LONG"),
    ({"max.message.bytes": "2147483648"}, "INT"),
    ({"compression.gzip.level": "0"}, "1 and 9"),
    ({"leader.replication.throttled.replicas": "0:x"}, "[PartitionId]:[BrokerId]"),
    ({"cleanup.policy": "compact,sweep"}, "sweep"),
    ({"cleanup.policy": ""}, "cleanup.policy"),
    ({"message.downconversion.enable": "true"}, "Unknown topic config name"),  # gone in Kafka 4
])
def test_kafka_validation_of_every_config(configs: dict[str, str], message: str):
    with pytest.raises(InvalidValue, match=re.escape(message)):
        validate_configs(configs)


def test_the_whole_kafka_key_set_is_accepted_and_described():
    every = {k: v for k, v in TOPIC_CONFIG_DEFAULTS.items()}
    every.update({"cleanup.policy": "compact,delete", "compression.type": "zstd", "min.insync.replicas": "2",
                  "follower.replication.throttled.replicas": "0:0,1:0", "leader.replication.throttled.replicas": "*",
                  "remote.storage.enable": "false", "local.retention.ms": "-2", "min.cleanable.dirty.ratio": "0.01"})
    validate_configs(every)
    assert len(TOPIC_CONFIG_DEFAULTS) == 33
    described = topic_configs("kafka", {"delete.retention.ms": "5"}, {})
    assert described["delete.retention.ms"] == ("5", True) and described["file.delete.delay.ms"] == ("60000", False)


def test_compact_only_keeps_every_segment_and_rolls_by_max_compaction_lag():
    assert wal_options({"cleanup.policy": "compact", "retention.ms": "1000"})["WAL_RETENTION_PERIOD"] == -1
    assert wal_options({"cleanup.policy": "compact,delete", "retention.ms": "1000"})["WAL_RETENTION_PERIOD"] == 1
    assert wal_options({"cleanup.policy": "compact", "max.compaction.lag.ms": "5000"})["WAL_SEGMENT_MS"] == 5000
    assert wal_options({"segment.ms": "100"})["WAL_SEGMENT_MS"] == 100
    assert cleaner_settings({}) is None
    assert cleaner_settings({"cleanup.policy": "delete,compact"}) == CleanerSettings()
