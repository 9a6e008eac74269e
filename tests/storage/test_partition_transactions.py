"""Transactions, partition side: transactional batches open a producer's transaction, markers end it; the last
stable offset, the aborted list, the rules that refuse batches and markers, and all of it rebuilt from the WAL
(reopen, a kill -9 between a transactional append and its marker, a lost marker)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from faults import FAULT_KINDS, Faults

from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, NotFound, StorageUnavailable
from walgate.storage.producers import AbortedTxn, ActiveProducer, PartitionProducers, SequenceError
from walgate.storage.wal import KIND_KAFKA
from walgate.wire import batch_header, encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.record_batch import CONTROL_ABORT, CONTROL_COMMIT, decode_batch, end_txn_marker, txn_marker


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True, ts: int = 1000) -> bytes:
    return encode_batch(0, [ts] * n, [None] * n, [b"v%d" % i for i in range(n)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


# ------------------------------------------------------------------ the wire form of a marker


def test_an_end_txn_marker_is_a_control_batch_kafka_reads():
    raw = end_txn_marker(7, 3, 5, False, 1234, base_offset=40, partition_leader_epoch=0)
    b = decode_batch(raw)
    assert (b.is_control, b.is_transactional, b.producer_id, b.producer_epoch, b.base_sequence) == (True, True, 7, 3, -1)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in b.records] == [
        (40, 1234, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05")]  # key: version 0, ABORT; value: version 0, epoch 5
    assert txn_marker(raw) == (CONTROL_ABORT, 5)
    assert txn_marker(end_txn_marker(7, 3, 6, True, 0)) == (CONTROL_COMMIT, 6)


def test_a_control_batch_that_is_no_marker_is_skipped():
    other = encode_batch(0, [0], [b"\x00\x00\x00\x02"], [b""], is_control=True)  # LEADER_CHANGE-like
    assert txn_marker(other) is None
    assert txn_marker(encode_batch(0, [0], [b"\x00"], [b""], is_control=True)) is None


# ------------------------------------------------------------------ one partition's rules


def test_a_transaction_opens_at_its_first_batch_and_a_commit_ends_it():
    p = PartitionProducers()
    p.record(7, 0, 0, 2, 10, transactional=True)
    p.record(7, 0, 2, 3, 12, transactional=True)
    assert p.ongoing() == {7: 10}
    assert p.last_stable(0, 15) == 10
    p.check_marker(7, 0, 0)
    p.record_marker(7, 0, 0, True, 15, 99)
    assert p.ongoing() == {}
    assert p.last_stable(0, 15) == 10  # the marker at 15 is not below the high watermark yet
    assert p.last_stable(0, 16) == 16
    assert p.aborted_between(0, 100, 0) == []
    assert p.active() == [ActiveProducer(7, 0, 4, 99, 0, -1)]


def test_an_abort_enters_the_aborted_list_and_fetch_ranges_select_it():
    p = PartitionProducers()
    p.record(7, 0, 0, 2, 10, transactional=True)
    p.record(8, 0, 0, 2, 12, transactional=True)
    p.record_marker(7, 0, 0, False, 14, 0)
    p.record_marker(8, 0, 0, False, 20, 0)
    assert p.aborted_between(0, 100, 0) == [AbortedTxn(7, 10, 14), AbortedTxn(8, 12, 20)]
    assert p.aborted_between(15, 100, 0) == [AbortedTxn(8, 12, 20)]  # 7's marker is before the fetch
    assert p.aborted_between(0, 12, 0) == [AbortedTxn(7, 10, 14)]  # 8 starts at the upper bound
    assert p.aborted_between(0, 100, 15) == [AbortedTxn(8, 12, 20)]  # wholly below the log start: forgotten
    assert p.last_stable(0, 21) == 21


def test_a_marker_without_a_transaction_changes_no_offsets():
    p = PartitionProducers()
    p.record_marker(7, 0, 0, False, 5, 0)
    assert (p.ongoing(), p.aborted_between(0, 10, 0), p.last_stable(0, 6)) == ({}, [], 6)


def test_the_last_stable_offset_is_bounded_by_the_log_start_and_high_watermark():
    p = PartitionProducers()
    p.record(7, 0, 0, 2, 10, transactional=True)
    assert p.last_stable(12, 20) == 12
    assert p.last_stable(0, 8) == 8


def test_a_non_transactional_batch_inside_a_transaction_is_invalid_txn_state():
    p = PartitionProducers()
    p.record(7, 0, 0, 2, 10, transactional=True)
    with pytest.raises(SequenceError) as err:
        p.check(7, 0, 2, 1, transactional=False)
    assert err.value.error_code is ErrorCode.invalid_txn_state
    assert p.check(7, 0, 2, 1, transactional=True) is None


def test_markers_of_an_old_producer_epoch_or_coordinator_epoch_are_fenced():
    p = PartitionProducers()
    p.record(7, 2, 0, 1, 0, transactional=True)
    p.record_marker(7, 2, 4, True, 1, 0)
    with pytest.raises(SequenceError) as old_epoch:
        p.check_marker(7, 1, 4)
    assert old_epoch.value.error_code is ErrorCode.invalid_producer_epoch
    with pytest.raises(SequenceError) as old_coordinator:
        p.check_marker(7, 2, 3)
    assert old_coordinator.value.error_code is ErrorCode.transaction_coordinator_fenced
    p.check_marker(8, 0, 0)  # a producer the partition does not know


def test_an_abort_with_a_bumped_epoch_fences_the_zombie_and_restarts_sequences():
    p = PartitionProducers()
    p.record(7, 0, 0, 3, 0, transactional=True)
    p.record_marker(7, 1, 0, False, 3, 0)  # the coordinator bumped the epoch when it aborted
    with pytest.raises(SequenceError) as zombie:
        p.check(7, 0, 3, 1, transactional=True)
    assert zombie.value.error_code is ErrorCode.invalid_producer_epoch
    with pytest.raises(SequenceError) as gap:
        p.check(7, 1, 5, 1, transactional=True)
    assert gap.value.error_code is ErrorCode.out_of_order_sequence_number
    assert p.check(7, 1, 0, 1, transactional=True) is None


def test_sequences_go_on_across_transactions_of_one_epoch():
    p = PartitionProducers()
    p.record(7, 0, 0, 3, 0, transactional=True)
    p.record_marker(7, 0, 0, True, 3, 0)
    assert p.check(7, 0, 0, 3, transactional=True).base_offset == 0  # a retry: the original offset
    assert p.check(7, 0, 3, 1, transactional=True) is None


# ------------------------------------------------------------------ the engine


@pytest.fixture()
def engine(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 2, {})
    yield e
    e.close()


def test_markers_move_the_last_stable_offset_and_are_served_as_batches(engine: Engine):
    assert engine.append_batches("t", 0, [encode_batch(0, [1], [None], [b"plain"])]) == 0
    assert engine.append_batches("t", 0, [txn_batch(7, 0)]) == 1
    assert engine.append_batches("t", 0, [txn_batch(8, 0)]) == 3
    assert engine.partitions.offsets("t", 0).last_stable == 1
    assert engine.ongoing_transactions() == {7: [("t", 0, 1)], 8: [("t", 0, 3)]}
    assert engine.write_txn_markers(7, 0, 0, True, [("t", 0), ("t", 1)]) == [None, None]
    assert engine.partitions.offsets("t", 0).last_stable == 3  # 8 is still open
    assert engine.watermarks("t", 0) == (0, 6) and engine.watermarks("t", 1) == (0, 1)  # a marker takes an offset
    assert engine.write_txn_markers(8, 0, 0, False, [("t", 0)]) == [None]
    assert engine.partitions.offsets("t", 0).last_stable == 7 == engine.watermarks("t", 0)[1]
    assert engine.native.aborted_transactions("t", 0, 0, 7) == [AbortedTxn(8, 3, 6)]
    assert engine.native.aborted_transactions("t", 0, 0, 3) == []
    assert engine.ongoing_transactions() == {}
    entries = list(engine.index_entries("t", 0, 0))
    assert [(base, count) for base, _, count in entries] == [(0, 1), (1, 2), (3, 2), (5, 1), (6, 1)]
    marker = engine.native.kafka_region("t", 0, entries[-1][1]).read()
    assert batch_header(marker).base_offset == 6 and txn_marker(marker) == (CONTROL_ABORT, 0)


def test_markers_are_refused_per_partition(engine: Engine):
    engine.execute("CREATE DATABASE db VGROUPS 1")
    engine.execute("CREATE STABLE db.m (ts TIMESTAMP, v INT) TAGS (k INT)")
    engine.execute("CREATE TOPIC td AS STABLE db.m")
    engine.append_batches("t", 0, [txn_batch(7, 0, epoch=2)])
    results = engine.write_txn_markers(7, 1, 0, True, [("t", 0), ("nope", 0), ("t", 9), ("td", 0), ("t", 1)])
    assert isinstance(results[0], SequenceError) and results[0].error_code is ErrorCode.invalid_producer_epoch
    assert isinstance(results[1], NotFound) and isinstance(results[2], NotFound)
    assert isinstance(results[3], InvalidValue)
    assert results[4] is None
    assert engine.watermarks("t", 0) == (0, 2)  # nothing written where it was refused
    assert engine.partitions.offsets("td", 0).last_stable == engine.watermarks("td", 0)[1]
    assert engine.native.aborted_transactions("td", 0, 0, 10) == [] and engine.partitions.producers("td", 0) == []


def test_produce_rules_for_transactional_producers(engine: Engine):
    engine.append_batches("t", 0, [txn_batch(7, 0)])
    with pytest.raises(SequenceError) as err:
        engine.append_batches("t", 0, [txn_batch(7, 2, transactional=False)])
    assert err.value.error_code is ErrorCode.invalid_txn_state
    engine.write_txn_markers(7, 1, 0, False, [("t", 0)])  # fenced: aborted with a bumped epoch
    with pytest.raises(SequenceError) as zombie:
        engine.append_batches("t", 0, [txn_batch(7, 2)])
    assert zombie.value.error_code is ErrorCode.invalid_producer_epoch
    with pytest.raises(SequenceError) as mixed:  # one request: a transaction opened, then a batch outside it
        engine.append_batches("t", 0, [txn_batch(7, 0, epoch=1), txn_batch(7, 2, epoch=1, transactional=False)])
    assert mixed.value.error_code is ErrorCode.invalid_txn_state
    assert engine.append_batches("t", 0, [txn_batch(7, 0, epoch=1), txn_batch(7, 2, epoch=1)]) == 3
    assert engine.ongoing_transactions() == {7: [("t", 0, 3)]}
    assert engine.partitions.producers("t", 0) == [ActiveProducer(7, 1, 3, 1000, 0, 3)]


def test_transaction_state_is_rebuilt_from_the_wal(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {})
    e.append_batches("t", 0, [txn_batch(7, 0)])
    e.append_batches("t", 0, [txn_batch(8, 0)])
    e.write_txn_markers(7, 0, 3, False, [("t", 0)])
    e.append_batches("t", 0, [txn_batch(9, 0)])
    before = (e.ongoing_transactions(), e.partitions.offsets("t", 0).last_stable, e.native.aborted_transactions("t", 0, 0, 100),
              e.partitions.producers("t", 0))
    e.close()
    e = Engine.open(tmp_path)
    after = (e.ongoing_transactions(), e.partitions.offsets("t", 0).last_stable, e.native.aborted_transactions("t", 0, 0, 100),
             e.partitions.producers("t", 0))
    assert after == before == ({8: [("t", 0, 2)], 9: [("t", 0, 5)]}, 2, [AbortedTxn(7, 0, 4)], after[3])
    assert [a.coordinator_epoch for a in after[3]] == [3, -1, -1]
    with pytest.raises(SequenceError):  # the coordinator epoch seen is rebuilt too
        e.native.store.producers[("t", 0)].check_marker(7, 0, 2)
    e.close()


def test_a_lost_marker_leaves_its_transaction_open_for_the_coordinator(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {})
    e.append_batches("t", 0, [txn_batch(7, 0)])
    e.write_txn_markers(7, 0, 0, True, [("t", 0)])
    vnode = e.vnodes[e.catalog.topics["t"].db][0]
    seg = vnode.wal.segments[-1].path
    e.close()
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF  # inside the marker's records
    seg.write_bytes(bytes(data))
    e = Engine.open(tmp_path)
    assert e.ongoing_transactions() == {7: [("t", 0, 0)]}
    assert e.partitions.offsets("t", 0).last_stable == 0
    assert e.write_txn_markers(7, 0, 0, True, [("t", 0)]) == [None]  # written again, the partition is stable
    assert e.partitions.offsets("t", 0).last_stable == e.watermarks("t", 0)[1]
    e.close()


_KILLED = """
import os, signal, sys
from walgate.storage.engine import Engine
from walgate.wire import encode_batch
e = Engine.open(__import__("pathlib").Path(sys.argv[1]))
e.create_kafka_topic("t", 1, {"flush.messages": "1"})
e.append_batches("t", 0, [encode_batch(0, [1], [None], [b"a"], producer_id=7, producer_epoch=0, base_sequence=0,
                                       is_transactional=True)])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_kill_between_a_transactional_append_and_its_marker_leaves_the_transaction_open(tmp_path: Path):
    run = subprocess.run([sys.executable, "-c", _KILLED, str(tmp_path)], timeout=60, capture_output=True,
                         env={**os.environ})
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()
    e = Engine.open(tmp_path)
    assert e.ongoing_transactions() == {7: [("t", 0, 0)]}
    assert e.partitions.offsets("t", 0).last_stable == 0 and e.watermarks("t", 0) == (0, 1)
    assert e.write_txn_markers(7, 0, 0, False, [("t", 0)]) == [None]
    assert e.native.aborted_transactions("t", 0, 0, 2) == [AbortedTxn(7, 0, 1)]
    e.close()


