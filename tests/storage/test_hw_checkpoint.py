"""A replicated vnode's high watermark checkpoint (storage/hw_checkpoint.py, Kafka's ``replication-offset-checkpoint``):
what is written is read back; a missing file reads as none; every refused write (ENOSPC, EIO, a short write, a
failed fsync or rename) raises OSError and leaves the old value or the new one, never a file that does not verify,
and no temporary file; a truncated file (at every byte) or one with a bit flipped reads as none and is reported to
the DamageLog (its bytes kept), as is one that cannot be read."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from faults import FAULT_KINDS, Faults, flipped_in_line, truncations

from walgate.storage import hw_checkpoint
from walgate.storage.damage import DamageLog
from walgate.storage.fileio import SyncLatency

REFUSALS = [("write", k) for k in FAULT_KINDS] + [("fsync", "enospc"), ("fsync", "eio"), ("replace", "eio")]
"""Every way the disk can refuse an atomic replace of the file."""


def test_what_is_written_is_read_and_a_missing_file_is_none(tmp_path: Path) -> None:
    assert hw_checkpoint.read(tmp_path) is None
    for hw in (0, 7, 1 << 40):
        hw_checkpoint.write(tmp_path, hw, syncs=SyncLatency())
        assert hw_checkpoint.read(tmp_path) == hw


@pytest.mark.parametrize(("op", "kind"), REFUSALS)
def test_a_refused_write_raises_and_leaves_the_old_value_or_the_new(tmp_path: Path, op: str, kind: str) -> None:
    hw_checkpoint.write(tmp_path, 5, syncs=SyncLatency())
    damage = DamageLog(tmp_path)
    faults = Faults()
    with faults.active():
        faults.fail_kind(op, kind)
        with pytest.raises(OSError):
            hw_checkpoint.write(tmp_path, 9, syncs=SyncLatency())
        assert faults.injected == 1
    assert hw_checkpoint.read(tmp_path, damage) in ((5,) if op != "fsync" or kind == "short" else (5, 9))
    assert not damage.records and not list(tmp_path.glob("*.tmp"))
    hw_checkpoint.write(tmp_path, 9, syncs=SyncLatency())  # the disk has room again
    assert hw_checkpoint.read(tmp_path, damage) == 9


def test_a_truncated_or_flipped_file_is_reported_and_read_as_none(tmp_path: Path) -> None:
    hw_checkpoint.write(tmp_path, 123456, syncs=SyncLatency())
    path = tmp_path / hw_checkpoint.HW_FILE
    whole = path.read_bytes()
    damage = DamageLog(tmp_path / "damage")
    reports = 0
    for held in truncations(path):
        got = hw_checkpoint.read(tmp_path, damage)
        if held in (whole, whole.rstrip(b"\n")):
            assert got == 123456
        else:
            reports += 1
            assert got is None and len(damage.records) == reports, held
    for _ in flipped_in_line(path, 0):
        reports += 1
        assert hw_checkpoint.read(tmp_path, damage) is None and len(damage.records) == reports
    assert hw_checkpoint.read(tmp_path, damage) == 123456


def test_an_unreadable_file_is_reported_and_read_as_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hw_checkpoint.write(tmp_path, 3, syncs=SyncLatency())
    real = Path.read_bytes

    def failing(self: Path) -> bytes:
        if self.name == hw_checkpoint.HW_FILE:
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real(self)
    monkeypatch.setattr(Path, "read_bytes", failing)
    damage = DamageLog(tmp_path / "damage")
    assert hw_checkpoint.read(tmp_path, damage) is None and len(damage.records) == 1
