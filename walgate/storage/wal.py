"""The write-ahead log of one vnode: segments, index, CRC32C, fsync policy, retention, recovery.

Theory of operation
-------------------
A WAL is a directory of segments. Segment ``<first_version:020d>.log`` holds
entries back to back; an in-memory index (three arrays per segment) holds one
record per entry, so lookups are binary searches over arrays, never scans.
Versions are per vnode, start at 0 and are monotonic: an entry spans ``count``
versions (one per row for data, one for meta), so the versions a table or topic
sees are not contiguous. Memory (the index arrays, ``next_version``) is the
truth about what was acknowledged; after any failure the disk is made to match
it.

Entry layout (little endian; a 36-byte header, then the body)::

    0  u32 header_crc   CRC32C of bytes 4..36
    4  u32 body_len
    8  u32 body_crc     CRC32C of the body
    12 u8  kind         1 = data, 2 = meta, 3 = Kafka record batch
    13 u8  flags        bit 0: "more entries of this batch follow"
    14 u16 reserved     0
    16 u64 version      first version of the entry
    24 u32 count        versions spanned (>= 1)
    28 i64 max_ts       largest row timestamp (database precision)

Index record (24 bytes): ``u64 version, u64 file_position, i64 running_max_ts``
where running_max_ts is the maximum of max_ts over every entry of the vnode up
to and including this one, so "first entry whose max_ts >= T" is a binary
search over a monotonic array. When a segment is sealed (the next one starts)
its index is written whole to ``<first_version:020d>.idx``, followed by a
32-byte seal: ``u64 0xFFFF_FFFF_FFFF_FFFF, i64 end_version, i64 log_size, u32
CRC32C of everything before it, 4 zero bytes``; ``end_version`` is the next
segment's first version. The active segment has no index file (one left by an
earlier release or a failed roll is ignored): it is scanned at every open.

Batches: one :meth:`Wal.append` call writes its entries with a single
``write`` and never spans segments; every entry but the last carries the
"more" flag, and recovery drops an incomplete final batch whole. That makes
each append atomic: after a crash it is there entirely or not at all.

Failed writes: every file operation goes through :mod:`walgate.storage.fileio`.
When the log write (an error or a short write), the fdatasync (WAL_LEVEL 2,
period 0) or a step of a roll (sealing the active segment, creating the next)
fails, the log is cut back to its size before the call and a half-made next
segment is removed; memory is untouched and :class:`StorageUnavailable` names
the file and the errno: nothing of the append was kept and the next append
takes its versions. (A roll that completed before the append's own write
failed stays: it is a consistent state.) If even the undo fails, the WAL is
*fenced*: every later append first retries the undo and is refused until it
succeeds, so service resumes by itself once the disk accepts writes again, and
the refused bytes are never served meanwhile. A restart while fenced must not
serve them either, so fencing overwrites the bytes past the last complete
entry with zeros and fdatasyncs them (a file system that overwrites in place
needs no free blocks for that, so it works on a full disk): the next open cuts
them off as a torn tail. Only if that fails too (an I/O error, or a
copy-on-write file system that is full) can a restart before the disk recovers
find a refused entry complete on disk and keep it (it was answered with an
error, as Kafka may keep a batch whose produce failed); the error log says so.

Undo: :meth:`Wal.undo_append` takes back the last append, acknowledged by the
WAL but not yet by its caller and read by nobody (the engine appends one request
to several vnodes and takes back the appends already made when a later one is
refused). Memory goes back to where the append began, then the log is cut there
(``ftruncate``) and fdatasynced, since the append may already have been durable
(WAL_LEVEL 2). An append that rolled leaves its new segment, empty: the state a
roll whose append failed leaves. A cut that fails fences the WAL as above.

Durability: ``level`` 1 writes to the OS and fsyncs every ``fsync_period_ms``
(driven by :meth:`Wal.sync_due`, whose :class:`PendingSync` runs on another
thread so appends and reads never wait for the disk); ``level`` 2 with period 0
fdatasyncs inside :meth:`append` before it returns, and a failed fdatasync
refuses the append (cut off as above) instead of acknowledging it. After a
failed fdatasync Linux may have dropped the dirty pages it could not write and
marked them clean ("fsyncgate"), so a retried fsync can succeed with the data
not on disk. Hence a failed sync never advances ``durable_version``: it arms a
*resync*, and the next sync (periodic, explicit, in an append or a roll) first
rewrites the active segment's non-durable bytes from the page cache
(re-dirtying them) and then fdatasyncs; only its success makes those versions
durable. A periodic sync failing on its worker thread logs one error and is
retried that way at the next period. A sealed segment's log is fdatasynced and
its index written atomically (write new, fsync, rename, fsync the directory)
before the next segment is created; the directory is fsynced whenever segment
files are created or deleted.

Recovery (:meth:`Wal.open`) never refuses to open because of damage: what is
damaged is reported to the :class:`DamageLog` (file, byte range, reason, the
versions lost, a copy of the bytes in ``quarantine/``) and everything intact is
served. Lost versions form *gaps*: :meth:`Wal.read_from` skips them,
:meth:`Wal.read` and :meth:`Wal.region` raise :class:`CorruptEntry` for a
version in one, and their numbers are not given to new entries (only the
versions of a torn tail cut off the active segment are, as Kafka reuses the
offsets of a log it truncates).

- A sealed segment is trusted without reading its log when its index is sealed
  and sound (seal CRC, log size, the first and last entries' headers agree);
  any other index (garbage, wrong size, unsealed, missing) is rebuilt by
  scanning the log and written again. A damaged entry inside a trusted segment
  is found when read: reported then (once per process) and skipped. Its body is
  checked even when served unread (:meth:`Wal.region`): the first time, the
  segment keeping one bit per entry checked; an entry found damaged is never
  served again.
- The active segment is always scanned, entry by entry, checking both CRCs and
  that versions increase. At a damaged entry the scan resynchronises: when its
  header is intact, its length gives the next entry; when not, the scan looks
  forward for the next position holding an entry with a valid header CRC, a
  valid body CRC, a known kind and a version above the last good one (a body
  forging such an entry, CRCs included, inside the damaged range could be taken
  for one). Intact entries after the damage are kept. Sealed segments that need
  a scan are scanned the same way.
- Damaged bytes followed by intact entries are reported as quarantined and the
  segment is rewritten without them (write new, fsync, rename, fsync the
  directory): the next open finds a clean segment whose version jump is the
  gap, so the damage is reported once, when found. If the rewrite fails the
  bytes stay in place, outside the index.
- The tail of the active segment after its last complete batch is cut off. A
  torn tail (an incomplete final batch whose last entry is cut short by the end
  of the file, or zeros) is what a crash while appending leaves, never durably
  acknowledged: it is logged at WARNING, not quarantined. A tail holding a
  complete but damaged entry (maybe acknowledged and read) is reported and its
  bytes kept, and its versions are never given again: the segment is sealed at
  a bound of them (exact when the headers there are intact, else the most its
  bytes can hold, see :func:`_tail_end`; reported with end -1) and the next
  segment starts there, so a reopen keeps the gap. A sealed segment's
  damaged or missing tail, an empty sealed segment and versions missing between
  segments (a segment file lost) are reported; the seal records the gap so it
  is reported once.
- Files that are not segments are ignored (and reported), leftover ``.tmp``
  files and an index whose log is gone are deleted (reported when it follows
  every log: new appends then start at its first version, not below).

Descriptors: a WAL holds none between calls. Segment files are opened through
the bounded, process-wide :data:`walgate.storage.filecache.FILES` (least
recently used descriptors are closed; a :class:`FileRegion` being sent keeps its
own open), so any number of partitions run within ``ulimit -n``: an append gets
the active log (``O_APPEND``) from it, a read the segment (read-only), and a
periodic sync opens the segment on its worker thread for its fdatasync only.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import struct
import sys
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter
from pathlib import Path
from typing import Iterator

import crc32c

from walgate.storage import fileio
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable
from walgate.storage.filecache import FILES, OpenFile

__all__ = ["Wal", "WalEntry", "WalOptions", "KIND_DATA", "KIND_META", "KIND_KAFKA", "CorruptEntry"]

log = logging.getLogger("walgate.wal")

KIND_DATA = 1
KIND_META = 2
KIND_KAFKA = 3  # a Kafka RecordBatch v2 as produced (base offset = its Kafka offset); count = its records
_KINDS = (KIND_DATA, KIND_META, KIND_KAFKA)
FLAG_MORE = 1

_HEADER = struct.Struct("<IIIBBHQIq")
HEADER_SIZE = _HEADER.size  # 36
INDEX_SIZE = struct.calcsize("<QQq")  # 24
_SEAL = struct.Struct("<QqqI4x")
SEAL_SIZE = _SEAL.size  # 32
_SEAL_MARK = 0xFFFF_FFFF_FFFF_FFFF
_TS_MIN = -(1 << 63)

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT  # how the active segment's log is written
_NAME = re.compile(r"(\d{20})\.(log|idx)")
# where a header may start: its kind, flags and reserved bytes (offset 12) look right; the CRCs decide
_HEADER_SHAPE = re.compile(b"(?=[" + bytes(_KINDS) + b"][\x00\x01]\x00\x00)")
_TORN = ("torn header", "torn body")  # an entry cut by the end of the file
_first = attrgetter("first")

SegmentFile = OpenFile  # the descriptor a FileRegion keeps open (from the process-wide cache)


class CorruptEntry(Exception):
    """An entry failed its CRC check, or the version asked for lies in a lost range (a gap)."""


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


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of a segment file from ``offset``: an entry body to be sent with ``sendfile``, never read
    into memory. ``file`` keeps its descriptor open until the region is dropped, even after the cache evicted it
    or retention deleted the segment."""

    file: SegmentFile
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self, length: int | None = None) -> bytes:
        """The region's bytes (its first ``length`` only, when given)."""
        return os.pread(self.file.fd, self.length if length is None else min(length, self.length), self.offset)