def test_under_group_commit_the_last_stable_offset_waits_for_the_marker_to_be_durable(tmp_path: Path):
    e = Engine.open(tmp_path, group_commit=True)
    e.create_kafka_topic("t", 1, {"flush.messages": "1"})

    def sync() -> None:
        for file, _ in e.take_unsynced():
            s = file.take_sync()
            if s is not None:
                s.run()
                s.done()

    e.append_batches("t", 0, [txn_batch(7, 0)])
    sync()
    assert e.partitions.offsets("t", 0).last_stable == 0 and e.watermarks("t", 0)[1] == 2
    e.write_txn_markers(7, 0, 0, True, [("t", 0)])
    assert e.ongoing_transactions() == {}
    assert e.partitions.offsets("t", 0).last_stable == 0  # the marker is written, not durable: it could still be lost
    sync()
    assert e.partitions.offsets("t", 0).last_stable == 3 == e.watermarks("t", 0)[1]
    e.close()


def test_a_marker_is_one_wal_entry_of_one_record(engine: Engine):
    engine.write_txn_markers(7, 0, 0, True, [("t", 1)])
    vnode = engine.vnodes[engine.catalog.topics["t"].db][1]
    entries = [x for x in vnode.wal.read_from(vnode.wal.first_version) if x.kind == KIND_KAFKA]
    assert [(x.count, txn_marker(x.body)) for x in entries] == [(1, (CONTROL_COMMIT, 0))]


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_marker_the_disk_refuses_changes_nothing_and_can_be_written_again(tmp_path: Path, kind: str):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {"flush.messages": "1"})
    e.append_batches("t", 0, [txn_batch(7, 0)])
    faults = Faults()
    with faults.active():
        faults.fail_kind("write", kind)
        faults.fail("fdatasync", error=errno.EIO)  # a write that passes is refused by its sync
        faults.fail("fsync", error=errno.EIO)
        [refused] = e.write_txn_markers(7, 0, 0, False, [("t", 0)])
    assert isinstance(refused, StorageUnavailable)
    assert (e.ongoing_transactions(), e.watermarks("t", 0), e.native.aborted_transactions("t", 0, 0, 10)) == (
        {7: [("t", 0, 0)]}, (0, 2), [])
    assert e.write_txn_markers(7, 0, 0, False, [("t", 0)]) == [None]
    assert e.native.aborted_transactions("t", 0, 0, 10) == [AbortedTxn(7, 0, 2)]
    e.close()
    e = Engine.open(tmp_path)  # nothing of the refused marker was kept
    assert [batch_header(x.body).base_offset for x in e.vnodes[e.catalog.topics["t"].db][0].wal.read_from(0)] == [0, 2]
    assert (e.ongoing_transactions(), e.native.aborted_transactions("t", 0, 0, 10)) == ({}, [AbortedTxn(7, 0, 2)])
    e.close()


