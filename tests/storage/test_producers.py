"""Idempotent-producer rules per partition and durable producer id blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from walgate.storage.producers import DuplicateBatch, PartitionProducers, ProducerIds, SequenceError


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
    assert gap.value.code == "out_of_order_sequence_number"


def test_only_the_last_five_batches_are_recognised_as_duplicates():
    p = PartitionProducers()
    for k in range(6):
        p.record(1, 0, k, 1, 10 + k)
    assert p.check(1, 0, 1, 1) == DuplicateBatch(11)
    with pytest.raises(SequenceError):
        p.check(1, 0, 0, 1)  # fell out of the window: out of order, as in Kafka


def test_epochs_fence_old_producers_and_restart_sequences():
    p = PartitionProducers()
    p.record(3, 1, 0, 4, 0)
    with pytest.raises(SequenceError) as fenced:
        p.check(3, 0, 4, 1)
    assert fenced.value.code == "invalid_producer_epoch"
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


def test_producer_ids_are_never_handed_out_twice_across_restarts(tmp_path: Path):
    path = tmp_path / "producer_ids.json"
    first = ProducerIds(path)
    ids = [first.allocate() for _ in range(3)]
    assert ids == [0, 1, 2]
    again = ProducerIds(path)  # a restart skips the rest of the reserved block
    assert again.allocate() == ProducerIds.BLOCK
    assert ProducerIds(path).allocate() == 2 * ProducerIds.BLOCK
