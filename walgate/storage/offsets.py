"""Kafka offset ⇄ WAL version translation for one topic-partition (topic × vnode).

Kafka offsets are dense per topic-partition while WAL versions are not
(docs/architecture.md, "Why dense offsets"), except where the cleaner dropped a Kafka-native batch (compaction
leaves gaps, as in Kafka). One index record per WAL entry that contributes records to the topic::

    u64 offset       Kafka offset of the entry's first record
    u64 version      the entry's first WAL version
    u32 count        records the entry contributes (after filter)
    i64 running_max  max record timestamp of the topic up to this entry
    u32 crc          CRC32C of the 28 bytes before it

The rows inside an entry are found again by re-evaluating the topic on that
entry (deterministic). ``topics/<topic id>.oidx`` in the vnode directory is
derived state, never trusted: it is appended as entries are written (not
fsynced), and on open its records are checked (each record's CRC, which
also fails for a file of the old 28-byte records; offsets dense (but for compaction's gaps, see :meth:`OffsetIndex.open`), versions
increasing by at least the previous count, counts >= 1, running max not
decreasing, nothing past the WAL's end). The longest valid prefix is kept
and the engine re-evaluates the WAL from there (``indexed_to``; a
Kafka-native partition numbers a rebuilt index from the base offsets its
stored batches carry, and the ``.start`` file below keeps its log start);
anything after it is garbage (reported to the DamageLog unless it is a
zero-filled or torn tail, the normal leftovers of a crash) or describes
entries the WAL lost. A write the disk refuses is not retried: the file is rewritten whole
at the next trim or on close, or rebuilt at the next open. Retention trims
records whose entries left the WAL; offsets are never renumbered, so the
log start offset is the offset of the first surviving record.

``topics/<topic id>.start`` holds the log start set by DeleteRecords (or by
retention deleting every indexed entry) as one checksummed line
(:mod:`walgate.storage.lines`), written with
:func:`walgate.storage.fileio.replace_file` before memory changes; when it
does not verify, the log start falls back to 0 (reported).
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from pathlib import Path

import crc32c

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable
from walgate.storage.filecache import FileCache
from walgate.storage.fileio import SyncLatency

__all__ = ["OffsetIndex", "pack_record"]

log = logging.getLogger("walgate.offsets")

_REC = struct.Struct("<QQIqI")
_BODY = struct.Struct("<QQIq")  # what the CRC covers
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT  # appends go through the engine's descriptor cache
_TS_MIN = -(1 << 63)
_OFFSET_MAX = 1 << 62


def pack_record(offset: int, version: int, count: int, running_max: int) -> bytes:
    """One index record with its CRC."""
    body = _BODY.pack(offset, version, count, running_max)
    return body + crc32c.crc32c(body).to_bytes(4, "little")


class OffsetIndex:
    def __init__(self, path: Path, damage: DamageLog | None = None, files: FileCache | None = None,
                 syncs: SyncLatency | None = None) -> None:
        self.path = path
        self.files = FileCache() if files is None else files  # its engine's descriptors (its vnode WAL's)
        self.syncs = SyncLatency() if syncs is None else syncs  # its engine's fsync times (its vnode WAL's)
        self.damage = damage
        self.offsets = array("q")
        self.versions = array("q")
        self.counts = array("q")
        self.running_max = array("q")
        self.end_offset = 0  # next offset to assign (high watermark)
        self.indexed_to = -1  # WAL versions < indexed_to have been evaluated
        self.log_start = 0  # set by DeleteRecords (persisted beside the index)
        self._file_ok = True  # the file holds exactly the records in memory: appends go on
        self._start_saved = True  # the .start file holds log_start
        self._entries_in: Callable[[int, int], bool] | None = None  # see open

    @classmethod
    def open(cls, path: Path, wal_end: int, damage: DamageLog | None = None,
             entries_in: Callable[[int, int], bool] | None = None, files: FileCache | None = None,
             syncs: SyncLatency | None = None) -> OffsetIndex:
        """Load the valid prefix of ``path`` (if any) below ``wal_end`` (see the module docstring). ``entries_in(a, b)``
        (a Kafka-native partition: whether its WAL holds an entry with a version in [a, b)) allows gaps in the
        offsets where the WAL holds no entry (the cleaner dropped the batches); without it offsets must be dense."""
        idx = cls(path, damage, files, syncs)
        idx._entries_in = entries_in
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = path.read_bytes() if path.exists() else b""
        whole = len(raw) - len(raw) % _REC.size
        reason = ""
        for i, (offset, version, count, running, crc) in enumerate(_REC.iter_unpack(raw[:whole])):
            if crc != crc32c.crc32c(raw[i * _REC.size : i * _REC.size + _BODY.size]):
                reason = "checksum mismatch"
            else:
                reason = idx._invalid(offset, version, count, running, wal_end)
            if reason:
                break
            idx.offsets.append(offset)
            idx.versions.append(version)
            idx.counts.append(count)
            idx.running_max.append(running)
        kept = len(idx.offsets) * _REC.size
        if reason and reason != "past the WAL's end" and any(raw[kept:]):
            idx._report(path, kept, len(raw), f"offset index: {reason} at record {len(idx.offsets)}; rebuilt from the WAL "
                        "from there", "rebuilt", raw[kept:])
        if kept != len(raw):
            idx._rewrite()
        if idx.offsets:
            idx.end_offset = idx.offsets[-1] + idx.counts[-1]
            idx.indexed_to = idx.versions[-1] + 1
        idx.log_start = idx._read_start()
        idx.end_offset = max(idx.end_offset, idx.log_start)
        return idx

    def _invalid(self, offset: int, version: int, count: int, running: int, wal_end: int) -> str:
        """Why a record cannot follow the ones loaded so far ("" if it can)."""
        if not self.offsets:
            if not 0 <= offset < _OFFSET_MAX or version < 0:
                return f"offset {offset} at version {version}"
        elif offset != self.offsets[-1] + self.counts[-1] and (
                self._entries_in is None or offset < self.offsets[-1] + self.counts[-1]
                or self._entries_in(self.versions[-1] + self.counts[-1], version)):
            return f"offset {offset} after {self.offsets[-1]} + {self.counts[-1]} (not dense)"
        elif version < self.versions[-1] + self.counts[-1]:
            return f"version {version} after {self.versions[-1]} + {self.counts[-1]} (not increasing)"
        elif running < self.running_max[-1]:
            return f"running max timestamp {running} below {self.running_max[-1]}"
        if version >= wal_end:
            return "past the WAL's end"
        if count < 1 or version + count > wal_end:
            return f"count {count} at version {version} (WAL end {wal_end})"
        return ""

    def _report(self, path: Path, start: int, end: int, reason: str, action: str, data: bytes) -> None:
        if self.damage is None:
            log.warning("%s bytes [%d, %d): %s; %s", path, start, end, reason, action)
        else:
            self.damage.report(path, start, end, reason, action, data)

    def _read_start(self) -> int:
        path = self._start_path
        if not path.exists():
            return 0
        raw = path.read_bytes()
        try:
            return lines.decode_int(raw, "log_start", 0)
        except ValueError as exc:
            self._report(path, 0, len(raw), f"log start of DeleteRecords: {exc}; the log starts at the first indexed "
                         "record", "reset", raw)
            return 0

    def _rewrite(self) -> None:
        """Replace the file by the records in memory; on failure the file is left to the next open to repair."""
        data = b"".join(pack_record(o, v, c, m) for o, v, c, m in zip(self.offsets, self.versions, self.counts, self.running_max))
        try:
            fileio.replace_file(self.path, data, syncs=self.syncs)
        except OSError as exc:
            log.warning("%s: could not rewrite the offset index (rebuilt at the next start): %s", self.path, exc)
            self._file_ok = False
            return
        self._file_ok = True
        self.files.discard(self.path, _APPEND)  # the cached descriptor (if any) is of the replaced file

    def append(self, version: int, count: int, max_ts: int, next_version: int, offset: int = -1) -> None:
        """Record that the entry at ``version`` contributes ``count`` records (0: just mark it evaluated); ``offset``:
        the offset a stored Kafka batch carries, when it is past the end (a gap left by compaction)."""
        if count and offset > self.end_offset:
            self.end_offset = offset
        if count:
            running = max(self.running_max[-1] if self.running_max else _TS_MIN, max_ts)
            if self._file_ok:
                try:
                    fileio.write_all(self.files.get(self.path, _APPEND).fd, pack_record(self.end_offset, version, count, running))
                except OSError as exc:  # derived state: memory goes on, the file is repaired later
                    log.warning("%s: offset index write failed (repaired later): %s", self.path, exc)
                    self._file_ok = False
            self.offsets.append(self.end_offset)
            self.versions.append(version)
            self.counts.append(count)
            self.running_max.append(running)
            self.end_offset += count
        self.indexed_to = next_version

    def records_between(self, start: int, end: int) -> list[tuple[int, int, int, int]]:
        """(offset, version, count, running max) of each record whose entry's version is in ``[start, end)``."""
        lo, hi = bisect_left(self.versions, start), bisect_left(self.versions, end)
        return list(zip(self.offsets[lo:hi], self.versions[lo:hi], self.counts[lo:hi], self.running_max[lo:hi]))

    def start_empty_at(self, offset: int) -> None:
        """An index with no records numbers the next entry ``offset`` (a rebuilt Kafka-native partition: the
        offset its first stored batch carries)."""
        if not self.offsets:
            self.end_offset = offset

    @property
    def start_offset(self) -> int:
        """Log start offset: first offset still backed by the WAL, or the one DeleteRecords set if later."""
        first = self.offsets[0] if self.offsets else self.end_offset
        return max(first, self.log_start)

    def advance_start(self, offset: int) -> None:
        """DeleteRecords: the log starts at *offset* (<= the high watermark) from now on, durably; raises
        :class:`StorageUnavailable`, changing nothing, when the disk refuses the write.

        Entries wholly below it are forgotten; the WAL keeps their bytes until
        retention deletes the segment, as Kafka deletes segments lazily.
        """
        if offset > self.log_start:
            try:
                self._save_start(offset)
            except OSError as exc:
                raise StorageUnavailable(f"The log start could not be written ({exc.strerror or exc}): "
                                         "no records were deleted") from None
            self.log_start = offset
        self._forget(bisect_right(self.offsets, offset), offset)

    def _save_start(self, offset: int) -> None:
        fileio.replace_file(self._start_path, lines.encode({"log_start": offset}), syncs=self.syncs)
        self._start_saved = True

    def _forget(self, gone: int, offset: int) -> None:
        """Drop the first ``gone`` records, keeping the one holding ``offset``."""
        if gone and self.offsets[gone - 1] + self.counts[gone - 1] > offset:
            gone -= 1  # the entry holding `offset` stays
        if gone:
            for a in (self.offsets, self.versions, self.counts, self.running_max):
                del a[:gone]
            self._rewrite()

    def remove_versions(self, versions: set[int]) -> None:
        """Forget the entries at ``versions`` (batches the cleaner dropped: their offsets become a gap; never the
        last entry, so the high watermark stays) and rewrite the file."""
        keep = [i for i, v in enumerate(self.versions) if v not in versions]
        if len(keep) == len(self.versions):
            return
        for name in ("offsets", "versions", "counts", "running_max"):
            old = getattr(self, name)
            setattr(self, name, array("q", (old[i] for i in keep)))
        self._rewrite()

    def truncate_to(self, version: int) -> None:
        """The WAL was cut back to ``version`` (its entries at and after it gone): forget their records, so the next
        entry indexed gets the offset the first forgotten one had, as on a replica that never had them; the log
        start stays unless it was past that offset (then it is that offset, as Kafka's log start never passes its
        end). The file is rewritten when that cut records, or when an earlier rewrite was refused: StorageUnavailable
        when the disk refuses it (memory is cut; the caller keeps the WAL from growing back past the cut until a
        retry succeeds, as the file's stale records would then pass the open's check, which drops only those past the
        WAL's end)."""
        i = bisect_left(self.versions, version)
        if i < len(self.versions):
            self.end_offset = self.offsets[i]
            for a in (self.offsets, self.versions, self.counts, self.running_max):
                del a[i:]
            self._file_ok = False
        if not self._file_ok:
            self._rewrite()
            if not self._file_ok:
                raise StorageUnavailable(f"{self.path}: the offset index could not be cut back to version {version}")
        self.indexed_to = min(self.indexed_to, version)
        if self.log_start > self.end_offset:
            self._move_start(self.end_offset)

    def _move_start(self, offset: int) -> None:
        """The log starts at ``offset`` (a retention or a truncation moved it): saved now, or retried on close."""
        self.log_start = offset
        try:
            self._save_start(offset)
        except OSError as exc:
            log.warning("%s: could not save the log start (retried on close): %s", self._start_path, exc)
            self._start_saved = False

    @property
    def _start_path(self) -> Path:
        return self.path.with_suffix(".start")

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(entry version, position of ``offset`` among the entry's records), None outside the log."""
        if offset < self.start_offset or offset >= self.end_offset:
            return None
        i = bisect_right(self.offsets, offset) - 1
        return self.versions[i], offset - self.offsets[i]

    def entry_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, version) of the first entry holding a record with timestamp >= ``ts``."""
        i = bisect_left(self.running_max, ts)
        if i == len(self.running_max):
            return None
        return self.offsets[i], self.versions[i]

    def trim_before(self, version: int) -> None:
        """Forget entries whose WAL versions were deleted by retention (never fails: what the disk refuses to
        record now is recorded on close, or derived again at the next start)."""
        i = bisect_left(self.versions, version)
        if i and i == len(self.versions) and self.end_offset > self.log_start:
            self._move_start(self.end_offset)  # all gone: remember where the log starts, or offsets would restart at 0
        self._forget(i, self.offsets[i] if i < len(self.offsets) else self.end_offset)

    def close(self) -> None:
        if not self._file_ok:
            self._rewrite()
        if not self._start_saved:
            try:
                self._save_start(self.log_start)
            except OSError as exc:
                log.error("%s: could not save the log start: %s", self._start_path, exc)
        self.files.discard(self.path, _APPEND)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._start_path.unlink(missing_ok=True)