class _Segment:
    """One segment: its first version, the in-memory copy of its index, its size, and which entries' bodies this
    process has checked: ``checked`` is None when all of them were (scanned at open, or appended in this process),
    else a bitmap (bit ``i`` for entry ``i``, one bit an entry) of a sealed segment trusted without reading it."""

    __slots__ = ("first", "path", "index_path", "versions", "positions", "running_max", "size", "checked")

    def __init__(self, directory: Path, first: int) -> None:
        self.first = first
        self.path = directory / f"{first:020d}.log"
        self.index_path = directory / f"{first:020d}.idx"
        self.versions = array("q")
        self.positions = array("q")
        self.running_max = array("q")
        self.size = 0
        self.checked: bytearray | None = None

    def forget_files(self) -> None:
        """Drop this segment's descriptors from the cache (they close once no region uses them)."""
        FILES.discard(self.path, os.O_RDONLY, _APPEND)


def _encode(kind: int, flags: int, version: int, count: int, max_ts: int, body: bytes) -> bytes:
    rest = _HEADER.pack(0, len(body), crc32c.crc32c(body), kind, flags, 0, version, count, max_ts)[4:]
    return struct.pack("<I", crc32c.crc32c(rest)) + rest + body


def _decode_header(buf: bytes | memoryview) -> tuple[int, int, int, int, int, int, int] | None:
    """(body_len, body_crc, kind, flags, version, count, max_ts), or None if the header CRC fails."""
    header_crc, body_len, body_crc, kind, flags, _, version, count, max_ts = _HEADER.unpack(buf)
    if crc32c.crc32c(buf[4:HEADER_SIZE]) != header_crc:
        return None
    return body_len, body_crc, kind, flags, version, count, max_ts


