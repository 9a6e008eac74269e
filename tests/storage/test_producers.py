"""Idempotent-producer rules per partition and durable producer id blocks (never handed out twice, even when\nthe file is damaged or the disk refuses a block)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest
from faults import Faults

from walgate.storage import lines, native_topics
from walgate.storage.damage import DamageLog
from walgate.storage.errors import InvalidValue, StorageUnavailable
from walgate.storage.producers import DuplicateBatch, EarlierBatch, PartitionProducers, ProducerIds, SequenceError
from walgate.wire.errors import ErrorCode


def test_non_idempotent_batches_are_always_appended():
    p = PartitionProducers()
    p.record(-1, -1, -1, 5, 0)
    assert p.check(-1, -1, -1, 5) is None


def test_sequences_must_follow_and_retries_answer_the_original_offset():
    p = PartitionProducers()
    assert p.check(7, 0, 0, 3) is None
    p.record(7, 0, 0, 3, 100)
    assert p.check(7, 0, 3, 2) is None
    p.record(7, 0, 3, 2, 103)
    assert p.check(7, 0, 0, 3) == DuplicateBatch(100)  # a retry of the first batch
    assert p.check(7, 0, 3, 2) == DuplicateBatch(103)
    with pytest.raises(SequenceError) as gap:
        p.check(7, 0, 6, 1)  # 5 was skipped
    assert gap.value.error_code is ErrorCode.out_of_order_sequence_number


def test_only_the_last_five_batches_are_kept_and_an_earlier_retry_is_to_be_looked_up():
    p = PartitionProducers()
    for k in range(6):
        p.record(1, 0, k, 1, 10 + k)
    assert p.check(1, 0, 1, 1) == DuplicateBatch(11)
    # fell out of the five (Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER): the partition looks it up below offset 11
    assert p.check(1, 0, 0, 1) == EarlierBatch(1, 0, 0, 0, 11)
    assert p.copy_for({1}).check(1, 0, 0, 1) == EarlierBatch(1, 0, 0, 0, 11)


@pytest.mark.parametrize(("first_seq", "count"), [
    (0, 2),  # reaches into the batches kept: not a retry of one batch
    (7, 1),  # past the next sequence: a gap
])
def test_sequences_not_wholly_before_the_five_kept_are_out_of_order(first_seq: int, count: int):
    p = PartitionProducers()
    for k in range(6):
        p.record(1, 0, k, 1, 10 + k)
    with pytest.raises(SequenceError) as refused:
        p.check(1, 0, first_seq, count)
    assert refused.value.error_code is ErrorCode.out_of_order_sequence_number


def test_an_earlier_batch_is_only_one_of_the_epoch_this_partition_holds_from_its_first_sequence():
    p = PartitionProducers()
    for k in range(10, 16):  # a producer first seen at sequence 10 (its earlier batches deleted by retention)
        p.record(2, 0, k, 1, k)
    with pytest.raises(SequenceError):
        p.check(2, 0, 3, 1)  # below what this partition holds of it: nothing to look up
    assert p.check(2, 0, 10, 1) == EarlierBatch(2, 0, 10, 10, 11)
    for k in range(6):  # a new epoch starts over at 0
        p.record(2, 1, k, 1, 20 + k)
    assert p.check(2, 1, 0, 1) == EarlierBatch(2, 1, 0, 0, 21)
    with pytest.raises(SequenceError) as fenced:
        p.check(2, 0, 10, 1)
    assert fenced.value.error_code is ErrorCode.invalid_producer_epoch


def test_epochs_fence_old_producers_and_restart_sequences():
    p = PartitionProducers()
    p.record(3, 1, 0, 4, 0)
    with pytest.raises(SequenceError) as fenced:
        p.check(3, 0, 4, 1)
    assert fenced.value.error_code is ErrorCode.invalid_producer_epoch
    with pytest.raises(SequenceError):
        p.check(3, 2, 5, 1)  # a new epoch starts at 0
    assert p.check(3, 2, 0, 1) is None
    p.record(3, 2, 0, 1, 4)
    assert p.check(3, 2, 1, 1) is None


def test_unknown_producers_are_accepted_at_any_sequence():
    assert PartitionProducers().check(42, 0, 17, 1) is None


def test_sequences_wrap_at_2_pow_31():
    p = PartitionProducers()
    p.record(5, 0, 2**31 - 2, 2, 0)
    assert p.check(5, 0, 0, 1) is None


def _sent(sequence: int, count: int = 1) -> bytes:
    """Producer 3075's batch of ``count`` records from ``sequence``, at epoch 0."""
    from walgate.wire import encode_batch

    return encode_batch(0, [1] * count, [None] * count, [b"v%d" % (sequence + k) for k in range(count)],
                        producer_id=3075, producer_epoch=0, base_sequence=sequence)


