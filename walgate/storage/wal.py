"""The write-ahead log of one vnode: segments, index, CRC32C, fsync policy, retention.

Theory of operation
-------------------
A WAL is a directory of segments. Segment ``<first_version:020d>.log`` holds
entries back to back; ``<first_version:020d>.idx`` holds one fixed-width
index record per entry, so lookups are binary searches over arrays, never
scans. Versions are per vnode, start at 0 and are monotonic: an entry spans
``count`` versions (one per row for data, one for meta), so the versions a
table or topic sees are not contiguous.

Entry layout (little endian; a 36-byte header, then the body)::

    0  u32 header_crc   CRC32C of bytes 4..36
    4  u32 body_len
    8  u32 body_crc     CRC32C of the body
    12 u8  kind         1 = data, 2 = meta
    13 u8  flags        bit 0: "more entries of this batch follow"
    14 u16 reserved
    16 u64 version      first version of the entry
    24 u32 count        versions spanned (>= 1)
    28 i64 max_ts       largest row timestamp (database precision)

Index record (24 bytes): ``u64 version, u64 file_position, i64 running_max_ts``
where running_max_ts is the maximum of max_ts over every entry of the vnode up
to and including this one, so "first entry whose max_ts >= T" is a binary
search over a monotonic array.

Batches: one :meth:`Wal.append` call writes its entries with a single
``write`` and never spans segments; every entry but the last carries the
"more" flag, and replay drops an incomplete batch whole. That makes each
append atomic: after a crash it is there entirely or not at all.

Recovery (:meth:`Wal.open`): sealed segments are trusted when their index
agrees with the log (the last record points at a valid header); otherwise
their index is rebuilt by scanning. The active (last) segment is always
rescanned: every entry's header and body CRC is checked, and the log is
truncated at the first entry that is torn, corrupt or part of an incomplete
batch, with one log line saying where and how many bytes were dropped.

Durability: ``level`` 1 writes to the OS and fsyncs every ``fsync_period_ms``
(driven by :meth:`Wal.sync_due`, whose :class:`PendingSync` runs on another
thread so appends and reads never wait for the disk); ``level`` 2 with period 0
fsyncs inside :meth:`append` before it returns. The index is derived state and is only
fsynced when a segment is sealed.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import crc32c

__all__ = ["Wal", "WalEntry", "WalOptions", "KIND_DATA", "KIND_META", "KIND_KAFKA", "CorruptEntry"]

log = logging.getLogger("walgate.wal")

KIND_DATA = 1
KIND_META = 2
KIND_KAFKA = 3  # a Kafka RecordBatch v2 as produced (base offset = its Kafka offset); count = its records
FLAG_MORE = 1

_HEADER = struct.Struct("<IIIBBHQIq")
HEADER_SIZE = _HEADER.size  # 36
_INDEX = struct.Struct("<QQq")
INDEX_SIZE = _INDEX.size  # 24
_TS_MIN = -(1 << 63)


class CorruptEntry(Exception):
    """An entry read from a sealed segment failed its CRC check."""


@dataclass(frozen=True)
class WalOptions:
    level: int = 1
    fsync_period_ms: int = 3000
    segment_bytes: int = 64 << 20
    retention_period_s: int = 604800  # -1: keep forever
    retention_bytes: int = -1  # -1: unlimited


@dataclass(frozen=True)
class WalEntry:
    version: int
    count: int
    kind: int
    max_ts: int
    body: bytes

    @property
    def next_version(self) -> int:
        return self.version + self.count


class SegmentFile:
    """A read-only descriptor of a segment file, closed when nothing refers to it any more: a :class:`FileRegion`
    being sent keeps it open past the segment's retention, and its number is never reused meanwhile."""

    __slots__ = ("fd",)

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        if hasattr(self, "fd"):  # not when os.open raised
            os.close(self.fd)


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of a segment file from ``offset``: an entry body to be sent with ``sendfile``, never read
    into memory."""

    file: SegmentFile
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        return os.pread(self.file.fd, self.length, self.offset)


class _Segment:
    """One segment: its first version, the in-memory copy of its index, its size."""

    __slots__ = ("first", "versions", "positions", "running_max", "size", "path", "file")

    def __init__(self, directory: Path, first: int) -> None:
        self.first = first
        self.path = directory / f"{first:020d}.log"
        self.versions = array("q")
        self.positions = array("q")
        self.running_max = array("q")
        self.size = 0
        self.file: SegmentFile | None = None

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(".idx")

    def reader(self) -> SegmentFile:
        if self.file is None:
            self.file = SegmentFile(self.path)
        return self.file

    def close(self) -> None:
        self.file = None  # closed now, or when the last region of it has been sent


def _encode(kind: int, flags: int, version: int, count: int, max_ts: int, body: bytes) -> bytes:
    rest = _HEADER.pack(0, len(body), crc32c.crc32c(body), kind, flags, 0, version, count, max_ts)[4:]
    return struct.pack("<I", crc32c.crc32c(rest)) + rest + body


def _decode_header(buf: bytes) -> tuple[int, int, int, int, int, int, int] | None:
    """(body_len, body_crc, kind, flags, version, count, max_ts), or None if the header CRC fails."""
    header_crc, body_len, body_crc, kind, flags, _, version, count, max_ts = _HEADER.unpack(buf)
    if crc32c.crc32c(buf[4:HEADER_SIZE]) != header_crc:
        return None
    return body_len, body_crc, kind, flags, version, count, max_ts


@dataclass(frozen=True)
class PendingSync:
    """A periodic fsync taken from the storage thread: ``run`` (any thread) fdatasyncs ``fd``, a duplicate of the
    active segment's descriptor (a roll or retention may close the original meanwhile), and closes it; ``done``
    (storage thread, after ``run`` returned) marks every version below ``version`` durable."""

    wal: Wal
    fd: int
    version: int

    def run(self) -> None:
        try:
            os.fdatasync(self.fd)
        finally:
            os.close(self.fd)

    def done(self) -> None:
        self.wal.durable_version = max(self.wal.durable_version, self.version)


class Wal:
    """Append-only, versioned, indexed log of one vnode (see the module docstring)."""

    def __init__(self, directory: Path, options: WalOptions) -> None:
        self.dir = directory
        self.options = options
        self.segments: list[_Segment] = []
        self.next_version = 0
        self.durable_version = 0  # versions below this are fsynced
        self._log_fd: int | None = None
        self._idx_fd: int | None = None
        self._running_max = _TS_MIN
        self._last_sync = time.monotonic()

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, directory: Path, options: WalOptions, *, first_version: int = 0) -> "Wal":
        """Open (creating if needed) and recover the WAL in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        wal = cls(directory, options)
        firsts = sorted(int(p.stem) for p in directory.glob("*.log"))
        for p in directory.glob("*.idx"):
            if int(p.stem) not in firsts:
                p.unlink()
        for i, first in enumerate(firsts):
            seg = _Segment(directory, first)
            last = i == len(firsts) - 1
            if last or not wal._load_index(seg):
                wal._scan(seg, repair=last)
            wal.segments.append(seg)
            if seg.running_max:
                wal._running_max = seg.running_max[-1]
        if wal.segments:
            tail = wal.segments[-1]
            wal.next_version = wal._end_version(tail)
        else:
            wal.next_version = first_version
            wal._new_segment(first_version)
        wal._open_active()
        wal.durable_version = wal.next_version
        return wal

    def _end_version(self, seg: _Segment) -> int:
        if not seg.versions:
            return seg.first
        _, (*_, version, count, _max_ts) = self._header_at(seg, len(seg.positions) - 1)
        return version + count

    def _load_index(self, seg: _Segment) -> bool:
        """Load a sealed segment's index; False when it disagrees with the log."""
        try:
            raw = seg.index_path.read_bytes()
        except FileNotFoundError:
            return False
        seg.size = seg.path.stat().st_size
        if len(raw) % INDEX_SIZE or not raw:
            return False
        for version, pos, running in _INDEX.iter_unpack(raw):
            seg.versions.append(version)
            seg.positions.append(pos)
            seg.running_max.append(running)
        header = os.pread(seg.reader().fd, HEADER_SIZE, seg.positions[-1])
        decoded = _decode_header(header) if len(header) == HEADER_SIZE else None
        if (
            decoded is None
            or decoded[4] != seg.versions[-1]
            or seg.positions[-1] + HEADER_SIZE + decoded[0] != seg.size
            or seg.versions[0] != seg.first
        ):
            seg.versions, seg.positions, seg.running_max = array("q"), array("q"), array("q")
            return False
        return True

    def _scan(self, seg: _Segment, *, repair: bool) -> None:
        """Rebuild ``seg``'s index from its log; in the active segment, truncate a bad tail."""
        data = seg.path.read_bytes()
        pos = 0
        expected = seg.first
        running = self._running_max
        committed, committed_end = 0, 0  # entries / bytes of complete batches
        reason = ""
        versions, positions, maxes = array("q"), array("q"), array("q")
        while pos < len(data):
            if len(data) - pos < HEADER_SIZE:
                reason = "torn header"
                break
            decoded = _decode_header(data[pos : pos + HEADER_SIZE])
            if decoded is None:
                reason = "header checksum mismatch"
                break
            body_len, body_crc, kind, flags, version, count, max_ts = decoded
            end = pos + HEADER_SIZE + body_len
            if end > len(data):
                reason = "torn body"
                break
            if crc32c.crc32c(data[pos + HEADER_SIZE : end]) != body_crc:
                reason = "body checksum mismatch"
                break
            if version != expected or count < 1 or kind not in (KIND_DATA, KIND_META, KIND_KAFKA):
                reason = f"unexpected version {version} (expected {expected})"
                break
            running = max(running, max_ts)
            versions.append(version)
            positions.append(pos)
            maxes.append(running)
            expected = version + count
            pos = end
            if not flags & FLAG_MORE:
                committed, committed_end = len(versions), pos
        if committed < len(versions) and not reason:
            reason = "incomplete batch"
        del versions[committed:], positions[committed:], maxes[committed:]
        pos = committed_end
        if pos < len(data):
            if not repair:
                raise CorruptEntry(f"{seg.path}: sealed segment is corrupt at byte {pos} ({reason})")
            log.warning(
                "wal %s: %s at byte %d; truncating %d bytes of torn/corrupt tail",
                seg.path, reason or "bad entry", pos, len(data) - pos,
            )
            with open(seg.path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
        seg.versions, seg.positions, seg.running_max = versions, positions, maxes
        seg.size = pos
        if seg.running_max:
            self._running_max = seg.running_max[-1]
        seg.index_path.write_bytes(
            b"".join(_INDEX.pack(v, p, m) for v, p, m in zip(versions, positions, maxes))
        )

    def _new_segment(self, first: int) -> None:
        seg = _Segment(self.dir, first)
        seg.path.touch()
        seg.index_path.touch()
        _fsync_dir(self.dir)
        self.segments.append(seg)

    def _open_active(self) -> None:
        seg = self.segments[-1]
        self._log_fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
        self._idx_fd = os.open(seg.index_path, os.O_WRONLY | os.O_APPEND)

    # ----------------------------------------------------------------- write

    def append(self, entries: list[tuple[int, int, int, bytes]]) -> int:
        """Append ``(kind, count, max_ts, body)`` entries atomically; returns the first version.

        Returns once the batch is durable per the WAL level (fsynced for level 2,
        period 0; written to the OS otherwise)."""
        if not entries:
            return self.next_version
        first = self.next_version
        chunks: list[bytes] = []
        index: list[bytes] = []
        seg = self.segments[-1]
        total = sum(HEADER_SIZE + len(e[3]) for e in entries)
        if seg.size and seg.size + total > self.options.segment_bytes:
            self._roll()
            seg = self.segments[-1]
        pos = seg.size
        version = first
        running = self._running_max
        new_v, new_p, new_m = [], [], []
        for i, (kind, count, max_ts, body) in enumerate(entries):
            flags = FLAG_MORE if i < len(entries) - 1 else 0
            chunks.append(_encode(kind, flags, version, count, max_ts, body))
            running = max(running, max_ts)
            index.append(_INDEX.pack(version, pos, running))
            new_v.append(version)
            new_p.append(pos)
            new_m.append(running)
            pos += HEADER_SIZE + len(body)
            version += count
        buf = b"".join(chunks)
        written = os.write(self._log_fd, buf)  # type: ignore[arg-type]
        if written != len(buf):  # a short write on a regular file means the disk is full
            os.ftruncate(self._log_fd, seg.size)  # type: ignore[arg-type]
            raise OSError(f"short write to {seg.path}: {written} of {len(buf)} bytes")
        os.write(self._idx_fd, b"".join(index))  # type: ignore[arg-type]
        seg.versions.extend(new_v)
        seg.positions.extend(new_p)
        seg.running_max.extend(new_m)
        seg.size = pos
        self._running_max = running
        self.next_version = version
        if self.options.level >= 2 and self.options.fsync_period_ms == 0:
            self.sync()
        return first

    def sync(self) -> None:
        """fsync the active segment; every version appended so far becomes durable."""
        if self.durable_version != self.next_version:
            os.fdatasync(self._log_fd)  # type: ignore[arg-type]
            self.durable_version = self.next_version
        self._last_sync = time.monotonic()

    def sync_due(self, now: float) -> tuple[float, PendingSync | None]:
        """(seconds until the next periodic fsync is due, the fsync to run now: when the period elapsed and
        something was appended since the last one)."""
        period = self.options.fsync_period_ms / 1000
        if period <= 0 and self.options.level >= 2:
            return 3600.0, None
        period = max(period, 0.001)
        pending = None
        if now - self._last_sync >= period:
            self._last_sync = now
            if self.durable_version != self.next_version:
                pending = PendingSync(self, os.dup(self._log_fd), self.next_version)  # type: ignore[arg-type]
        return max(0.0, self._last_sync + period - now), pending

    def _roll(self) -> None:
        """Seal the active segment (fsync log and index) and start a new one."""
        self.sync()
        os.fsync(self._idx_fd)  # type: ignore[arg-type]
        os.close(self._log_fd)  # type: ignore[arg-type]
        os.close(self._idx_fd)  # type: ignore[arg-type]
        self._new_segment(self.next_version)
        self._open_active()

    def close(self) -> None:
        if self._log_fd is None:
            return
        self.sync()
        os.fsync(self._idx_fd)  # type: ignore[arg-type]
        os.close(self._log_fd)
        os.close(self._idx_fd)  # type: ignore[arg-type]
        self._log_fd = self._idx_fd = None
        for seg in self.segments:
            seg.close()

    # ------------------------------------------------------------------ read

    @property
    def first_version(self) -> int:
        """The first retained version (log start)."""
        return self.segments[0].first

    def _locate(self, version: int) -> tuple[int, int] | None:
        """(segment index, entry index) of the entry holding ``version`` (clamped to the log start)."""
        if version >= self.next_version:
            return None
        version = max(version, self.first_version)
        s = bisect_right(self.segments, version, key=lambda seg: seg.first) - 1
        return s, max(bisect_right(self.segments[s].versions, version) - 1, 0)

    def read_from(self, version: int) -> Iterator[WalEntry]:
        """Entries from the one containing ``version`` (clamped to the log start) to the end."""
        loc = self._locate(version)
        if loc is None:
            return
        s, i = loc
        end = self.next_version
        for seg in self.segments[s:]:
            while i < len(seg.versions):
                if seg.versions[i] >= end:
                    return
                yield self._read_at(seg, i)
                i += 1
            i = 0

    def read(self, version: int) -> WalEntry | None:
        """The entry containing ``version``, or None past the end."""
        loc = self._locate(version)
        return None if loc is None else self._read_at(self.segments[loc[0]], loc[1])

    def region(self, version: int, kind: int) -> FileRegion | None:
        """The body of the entry containing ``version`` as a region of its segment, if the entry is of ``kind``.

        Only the header is read and checked: the body goes to the socket with ``sendfile``, unread, as a Kafka
        broker serves its log (a Kafka batch carries its own CRC, which clients check)."""
        loc = self._locate(version)
        if loc is None:
            return None
        seg = self.segments[loc[0]]
        pos, (body_len, _, entry_kind, *_) = self._header_at(seg, loc[1])
        return FileRegion(seg.reader(), pos + HEADER_SIZE, body_len) if entry_kind == kind else None

    def _header_at(self, seg: _Segment, i: int) -> tuple[int, tuple[int, int, int, int, int, int, int]]:
        pos = seg.positions[i]
        header = os.pread(seg.reader().fd, HEADER_SIZE, pos)
        decoded = _decode_header(header) if len(header) == HEADER_SIZE else None
        if decoded is None:
            raise CorruptEntry(f"{seg.path}: header checksum mismatch at byte {pos}")
        return pos, decoded

    def _read_at(self, seg: _Segment, i: int) -> WalEntry:
        # two reads instead of slicing one: slicing would copy the (often megabyte) body a second time
        pos, (body_len, body_crc, kind, _, version, count, max_ts) = self._header_at(seg, i)
        body = os.pread(seg.reader().fd, body_len, pos + HEADER_SIZE)
        if len(body) != body_len or crc32c.crc32c(body) != body_crc:
            log.error("wal %s: body checksum mismatch at byte %d (version %d); entry rejected", seg.path, pos, version)
            raise CorruptEntry(f"{seg.path}: body checksum mismatch at byte {pos}")
        return WalEntry(version, count, kind, max_ts, body)

    def version_for_timestamp(self, ts: int) -> int | None:
        """First version of the first entry whose max_ts >= ``ts`` (None when there is none)."""
        for seg in self.segments:
            if seg.running_max and seg.running_max[-1] >= ts:
                i = bisect_left(seg.running_max, ts)
                return seg.versions[i]
        return None

    @property
    def size_bytes(self) -> int:
        return sum(seg.size for seg in self.segments)

    # ------------------------------------------------------------- retention

    def expired_segments(self, now_wall: float) -> int:
        """How many of the oldest sealed segments the retention policy wants gone."""
        opts = self.options
        sealed = self.segments[:-1]
        n = 0
        if opts.retention_period_s >= 0:
            while n < len(sealed) and now_wall - sealed[n].path.stat().st_mtime > opts.retention_period_s:
                n += 1
        if opts.retention_bytes >= 0:
            total = self.size_bytes - sum(seg.size for seg in sealed[:n])
            while n < len(sealed) and total > opts.retention_bytes:
                total -= sealed[n].size
                n += 1
        return n

    def delete_oldest(self, n: int) -> None:
        """Delete the ``n`` oldest sealed segments (the log start moves forward)."""
        n = min(n, len(self.segments) - 1)
        for seg in self.segments[:n]:
            seg.close()
            seg.path.unlink()
            seg.index_path.unlink()
        if n:
            del self.segments[:n]
            _fsync_dir(self.dir)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