def _entry_at(data: memoryview, pos: int) -> tuple[int | None, tuple[int, int, int, int, int, int, int] | None, str]:
    """(where the entry at ``pos`` ends (None: unknown, its header is bad), its header if intact, why it is not a
    valid entry ("" when it is))."""
    n = len(data)
    if n - pos < HEADER_SIZE:
        return n, None, "torn header"
    decoded = _decode_header(data[pos : pos + HEADER_SIZE])
    if decoded is None:
        return None, None, "header checksum mismatch"
    end = pos + HEADER_SIZE + decoded[0]
    if end > n:
        return n, decoded, "torn body"
    if crc32c.crc32c(data[pos + HEADER_SIZE : end]) != decoded[1]:
        return end, decoded, "body checksum mismatch"
    return end, decoded, ""


def _implausible(decoded: tuple[int, int, int, int, int, int, int], expected: int, bound: int | None) -> str:
    """Why an entry with a valid header does not belong here ("" when it does)."""
    _, _, kind, flags, version, count, _ = decoded
    if kind not in _KINDS or flags > FLAG_MORE or count < 1:
        return f"invalid entry (kind {kind}, flags {flags}, count {count})"
    if version < expected or (bound is not None and version + count > bound):
        limit = f", ending by {bound}" if bound is not None else ""
        return f"unexpected version {version} (expected {expected} or more{limit})"
    return ""


def _tail_end(end: int, damaged: int, ends: list[int]) -> int:
    """A version above every version the ``damaged`` bytes cut off the active segment's tail after version ``end``
    may have held, given the ends of the entries there whose headers are intact (-1: a header is not).

    When every header is intact their ends are exact. Else the bound is the layout's: each entry takes at least
    ``HEADER_SIZE`` bytes and spans at most ``0xFFFF_FFFF`` versions (its u32 count; no tighter bound holds for a
    compressed Kafka batch), so at most ``damaged // HEADER_SIZE`` entries follow ``end``, contiguously (versions of
    an active segment jump only where a rewrite removed damage: such a jump before the tail is not counted). The gap
    is large but unused versions cost nothing (offsets are counted apart, per topic)."""
    if -1 not in ends:
        return max([end, *ends])
    return max([end, *ends]) + damaged // HEADER_SIZE * 0xFFFF_FFFF


def _resync(data: bytes, view: memoryview, start: int, expected: int, bound: int | None) -> int:
    """The first position from ``start`` where a valid entry of a plausible version begins (else the end)."""
    for match in _HEADER_SHAPE.finditer(data, start + 12):
        pos = match.start() - 12
        _, decoded, reason = _entry_at(view, pos)
        if decoded is not None and not reason and not _implausible(decoded, expected, bound):
            return pos
    return len(data)


def _pack_index(versions: array, positions: array, maxes: array) -> bytes:
    records = array("q", bytes(len(versions) * INDEX_SIZE))
    records[0::3], records[1::3], records[2::3] = versions, positions, maxes
    if sys.byteorder == "big":
        records.byteswap()
    return records.tobytes()


def _unpack_index(raw: bytes) -> tuple[array, array, array]:
    records = array("q", raw)
    if sys.byteorder == "big":
        records.byteswap()
    return records[0::3], records[1::3], records[2::3]


def _seal(records: bytes, end_version: int, log_size: int) -> bytes:
    head = _SEAL.pack(_SEAL_MARK, end_version, log_size, 0)[:24]
    return _SEAL.pack(_SEAL_MARK, end_version, log_size, crc32c.crc32c(head, crc32c.crc32c(records)))


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"{name}: {exc.strerror or exc}"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # deleted under us: expired
        return -float("inf")


def _unlink(path: Path) -> None:
    """Delete a leftover; if that fails it is only logged (it is met, and deleted, again at the next open)."""
    try:
        path.unlink()
    except OSError as exc:
        log.error("wal %s: cannot delete it (%s)", path, _describe(exc))


def _zero_tail(path: Path, start: int) -> None:
    """Overwrite ``path`` from ``start`` to its end with zeros and fdatasync it: the next open cuts a zeroed tail
    off as torn (see :meth:`Wal._fence`)."""
    fd = os.open(path, os.O_RDWR)
    try:
        end = os.fstat(fd).st_size
        for pos in range(start, end, 1 << 20):
            fileio.pwrite_all(fd, bytes(min(1 << 20, end - pos)), pos)
        if end > start:
            fileio.fdatasync(fd)
    finally:
        os.close(fd)


def _sync_file(path: Path, rewrite_from: int | None) -> None:
    """fdatasync ``path`` through a descriptor of its own, after rewriting its bytes from ``rewrite_from`` (when
    not None) so pages a failed fsync dropped are dirty again and really written."""
    fd = os.open(path, os.O_RDONLY if rewrite_from is None else os.O_RDWR)
    try:
        pos = rewrite_from
        while pos is not None:
            chunk = os.pread(fd, 1 << 20, pos)
            if not chunk:
                break
            fileio.pwrite_all(fd, chunk, pos)
            pos += len(chunk)
        fileio.fdatasync(fd)
    finally:
        os.close(fd)


class PendingSync:
    """A periodic fsync taken from the storage thread. ``run`` (any thread) fdatasyncs the segment through a
    descriptor it opens and closes itself (a roll or the cache may close the WAL's meanwhile, and a thousand
    pending syncs never hold a thousand descriptors); it never raises. ``done`` (storage thread, after ``run``)
    marks every version below ``version`` durable, or, if the fdatasync failed, logs it and leaves them
    non-durable for the next sync to rewrite and sync again."""

    __slots__ = ("wal", "path", "since", "version", "rewrite_from", "generation", "error")

    def __init__(self, wal: Wal, path: Path, since: int, version: int, rewrite_from: int | None,
                 generation: int) -> None:
        self.wal = wal
        self.path = path
        self.since = since  # versions [since, version) are what it makes durable
        self.version = version
        self.rewrite_from = rewrite_from
        self.generation = generation
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            _sync_file(self.path, self.rewrite_from)
        except FileNotFoundError:
            pass  # sealed meanwhile (its roll fsynced it) and deleted by retention
        except OSError as exc:
            self.error = exc

    def done(self) -> None:
        self.wal._synced(self)