def test_a_retry_older_than_the_five_kept_batches_answers_its_original_offset_also_after_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """The CI finding of 2026-11-30: the Java producer's first batch (sequence 0) retried after the partition took the
    run's 33 records, answered OUT_OF_ORDER_SEQUENCE_NUMBER "sequence 0, expected 33" forever. Now its original
    offset, nothing written; a leader's state rebuilt from the WAL (a restart, a follower's copy) answers alike."""
    from walgate.storage.engine import Engine

    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {})
    e.append_batches("t", 0, [_sent(0, 3)])  # offsets 0-2
    for k in range(3, 33):
        assert e.append_batches("t", 0, [_sent(k)]) == k
    caplog.set_level(logging.INFO, "walgate.producers")
    for _ in range(2):
        assert e.append_batches("t", 0, [_sent(0, 3)]) == 0
        assert "retry of sequences 0-2 (epoch 0), older than the 5 batches kept, answered with its offset 0" in caplog.text
        assert e.append_batches("t", 0, [_sent(10)]) == 10
        assert e.partitions.offsets("t", 0).high_watermark == 33  # nothing written
        with pytest.raises(SequenceError) as other:
            e.append_batches("t", 0, [_sent(0, 2)])  # sequences 0-1 were not one batch
        assert other.value.error_code is ErrorCode.out_of_order_sequence_number
        e.close()
        e = Engine.open(tmp_path)
    monkeypatch.setattr(native_topics, "_LOOKUP_ENTRIES", 3)  # the lookup reads 3 entries back from the five kept
    assert e.append_batches("t", 0, [_sent(25)]) == 25
    with pytest.raises(SequenceError) as far:
        e.append_batches("t", 0, [_sent(24)])  # written, further back than the lookup reads
    assert far.value.error_code is ErrorCode.duplicate_sequence_number
    e.delete_records("t", 0, 5)
    with pytest.raises(SequenceError) as gone:
        e.append_batches("t", 0, [_sent(3)])  # written, below the log start now: its offset is not known any more
    assert gone.value.error_code is ErrorCode.duplicate_sequence_number
    assert e.append_batches("t", 0, [_sent(33)]) == 33
    e.close()


def test_producer_ids_are_never_handed_out_twice_across_restarts(tmp_path: Path):
    path = tmp_path / "producer_ids.log"
    ProducerIds.create(path)
    first = ProducerIds(path)
    ids = [first.allocate() for _ in range(3)]
    assert ids == [0, 1, 2]
    again = ProducerIds(path)  # a restart skips the rest of the reserved block
    assert again.allocate() == ProducerIds.BLOCK
    assert ProducerIds(path).allocate() == 2 * ProducerIds.BLOCK


@pytest.mark.parametrize("garbage", [b"", b"\x00" * 20, b'{"next_block": 5}', b"3e6a1b2c {\"next_block\": 5}\n"])
def test_a_damaged_producer_id_file_never_hands_an_id_out_twice(tmp_path: Path, garbage: bytes):
    path = tmp_path / "producer_ids.log"
    ProducerIds.create(path)
    first = ProducerIds(path)
    handed = [first.allocate() for _ in range(ProducerIds.BLOCK + 5)]  # two blocks reserved
    path.write_bytes(garbage)
    damage = DamageLog(tmp_path)
    again = ProducerIds(path, damage)
    assert again.allocate() > max(handed)
    [record] = damage.records
    assert record.action == "reset" and record.file == "producer_ids.log"


