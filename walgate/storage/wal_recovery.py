"""WAL recovery: what :meth:`Wal.open <walgate.storage.wal.Wal.open>` finds on disk, checked and repaired.

Recovery (:func:`recover`, run by :meth:`Wal.open`) never refuses to open because of damage: what is
damaged is reported to the :class:`~walgate.storage.damage.DamageLog` (file, byte range, reason, the
versions lost, a copy of the bytes in ``quarantine/``) and everything intact is
served. Lost versions form *gaps*: :meth:`Wal.read_from` skips them,
:meth:`Wal.read` and :meth:`Wal.region` raise :class:`~walgate.storage.wal.CorruptEntry` for a
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
- A merge of sealed segments by the log cleaner (:mod:`walgate.storage.cleaner`) is committed by a file
  ``<first>.<end>.swap`` holding the merged log of the segments from ``first`` to ``end``; found at open, the merge
  is finished as the cleaner would have: those segments' files are deleted and the swap file is renamed to the
  first one's log. When the disk refuses a step, the merged segment is served from the swap file (those segments'
  files left are not), and the WAL finishes the merge later (:meth:`Wal.finish_merges
  <walgate.storage.wal.Wal.finish_merges>`).
- Files that are not segments are ignored (and reported), leftover ``.tmp``
  files and an index whose log is gone are deleted (reported when it follows
  every log: new appends then start at its first version, not below).
"""

from __future__ import annotations

import logging
import os
import re
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Protocol

import crc32c

from walgate.storage import fileio
from walgate.storage.filecache import FileCache
from walgate.storage.fileio import SyncLatency
from walgate.storage.wal_format import (
    APPEND,
    FLAG_MORE,
    HEADER_SIZE,
    INDEX_SIZE,
    KINDS,
    SEAL,
    SEAL_MARK,
    SEAL_SIZE,
    SEGMENT_NAME,
    SWAP_NAME,
    TS_MIN,
    Header,
    Segment,
    decode_header,
    describe,
    sealed_index,
    unpack_index,
)

__all__ = ["Recovered", "Report", "Unfinished", "recover"]

log = logging.getLogger("walgate.wal")

# where a header may start: its kind, flags and reserved bytes (offset 12) look right; the CRCs decide
_HEADER_SHAPE = re.compile(b"(?=[" + bytes(KINDS) + b"][\x00\x01]\x00\x00)")
_TORN = ("torn header", "torn body")  # an entry cut by the end of the file


class Report(Protocol):
    def __call__(self, path: Path, start: int, end: int, reason: str, action: str, data: bytes = b"",
                 first_version: int = -1, end_version: int = -1) -> None:
        """Report damage (see :class:`~walgate.storage.damage.DamageLog`)."""


@dataclass
class Recovered:
    """What a WAL directory holds once recovered: its segments (the last one active, its log made by the caller),
    the next version to give and the running max timestamp of the last entry."""

    segments: list[Segment]
    next_version: int
    running_max: int
    merges: list[Unfinished] = field(default_factory=list)


@dataclass
class Unfinished:
    """A merge of the log cleaner the disk refused to finish at open: the merged segment (its first version), read
    from its swap file; the files still to delete (the merged segments'); the version after it."""

    first: int
    swap: Path
    stale: list[Path]
    end: int


def recover(directory: Path, first_version: int, report: Report, files: FileCache, syncs: SyncLatency) -> Recovered:
    """Recover the segments of ``directory`` (see the module docstring), reading them through ``files`` (the WAL's
    descriptor cache) and timing its fsyncs into ``syncs`` (the WAL's); a WAL with none starts at
    ``first_version``."""
    rec = _Recovery(directory, report, files, syncs)
    segments: list[Segment] = []
    logs, floor = rec.segment_files()
    firsts = sorted(logs)
    end = first_version
    sealed_end = -1  # the gap-free end recorded in the previous segment's seal
    for i, first in enumerate(firsts):
        seg = Segment(directory, first)
        if first in rec.unfinished:
            seg.path = rec.unfinished[first].swap
        bound = firsts[i + 1] if i + 1 < len(firsts) else None
        if segments:
            prev = segments[-1]
            if first < end:
                report(seg.path, 0, logs[first], f"segment starts at version {first}, inside the previous "
                       f"one (which ends at version {end}); ignored", "ignored")
                continue
            if first > end and first > sealed_end:
                report(prev.path, prev.size, prev.size, f"versions [{end}, {first}) are missing: the "
                       "segment that held them is gone", "lost", first_version=end, end_version=first)
                rec.write_sealed_index(prev, first)
        loaded = rec.load_sealed(seg) if bound is not None else None
        end, sealed_end = rec.scan(seg, bound) if loaded is None else loaded
        segments.append(seg)
        if seg.running_max:
            rec.running_max = seg.running_max[-1]
        if bound is None and sealed_end > end:  # scan sealed it: its damaged tail may have held versions to
            end = sealed_end                    # sealed_end, never given again; the active segment starts there
            segments.append(Segment(directory, end))  # (its log is made by the caller)
    if not segments:
        end = max(first_version, floor)
        segments.append(Segment(directory, end))  # its log is made (and the directory fsynced) by the caller
    return Recovered(segments, max(end, floor), rec.running_max, list(rec.unfinished.values()))


