"""WAL append/read/index/roll/retention/recovery."""

from __future__ import annotations

import os
import time

import pytest

from tests.storage.walindex import version_for_timestamp
from walgate.storage.wal import HEADER_SIZE, KIND_DATA, KIND_KAFKA, KIND_META, CorruptEntry, Wal, WalOptions


def _entries(n: int, start_ts: int = 0, size: int = 10) -> list[tuple[int, int, int, bytes]]:
    return [(KIND_DATA, 2, start_ts + i, bytes([i % 256]) * size) for i in range(n)]


def test_versions_span_counts_and_read_back(tmp_path):
    wal = Wal.open(tmp_path, WalOptions())
    assert wal.append([(KIND_META, 1, 5, b"create")]) == 0
    assert wal.append([(KIND_DATA, 3, 7, b"rows")]) == 1
    assert wal.next_version == 4
    e = wal.read(2)
    assert (e.version, e.count, e.kind, e.max_ts, e.body) == (1, 3, KIND_DATA, 7, b"rows")
    assert [x.version for x in wal.read_from(0)] == [0, 1]
    assert wal.read(4) is None
    wal.close()


def test_reopen_keeps_everything_and_continues_versions(tmp_path):
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=200))
    for i in range(30):
        wal.append([(KIND_DATA, 1, i, b"x" * 40)])
    assert len(wal.segments) > 3
    wal.close()
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=200))
    assert wal.next_version == 30
    assert [e.max_ts for e in wal.read_from(0)] == list(range(30))
    assert wal.append([(KIND_DATA, 1, 99, b"y")]) == 30
    wal.close()


def test_segment_roll_never_splits_a_batch(tmp_path):
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=150))
    wal.append(_entries(1, size=50))
    wal.append(_entries(3, size=50))  # does not fit: goes whole into a new segment
    assert len(wal.segments) == 2
    assert wal.segments[1].first == 2
    assert len(wal.segments[1].versions) == 3
    wal.close()


def test_timestamp_lookup_uses_running_max(tmp_path):
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=120))
    for ts in [10, 30, 20, 40, 35, 50]:
        wal.append([(KIND_DATA, 1, ts, b"z" * 30)])
    assert version_for_timestamp(wal, 25) == 1  # first entry with max_ts >= 25
    assert version_for_timestamp(wal, 36) == 3
    assert version_for_timestamp(wal, 10) == 0
    assert version_for_timestamp(wal, 51) is None
    wal.close()


def test_torn_tail_is_truncated(tmp_path, caplog):
    wal = Wal.open(tmp_path, WalOptions())
    wal.append(_entries(3))
    wal.close()
    seg = sorted(tmp_path.glob("*.log"))[-1]
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn header
    wal = Wal.open(tmp_path, WalOptions())
    assert "torn header" in caplog.text
    assert seg.stat().st_size == size
    assert wal.next_version == 6
    wal.close()


def test_incomplete_batch_is_dropped_whole(tmp_path):
    wal = Wal.open(tmp_path, WalOptions())
    wal.append(_entries(1))
    wal.append(_entries(3, size=20))
    wal.close()
    seg = sorted(tmp_path.glob("*.log"))[-1]
    # cut into the last entry of the 3-entry batch: the first two entries are intact but must go too
    os.truncate(seg, seg.stat().st_size - 5)
    wal = Wal.open(tmp_path, WalOptions())
    assert wal.next_version == 2
    assert seg.stat().st_size == HEADER_SIZE + 10
    assert wal.append(_entries(1)) == 2
    wal.close()


def test_corrupt_body_of_the_last_entry_is_cut_and_its_versions_never_reused(tmp_path, caplog):
    wal = Wal.open(tmp_path, WalOptions())
    wal.append(_entries(2))
    wal.append(_entries(1))
    wal.close()
    seg = sorted(tmp_path.glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    data[-1] ^= 0xFF
    seg.write_bytes(bytes(data))
    wal = Wal.open(tmp_path, WalOptions())
    assert "body checksum mismatch" in caplog.text
    assert wal.next_version == 6  # versions 4 and 5 were acknowledged (and maybe read): a gap now
    with pytest.raises(CorruptEntry):
        wal.read(4)
    wal.close()
    assert seg.stat().st_size == 2 * (HEADER_SIZE + 10)
    caplog.clear()
    wal = Wal.open(tmp_path, WalOptions())  # the gap is kept (the cut segment is sealed), not reported again
    assert wal.next_version == 6 and "damage" not in caplog.text and "wal " not in caplog.text
    assert wal.append(_entries(1)) == 6
    wal.close()


def test_corrupt_sealed_segment_is_rejected_on_read(tmp_path):
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=100))
    for i in range(4):
        wal.append([(KIND_DATA, 1, i, b"q" * 50)])
    wal.close()
    first = sorted(tmp_path.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=100))
    with pytest.raises(CorruptEntry):
        wal.read(0)
    assert wal.read(1).version == 1
    wal.close()


