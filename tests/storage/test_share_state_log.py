"""share_groups.log (walgate/storage/share_state_log.py): durable, compacted, and damage never stops a start."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from faults import WRITE_FAULTS, Faults, refused, truncations

from walgate.storage import share_state_log
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable
from walgate.storage.share_state_log import COMPACT_FLOOR, ShareStateLog

TOPIC = "6cd5b087-f4a1-4166-b030-55e52dc70cbf"


def key(partition: int, group: str = "sg") -> tuple[str, str, int]:
    return (group, TOPIC, partition)


def value(start: int) -> dict[str, Any]:
    return {"s": start, "e": start + 3, "r": [[start, start + 2, 2, 1]]}


def reopen(path: Any) -> tuple[dict[Any, Any], DamageLog]:
    damage = DamageLog(path.parent)
    return dict(ShareStateLog.open(path, damage).states()), damage


def test_write_reopen_and_delete(tmp_path):
    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path))
    assert dict(log.states()) == {} and not path.exists()  # created by the first record
    log.write([(key(0), value(1)), (key(1), value(2))])
    log.write([(key(0), value(3)), (key(1), None)])
    assert dict(log.states()) == {key(0): value(3)}
    states, damage = reopen(path)
    assert states == {key(0): value(3)} and damage.records == []


def test_a_write_is_fsynced_before_it_returns(tmp_path):
    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path))
    faults = Faults()
    with faults.active():
        log.write([(key(0), value(1))])
    assert faults.calls["fsync"] == 1 and reopen(path)[0] == {key(0): value(1)}


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_write_records_nothing_and_loses_nothing_written(tmp_path, op, kind):
    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path))
    acked: dict[Any, Any] = {}
    faults = Faults()
    with faults.active():
        for i in range(40):
            k = key(i % 3)
            if i % 4 == 1:
                refused(faults, op, kind, lambda k=k, i=i: log.write([(k, value(i))]))
            else:
                log.write([(k, value(i))])
                acked[k] = value(i)
            assert dict(log.states()) == acked  # nothing refused is visible
    states, damage = reopen(path)
    assert states == acked and damage.records == []


def test_a_torn_line_the_disk_would_not_cut_back_costs_nothing_after_it(tmp_path):
    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path))
    log.write([(key(0), value(1))])
    faults = Faults()
    with faults.active():
        faults.fail("write", short=True)
        faults.fail("ftruncate", error=errno.EIO)
        with pytest.raises(StorageUnavailable):
            log.write([(key(0), value(2))])
        faults.clear()
        log.write([(key(1), value(3))])
    states, damage = reopen(path)
    assert states == {key(0): value(1), key(1): value(3)}
    assert [d.reason.split(";")[0] for d in damage.records] == ["share group state: checksum mismatch"]


def test_a_truncated_file_keeps_every_whole_line(tmp_path):
    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path))
    for i in range(5):
        log.write([(key(i), value(i))])
    for data in truncations(path):
        states, _ = reopen(path)
        assert states == {key(i): value(i) for i in range(data.count(b"\n"))}


def test_a_flipped_byte_costs_that_partitions_line_only_and_is_reported(tmp_path):
    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path))
    for i in range(5):
        log.write([(key(i), value(i))])
    data = path.read_bytes()
    start = data.index(b'"p":2')
    line_start, line_end = data.rindex(b"\n", 0, start) + 1, data.index(b"\n", start)
    for pos in range(line_start, line_end):
        for bit in (0, 7):
            path.write_bytes(data[:pos] + bytes([data[pos] ^ 1 << bit]) + data[pos + 1:])
            states, damage = reopen(path)
            assert states == {key(i): value(i) for i in (0, 1, 3, 4)}
            [record] = damage.records
            assert record.reason.startswith("share group state:") and record.kept
            again, clean = reopen(path)  # rewritten without the bad line at the first open
            assert again == states and clean.records == []


def test_a_line_that_is_no_share_record_is_reported_and_skipped(tmp_path):
    from walgate.storage import lines

    path = tmp_path / "share_groups.log"
    path.write_bytes(lines.encode({"x": 1}) + lines.encode({"g": "sg", "t": TOPIC, "p": -1, "v": {}})
                     + lines.encode({"g": "sg", "t": TOPIC, "p": 0, "v": 1}))
    states, damage = reopen(path)
    assert states == {key(0): 1}
    assert [d.reason.split(":")[1].strip().split(";")[0] for d in damage.records] == [
        "not a share-partition record", "not a share-partition record"]


def test_the_log_is_compacted_and_a_refused_compaction_loses_nothing(tmp_path, monkeypatch):
    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path))
    monkeypatch.setattr(share_state_log, "COMPACT_FLOOR", 5)
    faults = Faults()
    with faults.active():
        faults.fail("replace", error=errno.ENOSPC, times=1000)
        for i in range(50):
            log.write([(key(0), value(i))])
        assert faults.injected >= 40 and path.read_bytes().count(b"\n") >= 50
        faults.clear()
        log.write([(key(1), value(7))])
    assert path.read_bytes().count(b"\n") == 2
    assert reopen(path)[0] == {key(0): value(49), key(1): value(7)}
    assert COMPACT_FLOOR == 1000


def synced(log: ShareStateLog) -> Any:
    """Run the group-commit sync the log has queued (as gateway/group_commit.py does, here on this thread)."""
    sync = log.take_sync()
    assert sync is not None
    sync.run()
    sync.done()
    return sync


def test_with_group_commit_a_write_is_applied_only_once_its_sync_ran(tmp_path):
    from walgate.storage.durability import Unsynced

    path = tmp_path / "share_groups.log"
    ledger = Unsynced(lambda owner: None)
    log = ShareStateLog.open(path, DamageLog(tmp_path), unsynced=ledger)
    faults = Faults()
    with faults.active():
        assert log.write([(key(0), value(1))]) == 1 and log.write([(key(1), value(2))]) == 2
        assert ledger.take() == [(log, 2)] and faults.calls["fsync"] == 0 and not path.exists()
        assert dict(log.states()) == {} and log.durable_to == 0
        assert synced(log).covers == 2 and faults.calls["fsync"] == 1  # one fsync for both
    assert dict(log.states()) == {key(0): value(1), key(1): value(2)} and log.durable_to == 2
    assert reopen(path)[0] == dict(log.states())


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_with_group_commit_a_refused_sync_refuses_every_write_not_durable(tmp_path, op, kind):
    from walgate.storage.durability import Unsynced

    path = tmp_path / "share_groups.log"
    log = ShareStateLog.open(path, DamageLog(tmp_path), unsynced=Unsynced(lambda owner: None))
    log.write([(key(0), value(1))])
    synced(log)
    faults = Faults()
    with faults.active():
        log.write([(key(0), value(2))])
        sync = log.take_sync()
        log.write([(key(1), value(3))])  # queued while the sync runs: refused with it
        faults.fail_kind(op, kind)
        sync.run()
        sync.done()
        faults.clear()
    assert sync.error is not None and sync.covers == 3 and log.refusals == 1 and log.durable_to == 1
    assert log.take_sync() is None and dict(log.states()) == {key(0): value(1)}
    log.write([(key(1), value(4))])
    synced(log)
    assert log.durable_to == 4 and dict(log.states()) == {key(0): value(1), key(1): value(4)}
    states, damage = reopen(path)
    assert states == dict(log.states()) and damage.records == []