class Wal:
    """Append-only, versioned, indexed log of one vnode (see the module docstring)."""

    def __init__(self, directory: Path, options: WalOptions, damage: DamageLog | None = None) -> None:
        self.dir = directory
        self.options = options
        self.damage = damage
        self.segments: list[_Segment] = []
        self.next_version = 0
        self.durable_version = 0  # versions below this are fsynced
        self._running_max = _TS_MIN
        self._last_sync = time.monotonic()
        self._fenced = False  # a failed write could not be undone: appends first retry the undo
        self._undo: tuple[int, int] | None = None  # (first version, running max before) of the last append
        self._resync_from: int | None = None  # after a failed fdatasync: active-segment bytes to rewrite first
        self._sync_generation = 0  # bumped at each failed fdatasync
        self._reported: set[tuple[int, int]] = set()  # (segment, position) of damage found while reading

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, directory: Path, options: WalOptions, *, first_version: int = 0,
             damage: DamageLog | None = None) -> "Wal":
        """Open (creating if needed) and recover the WAL in ``directory``; damage is reported, never fatal."""
        directory.mkdir(parents=True, exist_ok=True)
        wal = cls(directory, options, damage)
        logs, floor = wal._segment_files()
        firsts = sorted(logs)
        end = first_version
        sealed_end = -1  # the gap-free end recorded in the previous segment's seal
        for i, first in enumerate(firsts):
            seg = _Segment(directory, first)
            bound = firsts[i + 1] if i + 1 < len(firsts) else None
            if wal.segments:
                prev = wal.segments[-1]
                if first < end:
                    wal._report(seg.path, 0, logs[first], f"segment starts at version {first}, inside the previous "
                                f"one (which ends at version {end}); ignored", "ignored")
                    continue
                if first > end and first > sealed_end:
                    wal._report(prev.path, prev.size, prev.size, f"versions [{end}, {first}) are missing: the "
                                "segment that held them is gone", "lost", first_version=end, end_version=first)
                    wal._write_sealed_index(prev, first)
            loaded = wal._load_sealed(seg) if bound is not None else None
            end, sealed_end = wal._scan(seg, bound) if loaded is None else loaded
            wal.segments.append(seg)
            if seg.running_max:
                wal._running_max = seg.running_max[-1]
            if bound is None and sealed_end > end:  # _scan sealed it: its damaged tail may have held versions to
                end = sealed_end                    # sealed_end, never given again; the active segment starts there
                wal.segments.append(_Segment(directory, end))  # (its log is made by _restore, below)
        if not wal.segments:
            end = max(first_version, floor)
            wal.segments.append(_Segment(directory, end))  # its log is made (and the directory fsynced) below
        wal.next_version = wal.durable_version = max(end, floor)
        try:
            wal._restore()
            wal._fenced = False
        except OSError as exc:
            wal._fenced = True
            log.error("wal %s: cannot prepare the active segment (%s); appends are refused until it can",
                      directory, _describe(exc))
        return wal

    def _segment_files(self) -> tuple[dict[int, int], int]:
        """({first version: log size} of the segment logs, the lowest version new appends may use); ignores and
        reports what is not a segment, deletes leftovers (.tmp files, an index whose log is gone)."""
        logs: dict[int, int] = {}
        indexes: dict[int, Path] = {}
        with os.scandir(self.dir) as it:
            for item in it:
                path = Path(item.path)
                m = _NAME.fullmatch(item.name)
                if m and item.is_file():
                    FILES.discard(path, os.O_RDONLY, _APPEND)  # a WAL closed without close() in this process
                    if m[2] == "log":
                        logs[int(m[1])] = item.stat().st_size
                    else:
                        indexes[int(m[1])] = path
                elif item.name.endswith(".tmp") and item.is_file():
                    _unlink(path)  # an interrupted fileio.replace_file: the file it replaces is intact
                else:
                    self._report(path, 0, 0, "not a WAL segment file; ignored", "ignored")
        floor = 0
        for first, path in indexes.items():
            if first in logs:
                continue
            _unlink(path)
            if not logs or first > max(logs):  # (below all logs: left by retention; between: a gap, see open)
                self._report(path, 0, 0, f"the log of segment {first} is missing: the versions it held are lost",
                             "lost", first_version=first)
                floor = max(floor, first)
        return logs, floor

    def _load_sealed(self, seg: _Segment) -> tuple[int, int] | None:
        """Load a sealed segment's index when its seal proves it right: (end of its entries, end recorded in the
        seal); None (arrays left empty) when it must be rebuilt."""
        try:
            raw = seg.index_path.read_bytes()
        except FileNotFoundError:
            log.info("wal %s: no index; rebuilding it from the log", seg.path)
            return None
        seg.size = seg.path.stat().st_size
        reason, ends = self._check_index(seg, raw)
        if ends is not None:
            return ends
        seg.versions, seg.positions, seg.running_max = array("q"), array("q"), array("q")
        if reason.startswith("index "):
            if len(raw) % INDEX_SIZE:
                self._report(seg.index_path, 0, len(raw), f"{reason}; rebuilt from the log", "rebuilt")
            else:  # as releases before the seal wrote them
                log.info("wal %s: %s; rebuilding it from the log", seg.index_path, reason)
        else:  # the index is sound and the log is not what it describes: the scan finds and reports why
            log.info("wal %s: %s; scanning it", seg.path, reason)
        return None

    def _check_index(self, seg: _Segment, raw: bytes) -> tuple[str, tuple[int, int] | None]:
        """("", (end of its entries, end recorded in the seal)) when the index is sound and describes the log,
        else (why, None): "index ..." when the index itself is bad."""
        if len(raw) < SEAL_SIZE or (len(raw) - SEAL_SIZE) % INDEX_SIZE:
            return f"index has {len(raw)} bytes, not a whole number of records and a seal", None
        mark, sealed_end, log_size, crc = _SEAL.unpack_from(raw, len(raw) - SEAL_SIZE)
        if mark != _SEAL_MARK or crc32c.crc32c(raw[: len(raw) - 8]) != crc or any(raw[len(raw) - 4 :]):
            return "index checksum mismatch", None
        if log_size != seg.size:
            return f"the log has {seg.size} bytes, its index was sealed at {log_size}", None
        seg.versions, seg.positions, seg.running_max = _unpack_index(raw[: len(raw) - SEAL_SIZE])
        if not seg.versions:
            return ("", (seg.first, sealed_end)) if seg.size == 0 else ("the log has bytes its index has no entry "
                                                                           "for", None)
        file = FILES.get(seg.path)
        ends = []
        for i in (0, len(seg.versions) - 1):
            header = os.pread(file.fd, HEADER_SIZE, seg.positions[i])
            decoded = _decode_header(header) if len(header) == HEADER_SIZE else None
            if decoded is None or decoded[4] != seg.versions[i] or decoded[4] < seg.first:
                return f"the entry at byte {seg.positions[i]} is not the one its index lists", None
            ends.append((seg.positions[i] + HEADER_SIZE + decoded[0], decoded[4] + decoded[5]))
        if ends[-1][0] != seg.size:
            return "the log does not end where its index does", None
        seg.checked = bytearray((len(seg.versions) + 7) // 8)
        return "", (ends[-1][1], sealed_end)

    def _scan(self, seg: _Segment, bound: int | None) -> tuple[int, int]:
        """Rebuild ``seg``'s index from its log, resynchronising past damage; returns (the version after its last
        kept entry, the end recorded in its seal: ``bound``, or -1 when it stays the active segment). ``bound`` is
        the next segment's first version, None for the active segment (whose tail after the last complete batch is
        cut off; when that tail is damaged, not torn, the segment is sealed: see :func:`_tail_end`)."""
        data = seg.path.read_bytes()
        view = memoryview(data)
        n = len(data)
        expected = seg.first
        kept: list[tuple[int, int, int, int, int, int]] = []  # pos, end, version, next version, flags, max_ts
        bad: list[tuple[int, int, int, str, int]] = []  # start, end, first version lost, reason, known end version
        pos = 0
        while pos < n:
            end, decoded, reason = _entry_at(view, pos)
            if decoded is not None and not reason:
                reason = _implausible(decoded, expected, bound)
            if reason:
                if end is None:
                    end = _resync(data, view, pos + 1, expected, bound)
                known = decoded[4] + decoded[5] if decoded is not None else -1
                if bad and bad[-1][1] == pos:  # one damaged range, however many bad entries it held (-1: any unknown)
                    known = -1 if -1 in (known, bad[-1][4]) else max(known, bad[-1][4])
                    bad[-1] = (bad[-1][0], end, bad[-1][2], bad[-1][3], known)
                else:
                    bad.append((pos, end, expected, reason, known))
                pos = end
                continue
            assert decoded is not None and end is not None
            kept.append((pos, end, decoded[4], decoded[4] + decoded[5], decoded[3], decoded[6]))
            expected = decoded[4] + decoded[5]
            pos = end
        dropped = []
        if bound is None:  # an incomplete final batch goes whole
            while kept and kept[-1][4] & FLAG_MORE:
                dropped.append(kept.pop())
        tail = kept[-1][1] if kept else 0
        end_version = kept[-1][3] if kept else seg.first
        starts = [k[0] for k in kept]
        for start, stop, lost_from, reason, _ in bad:
            if stop <= tail:
                lost_to = kept[bisect_left(starts, stop)][2]
                self._report(seg.path, start, stop, reason, "quarantined", data[start:stop], lost_from, lost_to)
        tail_bad = [b for b in bad if b[0] >= tail]
        sealed_end = -1 if bound is None else bound
        if bound is not None and (tail < n or end_version < bound):
            self._report(seg.path, tail, n, tail_bad[0][3] if tail_bad else "segment ends early",
                         "truncated" if tail < n else "lost", data[tail:], end_version, bound)
        elif tail < n:
            torn = tail_bad[-1] if tail_bad else None
            if torn is None or (len(tail_bad) == 1 and torn[1] == n and (
                    torn[3] in _TORN or data.count(0, torn[0]) == n - torn[0])):
                log.warning("wal %s: %s at byte %d; cutting %d bytes of an append a crash interrupted", seg.path,
                            torn[3] if torn else "incomplete batch", tail, n - tail)
            else:  # complete entries, maybe acknowledged and read: their versions are never given again
                ends = [d[3] for d in dropped] + [b[4] for b in tail_bad]
                sealed_end = _tail_end(end_version, n - tail, ends)
                self._report(seg.path, tail, n, tail_bad[0][3], "truncated", data[tail:], end_version,
                             -1 if -1 in ends else sealed_end)
        positions = array("q", (k[0] for k in kept))
        if len(bad) > len(tail_bad):  # damage before intact entries: rewrite the segment without it
            try:
                fileio.replace_file(seg.path, b"".join(view[k[0] : k[1]] for k in kept))
                sizes = [k[1] - k[0] for k in kept]
                positions = array("q", accumulate(sizes[:-1], initial=0))
                tail = sum(sizes)
            except OSError as exc:
                log.error("wal %s: cannot rewrite it without its damaged bytes (%s); they stay in place, outside "
                          "the index", seg.path, _describe(exc))
            seg.forget_files()
        running = self._running_max
        seg.versions = array("q", (k[2] for k in kept))
        seg.positions = positions
        seg.running_max = array("q")
        for k in kept:
            running = max(running, k[5])
            seg.running_max.append(running)
        seg.size = tail
        if bound is not None:
            if tail < n and len(bad) == len(tail_bad):
                self._truncate_sealed(seg)
            self._write_sealed_index(seg, bound)
        elif sealed_end > end_version:  # sealed before it is cut: a crash between re-reports, never reuses
            self._write_sealed_index(seg, sealed_end)
            self._truncate_sealed(seg)
        # (an active segment's log is cut back to seg.size by _restore, at the end of open)
        return end_version, sealed_end

    def _truncate_sealed(self, seg: _Segment) -> None:
        try:
            fd = os.open(seg.path, os.O_WRONLY)
            try:
                fileio.truncate(fd, seg.size)
                fileio.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:  # the index keeps the damaged tail out; the next open tries again
            log.error("wal %s: cannot cut off its damaged tail (%s)", seg.path, _describe(exc))

    def _write_sealed_index(self, seg: _Segment, end_version: int) -> None:
        records = _pack_index(seg.versions, seg.positions, seg.running_max)
        try:
            fileio.replace_file(seg.index_path, records + _seal(records, end_version, seg.size))
        except OSError as exc:  # derived: rebuilt at the next open
            log.error("wal %s: cannot write its index (%s)", seg.index_path, _describe(exc))

    def _report(self, path: Path, start: int, end: int, reason: str, action: str, data: bytes = b"",
                first_version: int = -1, end_version: int = -1) -> None:
        if self.damage is not None:
            self.damage.report(path, start, end, reason, action, data, first_version, end_version)
        else:
            log.warning("wal %s bytes [%d, %d), versions [%d, %d): %s; %s", path, start, end, first_version,
                        end_version, reason, action)

    # ----------------------------------------------------------------- write

    def append(self, entries: list[tuple[int, int, int, bytes]]) -> int:
        """Append ``(kind, count, max_ts, body)`` entries atomically; returns the first version.

        Returns once the batch is durable per the WAL level (fsynced for level 2,
        period 0; written to the OS otherwise). Raises :class:`StorageUnavailable`
        (nothing kept, memory and disk as before the call) when the disk refuses."""
        if not entries:
            return self.next_version
        self._undo = None
        if self._fenced:
            try:
                self._restore()
            except OSError as exc:
                raise StorageUnavailable(f"WAL {self.dir} is read-only since a failed write could not be undone "
                                         f"({_describe(exc)}); retry once the disk accepts writes") from exc
            self._fenced = False
            log.warning("wal %s: the failed write is undone; appends are accepted again", self.dir)
        seg = self.segments[-1]
        total = sum(HEADER_SIZE + len(e[3]) for e in entries)
        if seg.size and seg.size + total > self.options.segment_bytes:
            self._roll()
            seg = self.segments[-1]
        first = self.next_version
        chunks: list[bytes] = []
        pos = seg.size
        version = first
        running = self._running_max
        new_v, new_p, new_m = [], [], []
        for i, (kind, count, max_ts, body) in enumerate(entries):
            flags = FLAG_MORE if i < len(entries) - 1 else 0
            chunks.append(_encode(kind, flags, version, count, max_ts, body))
            running = max(running, max_ts)
            new_v.append(version)
            new_p.append(pos)
            new_m.append(running)
            pos += HEADER_SIZE + len(body)
            version += count
        sync = self.options.level >= 2 and self.options.fsync_period_ms == 0
        try:
            log_file = FILES.get(seg.path, _APPEND)
            fileio.write_all(log_file.fd, b"".join(chunks))
            if sync:
                self._flush(seg)
        except OSError as exc:
            raise self._refuse(exc, seg.path, "append") from exc
        seg.versions.extend(new_v)
        seg.positions.extend(new_p)
        seg.running_max.extend(new_m)
        seg.size = pos
        self._undo = (first, self._running_max)
        self._running_max = running
        self.next_version = version
        if sync:
            self.durable_version = version
            self._last_sync = time.monotonic()
        return first

    def undo_append(self, first_version: int) -> None:
        """Take back the last append, which returned ``first_version``, while nothing has read it (see the module
        docstring): its versions go to the next append. Never raises for the disk: a cut that fails fences the WAL
        (logged). ValueError when ``first_version`` did not begin the last append."""
        if first_version == self.next_version:  # an empty append
            return
        if self._undo is None or self._undo[0] != first_version:
            raise ValueError(f"wal {self.dir}: version {first_version} does not begin the last append")
        self._running_max = self._undo[1]
        self._undo = None
        seg = self.segments[-1]  # an append never spans segments: one that rolled began this one
        i = bisect_left(seg.versions, first_version)
        seg.size = seg.positions[i]
        del seg.versions[i:], seg.positions[i:], seg.running_max[i:]
        self.next_version = first_version
        self.durable_version = min(self.durable_version, first_version)
        try:
            fileio.truncate(FILES.get(seg.path, _APPEND).fd, seg.size)
        except OSError as exc:
            self._fence("an undone append", exc)
            return
        try:
            self._flush(seg)
        except OSError as exc:  # the cut stands; only a power loss could bring the undone bytes back
            log.error("wal %s: an undone append is cut off but the fdatasync making that durable failed (%s)",
                      seg.path, _describe(exc))
            return
        self.durable_version = self.next_version

    def _refuse(self, exc: OSError, path: Path, what: str) -> StorageUnavailable:
        """Undo a failed write (disk back to memory) and say so; fence the WAL when even that fails."""
        try:
            self._restore()
        except OSError as again:
            self._fence(f"a failed {what}", again)
            return StorageUnavailable(f"{path}: {what} failed ({_describe(exc)}) and could not be undone "
                                      f"({_describe(again)}); the WAL refuses writes until the disk accepts them")
        return StorageUnavailable(f"{path}: {what} failed ({_describe(exc)}); nothing of it was kept")

    def _fence(self, what: str, exc: OSError) -> None:
        """Refuse appends until :meth:`_restore` succeeds (each append retries it first), after ``what`` could not be
        undone (``exc``); zero the bytes past the last complete entry so a restart meanwhile cuts them off."""
        self._fenced = True
        seg = self.segments[-1]
        try:
            _zero_tail(seg.path, seg.size)
            kept = "they are zeroed, so a restart cuts them off"
        except OSError as again:
            kept = (f"they cannot be zeroed either ({_describe(again)}): a restart before the disk recovers may "
                    "keep them")
        log.error("wal %s: cannot undo %s (%s); appends are refused until it can, the bytes are never served, and %s",
                  self.dir, what, _describe(exc), kept)

    def _restore(self) -> None:
        """Make the disk match memory: cut the active log back to its last complete entry, remove a half-made
        next segment, create the active log if missing. Raises OSError."""
        seg = self.segments[-1]
        created = not seg.path.exists()
        log_file = FILES.get(seg.path, _APPEND)
        if os.fstat(log_file.fd).st_size != seg.size:
            fileio.truncate(log_file.fd, seg.size)
        removed = False
        if self.next_version != seg.first:
            half_made = _Segment(self.dir, self.next_version)
            if half_made.path.exists():
                half_made.forget_files()
                half_made.path.unlink()
                removed = True
        if created or removed:
            fileio.fsync_dir(self.dir)

    def _flush(self, seg: _Segment) -> None:
        """fdatasync the active log (first rewriting what a failed fdatasync left unsure); on failure what was
        not durable stays so and is rewritten by the next flush. Raises OSError."""
        try:
            if self._resync_from is None:
                log_file = FILES.get(seg.path, _APPEND)
                fileio.fdatasync(log_file.fd)
            else:
                _sync_file(seg.path, self._resync_from)
        except OSError:
            self._arm_resync(seg)
            raise
        self._resync_from = None

    def _arm_resync(self, seg: _Segment) -> None:
        i = bisect_left(seg.versions, self.durable_version)
        start = seg.positions[i] if i < len(seg.versions) else seg.size
        self._sync_generation += 1
        if start < seg.size:
            self._resync_from = start if self._resync_from is None else min(self._resync_from, start)

    def sync(self) -> None:
        """fsync the active segment; every version appended so far becomes durable (StorageUnavailable if not)."""
        if self.durable_version != self.next_version or self._resync_from is not None:
            seg = self.segments[-1]
            try:
                self._flush(seg)
            except OSError as exc:
                raise StorageUnavailable(f"{seg.path}: fdatasync failed ({_describe(exc)}); versions from "
                                         f"{self.durable_version} are not durable yet") from exc
            self.durable_version = self.next_version
        self._last_sync = time.monotonic()

    def sync_due(self, now: float) -> tuple[float, PendingSync | None]:
        """(seconds until the next periodic fsync is due, the fsync to run now: when the period elapsed and
        something was appended since the last one, or the last one failed)."""
        period = self.options.fsync_period_ms / 1000
        if period <= 0 and self.options.level >= 2:
            return 3600.0, None
        period = max(period, 0.001)
        pending = None
        if now - self._last_sync >= period:
            self._last_sync = now
            if self.durable_version != self.next_version or self._resync_from is not None:
                pending = PendingSync(self, self.segments[-1].path, self.durable_version, self.next_version,
                                      self._resync_from, self._sync_generation)
        return max(0.0, self._last_sync + period - now), pending

    def _synced(self, sync: PendingSync) -> None:
        if sync.error is None:
            if sync.generation == self._sync_generation:  # (else an fdatasync failed since: it proves nothing)
                self.durable_version = max(self.durable_version, sync.version)
                self._resync_from = None
            return
        # what this fdatasync covered may be lost, even if an fdatasync through another descriptor succeeded since
        self.durable_version = min(self.durable_version, sync.since)
        log.error("wal %s: periodic fdatasync failed (%s); versions from %d stay non-durable, and the next sync "
                  "rewrites and syncs them again", sync.path, _describe(sync.error), self.durable_version)
        seg = self.segments[-1]
        if seg.path == sync.path:  # else a roll sealed it since, after an fdatasync of its own
            self._arm_resync(seg)

    def _roll(self) -> None:
        """Seal the active segment (fdatasync its log, write its whole index with the seal: write new, fsync,
        rename, fsync the directory) and create the next one (fsync the directory); on failure undo what the
        active segment needs undone and raise StorageUnavailable. (A seal written by a roll that failed later is
        harmless: the last segment's index is never read, and the next roll rewrites it.)"""
        old = self.segments[-1]
        new = _Segment(self.dir, self.next_version)
        target = old.path
        try:
            self._flush(old)
            target = old.index_path
            records = _pack_index(old.versions, old.positions, old.running_max)
            fileio.replace_file(old.index_path, records + _seal(records, new.first, old.size))
            target = new.path
            fileio.append_file(new.path, b"", sync=False)
            fileio.fsync_dir(self.dir)
        except OSError as exc:
            raise self._refuse(exc, target, "roll to a new segment") from exc
        self.durable_version = self.next_version
        FILES.discard(old.path, _APPEND)
        self.segments.append(new)

    def close(self) -> None:
        """fsync what was appended and release the descriptors. Best effort: a failure is logged (the entries stay
        written to the OS, as level 1 promises), and the WAL reopens whatever happened."""
        try:
            if self._fenced:
                self._restore()
                self._fenced = False
            self.sync()
        except (OSError, StorageUnavailable) as exc:
            log.error("wal %s: closing: %s", self.dir, exc)
        for seg in self.segments:
            seg.forget_files()

    # ------------------------------------------------------------------ read

    @property
    def first_version(self) -> int:
        """The first retained version (log start)."""
        return self.segments[0].first

    def _locate(self, version: int) -> tuple[int, int, int] | None:
        """(segment index, index of the last entry starting at or before ``version`` there (-1: none), the version
        clamped to the log start); None past the end."""
        if version >= self.next_version:
            return None
        version = max(version, self.first_version)
        s = bisect_right(self.segments, version, key=_first) - 1
        return s, bisect_right(self.segments[s].versions, version) - 1, version

    def read_from(self, version: int) -> Iterator[WalEntry]:
        """Entries from the one containing ``version`` (clamped to the log start) to the end, skipping lost and
        damaged ones (damage is reported when first found)."""
        loc = self._locate(version)
        if loc is None:
            return
        s, i, version = loc
        end = self.next_version
        for seg in self.segments[s:]:
            file = FILES.get(seg.path)
            for i in range(max(i, 0), len(seg.versions)):
                if seg.versions[i] >= end:
                    return
                try:
                    entry = self._read_at(seg, i, file)
                except CorruptEntry:
                    continue
                if entry.version + entry.count > version:  # (not so for an entry before a gap holding version)
                    yield entry
            i = 0

    def read(self, version: int) -> WalEntry | None:
        """The entry containing ``version``, or None past the end; CorruptEntry if it is damaged or lost."""
        loc = self._locate(version)
        if loc is None:
            return None
        s, i, version = loc
        seg = self.segments[s]
        entry = self._read_at(seg, i, FILES.get(seg.path)) if i >= 0 else None
        if entry is None or version >= entry.version + entry.count:
            raise self._lost(seg, version)
        return entry

    def region(self, version: int, kind: int) -> FileRegion | None:
        """The body of the entry containing ``version`` as a region of its segment, if the entry is of ``kind``.

        The header is read and checked each time; the body goes to the socket with ``sendfile``, and is read and
        checked only the first time this process serves it (clients need not check a Kafka batch's CRC, and the
        batch's first 16 bytes are outside it), unless this process scanned or appended it. CorruptEntry for an
        entry known damaged, or whose body fails its CRC (reported once)."""
        loc = self._locate(version)
        if loc is None:
            return None
        s, i, version = loc
        seg = self.segments[s]
        if i < 0:
            raise self._lost(seg, version)
        file = FILES.get(seg.path)
        pos, (body_len, body_crc, entry_kind, _, first, count, _) = self._header_at(seg, i, file)
        if version >= first + count:
            raise self._lost(seg, version)
        if entry_kind != kind:
            return None
        if (seg.first, pos) in self._reported:
            raise CorruptEntry(f"{seg.path}: the entry at byte {pos} is damaged (reported when found)")
        if seg.checked is not None and not seg.checked[i >> 3] & (1 << (i & 7)):
            body = os.pread(file.fd, body_len, pos + HEADER_SIZE)
            if len(body) != body_len or crc32c.crc32c(body) != body_crc:
                raise self._corrupt(seg, i, "body checksum mismatch")
            seg.checked[i >> 3] |= 1 << (i & 7)
        return FileRegion(file, pos + HEADER_SIZE, body_len)

    def damaged(self, version: int, reason: str) -> CorruptEntry:
        """Report (once) the entry containing ``version`` as damaged for ``reason`` (something its CRCs do not
        cover, found by the caller); :meth:`region` never serves it again. Returns the error to raise."""
        loc = self._locate(version)
        if loc is None or loc[1] < 0:
            return CorruptEntry(f"wal {self.dir}: no entry holds version {version}")
        return self._corrupt(self.segments[loc[0]], loc[1], reason)

    def _lost(self, seg: _Segment, version: int) -> CorruptEntry:
        return CorruptEntry(f"{seg.path}: version {version} is in a lost range (damage reported when found)")

    def _header_at(self, seg: _Segment, i: int, file: OpenFile) -> tuple[int, tuple[int, int, int, int, int, int, int]]:
        pos = seg.positions[i]
        header = os.pread(file.fd, HEADER_SIZE, pos)
        decoded = _decode_header(header) if len(header) == HEADER_SIZE else None
        if decoded is None:
            raise self._corrupt(seg, i, "header checksum mismatch")
        if decoded[4] != seg.versions[i]:
            raise self._corrupt(seg, i, f"entry has version {decoded[4]} where the index says {seg.versions[i]}")
        return pos, decoded

    def _read_at(self, seg: _Segment, i: int, file: OpenFile) -> WalEntry:
        # two reads instead of slicing one: slicing would copy the (often megabyte) body a second time
        pos, (body_len, body_crc, kind, _, version, count, max_ts) = self._header_at(seg, i, file)
        if (seg.first, pos) in self._reported:
            raise CorruptEntry(f"{seg.path}: the entry at byte {pos} is damaged (reported when found)")
        body = os.pread(file.fd, body_len, pos + HEADER_SIZE)
        if len(body) != body_len or crc32c.crc32c(body) != body_crc:
            raise self._corrupt(seg, i, "body checksum mismatch")
        if seg.checked is not None:
            seg.checked[i >> 3] |= 1 << (i & 7)
        return WalEntry(version, count, kind, max_ts, body)

    def _corrupt(self, seg: _Segment, i: int, reason: str) -> CorruptEntry:
        """Report (once) the damaged entry ``i`` of ``seg`` found while reading; the error to raise."""
        start = seg.positions[i]
        stop = seg.positions[i + 1] if i + 1 < len(seg.versions) else seg.size
        if (seg.first, start) not in self._reported:
            self._reported.add((seg.first, start))
            lost_to = (seg.versions[i + 1] if i + 1 < len(seg.versions)
                       else next((x.first for x in self.segments if x.first > seg.first), self.next_version))
            file = FILES.get(seg.path)
            self._report(seg.path, start, stop, reason, "quarantined", os.pread(file.fd, stop - start, start),
                         seg.versions[i], lost_to)
        return CorruptEntry(f"{seg.path}: {reason} at byte {start}")

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
            while n < len(sealed) and now_wall - _mtime(sealed[n].path) > opts.retention_period_s:
                n += 1
        if opts.retention_bytes >= 0:
            total = self.size_bytes - sum(seg.size for seg in sealed[:n])
            while n < len(sealed) and total > opts.retention_bytes:
                total -= sealed[n].size
                n += 1
        return n

    def delete_oldest(self, n: int) -> None:
        """Delete the ``n`` oldest sealed segments (the log start moves forward), oldest first, so what is left
        is always a suffix of the log; a failure stops there (logged; retention tries again later)."""
        deleted = 0
        for seg in self.segments[: min(n, len(self.segments) - 1)]:
            seg.forget_files()
            try:
                seg.index_path.unlink(missing_ok=True)
                seg.path.unlink(missing_ok=True)  # (if this fails, the next open rebuilds the index)
            except OSError as exc:
                log.error("wal %s: cannot delete it (%s); retention tries again later", seg.path, _describe(exc))
                break
            deleted += 1
        if deleted:
            del self.segments[:deleted]
            try:
                fileio.fsync_dir(self.dir)
            except OSError as exc:  # a crash may bring the files back: older, intact segments, deleted again
                log.error("wal %s: cannot fsync the directory after deleting segments (%s)", self.dir,
                          _describe(exc))
