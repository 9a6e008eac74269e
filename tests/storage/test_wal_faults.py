"""WAL under a failing disk (issue 13, item 4): every write, fsync and file creation of an append (one that rolls a
segment too) fails in turn with ENOSPC, EIO or a short write; after each the refused append is invisible, memory is
unchanged, the next append takes the refused versions, and a reopen sees exactly the acknowledged entries. And
``Wal.undo_append`` (a request refused by another vnode taken back): memory and disk as before the append (after a
roll too, at both levels), and a cut that fails fences the WAL and zeroes the bytes, so even a restart while fenced
never serves them."""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path

import pytest
from faults import FAULT_KINDS, Faults

from tests.storage.walindex import version_for_timestamp
from walgate.storage.errors import StorageUnavailable
from walgate.storage.wal import HEADER_SIZE, KIND_DATA, Wal, WalOptions

LEVEL1 = WalOptions(level=1, fsync_period_ms=1000, segment_bytes=300)
LEVEL2 = WalOptions(level=2, fsync_period_ms=0, segment_bytes=300)


def _batch(i: int, n: int = 1) -> list[tuple[int, int, int, bytes]]:
    return [(KIND_DATA, 2, i * 10 + k, bytes([i % 251 + 1]) * (20 + k)) for k in range(n)]


def _check(wal: Wal, acked: dict[int, bytes]) -> None:
    """Exactly the acknowledged entries are readable, at their versions."""
    assert {e.version: e.body for e in wal.read_from(0)} == acked
    for version, body in acked.items():
        assert wal.read(version).body == body


def _append(wal: Wal, acked: dict[int, bytes], entries: list[tuple[int, int, int, bytes]]) -> int:
    version = wal.append(entries)
    for k, (_, _, _, body) in enumerate(entries):
        acked[version + 2 * k] = body
    return version


def _prepared(root: Path, options: WalOptions) -> tuple[Path, dict[int, bytes]]:
    """A WAL with a sealed segment, whose next one-entry append fits in the active segment and two-entry append
    rolls it."""
    directory = root / "base"
    wal = Wal.open(directory, options)
    acked: dict[int, bytes] = {}
    for i in range(8):
        _append(wal, acked, _batch(i))
    while wal.segments[-1].size + HEADER_SIZE * 2 + 20 + 21 <= options.segment_bytes:
        _append(wal, acked, _batch(9))
    assert len(wal.segments) > 1 and wal.segments[-1].size + HEADER_SIZE + 20 <= options.segment_bytes
    wal.close()
    return directory, acked


def _ops(faults: Faults, wal: Wal, entries: list[tuple[int, int, int, bytes]]) -> dict[str, int]:
    before = dict(faults.calls)
    wal.append(entries)
    return {op: n - before.get(op, 0) for op, n in faults.calls.items() if n - before.get(op, 0)}


