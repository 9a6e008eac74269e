"""Log compaction of Kafka-native partitions (``cleanup.policy=compact``): Kafka's log cleaner as a storage step.

Theory of operation
-------------------
:meth:`Cleaner.clean` is synchronous and bounded: one call is one step of a pass over one partition (the dirtiest
one that is due when the pass starts): a step of the scan reads about :data:`STEP_BYTES` of the log, a step of the
rewrite swaps one segment. It runs on the storage thread like every engine call, so a reader never sees a
half-cleaned segment, and requests are served between steps (appends only touch the active segment, which a pass
never cleans; a segment retention deleted meanwhile is skipped; a partition dropped or no longer compacted ends the
pass). The gateway calls it again at once while a pass is in progress, else after ``log.cleaner.backoff.ms``.

What may be cleaned (Kafka's ``LogCleanerManager``): only sealed segments, never the active one; of those, with a
``min.compaction.lag.ms`` above 0, the oldest ones up to the first dirty one whose records may be younger than it
(the WAL's running max timestamp, an upper bound of the segment's own). The segments at or past the partition's *dirty point* (where the
last pass ended, kept in ``cleaner.ckpt`` in the vnode directory; 0 when missing or damaged, which only costs a
pass) are dirty. A partition is due when its dirty bytes are at least ``min.cleanable.dirty.ratio`` of the
cleanable bytes, or its first dirty segment was sealed more than ``max.compaction.lag.ms`` ago (``segment.ms`` rolls
the active segment so its records get there too, see :func:`~walgate.storage.topic_configs.wal_options`).

A pass (Kafka's ``Cleaner.doClean``): the newest offset of every key in the cleanable range is found, then each
cleanable segment is rewritten keeping a record only if it is its key's newest, and a tombstone (null value) only
until its segment was sealed ``delete.retention.ms`` ago. Records without a key are kept. Transactions, as Kafka's
cleaner treats them: the scan pairs each producer's transactional batches with the control batch (marker) that
ends them; the records of a committed transaction are compacted like any others; those of an aborted one are
removed and never count as a key's newest; a pass never reaches a transaction that has not ended (it stops before
the segment where the first one begins: Kafka's first unstable offset). Control batches are always kept (Kafka
removes a marker once its transaction's data is gone and ``delete.retention.ms`` passed: keeping it costs a few
bytes and is never wrong). Offsets never change: a cleaned batch keeps its base offset, last offset delta, producer id, epoch and base
sequence (Kafka's ``MemoryRecords.filterTo``), only its records, its base timestamp and its CRC change; a batch
left without records is dropped (a gap in the offsets, which clients skip), except that these stay as empty
batches, as Kafka keeps a producer's last batch: each producer's last five batches in the log (so the idempotence
state rebuilt at open is the state before cleaning, see :mod:`walgate.storage.producers`) and the first and last
batch of every segment (so a segment's versions still start and end where its neighbours say, and the log start
offset and high watermark never move). A WAL entry keeps its version, its version count and max timestamp; the
partition's offset index forgets the dropped entries. A segment holding a damaged entry is left as it is, and no
tombstone after it goes in that pass (an older record of its key may be in it).

Crash safety: a segment is swapped by one rename. Its new log is written whole under a temporary name
(``<first>.log.tmp``), given the old file's modification time (retention's clock), fsynced, renamed over the old
log, and the directory fsynced (:func:`~walgate.storage.fileio.replace_file`); its sealed index is then replaced
the same way. A kill before the rename leaves the old segment (the next open deletes the ``.tmp`` leftover); after
it, the new one. An index that does not match its log (a kill between the two renames) is rebuilt from the log at
open, as any damaged index is. Segments are swapped oldest first; each is a valid state on its own, since a record
is only ever removed for a newer one of its key, which a later (old or new) segment still holds. Readers are safe
too: a :class:`~walgate.storage.wal.FileRegion` handed out before a swap keeps the old file open and reads the old
bytes.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import crc32c

from walgate.storage import fileio, lines
from walgate.storage.catalog import TopicDef
from walgate.storage.offsets import OffsetIndex
from walgate.storage.producers import BATCHES_KEPT
from walgate.storage.store import Store
from walgate.storage.topic_configs import CleanerSettings, cleaner_settings
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_KAFKA, Wal, WalEntry
from walgate.storage.wal_format import Segment, describe, encode_entry, sealed_index
from walgate.wire import DecodedBatch, DecodedRecord, batch_header, encode_batch
from walgate.wire.errors import WireError
from walgate.wire.record_batch import BATCH_HEADER_SIZE, CONTROL_BIT, TRANSACTIONAL_BIT, decode_batch

__all__ = ["CHECKPOINT", "CleanStats", "Cleaner", "retained_batch"]

log = logging.getLogger("walgate.cleaner")

STEP_BYTES = 8 << 20
"""About how much of the log one step of a pass's scan reads (a step cleaning a segment handles that segment)."""

