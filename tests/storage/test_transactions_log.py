"""The transaction coordinator's durable log (walgate/storage/transactions_log.py): durable before applied, replayed
whole, damage reported and skipped, compacted."""

from __future__ import annotations

import errno

import pytest

from tests.storage.faults import WRITE_FAULTS, Faults, refused, truncations
from walgate.storage import transactions_log
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable
from walgate.storage.transactions_log import TRANSACTIONS_LOG, TransactionLog


def state(n: int) -> dict[str, object]:
    return {"pid": n, "epoch": n % 7, "state": "Ongoing", "partitions": [["t", n % 3]]}


def test_append_replay_and_tombstones(tmp_path):
    path = tmp_path / TRANSACTIONS_LOG
    log = TransactionLog.open(path)
    assert log.records == {} and not path.exists()  # a data dir from before transactions: nothing, no damage
    log.append([("a", state(1)), ("b", state(2))])
    log.append([("a", state(3))])
    log.append([("b", None)])
    assert log.records == {"a": state(3)}
    damage = DamageLog(tmp_path)
    assert TransactionLog.open(path, damage).records == {"a": state(3)} and damage.records == []


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_write_changes_nothing_and_loses_nothing_acknowledged(tmp_path, op, kind):
    path = tmp_path / TRANSACTIONS_LOG
    log = TransactionLog.open(path)
    acked: dict[str, object] = {}
    faults = Faults()
    with faults.active():
        for i in range(40):
            tid = f"t{i % 5}"
            if i % 4 == 1:
                refused(faults, op, kind, lambda: log.append([(tid, state(100 + i))]))
            else:
                log.append([(tid, state(100 + i))])
                acked[tid] = state(100 + i)
            assert log.records == acked  # nothing refused is visible
    damage = DamageLog(tmp_path)
    assert TransactionLog.open(path, damage).records == acked and damage.records == []


def test_a_torn_write_that_could_not_be_cut_back_costs_nothing_after_it(tmp_path):
    path = tmp_path / TRANSACTIONS_LOG
    log = TransactionLog.open(path)
    log.append([("a", state(1))])
    faults = Faults()
    with faults.active():
        faults.fail("write", short=True)
        faults.fail("ftruncate", error=errno.EIO)
        with pytest.raises(StorageUnavailable):
            log.append([("a", state(2))])
        faults.clear()
        log.append([("a", state(3)), ("b", state(4))])
    damage = DamageLog(tmp_path)
    assert TransactionLog.open(path, damage).records == {"a": state(3), "b": state(4)}
    assert [d.reason for d in damage.records] == ["transaction log: checksum mismatch"]


def test_truncation_at_every_byte_keeps_every_whole_record(tmp_path):
    path = tmp_path / TRANSACTIONS_LOG
    log = TransactionLog.open(path)
    for i in range(3):
        log.append([(f"t{i}", state(i))])
    for data in truncations(path):
        damage = DamageLog(tmp_path)
        whole = data.count(b"\n")
        assert TransactionLog.open(path, damage).records == {f"t{i}": state(i) for i in range(whole)}
        assert damage.records == []  # a torn tail is a crash while appending: dropped silently


def test_a_flipped_byte_costs_that_record_only_and_is_kept_aside(tmp_path):
    path = tmp_path / TRANSACTIONS_LOG
    log = TransactionLog.open(path)
    for i in range(5):
        log.append([(f"t{i}", state(i))])
    data = bytearray(path.read_bytes())
    data[data.index(b'"t2"') + 2] ^= 0x04
    path.write_bytes(bytes(data))
    damage = DamageLog(tmp_path)
    assert set(TransactionLog.open(path, damage).records) == {"t0", "t1", "t3", "t4"}
    [record] = damage.records
    assert record.kept and "checksum" in record.reason
    again = DamageLog(tmp_path)
    assert set(TransactionLog.open(path, again).records) == {"t0", "t1", "t3", "t4"} and again.records == []


def test_a_checksummed_line_that_is_not_a_record_is_reported(tmp_path):
    from walgate.storage import lines

    path = tmp_path / TRANSACTIONS_LOG
    path.write_bytes(lines.encode({"id": 5, "txn": {}}) + lines.encode({"id": "ok", "txn": state(1)}))
    damage = DamageLog(tmp_path)
    assert TransactionLog.open(path, damage).records == {"ok": state(1)}
    assert ["not a transaction record" in d.reason for d in damage.records] == [True]


def test_the_log_is_compacted_while_running(tmp_path, monkeypatch):
    monkeypatch.setattr(transactions_log, "COMPACT_FLOOR", 10)
    path = tmp_path / TRANSACTIONS_LOG
    log = TransactionLog.open(path)
    for i in range(50):
        log.append([("a", state(i))])
    assert path.read_bytes().count(b"\n") <= 11
    assert TransactionLog.open(path).records == {"a": state(49)}
