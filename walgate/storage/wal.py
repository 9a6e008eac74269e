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

The byte layout of entries, indexes and seals is :mod:`walgate.storage.wal_format`'s.

Segments: an append rolls the active segment when it would pass ``segment_bytes`` or the segment is older than
``segment_ms`` (Kafka's ``segment.ms``; -1: never): the append's max timestamp is at least ``segment_ms`` past the
active segment's first entry's (as Kafka times a roll from a segment's first batch, so a restart keeps the clock),
or that much wall time (the WAL's :class:`~walgate.storage.clock.Clock`) passed since the segment's first append or
the open (records with timestamps from the past, or none, still roll). Sealed
segments are never written again, except that the log cleaner of a compacted Kafka-native topic may replace one whole, under the same name, by a version with some
entries dropped or shrunk (:meth:`Wal.swap_segment`, :mod:`walgate.storage.cleaner`), or merge adjacent ones into
the first (:meth:`Wal.merge_segments`: served from the committed ``.swap`` file until the merge's file operations
are all done, so a disk refusing one never fails a read).

Batches: one :meth:`Wal.append` call writes its entries with a single
``write`` and never spans segments; every entry but the last carries the
"more" flag, and recovery drops an incomplete final batch whole. That makes
each append atomic: after a crash it is there entirely or not at all. A follower's
:meth:`Wal.append_verbatim` writes entries copied from its leader's WAL as they are (their headers, flags and
versions), a run :func:`walgate.storage.wal_verbatim.parse` checked, whole batches in a single ``write`` likewise.

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
refuses the append (cut off as above) instead of acknowledging it.

Group commit (level 2, period 0, opened with an :class:`~walgate.storage.durability.Unsynced` ledger: the gateway):
:meth:`append` writes to the OS, notes ``(wal, next_version)`` in the ledger and returns; its caller answers only
once a sync taken later (:meth:`take_sync`, at most one taken and not done at a time, run on another thread)
made that version durable, so one fdatasync covers every append made while the previous one ran. Until then the
versions are not *visible* (:attr:`visible_version`): consumers are never served records that are not durable, as
Kafka's high watermark only passes committed records. When that fdatasync fails, every append it covered is
refused (its caller answers StorageUnavailable) but its bytes are not cut: later appends may follow them in the
log, and the memory built on them (offset indexes, tables created, producer sequences) cannot be taken back. They
stay invisible, and the next sync (the resync below) rewrites and syncs them; once one succeeds they become durable
and visible like the appends after them. So a refused append under group commit is never served while it is not
durable, but may be served afterwards, as Kafka may keep a batch whose produce failed (an idempotent producer's
retry is then answered as a duplicate: the same offsets). A failure *writing* the log still refuses and cuts back
as above: group commit defers only the fdatasync. A follower's copy (:meth:`append_verbatim`) is fdatasynced in
its own call even so: its one writer waits for it before writing more, so a group would only ever hold it.

After a
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

Recovery (:meth:`Wal.open`, see :mod:`walgate.storage.wal_recovery`) never refuses to open because of damage:
what is damaged is reported to the :class:`DamageLog` and everything intact is served. Lost versions form
*gaps*: :meth:`Wal.read_from` skips them, :meth:`Wal.read` and :meth:`Wal.region` raise :class:`CorruptEntry`
for a version in one, and their numbers are not given to new entries (only the versions of a torn tail cut
off the active segment are, as Kafka reuses the offsets of a log it truncates). A damaged entry inside a
sealed segment trusted at open is found when read: reported then (once per process) and skipped; its body
is checked even when served unread (:meth:`Wal.region`): the first time, the segment keeping one bit per
entry checked; an entry found damaged is never served again.

Descriptors: a WAL holds none between calls. Segment files are opened through
the bounded :class:`~walgate.storage.filecache.FileCache` it was opened with,
its engine's (``Store.files``: least recently used descriptors are closed; a
:class:`FileRegion` being sent keeps its own open), so any number of partitions
run within ``ulimit -n``: an append gets
the active log (``O_APPEND``) from it, a read the segment (read-only), and a
periodic sync opens the segment on its worker thread for its fdatasync only.
"""

from __future__ import annotations

import contextlib
import logging
import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import crc32c

from walgate.storage import fileio
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.errors import CorruptEntry, StorageUnavailable
from walgate.storage.filecache import FileCache, OpenFile
from walgate.storage.fileio import SyncLatency
from walgate.storage.wal_format import (
    APPEND,
    FLAG_MORE,
    HEADER_SIZE,
    KIND_DATA,
    KIND_KAFKA,
    KIND_META,
    TS_MIN,
    Header,
    Segment,
    decode_header,
    describe,
    encode_entry,
    sealed_index,
)
from walgate.storage.wal_recovery import recover
from walgate.storage.wal_truncate import INTENT, Cut, finish, write_intent
from walgate.storage.wal_verbatim import EntriesRefused, VerbatimRun

__all__ = [
    "FLAG_MORE",
    "HEADER_SIZE",
    "KIND_DATA",
    "KIND_KAFKA",
    "KIND_META",
    "CorruptEntry",
    "FileRegion",
    "PendingSync",
    "SegmentFile",
    "Wal",
    "WalEntry",
    "WalOptions",
    "SegmentView",
    "WalSnapshot",
    "never_refused",
]

log = logging.getLogger("walgate.wal")

_first = attrgetter("first")

SegmentFile = OpenFile  # the descriptor a FileRegion keeps open (from its engine's cache)


@dataclass(frozen=True)
class WalOptions:
    level: int = 1
    fsync_period_ms: int = 3000
    segment_bytes: int = 64 << 20
    retention_period_s: int = 604800  # -1: keep forever
    retention_bytes: int = -1  # -1: unlimited
    segment_ms: int = -1  # an append rolls an active segment older than this (-1: by size only; Kafka's segment.ms)


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
    head: bytes = b""  # the body's first bytes, when asked for (read with the entry's header, see Wal.region)

    def __len__(self) -> int:
        return self.length

    def read(self, length: int | None = None) -> bytes:
        """The region's bytes (its first ``length`` only, when given)."""
        return os.pread(self.file.fd, self.length if length is None else min(length, self.length), self.offset)


def never_refused() -> str | None:
    """No refusal: the write is taken (a vnode not led, or led with enough in-sync replicas)."""
    return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # deleted under us: expired
        return -float("inf")


def _zero_tail(path: Path, start: int, syncs: SyncLatency) -> None:
    """Overwrite ``path`` from ``start`` to its end with zeros and fdatasync it: the next open cuts a zeroed tail
    off as torn (see :meth:`Wal._fence`)."""
    fd = os.open(path, os.O_RDWR)
    try:
        end = os.fstat(fd).st_size
        for pos in range(start, end, 1 << 20):
            fileio.pwrite_all(fd, bytes(min(1 << 20, end - pos)), pos)
        if end > start:
            fileio.fdatasync(fd, syncs=syncs)
    finally:
        os.close(fd)


def _sync_file(path: Path, rewrite_from: int | None, syncs: SyncLatency) -> None:
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
        fileio.fdatasync(fd, syncs=syncs)
    finally:
        os.close(fd)


class PendingSync:
    """An fsync taken on the storage thread (periodic, or group commit's: a :class:`~walgate.storage.durability.Sync`).
    ``run`` (any thread) fdatasyncs the segment through a descriptor it opens and closes itself (a roll or the cache
    may close the WAL's meanwhile, and a thousand pending syncs never hold a thousand descriptors); it never raises.
    ``done`` (storage thread, after ``run``) marks every version below ``version`` durable, or, if the fdatasync
    failed, logs it and leaves them non-durable for the next sync to rewrite and sync again."""

    __slots__ = ("wal", "path", "since", "version", "covers", "rewrite_from", "generation", "error")

    def __init__(self, wal: Wal, path: Path, since: int, version: int, rewrite_from: int | None,
                 generation: int) -> None:
        self.wal = wal
        self.path = path
        self.since = since  # versions [since, version) are what it makes durable
        self.version = version
        self.covers = version  # group commit: the needs (targets = next_version after an append) it answers
        self.rewrite_from = rewrite_from
        self.generation = generation
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            _sync_file(self.path, self.rewrite_from, self.wal.syncs)
        except FileNotFoundError:
            pass  # sealed meanwhile (its roll fsynced it) and deleted by retention
        except OSError as exc:
            self.error = exc

    def done(self) -> None:
        self.wal._synced(self)


@dataclass
class _Merge:
    """A merge of sealed segments the log cleaner committed whose file operations the disk refused: ``seg`` (served
    in place of the merged segments) reads its committed ``.swap`` file until it is renamed to ``log``; ``stale``
    are the merged segments' files still to delete; ``end`` is the version after ``seg`` (its index's seal)."""

    seg: Segment
    log: Path
    end: int
    stale: list[Path] = field(default_factory=list)


class _Bad(Exception):
    """An entry failed a check (the message says which); the caller reports it."""


def _header_at(seg: Segment | SegmentView, i: int, file: OpenFile, head: int = 0) -> tuple[int, Header, bytes]:
    """Entry ``i``'s position and checked header, and up to ``head`` bytes after it (the same ``pread``)."""
    pos = seg.positions[i]
    header = os.pread(file.fd, HEADER_SIZE + head, pos)
    decoded = decode_header(header) if len(header) >= HEADER_SIZE else None
    if decoded is None:
        raise _Bad("header checksum mismatch")
    if decoded[4] != seg.versions[i]:
        raise _Bad(f"entry has version {decoded[4]} where the index says {seg.versions[i]}")
    return pos, decoded, header[HEADER_SIZE:]


def _entry_at(seg: Segment | SegmentView, i: int, file: OpenFile) -> WalEntry:
    """Entry ``i`` of ``seg``, its header and body checked against their CRCs."""
    # two reads instead of slicing one: slicing would copy the (often megabyte) body a second time
    pos, (body_len, body_crc, kind, _, version, count, max_ts), _ = _header_at(seg, i, file)
    body = os.pread(file.fd, body_len, pos + HEADER_SIZE)
    if len(body) != body_len or crc32c.crc32c(body) != body_crc:
        raise _Bad("body checksum mismatch")
    return WalEntry(version, count, kind, max_ts, body)


@dataclass(frozen=True)
class SegmentView:
    """A copy of the index of a segment's first entries: what a :class:`WalSnapshot` reads."""

    path: Path
    first: int
    versions: array[int]
    positions: array[int]


@dataclass(frozen=True)
class WalSnapshot:
    """The entries a WAL served when :meth:`Wal.snapshot` took this, readable on any thread or in another process
    (it pickles) while the WAL goes on appending.

    It holds a copy of each segment's index up to the entries that were visible, and reads their bytes from the
    segment files, checking each entry against its CRCs: appends only add bytes after them, and an undo or a failed
    write cuts back only what was appended after the snapshot (a write is undone in the call that made it). A
    segment whose file was deleted since (retention, DROP DATABASE) is skipped: its entries left with it. Entries
    found damaged are skipped and listed for :meth:`Wal.recheck`, which reports them where the WAL lives (a report
    writes the quarantine): damage is never silent. Not for a compacted topic's WAL, whose cleaner rewrites sealed
    segments under their names."""

    segments: tuple[SegmentView, ...]
    reported: frozenset[tuple[int, int]]  # (segment, position) of damage already reported: skipped

    def entries(self, damaged: list[int]) -> Iterator[WalEntry]:
        """Every intact entry, oldest first; the first version of each damaged one is appended to ``damaged``."""
        for seg in self.segments:
            try:  # opened here, not from the process's file cache: closed once read, so a segment deleted later
                file = OpenFile(seg.path)  # (retention, DROP) is never kept open by a process that read it
            except FileNotFoundError:
                continue
            for i, position in enumerate(seg.positions):
                if (seg.first, position) in self.reported:
                    continue
                try:
                    entry = _entry_at(seg, i, file)
                except _Bad:
                    damaged.append(seg.versions[i])
                    continue
                yield entry


class Wal:
    """Append-only, versioned, indexed log of one vnode (see the module docstring)."""

    def __init__(self, directory: Path, options: WalOptions, damage: DamageLog | None = None,
                 unsynced: Unsynced | None = None, owner: tuple[str, int] = ("", 0),
                 clock: Clock = SYSTEM_CLOCK, files: FileCache | None = None, syncs: SyncLatency | None = None) -> None:
        self.dir = directory
        self.files = FileCache() if files is None else files  # its engine's descriptors (a WAL of its own: its own)
        self.syncs = SyncLatency() if syncs is None else syncs  # its engine's fsync times (a WAL of its own: its own)
        self.clock = clock  # wall time ages the active segment (segment_ms), monotonic time the fsync period
        self.options = options
        self.damage = damage
        self.unsynced = unsynced  # group commit (see the module docstring): level-2 appends note what they need
        self.owner = owner  # (database, vnode index): what unsynced.wake is told when versions become durable
        self._syncing = False  # a PendingSync is taken and not done
        self._sync_rewrites = False  # ... and it rewrites the segment's bytes (truncate_to waits for it)
        self.held: str | None = None  # why appends are refused (a truncation whose derived files are not cut yet)
        # a replicated vnode's high watermark given (log end, durable end), on the vnode's lane; None: no replicas
        self.replication: Callable[[int, int], int] | None = None
        # a replicated vnode this node leads now (set with ``replication`` by the replica manager): only then does it
        # take writes (Store.written_vnode); a single node's vnode ignores it
        self.leading = False
        # while leading: why a write waiting for the in-sync replicas is refused before its append (its ISR below
        # min.insync.replicas), None when it is taken (set and reset with ``leading``, on the vnode's lane)
        self.acks_all_refused: Callable[[], str | None] = never_refused
        self.segments: list[Segment] = []
        self.next_version = 0
        self.durable_version = 0  # versions below this are fsynced
        self._running_max = TS_MIN
        self._last_sync = self.clock.monotonic()
        self._fenced = False  # a failed write could not be undone: appends first retry the undo
        self._undo: tuple[int, int] | None = None  # (first version, running max before) of the last append
        self._resync_from: int | None = None  # after a failed fdatasync: active-segment bytes to rewrite first
        self._sync_generation = 0  # bumped at each failed fdatasync
        self._reported: set[tuple[int, int]] = set()  # (segment, position) of damage found while reading
        self._active_born = self.clock.time()  # wall time of the active segment's first append (or of the open)
        self._active_first_ts = -1  # the max timestamp of the active segment's first entry (-1: none)
        self._merges: list[_Merge] = []  # the cleaner's committed merges not finished yet (see merge_segments)
        self._cut_pending = False  # a truncation is cut in memory and its intent durable, its file steps not done
        self.appended: Callable[[], None] | None = None  # told after every append (followers' fetches wait on it)

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, directory: Path, options: WalOptions, *, first_version: int = 0,
             damage: DamageLog | None = None, unsynced: Unsynced | None = None, owner: tuple[str, int] = ("", 0),
             clock: Clock = SYSTEM_CLOCK, files: FileCache | None = None, syncs: SyncLatency | None = None) -> Wal:
        """Open (creating if needed) and recover the WAL in ``directory``; damage is reported, never fatal. Its
        segment files are opened through ``files`` (its engine's cache) and its fsyncs timed into ``syncs`` (its
        engine's); None: its own."""
        directory.mkdir(parents=True, exist_ok=True)
        wal = cls(directory, options, damage, unsynced, owner, clock, files, syncs)
        try:  # a truncation a crash interrupted is finished before any segment is read (wal_truncate.py)
            finish(directory, wal.syncs, wal._report)
        except OSError as exc:
            raise StorageUnavailable(f"wal {directory}: cannot finish an interrupted truncation ({describe(exc)}); "
                                     "it opens once the disk accepts writes") from exc
        recovered = recover(directory, first_version, wal._report, wal.files, wal.syncs)
        wal.segments = recovered.segments
        wal._running_max = recovered.running_max
        wal.next_version = wal.durable_version = recovered.next_version
        for merge in recovered.merges:  # (served from the swap file: finished later, see merge_segments)
            wal._merges += [_Merge(seg, Segment(directory, merge.first).path, merge.end, merge.stale)
                            for seg in wal.segments if seg.path == merge.swap]
        active = wal.segments[-1] if wal.segments else None
        if active is not None and active.size:
            wal._active_first_ts = next((e.max_ts for e in wal.read_from(active.first)), -1)
        try:
            wal._restore()
            wal._fenced = False
        except OSError as exc:
            wal._fenced = True
            log.error("wal %s: cannot prepare the active segment (%s); appends are refused until it can",
                      directory, describe(exc))
        return wal

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
        period 0, unless :attr:`group_commit`: then it notes the need and returns once written to the OS; written to
        the OS otherwise). Raises :class:`StorageUnavailable` (nothing kept, memory and disk as before the call) when
        the disk refuses."""
        if not entries:
            return self.next_version
        self._undo = None
        self._refuse_held()
        self._unfence()
        seg = self.segments[-1]
        total = sum(HEADER_SIZE + len(e[3]) for e in entries)
        if seg.size and (seg.size + total > self.options.segment_bytes or self._aged(entries)):
            self._roll()
            seg = self.segments[-1]
        if not seg.size:
            self._active_born = self.clock.time()
            self._active_first_ts = entries[0][2]
        first = self.next_version
        chunks: list[bytes] = []
        pos = seg.size
        version = first
        running = self._running_max
        new_v, new_p, new_m = [], [], []
        for i, (kind, count, max_ts, body) in enumerate(entries):
            flags = FLAG_MORE if i < len(entries) - 1 else 0
            chunks.append(encode_entry(kind, flags, version, count, max_ts, body))
            running = max(running, max_ts)
            new_v.append(version)
            new_p.append(pos)
            new_m.append(running)
            pos += HEADER_SIZE + len(body)
            version += count
        sync = self.options.level >= 2 and self.options.fsync_period_ms == 0 and self.unsynced is None
        try:
            log_file = self.files.get(seg.path, APPEND)
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
            self._last_sync = self.clock.monotonic()
        elif self.unsynced is not None and self.group_commit:
            self.unsynced.note(self, version)
        if self.appended is not None:
            self.appended()
        return first

    def _refuse_held(self) -> None:
        """StorageUnavailable while :attr:`held` says why appends must wait."""
        if self.held is not None:
            raise StorageUnavailable(f"WAL {self.dir} refuses appends: {self.held}")

    def _unfence(self) -> None:
        """Before an append to a fenced WAL: retry the undo that fenced it (see the module docstring);
        StorageUnavailable while the disk still refuses it."""
        if not self._fenced:
            return
        try:
            self._restore()
        except OSError as exc:
            raise StorageUnavailable(f"WAL {self.dir} is read-only since a failed write could not be undone "
                                     f"({describe(exc)}); retry once the disk accepts writes") from exc
        self._fenced = False
        log.warning("wal %s: the failed write is undone; appends are accepted again", self.dir)

    def _aged(self, entries: list[tuple[int, int, int, bytes]]) -> bool:
        """Whether ``segment_ms`` has passed for the active segment (see the module docstring): by wall time since
        its first append or the open, or by the entries' timestamps past its first entry's (Kafka's
        rollingBasedTimestamp, which a restart keeps)."""
        if self.options.segment_ms < 0:
            return False
        waited = (self.clock.time() - self._active_born) * 1000
        if self._active_first_ts >= 0:
            waited = max(waited, max(e[2] for e in entries) - self._active_first_ts)
        return self.options.segment_ms <= waited

    def append_verbatim(self, run: VerbatimRun) -> None:
        """Append ``run``, whole entries of a leader's WAL, byte for byte (a follower's copy:
        docs/plans/replication-wiring.md, step 4).

        :func:`walgate.storage.wal_verbatim.parse` checked the run when it made it (every header's and body's
        CRC32C, a known format, versions continuing from its first, whole entries ending a batch): no checksum is
        checked again here, only that it starts at :attr:`next_version`
        (:class:`~walgate.storage.wal_verbatim.EntriesRefused`, nothing written, otherwise). Then it is written as
        :meth:`append` writes a batch: one ``write`` into the active segment (rolled first by the same rules, so
        segment boundaries are this WAL's own), and :class:`StorageUnavailable` with nothing kept, memory and disk
        as before the call, when the disk refuses. At WAL_LEVEL 2, period 0 (a replicated vnode's) it is durable
        when this returns, also under group commit: a follower's copy has one writer, its fetcher, which waits for
        it before it fetches on, so group commit would batch nothing and only add the sync service's round trips
        (readers of the vnode are woken as its sync would wake them). After a crash the WAL holds a prefix of whole
        batches of it. :meth:`undo_append` takes it back as an append."""
        raw, first_version, parsed = run.raw, run.first_version, run.entries
        if first_version != self.next_version:
            raise EntriesRefused(f"wal {self.dir}: entries from version {first_version} do not continue the WAL, "
                                 f"whose next version is {self.next_version}")
        if not parsed:
            return
        self._undo = None
        self._refuse_held()
        self._unfence()
        seg = self.segments[-1]
        stamps = [(e.kind, e.count, e.max_ts, b"") for e in parsed]  # what _aged reads
        if seg.size and (seg.size + len(raw) > self.options.segment_bytes or self._aged(stamps)):
            self._roll()
            seg = self.segments[-1]
        if not seg.size:
            self._active_born = self.clock.time()
            self._active_first_ts = parsed[0].max_ts
        running = self._running_max
        new_m = []
        for e in parsed:
            running = max(running, e.max_ts)
            new_m.append(running)
        sync = self.options.level >= 2 and self.options.fsync_period_ms == 0
        try:
            fileio.write_all(self.files.get(seg.path, APPEND).fd, raw)
            if sync:
                self._flush(seg)
        except OSError as exc:
            raise self._refuse(exc, seg.path, "replicated append") from exc
        seg.versions.extend(e.version for e in parsed)
        seg.positions.extend(seg.size + e.start for e in parsed)
        seg.running_max.extend(new_m)
        seg.size += len(raw)
        self._undo = (first_version, self._running_max)
        self._running_max = running
        self.next_version = parsed[-1].version + parsed[-1].count
        if sync:
            self.durable_version = self.next_version
            self._last_sync = self.clock.monotonic()
            if self.unsynced is not None:
                self.unsynced.wake(self.owner)
        if self.appended is not None:
            self.appended()

    def note_end(self) -> None:
        """Under group commit, note a need for every version appended so far (an answer given from memory, such as
        a retried batch's original offsets, waits for what it names to be durable)."""
        if self.unsynced is not None and self.group_commit and self.durable_version < self.next_version:
            self.unsynced.note(self, self.next_version)

    @property
    def group_commit(self) -> bool:
        """Level 2, period 0, with an :class:`Unsynced` ledger: appends leave the fdatasync to :meth:`take_sync`."""
        return self.unsynced is not None and self.options.level >= 2 and self.options.fsync_period_ms == 0

    @property
    def visible_version(self) -> int:
        """Versions below this one may be served to consumers: the durable ones under group commit (what Kafka's
        high watermark is: a record is read only once it is committed), every appended one otherwise; for a
        replicated vnode (:attr:`replication` set by the replica manager, :mod:`walgate.gateway.replicas`) the
        least of its durable end and the replicas' high watermark (issue 25: what every replica in the ISR holds
        durably), asked at each read, so a local sync that moves the leader's high watermark is seen at once."""
        if self.replication is not None:
            return min(self.durable_version, self.replication(self.next_version, self.durable_version))
        return self.durable_version if self.group_commit else self.next_version

    @property
    def durable_to(self) -> int:
        """Every version below this one is fsynced (:class:`~walgate.storage.durability.Syncable`)."""
        return self.durable_version

    def take_sync(self) -> PendingSync | None:
        """A sync of every version appended so far, for the caller to run off the storage thread and then mark
        done (None: all is durable and nothing is left to rewrite, or a sync is taken and not done yet)."""
        if self._syncing or (self.durable_version == self.next_version and self._resync_from is None):
            return None
        self._syncing = True
        self._sync_rewrites = self._resync_from is not None
        return PendingSync(self, self.segments[-1].path, self.durable_version, self.next_version,
                           self._resync_from, self._sync_generation)

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
        self._sync_generation += 1  # a sync taken before proves nothing about the versions appended after the cut
        seg = self.segments[-1]  # an append never spans segments: one that rolled began this one
        i = bisect_left(seg.versions, first_version)
        seg.size = seg.positions[i]
        del seg.versions[i:], seg.positions[i:], seg.running_max[i:]
        self.next_version = first_version
        self.durable_version = min(self.durable_version, first_version)
        if self.unsynced is not None and self.group_commit:  # the undone append's need names versions now gone
            self.unsynced.note(self, self.next_version)
        try:
            fileio.truncate(self.files.get(seg.path, APPEND).fd, seg.size)
        except OSError as exc:
            self._fence("an undone append", exc)
            return
        try:
            self._flush(seg)
        except OSError as exc:  # the cut stands; only a power loss could bring the undone bytes back
            log.error("wal %s: an undone append is cut off but the fdatasync making that durable failed (%s)",
                      seg.path, describe(exc))
            return
        self.durable_version = self.next_version

    def entry_start(self, version: int) -> int:
        """The first version of the entry holding ``version`` (:attr:`next_version` for itself); ValueError below
        the log start or past the end."""
        if version == self.next_version:
            return version
        loc = self._locate(version)
        if loc is None or version < self.first_version or loc[1] < 0:
            raise ValueError(f"wal {self.dir}: no entry holds version {version} (log [{self.first_version}, "
                             f"{self.next_version}))")
        return self.segments[loc[0]].versions[loc[1]]

    def truncate_to(self, version: int) -> None:
        """Cut the log back to the entry holding ``version`` (:meth:`entry_start`; as Kafka's
        ``LogSegment.truncateTo`` cuts at the batch holding an offset): every entry from it on is gone, its versions
        go to the next append (a follower truncating to its leader's log, KIP-101/279). :attr:`next_version`: nothing
        to cut; ValueError below the log start or past the end. StorageUnavailable, nothing cut, while a sync taken
        with a rewrite (:meth:`take_sync` after a failed fdatasync) is not done: its rewrite reads and writes the
        segment's bytes on another thread, and a cut between the two would let cut bytes be written back.

        Durable and all or nothing across a crash (:mod:`walgate.storage.wal_truncate`): the intent is written
        first, and StorageUnavailable, with nothing cut, when the disk refuses it before it is in place (or a log
        cleaner's merge the disk refused is still unfinished; once in place, the cut goes on). Once it is written, memory is cut and the files follow; when the disk refuses
        a file step the WAL is fenced (appends retry it first, a restart finishes it), as after a failed undo. A
        :class:`FileRegion` or :class:`WalSnapshot` taken before must not be read after (the caller's lane)."""
        version = self.entry_start(version)
        if version == self.next_version:
            return
        if self._sync_rewrites:
            raise StorageUnavailable(f"wal {self.dir}: a sync rewriting the segment's bytes is under way; nothing "
                                     "was cut (retry once it is done)")
        s = bisect_right(self.segments, version, key=_first) - 1
        seg = self.segments[s]
        i = bisect_left(seg.versions, version)
        if not self.finish_merges():
            raise StorageUnavailable(f"wal {self.dir}: a log cleaner's merge is unfinished; nothing was cut")
        cut = Cut(version, seg.first, seg.positions[i])
        try:
            write_intent(self.dir, cut, self.syncs)
        except OSError as exc:
            if not (self.dir / INTENT).exists():
                raise StorageUnavailable(f"wal {self.dir}: the truncation to version {version} could not be "
                                         f"recorded ({describe(exc)}); nothing was cut") from exc
            # renamed into place, its directory's fsync refused: a restart may find it, so the cut goes on
            log.warning("wal %s: the truncation to version %d is recorded but not yet durable (%s)", self.dir,
                        version, describe(exc))
        if seg.checked is not None:  # it may take appends again: check the bodies it keeps once, now
            file = self.files.get(seg.path)
            for j in range(i):
                if not seg.checked[j >> 3] & (1 << (j & 7)):
                    with contextlib.suppress(CorruptEntry):  # (reported, and never served)
                        self._read_at(seg, j, file)
            seg.checked = None
        for gone in self.segments[s + 1:]:
            gone.forget_files(self.files)
        if s + 1 < len(self.segments) or self._resync_from is not None and self._resync_from >= cut.position:
            self._resync_from = None  # (what it would rewrite is cut)
        del self.segments[s + 1:]
        del seg.versions[i:], seg.positions[i:], seg.running_max[i:]
        seg.size = cut.position
        self._reported = {(f, p) for f, p in self._reported if f < seg.first or f == seg.first and p < seg.size}
        previous = self.segments[s - 1].running_max if s else None
        self._running_max = seg.running_max[-1] if seg.running_max else previous[-1] if previous else TS_MIN
        self.next_version = version
        self.durable_version = min(self.durable_version, version)
        self._undo = None
        self._sync_generation += 1  # a sync taken before the cut proves nothing about what is appended after it
        self._active_born = self.clock.time()
        self._active_first_ts = next((e.max_ts for e in self.read_from(seg.first)), -1) if seg.size else -1
        if self.unsynced is not None and self.group_commit:
            self.unsynced.note(self, self.next_version)
        self._cut_pending = True
        try:
            self._restore()
        except OSError as exc:
            self._fence(f"the truncation to version {version}", exc)

    def _refuse(self, exc: OSError, path: Path, what: str) -> StorageUnavailable:
        """Undo a failed write (disk back to memory) and say so; fence the WAL when even that fails."""
        try:
            self._restore()
        except OSError as again:
            self._fence(f"a failed {what}", again)
            return StorageUnavailable(f"{path}: {what} failed ({describe(exc)}) and could not be undone "
                                      f"({describe(again)}); the WAL refuses writes until the disk accepts them")
        return StorageUnavailable(f"{path}: {what} failed ({describe(exc)}); nothing of it was kept")

    def _fence(self, what: str, exc: OSError) -> None:
        """Refuse appends until :meth:`_restore` succeeds (each append retries it first), after ``what`` could not be
        undone (``exc``); zero the bytes past the last complete entry so a restart meanwhile cuts them off."""
        self._fenced = True
        seg = self.segments[-1]
        try:
            _zero_tail(seg.path, seg.size, self.syncs)
            kept = "they are zeroed, so a restart cuts them off"
        except OSError as again:
            kept = (f"they cannot be zeroed either ({describe(again)}): a restart before the disk recovers may "
                    "keep them")
        log.error("wal %s: cannot undo %s (%s); appends are refused until it can, the bytes are never served, and %s",
                  self.dir, what, describe(exc), kept)

    def _restore(self) -> None:
        """Make the disk match memory: cut the active log back to its last complete entry, remove a half-made
        next segment, create the active log if missing; first, the file steps of a truncation (:meth:`truncate_to`)
        the disk refused. Raises OSError."""
        if self._cut_pending:  # (the intent's removal made durable too: appends never follow an intent a crash
            finish(self.dir, self.syncs, self._report)  # could bring back, which would cut them off)
            fileio.fsync_dir(self.dir, syncs=self.syncs)
            self._cut_pending = False
        seg = self.segments[-1]
        created = not seg.path.exists()
        log_file = self.files.get(seg.path, APPEND)
        if os.fstat(log_file.fd).st_size != seg.size:
            fileio.truncate(log_file.fd, seg.size)
        removed = False
        if self.next_version != seg.first:
            half_made = Segment(self.dir, self.next_version)
            if half_made.path.exists():
                half_made.forget_files(self.files)
                half_made.path.unlink()
                removed = True
        if created or removed:
            fileio.fsync_dir(self.dir, syncs=self.syncs)

    def _flush(self, seg: Segment) -> None:
        """fdatasync the active log (first rewriting what a failed fdatasync left unsure); on failure what was
        not durable stays so and is rewritten by the next flush. Raises OSError."""
        try:
            if self._resync_from is None:
                log_file = self.files.get(seg.path, APPEND)
                fileio.fdatasync(log_file.fd, syncs=self.syncs)
            else:
                _sync_file(seg.path, self._resync_from, self.syncs)
        except OSError:
            self._arm_resync(seg)
            raise
        self._resync_from = None

    def _arm_resync(self, seg: Segment) -> None:
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
                raise StorageUnavailable(f"{seg.path}: fdatasync failed ({describe(exc)}); versions from "
                                         f"{self.durable_version} are not durable yet") from exc
            self.durable_version = self.next_version
        self._last_sync = self.clock.monotonic()

    def sync_due(self, now: float) -> tuple[float, PendingSync | None]:
        """``now``: the WAL clock's monotonic seconds. (seconds until the next periodic fsync is due, the fsync to run now: when the period elapsed and
        something was appended since the last one, or the last one failed)."""
        period = self.options.fsync_period_ms / 1000
        if period <= 0 and self.options.level >= 2:
            return 3600.0, None
        period = max(period, 0.001)
        pending = None
        if now - self._last_sync >= period:
            self._last_sync = now
            pending = self.take_sync()
        return max(0.0, self._last_sync + period - now), pending

    def _synced(self, sync: PendingSync) -> None:
        self._syncing = False
        self._sync_rewrites = False
        if sync.error is None:
            # (else an fdatasync failed or an append was undone since: it proves nothing)
            if sync.generation == self._sync_generation:
                advanced = sync.version > self.durable_version
                self.durable_version = max(self.durable_version, sync.version)
                self._resync_from = None
                if advanced and self.unsynced is not None and self.group_commit:  # newly visible: wake readers
                    self.unsynced.wake(self.owner)
            return
        # what this fdatasync covered may be lost, even if an fdatasync through another descriptor succeeded since
        self.durable_version = min(self.durable_version, sync.since)
        log.error("wal %s: %s fdatasync failed (%s); versions from %d stay non-durable (appends waiting for them are "
                  "refused), and the next sync rewrites and syncs them again", sync.path,
                  "group-commit" if self.group_commit else "periodic", describe(sync.error), self.durable_version)
        seg = self.segments[-1]
        if seg.path == sync.path:  # else a roll sealed it since, after an fdatasync of its own
            self._arm_resync(seg)

    def _roll(self) -> None:
        """Seal the active segment (fdatasync its log, write its whole index with the seal: write new, fsync,
        rename, fsync the directory) and create the next one (fsync the directory); on failure undo what the
        active segment needs undone and raise StorageUnavailable. (A seal written by a roll that failed later is
        harmless: the last segment's index is never read, and the next roll rewrites it.)"""
        old = self.segments[-1]
        new = Segment(self.dir, self.next_version)
        target = old.path
        try:
            self._flush(old)
            target = old.index_path
            fileio.replace_file(old.index_path, sealed_index(old, new.first), syncs=self.syncs)
            target = new.path
            fileio.append_file(new.path, b"", syncs=self.syncs, sync=False)
            fileio.fsync_dir(self.dir, syncs=self.syncs)
        except OSError as exc:
            raise self._refuse(exc, target, "roll to a new segment") from exc
        self.durable_version = self.next_version
        self.files.discard(old.path, APPEND)
        self.segments.append(new)

    @property
    def fenced(self) -> bool:
        """Appends are refused until the active segment is made to match memory again (a write that could not be
        undone, or an open that could not prepare the active segment)."""
        return self._fenced

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
            seg.forget_files(self.files)

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
        s, first, version = loc
        end = self.next_version
        for seg in self.segments[s:]:
            file = self.files.get(seg.path)
            for i in range(max(first, 0), len(seg.versions)):
                if seg.versions[i] >= end:
                    return
                try:
                    entry = self._read_at(seg, i, file)
                except CorruptEntry:
                    continue
                if entry.version + entry.count > version:  # (not so for an entry before a gap holding version)
                    yield entry
            first = 0

    def read(self, version: int) -> WalEntry | None:
        """The entry containing ``version``, or None past the end; CorruptEntry if it is damaged or lost."""
        loc = self._locate(version)
        if loc is None:
            return None
        s, i, version = loc
        seg = self.segments[s]
        entry = self._read_at(seg, i, self.files.get(seg.path)) if i >= 0 else None
        if entry is None or version >= entry.version + entry.count:
            raise self._lost(seg, version)
        return entry

    def snapshot(self) -> WalSnapshot:
        """The entries visible now (:attr:`visible_version`), to be read on any thread (:class:`WalSnapshot`)."""
        end = self.visible_version
        views = []
        for seg in self.segments:
            if seg.first >= end:
                break
            n = bisect_left(seg.versions, end)
            views.append(SegmentView(seg.path, seg.first, seg.versions[:n], seg.positions[:n]))
        return WalSnapshot(tuple(views), frozenset(self._reported))

    def recheck(self, versions: Iterable[int]) -> None:
        """Read again the entries holding ``versions`` (a :class:`WalSnapshot` found them damaged), so that what is
        damaged is reported and quarantined as any read here reports it."""
        for version in versions:
            with contextlib.suppress(CorruptEntry):
                self.read(version)

    def region(self, version: int, kind: int, head: int = 0) -> FileRegion | None:
        """The body of the entry containing ``version`` as a region of its segment, if the entry is of ``kind``.

        The header is read and checked each time, in one ``pread`` with the body's first ``head`` bytes
        (:attr:`FileRegion.head`, for the caller to check what the body's own checksum may not cover, e.g. a Kafka
        batch's first 16 bytes); the body goes to the socket with ``sendfile``, and is read and checked only the
        first time this process serves it (clients need not check a Kafka batch's CRC), unless this process
        scanned or appended it. CorruptEntry for an entry known damaged, or whose body fails its CRC (reported
        once)."""
        loc = self._locate(version)
        if loc is None:
            return None
        s, i, version = loc
        seg = self.segments[s]
        if i < 0:
            raise self._lost(seg, version)
        file = self.files.get(seg.path)
        try:
            pos, (body_len, body_crc, entry_kind, _, first, count, _), start = _header_at(seg, i, file, head)
        except _Bad as bad:
            raise self._corrupt(seg, i, str(bad)) from None
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
        return FileRegion(file, pos + HEADER_SIZE, body_len, start[: min(head, body_len)])

    def batches_from(self, version: int, max_bytes: int, stop: int) -> FileRegion | None:
        """The bytes of whole batches (entries and headers, as written) of one segment from the entry starting at
        ``version``: the first batch whatever its size, then the next ones while the run stays within ``max_bytes``
        and they start below ``stop``; None when nothing starts below ``stop`` there (``version`` the WAL's end).
        What a follower copies (:meth:`append_verbatim`): a batch never spans segments (a roll comes before an
        append), so one segment's run is whole batches, sent with ``sendfile``. Each header is read and checked;
        ValueError when no batch starts at ``version`` (below the log start, inside an entry, at an entry inside a
        batch: the one before it has ``FLAG_MORE``, past the end), CorruptEntry for a damaged header (a damaged body
        is refused by the follower's checks)."""
        loc = self._locate(version)
        if loc is None:
            if version == self.next_version:
                return None
            raise ValueError(f"wal {self.dir}: version {version} is past the end ({self.next_version})")
        s, i, _ = loc
        seg = self.segments[s]
        if version < self.first_version or i < 0 or seg.versions[i] != version:
            raise ValueError(f"wal {self.dir}: no entry starts at version {version} (log [{self.first_version}, "
                             f"{self.next_version}))")
        file = self.files.get(seg.path)
        if i > 0:  # (entry 0 of a segment starts a batch: a batch never spans segments)
            try:
                _, (_, _, _, before, _, _, _), _ = _header_at(seg, i - 1, file)
            except _Bad as bad:
                raise self._corrupt(seg, i - 1, str(bad)) from None
            if before & FLAG_MORE:
                raise ValueError(f"wal {self.dir}: version {version} is inside a batch (an entry of it, not its "
                                 f"first)")
        start = end = seg.positions[i]
        for k in range(i, len(seg.versions)):
            if seg.versions[k] >= stop:
                break
            try:
                pos, (body_len, _, _, flags, _, _, _), _ = _header_at(seg, k, file)
            except _Bad as bad:
                raise self._corrupt(seg, k, str(bad)) from None
            entry_end = pos + HEADER_SIZE + body_len
            if flags & FLAG_MORE:
                continue
            if end > start and entry_end - start > max_bytes:
                break
            end = entry_end
        return FileRegion(file, start, end - start) if end > start else None

    def damaged(self, version: int, reason: str) -> CorruptEntry:
        """Report (once) the entry containing ``version`` as damaged for ``reason`` (something its CRCs do not
        cover, found by the caller); :meth:`region` never serves it again. Returns the error to raise."""
        loc = self._locate(version)
        if loc is None or loc[1] < 0:
            return CorruptEntry(f"wal {self.dir}: no entry holds version {version}")
        return self._corrupt(self.segments[loc[0]], loc[1], reason)

    def _lost(self, seg: Segment, version: int) -> CorruptEntry:
        return CorruptEntry(f"{seg.path}: version {version} is in a lost range (damage reported when found)")

    def _read_at(self, seg: Segment, i: int, file: OpenFile) -> WalEntry:
        pos = seg.positions[i]
        if (seg.first, pos) in self._reported:
            raise CorruptEntry(f"{seg.path}: the entry at byte {pos} is damaged (reported when found)")
        try:
            entry = _entry_at(seg, i, file)
        except _Bad as bad:
            raise self._corrupt(seg, i, str(bad)) from None
        if seg.checked is not None:
            seg.checked[i >> 3] |= 1 << (i & 7)
        return entry

    def _corrupt(self, seg: Segment, i: int, reason: str) -> CorruptEntry:
        """Report (once) the damaged entry ``i`` of ``seg`` found while reading; the error to raise."""
        start = seg.positions[i]
        stop = seg.positions[i + 1] if i + 1 < len(seg.versions) else seg.size
        if (seg.first, start) not in self._reported:
            self._reported.add((seg.first, start))
            lost_to = (seg.versions[i + 1] if i + 1 < len(seg.versions)
                       else next((x.first for x in self.segments if x.first > seg.first), self.next_version))
            file = self.files.get(seg.path)
            self._report(seg.path, start, stop, reason, "quarantined", os.pread(file.fd, stop - start, start),
                         seg.versions[i], lost_to)
        return CorruptEntry(f"{seg.path}: {reason} at byte {start}")

    @property
    def size_bytes(self) -> int:
        return sum(seg.size for seg in self.segments)

    # ------------------------------------------------------------- retention

    def expired_segments(self, now_wall: float, limit: int | None = None) -> int:
        """How many of the oldest sealed segments the retention policy wants gone (at most ``limit``: each one
        looked at is a stat of its file)."""
        opts = self.options
        sealed = self.segments[:-1] if limit is None else self.segments[: min(limit, len(self.segments) - 1)]
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
        is always a suffix of the log; a failure stops there (logged; retention tries again later). A segment whose
        merge is not finished (:meth:`merge_segments`) goes with the files of the segments it merged, its swap file
        last (a crash before that finishes the merge at open: an older segment, deleted again)."""
        deleted = 0
        for seg in self.segments[: min(n, len(self.segments) - 1)]:
            seg.forget_files(self.files)
            merge = next((m for m in self._merges if m.seg is seg), None)
            try:
                for path in (*(merge.stale if merge else ()), *((merge.log,) if merge else ()), seg.index_path,
                             seg.path):  # (if the last fails, the next open rebuilds the index)
                    fileio.unlink(path, missing_ok=True)
            except OSError as exc:
                log.error("wal %s: cannot delete it (%s); retention tries again later", seg.path, describe(exc))
                break
            if merge is not None:
                self._merges.remove(merge)
            deleted += 1
        if deleted:
            del self.segments[:deleted]
            try:
                fileio.fsync_dir(self.dir, syncs=self.syncs)
            except OSError as exc:  # a crash may bring the files back: older, intact segments, deleted again
                log.error("wal %s: cannot fsync the directory after deleting segments (%s)", self.dir,
                          describe(exc))

    def swap_segment(self, new: Segment, count: int = 1) -> None:
        """Serve ``new`` in place of the ``count`` sealed segments from the one with the same first version, whose
        log file it has just replaced (the cleaner, :mod:`walgate.storage.cleaner`: same versions or fewer, each
        entry whole; with ``count`` above 1, the segments it merged, whose files the caller deletes next). Regions
        handed out before keep reading the old files, whose descriptors close once they are dropped."""
        i = bisect_left(self.segments, new.first, key=_first)
        if i + count > len(self.segments) - 1 or self.segments[i].first != new.first:
            raise ValueError(f"wal {self.dir}: no {count} sealed segments start at version {new.first}")
        gone = {seg.first for seg in self.segments[i : i + count]}
        for seg in self.segments[i : i + count]:
            seg.forget_files(self.files)
        self._reported = {r for r in self._reported if r[0] not in gone}
        self.segments[i : i + count] = [new]

    def merge_segments(self, new: Segment, count: int, end: int, *, sync: bool = True) -> bool:
        """Serve ``new`` in place of the ``count`` sealed segments from the one with its first version, whose merged
        log the cleaner (:mod:`walgate.storage.cleaner`) has just committed as ``new.path``, its ``<first>.<end>.swap``
        file (``end``: the next segment's first version), then finish the merge: delete the merged segments' files,
        rename the swap file to the first one's log, fsync the directory, write the sealed index (a failure of that
        last one only logged: rebuilt at open); without ``sync``, the directory's fsync and the index are the
        caller's (the cleaner runs its fsyncs off the storage thread). True once finished. When the disk refuses a
        step, False (logged):
        ``new`` goes on reading the swap file, so reads never depend on the files the merge removes, and
        :meth:`finish_merges` (or the next open, :mod:`walgate.storage.wal_recovery`) goes on from that step."""
        i = bisect_left(self.segments, new.first, key=_first)
        old = self.segments[i : i + count]
        self.swap_segment(new, count)
        stale = [path for seg in old[1:] for path in (seg.path, seg.index_path)] + [old[0].index_path]
        self._merges.append(_Merge(new, old[0].path, end, stale))
        return self.finish_merges(sync=sync)

    @property
    def merging(self) -> bool:
        """Whether a merge of the cleaner is committed and not finished (:meth:`merge_segments`)."""
        return bool(self._merges)

    def finish_merges(self, *, sync: bool = True) -> bool:
        """Go on with the merges the disk refused to finish (:meth:`merge_segments`), oldest first; True when none
        is left, False (logged) when the disk refuses a step again. Without ``sync``: neither the directory's fsync
        nor the sealed index (the caller's)."""
        while self._merges:
            merge = self._merges[0]
            seg = merge.seg
            try:
                while merge.stale:
                    fileio.unlink(merge.stale[0], missing_ok=True)
                    merge.stale.pop(0)
                if seg.path != merge.log:
                    fileio.rename(seg.path, merge.log)
                    seg.forget_files(self.files)
                    seg.path = merge.log
                if sync:
                    fileio.fsync_dir(self.dir, syncs=self.syncs)
            except OSError as exc:
                log.warning("wal %s: cannot finish the log cleaner's merge (%s); served from %s, finished later",
                            merge.log, describe(exc), seg.path.name)
                return False
            del self._merges[0]
            if not sync:
                continue
            try:
                fileio.replace_file(seg.index_path, sealed_index(seg, merge.end), syncs=self.syncs)
            except OSError as exc:  # derived: rebuilt from the log at the next open
                log.warning("wal %s: %s; rebuilt at the next open", seg.index_path, describe(exc))
        return True

    def has_entries(self, start: int, stop: int) -> bool:
        """Whether an entry of the log begins at a version in [``start``, ``stop``)."""
        s = max(bisect_right(self.segments, start, key=_first) - 1, 0)
        for seg in self.segments[s:]:
            if seg.first >= stop:
                return False
            i = bisect_left(seg.versions, start)
            if i < len(seg.versions) and seg.versions[i] < stop:
                return True
        return False