_first = attrgetter("first")

CHECKPOINT = "cleaner.ckpt"
"""The dirty point of a partition, in its vnode directory: one checksummed line ``{"dirty_from": version}``."""

_HEAD = struct.Struct(">qiibIhiqqqhii")  # a RecordBatch v2 header (walgate.wire.record_batch)


class _Damaged(Exception):
    """A segment holds a damaged entry: the pass leaves it as it is."""


@dataclass(frozen=True)
class CleanStats:
    """What a pass did to one partition so far (all of it once ``finished``)."""

    topic: str
    partition: int
    segments: int = 0  # segments rewritten
    bytes_before: int = 0  # their size before
    bytes_after: int = 0  # and after
    records_removed: int = 0
    batches_removed: int = 0
    finished: bool = False  # the pass is whole (else a step of it)


def retained_batch(batch: DecodedBatch, kept: list[DecodedRecord]) -> bytes:
    """*batch* holding only the *kept* records (a subset, in order), as Kafka's cleaner rewrites it: same base offset,
    last offset delta, attributes, producer id, epoch, base sequence and partition leader epoch; records keep their
    offsets and timestamps; the codec is the batch's. Without records: the batch's empty header (its max timestamp as
    both timestamps, no codec), as Kafka writes one to keep a producer's last batch."""
    if not kept:
        attributes = batch.attributes & ~0x07
        tail = _HEAD.pack(0, 0, 0, 0, 0, attributes, batch.last_offset_delta, batch.max_timestamp,
                          batch.max_timestamp, batch.producer_id, batch.producer_epoch, batch.base_sequence, 0)[21:]
        return _HEAD.pack(batch.base_offset, BATCH_HEADER_SIZE - 12, batch.partition_leader_epoch, 2,
                          _crc(tail), 0, 0, 0, 0, 0, 0, 0, 0)[:21] + tail
    out = bytearray(encode_batch(
        batch.base_offset, [r.timestamp for r in kept], [r.key for r in kept], [r.value for r in kept],
        [r.headers for r in kept], compression=batch.compression,
        offset_deltas=[r.offset - batch.base_offset for r in kept], timestamp_type=batch.timestamp_type,
        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch, is_transactional=batch.is_transactional,
        is_control=batch.is_control))
    out[23:27] = batch.last_offset_delta.to_bytes(4, "big", signed=True)
    out[17:21] = _crc(bytes(out[21:])).to_bytes(4, "big")
    return bytes(out)


def _crc(data: bytes) -> int:
    return int(crc32c.crc32c(data))


def _decoded(body: bytes) -> DecodedBatch | None:
    """A stored batch with its records (its CRC was checked with the WAL entry's); None when they cannot be read
    (a batch the cleaner then keeps as it is, and whose keys never count)."""
    try:
        return decode_batch(body, verify_crc=False)
    except WireError:
        return None


def _entries(wal: Wal, seg: Segment, end: int) -> Iterator[WalEntry]:
    """The intact entries of ``seg`` (``end``: the next segment's first version)."""
    for entry in wal.read_from(seg.first):
        if entry.version >= end:
            return
        yield entry


@dataclass
class _Pass:
    """A pass in progress over one partition: the cleanable segments ((first version, size), oldest first), the end
    of their range, and what the scan found so far (the scan reads the log from ``cursor``)."""

    topic: TopicDef
    vnode: Vnode
    segments: list[tuple[int, int]]
    end: int
    cursor: int
    log_end: int  # the WAL's end when the pass began: the scan stops there (later batches are never cleaned)
    newest: dict[bytes, int] = field(default_factory=dict)  # key -> offset of its newest record in the range
    recent: dict[int, deque[int]] = field(default_factory=dict)  # producer id -> versions of its last batches
    # producer id -> its transaction's batches not ended yet: (version, (key, offset) of the records in the range)
    open_txns: dict[int, list[tuple[int, list[tuple[bytes, int]]]]] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)  # versions of batches of aborted transactions
    scanned: bool = False
    tombstones_go: bool = True  # False once a segment was left as it was (damaged): tombstones after it stay
    stats: CleanStats | None = None


