"""Group records in the coordinator log (walgate/storage/coordinator_log.py, once groups.log): durable, compacted,
and damage never stops a start."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from faults import WRITE_FAULTS, Faults, refused, truncations

from walgate.storage import coordinator_log
from walgate.storage.coordinator_log import COMPACT_FLOOR, CoordinatorLog
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable


def value(generation: int) -> dict[str, Any]:
    return {"type": "classic", "generation": generation, "members": [{"id": f"m-{generation}", "é": "ü"}]}


def reopen(path: Any) -> tuple[dict[str, Any], DamageLog]:
    damage = DamageLog(path.parent)
    return dict(CoordinatorLog.open(path, damage).groups()), damage


def test_write_reopen_and_delete(tmp_path):
    path = tmp_path / "offsets-0.log"
    log = CoordinatorLog.open(path, DamageLog(tmp_path))
    assert dict(log.groups()) == {} and not path.exists()  # created by the first record
    log.write_groups([("g", value(1)), ("h", value(2))])
    log.write_groups([("g", value(3)), ("h", None)])
    assert dict(log.groups()) == {"g": value(3)}
    groups, damage = reopen(path)
    assert groups == {"g": value(3)} and damage.records == []


def test_a_write_is_fsynced_before_it_returns(tmp_path):
    path = tmp_path / "offsets-0.log"
    log = CoordinatorLog.open(path, DamageLog(tmp_path))
    faults = Faults()
    with faults.active():
        log.write_groups([("g", value(1))])
    assert faults.calls["fsync"] == 1 and reopen(path)[0] == {"g": value(1)}


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_write_records_nothing_and_loses_nothing_written(tmp_path, op, kind):
    path = tmp_path / "offsets-0.log"
    log = CoordinatorLog.open(path, DamageLog(tmp_path))
    acked: dict[str, Any] = {}
    faults = Faults()
    with faults.active():
        for i in range(40):
            group = f"g{i % 3}"
            if i % 4 == 1:
                refused(faults, op, kind, lambda: log.write_groups([(group, value(i))]))
            else:
                log.write_groups([(group, value(i))])
                acked[group] = value(i)
            assert dict(log.groups()) == acked  # nothing refused is visible
    groups, damage = reopen(path)
    assert groups == acked and damage.records == []


def test_a_torn_line_the_disk_would_not_cut_back_costs_nothing_after_it(tmp_path):
    path = tmp_path / "offsets-0.log"
    log = CoordinatorLog.open(path, DamageLog(tmp_path))
    log.write_groups([("g", value(1))])
    faults = Faults()
    with faults.active():
        faults.fail("write", short=True)  # half a line written ...
        faults.fail("ftruncate", error=errno.EIO)  # ... and the disk would not cut it back
        with pytest.raises(StorageUnavailable):
            log.write_groups([("g", value(2))])
        faults.clear()
        log.write_groups([("h", value(3))])
    groups, damage = reopen(path)
    assert groups == {"g": value(1), "h": value(3)}
    assert [d.reason for d in damage.records] == [
        "coordinator log: checksum mismatch" + CoordinatorLog.CONSEQUENCE]


def test_a_truncated_file_keeps_every_whole_line(tmp_path):
    path = tmp_path / "offsets-0.log"
    log = CoordinatorLog.open(path, DamageLog(tmp_path))
    for i in range(5):
        log.write_groups([(f"g{i}", value(i))])
    for data in truncations(path):
        groups, _ = reopen(path)
        whole = data.count(b"\n")
        assert groups == {f"g{i}": value(i) for i in range(whole)}  # a torn tail costs its own line only


def test_a_flipped_byte_costs_that_groups_line_only_and_is_reported(tmp_path):
    path = tmp_path / "offsets-0.log"
    log = CoordinatorLog.open(path, DamageLog(tmp_path))
    for i in range(5):
        log.write_groups([(f"g{i}", value(i))])
    data = path.read_bytes()
    start = data.index(b'"g2"')
    for pos in range(start, data.index(b"\n", start)):
        for bit in (0, 7):
            path.write_bytes(data[:pos] + bytes([data[pos] ^ 1 << bit]) + data[pos + 1:])
            groups, damage = reopen(path)
            assert groups == {f"g{i}": value(i) for i in (0, 1, 3, 4)}
            [record] = damage.records
            assert record.reason.startswith("coordinator log:") and record.kept
            again, clean = reopen(path)  # rewritten without the bad line at the first open
            assert again == groups and clean.records == []


def test_a_line_that_is_no_group_record_is_reported_and_skipped(tmp_path):
    from walgate.storage import lines

    path = tmp_path / "offsets-0.log"
    path.write_bytes(lines.encode({"x": 1}) + lines.encode({"g": 7, "v": {}}) + lines.encode({"g": "g", "v": 1}))
    groups, damage = reopen(path)
    assert groups == {"g": 1}
    assert [d.reason.split(":")[1].strip() for d in damage.records] == ["not an offset commit or group record"] * 2


def test_the_log_is_compacted_and_a_refused_compaction_loses_nothing(tmp_path, monkeypatch):
    path = tmp_path / "offsets-0.log"
    log = CoordinatorLog.open(path, DamageLog(tmp_path))
    for i in range(3 * COMPACT_FLOOR):
        log.write_groups([(f"g{i % 2}", value(i))])
        if i % 100 == 0:
            assert path.read_bytes().count(b"\n") <= COMPACT_FLOOR + 3
    monkeypatch.setattr(coordinator_log, "COMPACT_FLOOR", 5)
    faults = Faults()
    with faults.active():
        faults.fail("replace", error=errno.ENOSPC, times=1000)
        for i in range(50):
            log.write_groups([("g0", value(i))])
        assert faults.injected >= 40 and path.read_bytes().count(b"\n") >= 50
        faults.clear()
        log.write_groups([("g1", value(7))])
    assert path.read_bytes().count(b"\n") == 2
    assert reopen(path)[0] == {"g0": value(49), "g1": value(7)}


def test_the_engine_opens_with_a_damaged_group_log_and_reports_it(tmp_path):
    e = Engine.open(tmp_path)
    e.write_group_records([("g", value(1)), ("h", value(2))])
    e.close()
    path = tmp_path / "coordinator" / "offsets-0.log"
    data = bytearray(path.read_bytes())
    data[data.index(b'"h"') + 1] ^= 0x20
    path.write_bytes(bytes(data) + b"\x00" * 64)
    e = Engine.open(tmp_path)
    assert dict(e.group_records()) == {"g": value(1)}
    assert [d.file for d in e.damage()] == ["coordinator/offsets-0.log"] * 2
    e.close()
    assert dict(Engine.open(tmp_path).group_records()) == {"g": value(1)}