@pytest.mark.parametrize("options", [LEVEL1, LEVEL2], ids=["level1", "level2"])
@pytest.mark.parametrize("rolls", [False, True], ids=["append", "append-rolling"])
@pytest.mark.parametrize("undo_fails", [False, True], ids=["undone", "undo-fails"])
def test_every_failing_operation_of_an_append_is_refused_and_undone(tmp_path, options, rolls, undo_fails):
    """With ``undo_fails``, cutting the refused bytes off fails too (until the disk recovers): the WAL is fenced,
    refuses appends meanwhile, never serves the refused bytes, and resumes by itself."""
    base, acked0 = _prepared(tmp_path, options)
    entries = _batch(50, 2 if rolls else 1)
    faults = Faults()
    with faults.active():  # learn what the append does
        probe = Wal.open(shutil.copytree(base, tmp_path / "probe"), options)
        segments = len(probe.segments)
        ops = _ops(faults, probe, entries)
        assert (len(probe.segments) > segments) == rolls
        probe.close()
    assert ops.get("write") and (ops.get("fdatasync") or options.level == 1)
    cases = [(op, at, kind) for op, n in ops.items() if op in ("write", "pwrite", "fsync", "fdatasync", "open",
                                                                "replace")
             for at in range(1, n + 1) for kind in (FAULT_KINDS if op in ("write", "pwrite") else ("enospc", "eio"))]
    refused = harmless = fenced = 0
    for case, (op, at, kind) in enumerate(cases):
        directory = shutil.copytree(base, tmp_path / f"case{case}")
        wal = Wal.open(directory, options)
        acked = dict(acked0)
        next_version, segments, size = wal.next_version, len(wal.segments), wal.segments[-1].size
        with faults.active():
            faults.fail_kind(op, kind, at=at)
            if undo_fails:
                faults.fail("ftruncate", error=errno.EIO, times=1000)
            try:
                _append(wal, acked, entries)
                harmless += 1
                assert (op, kind) == ("write", "short"), (op, at, kind)  # half of the empty write creating a file
            except StorageUnavailable as exc:
                refused += 1
                assert str(directory) in str(exc) and ("ENOSPC" in str(exc) or "EIO" in str(exc)), exc
                assert wal.next_version == next_version
                # either nothing changed, or the roll was complete before the append's own write failed
                assert (len(wal.segments), wal.segments[-1].size) in ((segments, size), (segments + 1, 0))
                if len(wal.segments) > segments:
                    assert wal.segments[-1].first == next_version
                assert wal.read(next_version) is None
                assert wal.append([]) == next_version
                if "could not be undone" in str(exc):
                    fenced += 1
                    assert undo_fails and wal.segments[-1].path.stat().st_size > wal.segments[-1].size
                    _check(wal, acked)
                    with pytest.raises(StorageUnavailable, match="read-only"):
                        wal.append(_batch(59))
                else:
                    assert wal.segments[-1].path.stat().st_size == wal.segments[-1].size
                    assert sorted(p.name for p in directory.glob("*.log")) == [s.path.name for s in wal.segments]
            faults.clear()
        _check(wal, acked)
        expected = wal.next_version
        assert _append(wal, acked, _batch(60)) == expected  # the refused versions go to the next append
        _append(wal, acked, _batch(61, 3))
        _check(wal, acked)
        wal.close()
        reopened = Wal.open(directory, options)
        _check(reopened, acked)
        reopened.close()
        shutil.rmtree(directory)
    assert refused > len(cases) // 2 and refused + harmless == len(cases)
    assert (fenced > 0) == undo_fails  # (when bytes were written before the fault: a short write, a failed sync)
    print(f"{len(cases)} faults: {refused} refused ({fenced} fenced), {harmless} harmless; the append did {ops}")


def test_issue_13_disk_full_after_the_log_write(tmp_path, monkeypatch):
    """The issue's scenario: the log write succeeds, the write after it fails with ENOSPC (it was the index write,
    and the refused record was then served at the next version and later ones lost on restart)."""
    wal = Wal.open(tmp_path, WalOptions())
    acked: dict[int, bytes] = {}
    _append(wal, acked, _batch(0))
    real_write, writes = os.write, []

    def write(fd: int, data: bytes) -> int:
        writes.append(fd)
        if len(writes) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    refused = None
    for i in range(1, 4):
        try:
            _append(wal, acked, _batch(i))
        except StorageUnavailable:
            refused = wal.next_version
            break
    assert refused is not None and wal.read(refused) is None
    monkeypatch.undo()  # the disk has space again
    versions = [_append(wal, acked, _batch(10 + i)) for i in range(5)]  # five acks=all records
    assert versions[0] == refused
    _check(wal, acked)
    wal.close()
    _check(Wal.open(tmp_path, WalOptions()), acked)


def test_a_failed_fdatasync_refuses_the_append_and_is_not_retried_as_durable(tmp_path, monkeypatch):
    wal = Wal.open(tmp_path, LEVEL2)
    acked: dict[int, bytes] = {}
    _append(wal, acked, _batch(0))
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
    with pytest.raises(StorageUnavailable, match="EIO"):
        wal.append(_batch(1))
    assert wal.durable_version == wal.next_version == 2
    assert wal.segments[-1].path.stat().st_size == wal.segments[-1].size  # the refused entry was cut off
    monkeypatch.setattr(os, "fdatasync", real)
    assert _append(wal, acked, _batch(2)) == 2
    _check(wal, acked)
    wal.close()
    _check(Wal.open(tmp_path, LEVEL2), acked)


def test_undo_failing_too_fences_the_wal_until_the_disk_recovers(tmp_path, caplog):
    wal = Wal.open(tmp_path, LEVEL2)
    acked: dict[int, bytes] = {}
    _append(wal, acked, _batch(0))
    faults = Faults()
    with faults.active():
        faults.fail("fdatasync", error=errno.ENOSPC)
        faults.fail("ftruncate", error=errno.EIO, times=3)
        with pytest.raises(StorageUnavailable, match="could not be undone"):
            wal.append(_batch(1))
        assert wal.read(2) is None and wal.next_version == 2
        assert wal.segments[-1].path.stat().st_size > wal.segments[-1].size  # the refused bytes are still there
        _check(wal, acked)  # ... but never served
        for _ in range(2):
            with pytest.raises(StorageUnavailable, match="read-only"):
                wal.append(_batch(2))
        faults.clear()
        assert _append(wal, acked, _batch(3)) == 2  # the undo succeeds first: service resumes by itself
    assert "accepted again" in caplog.text
    _check(wal, acked)
    wal.close()
    _check(Wal.open(tmp_path, LEVEL2), acked)