class _Recovery:
    """The segment checks of one recovery; ``running_max`` carries the running max timestamp from segment to
    segment."""

    def __init__(self, directory: Path, report: Report, files: FileCache, syncs: SyncLatency) -> None:
        self.files = files
        self.syncs = syncs
        self.directory = directory
        self.report = report
        self.running_max = TS_MIN
        self.unfinished: dict[int, Unfinished] = {}  # first version -> a merge not finished at open

    def segment_files(self) -> tuple[dict[int, int], int]:
        """({first version: log size} of the segment logs, the lowest version new appends may use); ignores and
        reports what is not a segment, deletes leftovers (.tmp files, an index whose log is gone)."""
        logs: dict[int, int] = {}
        indexes: dict[int, Path] = {}
        swaps: list[tuple[int, int, Path]] = []
        with os.scandir(self.directory) as it:
            for item in it:
                path = Path(item.path)
                m = SEGMENT_NAME.fullmatch(item.name)
                swap = SWAP_NAME.fullmatch(item.name)
                if swap and item.is_file():
                    swaps.append((int(swap[1]), int(swap[2]), path))
                elif m and item.is_file():
                    self.files.discard(path, os.O_RDONLY, APPEND)  # a WAL closed without close() in this process
                    if m[2] == "log":
                        logs[int(m[1])] = item.stat().st_size
                    else:
                        indexes[int(m[1])] = path
                elif item.name.endswith(".tmp") and item.is_file():
                    _unlink(path)  # an interrupted fileio.replace_file: the file it replaces is intact
                else:
                    self.report(path, 0, 0, "not a WAL segment file; ignored", "ignored")
        for first, end, path in swaps:
            self._finish_merge(first, end, path, logs, indexes)
        floor = 0
        for first, path in indexes.items():
            if first in logs:
                continue
            _unlink(path)
            if not logs or first > max(logs):  # (below all logs: left by retention; between: a gap, see open)
                self.report(path, 0, 0, f"the log of segment {first} is missing: the versions it held are lost",
                             "lost", first_version=first)
                floor = max(floor, first)
        return logs, floor

    def _finish_merge(self, first: int, end: int, swap: Path, logs: dict[int, int], indexes: dict[int, Path]) -> None:
        """Finish the cleaner's merge of the segments in [first, end) that ``swap`` holds (see the module
        docstring), updating ``logs`` and ``indexes``."""
        merged = Segment(self.directory, first)
        try:
            for n in sorted(logs):
                if first < n < end:
                    fileio.unlink(Segment(self.directory, n).path)
                    del logs[n]
            for n in sorted(indexes):
                if first <= n < end:
                    fileio.unlink(indexes[n], missing_ok=True)
                    del indexes[n]
            fileio.rename(swap, merged.path)
        except OSError as exc:
            log.error("wal %s: cannot finish the log cleaner's merge (%s); served from it, finished later", swap,
                      describe(exc))
            stale = [Segment(self.directory, n).path for n in logs if first < n < end]
            for n in [n for n in logs if first <= n < end]:
                del logs[n]  # (the indexes of those gone are deleted next, the first one's checked against the swap)
            logs[first] = swap.stat().st_size
            stale += [Segment(self.directory, n).index_path for n in indexes if first <= n < end]
            self.unfinished[first] = Unfinished(first, swap, stale, end)
            return
        try:
            fileio.fsync_dir(self.directory, syncs=self.syncs)
        except OSError as exc:  # (a crash before a later fsync may bring the swap file back: finished again)
            log.error("wal %s: cannot fsync the directory after finishing a merge (%s)", self.directory,
                      describe(exc))
        logs[first] = merged.path.stat().st_size
        log.info("wal %s: the log cleaner's merge of the segments before version %d finished", merged.path, end)

    def load_sealed(self, seg: Segment) -> tuple[int, int] | None:
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
                self.report(seg.index_path, 0, len(raw), f"{reason}; rebuilt from the log", "rebuilt")
            else:  # as releases before the seal wrote them
                log.info("wal %s: %s; rebuilding it from the log", seg.index_path, reason)
        else:  # the index is sound and the log is not what it describes: the scan finds and reports why
            log.info("wal %s: %s; scanning it", seg.path, reason)
        return None

    def _check_index(self, seg: Segment, raw: bytes) -> tuple[str, tuple[int, int] | None]:
        """("", (end of its entries, end recorded in the seal)) when the index is sound and describes the log,
        else (why, None): "index ..." when the index itself is bad."""
        if len(raw) < SEAL_SIZE or (len(raw) - SEAL_SIZE) % INDEX_SIZE:
            return f"index has {len(raw)} bytes, not a whole number of records and a seal", None
        mark, sealed_end, log_size, crc = SEAL.unpack_from(raw, len(raw) - SEAL_SIZE)
        if mark != SEAL_MARK or crc32c.crc32c(raw[: len(raw) - 8]) != crc or any(raw[len(raw) - 4 :]):
            return "index checksum mismatch", None
        if log_size != seg.size:
            return f"the log has {seg.size} bytes, its index was sealed at {log_size}", None
        seg.versions, seg.positions, seg.running_max = unpack_index(raw[: len(raw) - SEAL_SIZE])
        if not seg.versions:
            return ("", (seg.first, sealed_end)) if seg.size == 0 else ("the log has bytes its index has no entry "
                                                                           "for", None)
        file = self.files.get(seg.path)
        ends = []
        for i in (0, len(seg.versions) - 1):
            header = os.pread(file.fd, HEADER_SIZE, seg.positions[i])
            decoded = decode_header(header) if len(header) == HEADER_SIZE else None
            if decoded is None or decoded[4] != seg.versions[i] or decoded[4] < seg.first:
                return f"the entry at byte {seg.positions[i]} is not the one its index lists", None
            ends.append((seg.positions[i] + HEADER_SIZE + decoded[0], decoded[4] + decoded[5]))
        if ends[-1][0] != seg.size:
            return "the log does not end where its index does", None
        seg.checked = bytearray((len(seg.versions) + 7) // 8)
        return "", (ends[-1][1], sealed_end)

    def scan(self, seg: Segment, bound: int | None) -> tuple[int, int]:
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
                self.report(seg.path, start, stop, reason, "quarantined", data[start:stop], lost_from, lost_to)
        tail_bad = [b for b in bad if b[0] >= tail]
        sealed_end = -1 if bound is None else bound
        if bound is not None and (tail < n or end_version < bound):
            self.report(seg.path, tail, n, tail_bad[0][3] if tail_bad else "segment ends early",
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
                self.report(seg.path, tail, n, tail_bad[0][3], "truncated", data[tail:], end_version,
                             -1 if -1 in ends else sealed_end)
        positions = array("q", (k[0] for k in kept))
        if len(bad) > len(tail_bad):  # damage before intact entries: rewrite the segment without it
            try:
                fileio.replace_file(seg.path, b"".join(view[k[0] : k[1]] for k in kept), syncs=self.syncs)
                sizes = [k[1] - k[0] for k in kept]
                positions = array("q", accumulate(sizes[:-1], initial=0))
                tail = sum(sizes)
            except OSError as exc:
                log.error("wal %s: cannot rewrite it without its damaged bytes (%s); they stay in place, outside "
                          "the index", seg.path, describe(exc))
            seg.forget_files(self.files)
        running = self.running_max
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
            self.write_sealed_index(seg, bound)
        elif sealed_end > end_version:  # sealed before it is cut: a crash between re-reports, never reuses
            self.write_sealed_index(seg, sealed_end)
            self._truncate_sealed(seg)
        # (an active segment's log is cut back to seg.size by _restore, at the end of open)
        return end_version, sealed_end

    def _truncate_sealed(self, seg: Segment) -> None:
        try:
            fd = os.open(seg.path, os.O_WRONLY)
            try:
                fileio.truncate(fd, seg.size)
                fileio.fsync(fd, syncs=self.syncs)
            finally:
                os.close(fd)
        except OSError as exc:  # the index keeps the damaged tail out; the next open tries again
            log.error("wal %s: cannot cut off its damaged tail (%s)", seg.path, describe(exc))

    def write_sealed_index(self, seg: Segment, end_version: int) -> None:
        try:
            fileio.replace_file(seg.index_path, sealed_index(seg, end_version), syncs=self.syncs)
        except OSError as exc:  # derived: rebuilt at the next open
            log.error("wal %s: cannot write its index (%s)", seg.index_path, describe(exc))


def _entry_at(data: memoryview, pos: int) -> tuple[int | None, Header | None, str]:
    """(where the entry at ``pos`` ends (None: unknown, its header is bad), its header if intact, why it is not a
    valid entry ("" when it is))."""
    n = len(data)
    if n - pos < HEADER_SIZE:
        return n, None, "torn header"
    decoded = decode_header(data[pos : pos + HEADER_SIZE])
    if decoded is None:
        return None, None, "header checksum mismatch"
    end = pos + HEADER_SIZE + decoded[0]
    if end > n:
        return n, decoded, "torn body"
    if crc32c.crc32c(data[pos + HEADER_SIZE : end]) != decoded[1]:
        return end, decoded, "body checksum mismatch"
    return end, decoded, ""


def _implausible(decoded: Header, expected: int, bound: int | None) -> str:
    """Why an entry with a valid header does not belong here ("" when it does)."""
    _, _, kind, flags, version, count, _ = decoded
    if kind not in KINDS or flags > FLAG_MORE or count < 1:
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


def _unlink(path: Path) -> None:
    """Delete a leftover; if that fails it is only logged (it is met, and deleted, again at the next open)."""
    try:
        path.unlink()
    except OSError as exc:
        log.error("wal %s: cannot delete it (%s)", path, describe(exc))
