"""Kafka offset ⇄ WAL version translation for one topic-partition (topic × vnode).

Kafka offsets are dense per topic-partition while WAL versions are not
(DESIGN.md, "Why dense offsets"). One index record per WAL entry that
contributes records to the topic::

    u64 offset       Kafka offset of the entry's first record
    u64 version      the entry's first WAL version
    u32 count        records the entry contributes (after filter)
    i64 running_max  max record timestamp of the topic up to this entry

The rows inside an entry are found again by re-evaluating the topic on that
entry (deterministic). The file is derived state: it is appended as entries
are written (not fsynced), truncated to whole records on open, cut back to
the WAL's end if the WAL lost a torn tail, and the engine re-evaluates the
WAL from ``last_version`` onward when it is behind. Retention trims records
whose entries left the WAL; offsets are never renumbered, so the log start
offset is the offset of the first surviving record.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

__all__ = ["OffsetIndex"]

_REC = struct.Struct("<QQIq")
_TS_MIN = -(1 << 63)


class OffsetIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = array("q")
        self.versions = array("q")
        self.counts = array("q")
        self.running_max = array("q")
        self.end_offset = 0  # next offset to assign (high watermark)
        self.indexed_to = -1  # WAL versions < indexed_to have been evaluated
        self.log_start = 0  # set by DeleteRecords (persisted beside the index)
        self._fd: int | None = None

    @classmethod
    def open(cls, path: Path, wal_end: int) -> "OffsetIndex":
        """Load ``path`` (if any), dropping torn records and records beyond ``wal_end``."""
        idx = cls(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = path.read_bytes() if path.exists() else b""
        raw = raw[: len(raw) - len(raw) % _REC.size]
        for offset, version, count, running in _REC.iter_unpack(raw):
            if version >= wal_end:
                break
            idx.offsets.append(offset)
            idx.versions.append(version)
            idx.counts.append(count)
            idx.running_max.append(running)
        if len(idx.offsets) * _REC.size != (path.stat().st_size if path.exists() else 0):
            idx._rewrite()
        if idx.offsets:
            idx.end_offset = idx.offsets[-1] + idx.counts[-1]
            idx.indexed_to = idx.versions[-1] + 1
        if idx._start_path.exists():
            idx.log_start = int(idx._start_path.read_text())
            idx.end_offset = max(idx.end_offset, idx.log_start)
        idx._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return idx

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(
            b"".join(
                _REC.pack(o, v, c, m)
                for o, v, c, m in zip(self.offsets, self.versions, self.counts, self.running_max)
            )
        )
        os.replace(tmp, self.path)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def append(self, version: int, count: int, max_ts: int, next_version: int) -> None:
        """Record that the entry at ``version`` contributes ``count`` records (0: just mark it evaluated)."""
        if count:
            running = max(self.running_max[-1] if self.running_max else _TS_MIN, max_ts)
            os.write(self._fd, _REC.pack(self.end_offset, version, count, running))  # type: ignore[arg-type]
            self.offsets.append(self.end_offset)
            self.versions.append(version)
            self.counts.append(count)
            self.running_max.append(running)
            self.end_offset += count
        self.indexed_to = next_version

    @property
    def start_offset(self) -> int:
        """Log start offset: first offset still backed by the WAL, or the one DeleteRecords set if later."""
        first = self.offsets[0] if self.offsets else self.end_offset
        return max(first, self.log_start)

    def advance_start(self, offset: int) -> None:
        """DeleteRecords: the log starts at *offset* (<= the high watermark) from now on, durably.

        Entries wholly below it are forgotten; the WAL keeps their bytes until
        retention deletes the segment, as Kafka deletes segments lazily.
        """
        if offset > self.log_start:
            self.log_start = offset
            tmp = self._start_path.with_suffix(".tmp")
            with tmp.open("w") as f:
                f.write(str(offset))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._start_path)
        gone = bisect_right(self.offsets, offset)
        if gone and self.offsets[gone - 1] + self.counts[gone - 1] > offset:
            gone -= 1  # the entry holding `offset` stays
        if gone:
            for a in (self.offsets, self.versions, self.counts, self.running_max):
                del a[:gone]
            self._rewrite()

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
        """Forget entries whose WAL versions were deleted by retention."""
        i = bisect_left(self.versions, version)
        if i and i == len(self.versions):  # all gone: remember where the log starts, or offsets would restart at 0
            self.advance_start(self.end_offset)
        elif i:
            for a in (self.offsets, self.versions, self.counts, self.running_max):
                del a[:i]
            self._rewrite()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._start_path.unlink(missing_ok=True)