def test_a_failed_periodic_fdatasync_keeps_versions_non_durable_and_rewrites_them(tmp_path, monkeypatch, caplog):
    wal = Wal.open(tmp_path, LEVEL1)
    acked: dict[int, bytes] = {}
    _append(wal, acked, _batch(0))
    _append(wal, acked, _batch(1))
    now = time.monotonic()
    _, pending = wal.sync_due(now + 2)
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
    pending.run()  # on the worker thread: must not raise (the server would log a traceback)
    pending.done()
    assert wal.durable_version == 0
    assert "periodic fdatasync failed" in caplog.text
    monkeypatch.setattr(os, "fdatasync", real)
    _append(wal, acked, _batch(2))
    faults = Faults()
    with faults.active():
        _, retry = wal.sync_due(now + 4)
        retry.run()
        assert faults.calls["pwrite"] >= 1 and faults.calls["fdatasync"] == 1  # the pages are re-dirtied first
    retry.done()
    assert wal.durable_version == wal.next_version
    assert wal.sync_due(now + 6)[1] is None
    _check(wal, acked)
    wal.close()


def test_a_failed_explicit_sync_raises_and_the_next_one_rewrites(tmp_path):
    wal = Wal.open(tmp_path, LEVEL1)
    acked: dict[int, bytes] = {}
    _append(wal, acked, _batch(0))
    faults = Faults()
    with faults.active():
        faults.fail("fdatasync", error=errno.EIO)
        with pytest.raises(StorageUnavailable, match="not durable"):
            wal.sync()
        assert wal.durable_version == 0
        wal.sync()
        assert faults.calls["pwrite"] >= 1
    assert wal.durable_version == wal.next_version
    wal.close()