def test_the_log_start_bounds_the_last_stable_offset_and_forgets_aborted_transactions(engine: Engine):
    engine.append_batches("t", 0, [txn_batch(7, 0)])
    engine.write_txn_markers(7, 0, 0, False, [("t", 0)])
    engine.append_batches("t", 0, [txn_batch(8, 0)])
    assert engine.partitions.offsets("t", 0).last_stable == 3
    assert engine.delete_records("t", 0, 4) == 4  # inside 8's open transaction
    assert engine.partitions.offsets("t", 0).last_stable == 4
    assert engine.native.aborted_transactions("t", 0, 4, 5) == []


def test_markers_are_durable_at_wal_level_1_with_the_records_before_them(tmp_path: Path):
    """A topic fsynced periodically (WAL_LEVEL 1): the marker call fsyncs the WAL (the coordinator records the
    transaction complete right after it); a sync the disk refuses is that partition's StorageUnavailable."""
    e = Engine.open(tmp_path)
    e.create_kafka_topic("t", 1, {})
    wal = e.vnodes[e.catalog.topics["t"].db][0].wal
    assert wal.options.level == 1 and wal.options.fsync_period_ms > 0
    e.append_batches("t", 0, [txn_batch(7, 0)])
    assert wal.durable_version < wal.next_version  # the records wait for the periodic fsync
    assert e.write_txn_markers(7, 0, 0, True, [("t", 0)]) == [None]
    assert wal.durable_version == wal.next_version  # the marker and the records before it
    e.append_batches("t", 0, [txn_batch(7, 2)])
    faults = Faults()
    with faults.active():
        faults.fail("fdatasync", error=errno.EIO)
        faults.fail("fsync", error=errno.EIO)
        [refused] = e.write_txn_markers(7, 0, 0, False, [("t", 0)])
    assert isinstance(refused, StorageUnavailable) and wal.durable_version < wal.next_version
    assert e.write_txn_markers(7, 0, 0, False, [("t", 0)]) == [None]  # written again: harmless
    assert wal.durable_version == wal.next_version
    e.close()