def test_a_block_the_disk_refuses_hands_out_nothing(tmp_path: Path):
    ProducerIds.create(tmp_path / "producer_ids.log")
    ids = ProducerIds(tmp_path / "producer_ids.log")
    faults = Faults()
    with faults.active():
        faults.fail("fsync", error=errno.ENOSPC)
        with pytest.raises(StorageUnavailable):
            ids.allocate()
    assert ids.allocate() == 0 and ProducerIds(tmp_path / "producer_ids.log").allocate() == ProducerIds.BLOCK


def test_the_engine_starts_producer_ids_above_every_one_its_wals_hold(tmp_path: Path):
    from walgate.storage.engine import Engine
    from walgate.wire import encode_batch

    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {})
    e.append_batches("t", 0, [encode_batch(0, [1], [None], [b"v"], producer_id=123_456, producer_epoch=0, base_sequence=0)])
    e.close()
    # no block reserved: only the WAL says 123456 is taken
    assert lines.decode((tmp_path / "producer_ids.log").read_bytes()[:-1]) == {"next_block": 0}
    e = Engine.open(tmp_path)
    assert e.producer_ids.allocate() == 123_457
    e.close()


def test_a_lost_producer_id_file_never_hands_an_id_out_again(tmp_path: Path):
    """A data dir has its producer_ids.log from creation on: a missing one was lost (the sweep's "delete
    producer_ids.log" handed out id 1 again), recovered like a damaged one and reported."""
    from walgate.storage.engine import Engine

    e = Engine.open(tmp_path)
    assert (tmp_path / "producer_ids.log").exists()
    handed = [e.producer_ids.allocate() for _ in range(3)]
    e.close()
    (tmp_path / "producer_ids.log").unlink()
    e = Engine.open(tmp_path)
    assert e.producer_ids.allocate() > max(handed)
    [record] = e.damage()
    assert record.file == "producer_ids.log" and record.action == "reset" and "missing" in record.reason
    e.close()
    e = Engine.open(tmp_path)  # written again with the next block: nothing more to report
    assert e.damage() == [] and e.producer_ids.allocate() > max(handed)
    e.close()


def _ids(tmp_path: Path, name: str) -> ProducerIds:
    path = tmp_path / name
    if not path.exists():
        ProducerIds.create(path)
    return ProducerIds(path)


def test_cluster_nodes_never_give_the_same_producer_id(tmp_path: Path):
    nodes = {node: _ids(tmp_path, f"n{node}.log") for node in (0, 1, 2, ProducerIds.NODES - 1)}
    for node, ids in nodes.items():
        ids.cluster(node)
    given = [ids.allocate() for _ in range(ProducerIds.BLOCK + 5) for ids in nodes.values()]  # past a block each
    assert len(set(given)) == len(given)
    assert all(pid % ProducerIds.NODES == node for node, ids in nodes.items() for pid in given[list(nodes).index(node)::4])
    with pytest.raises(InvalidValue, match="below 1024"):
        _ids(tmp_path, "n1024.log").cluster(ProducerIds.NODES)


def test_a_node_turned_cluster_node_never_goes_below_an_id_it_gave_or_saw(tmp_path: Path):
    single = _ids(tmp_path, "p.log")
    handed = [single.allocate() for _ in range(3)]  # 0, 1, 2 as a single node
    again = _ids(tmp_path, "p.log")  # restarted as a cluster node: the block it reserved, then spread
    again.at_least(5000)  # its WALs hold producer 4999 (another node's, say)
    again.cluster(3)
    first = again.allocate()
    assert first > max(handed + [4999]) and first % ProducerIds.NODES == 3
    assert first == ProducerIds.BLOCK * ProducerIds.NODES + 3  # the counter its file reserved, spread
    again.at_least(first + 10 * ProducerIds.NODES)  # a producer id seen later (the transaction log)
    assert again.allocate() >= first + 10 * ProducerIds.NODES


def test_restarting_cluster_nodes_do_not_grow_their_ids_by_the_spread(tmp_path: Path):
    seen = 0
    for _ in range(5):  # each start: the WALs' largest id is the last one given, as the engine lifts it
        ids = _ids(tmp_path, "p.log")
        ids.at_least(seen + 1)
        ids.cluster(7)
        seen = ids.allocate()
    assert seen < 6 * ProducerIds.BLOCK * ProducerIds.NODES  # a block per start, never a factor of 1024 per start