class Cleaner:
    """The cleaner of every compacted Kafka-native partition of one engine (see the module docstring)."""

    def __init__(self, store: Store, step_bytes: int = STEP_BYTES) -> None:
        self.store = store
        self.step_bytes = step_bytes
        self._dirty: dict[Path, int] = {}  # vnode directory -> dirty point (WAL version)
        self._pass: _Pass | None = None
        self._defaults: Mapping[str, str] = {}

    def clean(self, now_wall: float, defaults: Mapping[str, str]) -> CleanStats | None:
        """One bounded step of cleaning: what the pass in progress did so far (``finished`` once it is whole), or
        None when no partition is due, the pass's partition went away, or the disk refused a write (OSError never
        escapes: the pass stops there, logged, and is tried again later). A topic's configs apply over *defaults*
        (the dynamic broker defaults: ``log.cleanup.policy=compact`` compacts every topic without its own policy)."""
        self._defaults = defaults
        p = self._pass
        if p is None:
            p = self._pass = self._start(now_wall)
            if p is None:
                return None
        try:
            if self._gone(p):
                self._pass = None
                return None
            if not p.scanned:
                self._scan(p)
            elif p.segments:
                self._clean_next(p, now_wall)
            else:
                self._finish(p)
        except OSError as exc:
            log.warning("cleaner: %s-%d: %s; cleaned again later", p.topic.name, p.vnode.index, describe(exc))
            self._pass = None
            return None
        return p.stats

    def _start(self, now_wall: float) -> _Pass | None:
        """A pass over the dirtiest partition that is due (None: none is)."""
        best: tuple[float, TopicDef, Vnode, list[Segment]] | None = None
        for topic in self.store.catalog.topics.values():
            settings = cleaner_settings({**self._defaults, **topic.configs}) if topic.kind == "kafka" else None
            if settings is None:
                continue
            for vnode in self.store.vnodes.get(topic.db, []):
                due = self._due(vnode, settings, now_wall)
                if due is not None and (best is None or due[0] > best[0]):
                    best = (due[0], topic, vnode, due[1])
        if best is None:
            return None
        _, topic, vnode, segments = best
        wal = vnode.wal
        return _Pass(topic, vnode, [(s.first, s.size) for s in segments], wal.segments[len(segments)].first,
                     wal.first_version, wal.next_version, stats=CleanStats(topic.name, vnode.index))

    def _gone(self, p: _Pass) -> bool:
        """Whether the pass's partition stopped being a compacted one of this engine (dropped, altered)."""
        topic = self.store.catalog.topics.get(p.topic.name)
        vnodes = self.store.vnodes.get(p.topic.db, [])
        return (topic is None or topic.topic_id != p.topic.topic_id or cleaner_settings({**self._defaults, **topic.configs}) is None
                or p.vnode.index >= len(vnodes) or vnodes[p.vnode.index] is not p.vnode)

    def _scan(self, p: _Pass) -> None:
        """Read about ``step_bytes`` of the log from the cursor: the newest offset of each key in the cleanable range,
        and every producer's last batches in the log as it was when the pass began (keeping those keeps at least
        every producer's last batches now: batches appended since are newer, and never cleaned by this pass)."""
        read = 0
        for entry in p.vnode.wal.read_from(p.cursor):
            if entry.version >= p.log_end:
                break
            if entry.version < p.cursor:  # (the entry before a gap holding the cursor)
                continue
            p.cursor = entry.next_version
            read += len(entry.body)
            if entry.kind == KIND_KAFKA:
                self._scan_batch(p, entry)
            if read >= self.step_bytes:
                return
        p.scanned = True
        unstable = min((v for batches in p.open_txns.values() for v, _ in batches), default=p.end)
        if unstable < p.end:  # an ongoing transaction: the pass stops before the segment where it begins, and
            firsts = [first for first, _ in p.segments] + [p.end]  # scans again (its map must end there too)
            p.segments = [seg for k, seg in enumerate(p.segments) if firsts[k + 1] <= unstable]
            p.end = firsts[len(p.segments)]
            p.cursor, p.scanned = p.vnode.wal.first_version, False
            p.newest, p.recent, p.open_txns, p.aborted = {}, {}, {}, set()

    @staticmethod
    def _scan_batch(p: _Pass, entry: WalEntry) -> None:
        """What one stored batch tells the pass: its producer's last batches; the newest offset of the keys of a
        batch in the range that is neither aborted nor in an unresolved transaction (Kafka's offset map)."""
        header = batch_header(entry.body)
        pid = header.producer_id
        if pid >= 0:
            p.recent.setdefault(pid, deque(maxlen=BATCHES_KEPT)).append(entry.version)
        if header.attributes & CONTROL_BIT:
            marker = _decoded(entry.body)
            marker_records = marker.records if marker is not None else []
            ended = p.open_txns.pop(pid, [])
            key = marker_records[0].key if marker_records else None
            kind = key[2:4] if key is not None and len(key) >= 4 else None  # version 0, type 0 ABORT / 1 COMMIT
            if kind == b"\x00\x01":
                for _, keys in ended:
                    for k, offset in keys:
                        p.newest[k] = max(p.newest.get(k, offset), offset)
            elif kind == b"\x00\x00":
                p.aborted.update(v for v, _ in ended)
            # (a marker that is neither: its transaction's records never count as a key's newest, and are cleaned
            # as other records are: only ones a newer record of their key supersedes go)
            return
        in_range = entry.version < p.end
        decoded = _decoded(entry.body) if in_range else None
        keys = [(r.key, r.offset) for r in decoded.records if r.key is not None] if decoded is not None else []
        if header.attributes & TRANSACTIONAL_BIT:
            p.open_txns.setdefault(pid, []).append((entry.version, keys))
        else:
            for key, offset in keys:
                p.newest[key] = offset

    def _clean_next(self, p: _Pass, now_wall: float) -> None:
        """Clean the pass's next segment, if it is still there as it was (retention may have deleted it)."""
        first, size = p.segments.pop(0)
        wal = p.vnode.wal
        k = bisect_left(wal.segments, first, key=_first)
        if k >= len(wal.segments) - 1 or wal.segments[k].first != first or wal.segments[k].size != size:
            return
        settings = cleaner_settings({**self._defaults, **self.store.catalog.topics[p.topic.name].configs})
        assert settings is not None  # (checked by _gone)
        keep = {v for versions in p.recent.values() for v in versions}
        idx = self.store.indexes[(p.topic.name, p.vnode.index)]
        try:
            done = self._clean_segment(wal, idx, wal.segments[k], wal.segments[k + 1].first, p.newest, keep,
                                       p.aborted, settings.delete_retention_ms if p.tombstones_go else None,
                                       now_wall)
        except _Damaged:  # an older record of a key may be in it: no tombstone after it may go in this pass
            p.tombstones_go = False
            return
        if done is not None and p.stats is not None:
            before, after, records, batches = done
            s = p.stats
            p.stats = CleanStats(s.topic, s.partition, s.segments + 1, s.bytes_before + before, s.bytes_after + after,
                                 s.records_removed + records, s.batches_removed + batches)

    def _finish(self, p: _Pass) -> None:
        """Record the new dirty point (the end of the cleaned range) and end the pass."""
        self._pass = None
        if p.stats is not None:
            p.stats = dataclasses.replace(p.stats, finished=True)
        self._dirty[p.vnode.dir] = p.end
        try:
            fileio.replace_file(p.vnode.dir / CHECKPOINT, lines.encode({"dirty_from": p.end}))
        except OSError as exc:  # a lost dirty point costs one more pass
            log.warning("cleaner: %s: %s", p.vnode.dir / CHECKPOINT, describe(exc))

    def dirty_from(self, vnode: Vnode) -> int:
        """The partition's dirty point: segments from this version on have not been cleaned."""
        point = self._dirty.get(vnode.dir)
        if point is None:
            path = vnode.dir / CHECKPOINT
            path.with_name(CHECKPOINT + ".tmp").unlink(missing_ok=True)  # a pass killed while writing it
            point = 0
            if path.exists():
                raw = path.read_bytes()
                try:
                    point = lines.decode_int(raw, "dirty_from", 0)
                except ValueError as exc:
                    self.store.damage_log.report(path, 0, len(raw), f"cleaner checkpoint: {exc}; every segment is "
                                                 "cleaned again", "reset", raw)
            self._dirty[vnode.dir] = point
        return point

    def _due(self, vnode: Vnode, settings: CleanerSettings, now_wall: float) -> tuple[float, list[Segment]] | None:
        """(dirty ratio, the cleanable segments) when the partition is due, else None."""
        wal = vnode.wal
        lag_ms = settings.min_compaction_lag_ms
        horizon_ms = now_wall * 1000 - lag_ms
        point = self.dirty_from(vnode)
        cleanable = []
        for seg in wal.segments[:-1]:  # (Kafka: only a lag > 0 holds dirty segments back, as LogCleanerManager)
            if lag_ms > 0 and seg.first >= point and seg.running_max and seg.running_max[-1] > horizon_ms:
                break
            cleanable.append(seg)
        dirty = [s for s in cleanable if s.first >= point]
        total = sum(s.size for s in cleanable)
        if not dirty or not total:
            return None
        ratio = sum(s.size for s in dirty) / total
        try:
            overdue = (now_wall - dirty[0].path.stat().st_mtime) * 1000 > settings.max_compaction_lag_ms
        except FileNotFoundError:  # deleted by retention meanwhile
            return None
        if ratio < settings.min_cleanable_dirty_ratio and not overdue:
            return None
        return ratio, cleanable

    def _clean_segment(self, wal: Wal, idx: OffsetIndex, seg: Segment, next_first: int, newest: dict[bytes, int],
                       keep: set[int], aborted: set[int], delete_retention_ms: int | None,
                       now_wall: float) -> tuple[int, int, int, int] | None:
        """Rewrite one segment (tombstones go once it was sealed ``delete_retention_ms`` ago; never with None);
        (bytes before, after, records removed, batches removed), None when nothing changes. Raises _Damaged for a
        segment holding a damaged entry, OSError when the new log cannot be written (nothing changed either way)."""
        mtime = seg.path.stat().st_mtime
        expired = delete_retention_ms is not None and (now_wall - mtime) * 1000 >= delete_retention_ms
        entries = list(_entries(wal, seg, next_first))
        if len(entries) != len(seg.versions):
            raise _Damaged  # a damaged entry: left for the damage report, never rewritten away
        bodies: list[bytes | None] = []
        removed = 0
        for n, entry in enumerate(entries):
            if entry.kind != KIND_KAFKA or batch_header(entry.body).attributes & CONTROL_BIT:
                bodies.append(entry.body)
                continue
            batch = _decoded(entry.body)
            if batch is None:
                bodies.append(entry.body)
                continue
            kept = [] if entry.version in aborted else [r for r in batch.records if r.key is None or (
                newest.get(r.key, r.offset) <= r.offset and not (r.value is None and expired))]
            if len(kept) == len(batch.records):
                bodies.append(entry.body)
                continue
            try:
                body = None if not kept and n not in (0, len(entries) - 1) and entry.version not in keep else \
                    retained_batch(batch, kept)
            except ValueError:  # a record encode_batch refuses (a negative timestamp): the batch stays as it is
                bodies.append(entry.body)
                continue
            removed += len(batch.records) - len(kept)
            bodies.append(body)
        if not removed:
            return None
        new = Segment(wal.dir, seg.first)
        chunks = []
        dropped = []
        for entry, body in zip(entries, bodies):
            if body is None:
                dropped.append(entry.version)
                continue
            new.versions.append(entry.version)
            new.positions.append(new.size)
            new.running_max.append(seg.running_max[bisect_left(seg.versions, entry.version)])
            chunk = encode_entry(entry.kind, 0, entry.version, entry.count, entry.max_ts, body)
            chunks.append(chunk)
            new.size += len(chunk)
        fileio.replace_file(seg.path, b"".join(chunks), mtime=mtime)  # the swap: one rename
        wal.swap_segment(new)
        try:
            fileio.replace_file(new.index_path, sealed_index(new, next_first))
        except OSError as exc:  # derived: rebuilt from the log at the next open
            log.warning("cleaner: %s: %s; rebuilt at the next open", new.index_path, describe(exc))
        idx.remove_versions(set(dropped))
        return seg.size, new.size, removed, len(dropped)