def test_missing_index_is_rebuilt(tmp_path):
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=100))
    for i in range(6):
        wal.append([(KIND_DATA, 1, i, b"q" * 50)])
    wal.close()
    for idx in tmp_path.glob("*.idx"):
        idx.unlink()
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=100))
    assert [e.version for e in wal.read_from(0)] == list(range(6))
    assert version_for_timestamp(wal, 3) == 3
    wal.close()


def test_retention_by_size_and_time_moves_log_start(tmp_path):
    opts = WalOptions(segment_bytes=100, retention_bytes=200, retention_period_s=-1)
    wal = Wal.open(tmp_path, opts)
    for i in range(10):
        wal.append([(KIND_DATA, 1, i, b"r" * 50)])
    n = wal.expired_segments(time.time())
    assert n > 0
    wal.delete_oldest(n)
    assert wal.size_bytes <= 200
    assert wal.first_version == wal.segments[0].first > 0
    assert next(wal.read_from(0)).version == wal.first_version
    wal.close()
    aged = Wal.open(tmp_path, WalOptions(segment_bytes=100, retention_period_s=10))
    assert aged.expired_segments(time.time()) == 0
    assert aged.expired_segments(time.time() + 11) == len(aged.segments) - 1
    aged.close()


def test_region_is_the_entry_body_of_that_kind(tmp_path):
    wal = Wal.open(tmp_path, WalOptions())
    wal.append([(KIND_META, 1, 0, b"meta")])
    wal.append([(KIND_KAFKA, 3, 5, b"batch-bytes" * 100)])
    region = wal.region(2, KIND_KAFKA)  # inside the entry's 3 versions
    assert region is not None and len(region) == 1100 and region.read() == wal.read(1).body
    assert os.pread(region.file.fd, len(region), region.offset) == b"batch-bytes" * 100
    assert wal.region(0, KIND_KAFKA) is None  # a meta entry
    assert wal.region(4, KIND_KAFKA) is None  # past the end
    wal.close()


def test_region_outlives_retention_and_closes_when_dropped(tmp_path):
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=100, retention_bytes=0, retention_period_s=-1))
    for i in range(6):
        wal.append([(KIND_KAFKA, 1, i, bytes([i]) * 60)])
    region = wal.region(0, KIND_KAFKA)
    fd = region.file.fd
    wal.delete_oldest(wal.expired_segments(time.time()))
    assert wal.first_version > 0 and not (tmp_path / f"{0:020d}.log").exists()
    assert region.read() == bytes([0]) * 60  # the unlinked segment is still readable through the region
    wal.close()
    del region
    with pytest.raises(OSError):
        os.fstat(fd)  # closed with the last reference


def test_corrupt_header_is_rejected_by_region(tmp_path):
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=250))
    for i in range(6):
        wal.append([(KIND_KAFKA, 1, i, b"k" * 60)])
    wal.close()
    first = sorted(tmp_path.glob("*.log"))[0]  # sealed, 3 entries: opening checks only its last header
    data = bytearray(first.read_bytes())
    data[5] ^= 0xFF  # the first entry's body_len, covered by the header CRC
    first.write_bytes(bytes(data))
    wal = Wal.open(tmp_path, WalOptions(segment_bytes=250))
    with pytest.raises(CorruptEntry):
        wal.region(0, KIND_KAFKA)
    assert wal.region(1, KIND_KAFKA).read() == b"k" * 60
    wal.close()


def test_level2_period0_fsyncs_before_returning(tmp_path, monkeypatch):
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd)))
    wal = Wal.open(tmp_path, WalOptions(level=2, fsync_period_ms=0))
    wal.append(_entries(1))
    assert len(calls) == 1 and wal.durable_version == wal.next_version
    wal.close()


def test_level1_periodic_fsync_is_handed_out_and_survives_a_roll(tmp_path, monkeypatch):
    """sync_due hands out the fsync instead of running it (the gateway runs it off the storage thread); it opens
    the segment itself when run, so a roll closing the WAL's descriptors in between does not matter."""
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    before = time.monotonic()
    lazy = Wal.open(tmp_path, WalOptions(level=1, fsync_period_ms=1000, segment_bytes=4096))
    now = time.monotonic()
    wait, pending = lazy.sync_due(now)
    assert 1.0 - (now - before) <= wait <= 1.0 and pending is None  # nothing appended yet: a period from the open
    lazy.append(_entries(1))
    wait, pending = lazy.sync_due(now + 2)
    assert wait == pytest.approx(1.0, abs=0.01) and pending is not None and pending.version == lazy.next_version
    assert synced == [] and lazy.durable_version == 0  # handed out, not run
    segment = str(lazy.segments[-1].path)
    while len(lazy.segments) == 1:  # roll: the WAL's descriptors of the segment are closed
        lazy.append(_entries(1))
    fds = len(os.listdir("/proc/self/fd"))
    pending.run()
    assert synced[-1] == segment and pending.error is None
    assert len(os.listdir("/proc/self/fd")) == fds  # run() closed the descriptor it opened
    pending.done()
    assert lazy.durable_version >= pending.version
    _, rest = lazy.sync_due(now + 10)  # what was appended after the roll
    rest.run()
    rest.done()
    assert lazy.durable_version == lazy.next_version
    assert lazy.sync_due(now + 20)[1] is None  # nothing new: no fsync
    lazy.close()