def test_close_and_retention_with_a_failing_disk_leave_a_wal_that_reopens(tmp_path, monkeypatch, caplog):
    options = WalOptions(level=1, segment_bytes=120, retention_bytes=0, retention_period_s=-1)
    wal = Wal.open(tmp_path, options)
    acked: dict[int, bytes] = {}
    for i in range(12):
        _append(wal, acked, _batch(i))
    assert len(wal.segments) == 6
    real_unlink = os.unlink
    calls = []

    def unlink(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 3:  # the second segment's index
            raise OSError(errno.EIO, "Input/output error")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    first = wal.first_version
    wal.delete_oldest(3)
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert "cannot delete" in caplog.text and len(wal.segments) == 5 and wal.first_version > first
    acked = {v: b for v, b in acked.items() if v >= wal.first_version}
    _check(wal, acked)
    faults = Faults()
    with faults.active():
        faults.fail("fdatasync", error=errno.EIO)
        wal.close()  # logs, does not raise
    assert "closing" in caplog.text
    _check(Wal.open(tmp_path, options), acked)


def test_a_periodic_sync_proves_nothing_once_an_fdatasync_failed_meanwhile(tmp_path):
    """fsyncgate: after a failed fdatasync, one through another descriptor can succeed with the data lost."""
    wal = Wal.open(tmp_path, LEVEL1)
    acked: dict[int, bytes] = {}
    _append(wal, acked, _batch(0))
    _, pending = wal.sync_due(time.monotonic() + 2)
    faults = Faults()
    with faults.active():
        faults.fail("fdatasync", error=errno.EIO)
        with pytest.raises(StorageUnavailable):
            wal.sync()  # fails on the storage thread while the periodic one is on its way
    pending.run()
    pending.done()
    assert pending.error is None and wal.durable_version == 0
    wal.sync()  # rewrites, then syncs
    assert wal.durable_version == wal.next_version
    wal.close()


# ------------------------------------------------------------------------------------------------- undo_append


def _state(wal: Wal) -> tuple[int, int, int, int, int]:
    """What an undo must restore: versions, segments, the active segment's size in memory and on disk."""
    seg = wal.segments[-1]
    return wal.next_version, len(wal.segments), seg.first, seg.size, seg.path.stat().st_size


@pytest.mark.parametrize("options", [LEVEL1, LEVEL2], ids=["level1", "level2"])
@pytest.mark.parametrize("rolls", [False, True], ids=["append", "append-rolling"])
def test_undo_append_takes_the_last_append_back(tmp_path, options, rolls):
    base, acked = _prepared(tmp_path, options)
    wal = Wal.open(base, options)
    before, durable = _state(wal), wal.durable_version
    assert version_for_timestamp(wal, 10**6) is None
    faults = Faults()
    with faults.active():
        first = wal.append([(KIND_DATA, 2, 10**6 + k, b"undone" * 4) for k in range(2 if rolls else 1)])
        assert (len(wal.segments) > before[1]) == rolls
        assert wal.read(first).body == b"undone" * 4 and version_for_timestamp(wal, 10**6) == first
        ops = dict(faults.calls)
        wal.undo_append(first)
        undo_ops = {op: n - ops.get(op, 0) for op, n in faults.calls.items() if n - ops.get(op, 0)}
    assert undo_ops.get("ftruncate") == 1 and undo_ops.get("fdatasync") == 1  # cut, and the cut made durable
    if rolls:  # the new segment stays, empty: what a roll whose append failed leaves
        assert _state(wal) == (first, before[1] + 1, first, 0, 0)
    else:
        assert _state(wal) == before
    assert wal.durable_version == wal.next_version >= durable
    assert wal.read(first) is None and version_for_timestamp(wal, 10**6) is None  # the running max went back too
    _check(wal, acked)
    assert _append(wal, acked, _batch(70)) == first  # its versions go to the next append
    assert version_for_timestamp(wal, 10**6) is None
    _check(wal, acked)
    wal.close()
    reopened = Wal.open(base, options)
    _check(reopened, acked)
    assert version_for_timestamp(reopened, 10**6) is None
    reopened.close()


def test_undo_append_of_an_empty_append_or_not_the_last_one(tmp_path):
    wal = Wal.open(tmp_path, LEVEL1)
    acked: dict[int, bytes] = {}
    first = _append(wal, acked, _batch(0))
    wal.undo_append(wal.append([]))  # nothing appended: nothing to undo
    second = _append(wal, acked, _batch(1))
    with pytest.raises(ValueError, match="does not begin the last append"):
        wal.undo_append(first)
    with pytest.raises(ValueError):
        wal.undo_append(second + 1)
    wal.undo_append(second)
    del acked[second]
    with pytest.raises(ValueError):
        wal.undo_append(first)  # the append before the undone one is not undone with it
    _check(wal, acked)
    wal.close()


@pytest.mark.parametrize("options", [LEVEL1, LEVEL2], ids=["level1", "level2"])
@pytest.mark.parametrize("rolls", [False, True], ids=["append", "append-rolling"])
def test_an_undo_that_cannot_cut_fences_the_wal_and_a_restart_never_serves_the_undone_append(
        tmp_path, options, rolls, caplog):
    base, acked = _prepared(tmp_path, options)
    wal = Wal.open(base, options)
    faults = Faults()
    with faults.active():
        first = wal.append(_batch(80, 2 if rolls else 1))
        faults.fail("ftruncate", error=errno.EIO, times=1000)
        wal.undo_append(first)  # never raises: it fences
        assert "cannot undo an undone append" in caplog.text and "zeroed" in caplog.text
        seg = wal.segments[-1]
        assert wal.next_version == first and wal.read(first) is None
        assert seg.path.stat().st_size > seg.size  # the bytes could not be cut ...
        assert not any(seg.path.read_bytes()[seg.size :])  # ... but are zeroed
        _check(wal, acked)
        with pytest.raises(StorageUnavailable, match="read-only"):
            wal.append(_batch(81))
        crashed = shutil.copytree(base, tmp_path / "crashed")  # a restart while fenced (what the page cache holds)
        restarted = Wal.open(crashed, options)
        assert restarted.next_version == first
        _check(restarted, acked)
        restarted.close()
        faults.clear()
        assert _append(wal, acked, _batch(82)) == first  # the cut succeeds first: service resumes by itself
    assert "accepted again" in caplog.text
    _check(wal, acked)
    wal.close()
    _check(Wal.open(base, options), acked)


def test_an_undo_that_can_neither_cut_nor_zero_says_a_restart_may_keep_it(tmp_path, caplog):
    wal = Wal.open(tmp_path, LEVEL2)
    acked: dict[int, bytes] = {}
    _append(wal, acked, _batch(0))
    faults = Faults()
    with faults.active():
        first = wal.append(_batch(1))
        faults.fail("ftruncate", error=errno.EIO, times=1000)
        faults.fail("pwrite", error=errno.EIO, times=1000)
        wal.undo_append(first)
        assert "may keep them" in caplog.text
        assert wal.read(first) is None
        _check(wal, acked)
        faults.clear()
        assert _append(wal, acked, _batch(2)) == first
    _check(wal, acked)
    wal.close()
    _check(Wal.open(tmp_path, LEVEL2), acked)
