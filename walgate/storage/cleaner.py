"""Log compaction of Kafka-native partitions (``cleanup.policy=compact``): Kafka's log cleaner as a storage step.

Theory of operation
-------------------
:meth:`Cleaner.clean` is synchronous and bounded: one call is one step of a pass over one partition (the dirtiest
one that is due when the pass starts): a step reads about :data:`STEP_BYTES` of the log, or of its batches about
:data:`STEP_RECORDS` records (a step's Python work, which holds the storage thread and the GIL, goes with the records
it decodes, its I/O with the bytes: whichever bound comes first ends it), scanning it, rewriting a
segment (its new log staged in a temporary file over as many steps as it takes, then swapped in) or merging
segments (copied the same way). It runs on the storage lane like every engine call, so a reader never sees a
half-cleaned segment, and requests are served between steps: a pass's first step (which chooses the partition,
reading every compacted one's WAL) is an exclusive call, the next ones touch the pass's vnode alone
(:meth:`Cleaner.in_progress`) and may hold only it, beside other vnodes' calls (appends only touch the active segment, which a pass never cleans; a segment retention deleted
meanwhile is skipped, even halfway through its rewrite; a partition dropped or no longer compacted ends the pass).
The gateway calls it again at once while a pass is in progress, else after ``log.cleaner.backoff.ms``.

What may be cleaned (Kafka's ``LogCleanerManager``): only sealed segments, never the active one; of those, with a
``min.compaction.lag.ms`` above 0, the oldest ones up to the first dirty one whose records may be younger than it
(the WAL's running max timestamp, an upper bound of the segment's own). The versions at or past the partition's
*dirty point* (where the last pass's key map ended, kept in ``cleaner.ckpt`` in the vnode directory; 0 when missing
or damaged, which only costs a pass) are dirty, and so are the segments holding them. A partition is due when its
dirty bytes are at least ``min.cleanable.dirty.ratio`` of the cleanable bytes, or its first dirty segment was sealed
more than ``max.compaction.lag.ms`` ago (``segment.ms`` rolls the active segment so its records get there too, see
:func:`~walgate.storage.topic_configs.wal_options`), or a marker's delete horizon (below) passed. A partition whose
last pass stopped at a transaction still open (below) waits until that transaction ends: rescanning it could not
get further.

A pass (Kafka's ``Cleaner.doClean``): the newest offset of every key from the dirty point to the end of the
cleanable range is mapped (Kafka's offset map; at most ``max_keys`` keys, ``log.cleaner.dedupe.buffer.size`` / 24
bytes x 0.9: when the dirty section holds more, the map ends before the batch that would overflow it, and that
version is the new dirty point, the next pass going on from it), then each cleanable segment up to there is rewritten
keeping a record only if no newer record of its key is mapped, and a tombstone (null value) only until its segment
was sealed ``delete.retention.ms`` ago (a tombstone past the map's end stays: an older record of its key may still
be mapped). Records without a key are kept. Transactions, as Kafka's cleaner treats them: the scan pairs each
producer's transactional batches with the control batch (marker) that ends them; the records of a committed
transaction are compacted like any others; those of an aborted one are removed and never count as a key's newest; a
pass never reaches a transaction that has not ended (it stops before the segment where the first one begins:
Kafka's first unstable offset). A marker whose transaction has no batch left in the log goes in two passes, as
KIP-534 has it: the first gives it a *delete horizon* (``delete.retention.ms`` from then, written in its header:
attribute bit 6, base timestamp), a pass after the horizon removes it (a reader that saw the transaction's data had
that long to read its marker); a marker that is one of its producer's last five batches stays whole, and so does a
producer's newest marker: the producer state rebuilt at open takes its coordinator epoch from it, which fences the
markers of an older coordinator (Kafka's cleaner may remove it, its producer snapshot keeping that epoch; walgate's
producer state is the log's alone). One that is its segment's first or last stays as an empty control batch. The aborted transaction of a removed ABORT marker
leaves the partition's aborted list (a read_committed reader told of it would skip its producer's batches until a
marker that is gone); the state rebuilt at open never lists it (no batch of it is left). Offsets never change: a
cleaned batch keeps its base offset, last offset delta, producer id, epoch and base sequence (Kafka's
``MemoryRecords.filterTo``), only its records, its base timestamp and its CRC change; a batch left without records
is dropped (a gap in the offsets, which clients skip), except that these stay as empty batches, as Kafka keeps a
producer's last batch: each producer's last five batches in the log (so the idempotence state rebuilt at open is
the state before cleaning, see :mod:`walgate.storage.producers`) and the first and last batch of every segment (so
a segment's versions still start and end where its neighbours say, and the log start offset and high watermark never
move); an empty batch neither needs any more goes. A WAL entry keeps its version, its version count and max
timestamp; the partition's offset index forgets the dropped entries. A segment holding a damaged entry is left as
it is, and no tombstone or marker after it goes in that pass (an older record of its key, or a batch of its
transaction, may be in it).

Crash safety: a segment is swapped by one rename. Its new log is written under a temporary name
(``<first>.log.tmp``, a step at a time: :class:`~walgate.storage.fileio.StagedFile`), given the old file's
modification time (retention's clock), fsynced, renamed over the old log, and the directory fsynced; its sealed
index is then replaced the same way. No fsync of a pass runs in a step: each step leaves the ones that must come
before the next (a step's staged bytes; a commit's file and directory fsyncs, the commits being jobs of several
steps, :data:`_Job`) to :meth:`Cleaner.staged_sync`, which the gateway runs on a thread of its own between steps;
whatever the caller did not run, the next step runs first, so the order on disk is the same either way. A kill before the rename leaves the old segment (the next open deletes the ``.tmp`` leftover); after
it, the new one. An index that does not match its log (a kill between the two renames) is rebuilt from the log at
open, as any damaged index is. Segments are swapped oldest first; each is a valid state on its own, since a record
is only ever removed for a newer one of its key, which a later (old or new) segment still holds. Readers are safe
too: a :class:`~walgate.storage.wal.FileRegion` handed out before a swap keeps the old file open and reads the old
bytes.

Merging (Kafka's ``groupSegmentsBySize``): once a pass has rewritten its segments, each run of adjacent ones that
were read whole and intact, with no versions lost between them, and fit ``segment.bytes`` together, is merged
into its first, copied a step at a time (see :meth:`Cleaner._merge` for the ``.swap`` commit that makes it
crash-safe); a
batch kept only as a segment's first or last can go at the next pass once it is inside the merged segment.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import struct
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import crc32c

from walgate.storage import fileio, lines
from walgate.storage.catalog import TopicDef
from walgate.storage.producers import BATCHES_KEPT
from walgate.storage.store import Store
from walgate.storage.topic_configs import CleanerSettings, cleaner_settings
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_KAFKA, Wal, WalEntry
from walgate.storage.wal_format import Segment, describe, encode_entry, sealed_index
from walgate.wire import DecodedBatch, DecodedRecord, batch_header, encode_batch
from walgate.wire.errors import WireError
from walgate.wire.record_batch import (
    BATCH_HEADER_SIZE,
    CONTROL_ABORT,
    CONTROL_BIT,
    CONTROL_COMMIT,
    DELETE_HORIZON_BIT,
    TRANSACTIONAL_BIT,
    decode_batch,
)

__all__ = ["CHECKPOINT", "MAP_ENTRIES", "MAP_LOAD_FACTOR", "CleanStats", "Cleaner", "map_entries", "retained_batch"]

log = logging.getLogger("walgate.cleaner")

STEP_BYTES = 2 << 20
"""About how much of the log one step of a pass reads (scanning, or rewriting a segment)."""

STEP_RECORDS = 1000
"""About how many records of Kafka batches one step of a pass decodes (scanning, or rewriting a segment): a batch
is decoded whole, so a step ends after the batch that reaches it. Decoding is Python, a few microseconds a record:
without this bound a step of 2 MiB of small records decoded tens of thousands of them (issue 23, step 7: py-spy on
the stalls bench's node during a pass)."""

MAP_ENTRY_BYTES = 24
"""What one key of a pass's map counts against ``log.cleaner.dedupe.buffer.size``: Kafka's ``SkimpyOffsetMap`` entry
(a 16-byte MD5 of the key and an 8-byte offset). walgate's map holds the keys themselves; the bound counts entries
as Kafka's does, so a broker configured for Kafka cleans in passes of the same length."""


def map_entries(dedupe_buffer_size: int, load_factor: float) -> int:
    """How many keys a pass's map may hold (Kafka's ``log.cleaner.dedupe.buffer.size`` and
    ``log.cleaner.io.buffer.load.factor``, one cleaner thread); at least 1."""
    return max(1, int(dedupe_buffer_size // MAP_ENTRY_BYTES * load_factor))


MAP_LOAD_FACTOR = 0.9
"""Kafka's ``log.cleaner.io.buffer.load.factor`` default: how full its hash map gets."""

MAP_ENTRIES = map_entries(128 << 20, MAP_LOAD_FACTOR)
"""The default bound of a pass's key map (Kafka's defaults: 128 MiB at a load factor of 0.9)."""

_first = attrgetter("first")

_Job = Generator[Callable[[], None], None, None]
"""A commit in steps on the storage thread (a segment's swap, a merge, the dirty point's checkpoint): each ``yield``
hands out the I/O (fsyncs) to run off the storage thread before the next step; that I/O's OSError is thrown in at
the ``yield``."""

CHECKPOINT = "cleaner.ckpt"
"""The dirty point of a partition, in its vnode directory: one checksummed line ``{"dirty_from": version}``, with
``"horizon": ms`` when a marker waits for its delete horizon (the earliest)."""

_HEAD = struct.Struct(">qiibIhiqqqhii")  # a RecordBatch v2 header (walgate.wire.record_batch)
_COMMIT, _ABORT = (struct.pack(">h", kind) for kind in (CONTROL_COMMIT, CONTROL_ABORT))  # a marker key's type


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
    merged: int = 0  # segments merged into the one before them
    finished: bool = False  # the pass is whole (else a step of it)


def retained_batch(batch: DecodedBatch, kept: list[DecodedRecord], delete_horizon_ms: int | None = None) -> bytes:
    """*batch* holding only the *kept* records (a subset, in order), as Kafka's cleaner rewrites it: same base offset,
    last offset delta, attributes, producer id, epoch, base sequence and partition leader epoch; records keep their
    offsets and timestamps; the codec is the batch's; with *delete_horizon_ms*, that delete horizon (KIP-534). Without
    records: the batch's empty header (its max timestamp as both timestamps, no codec), as Kafka writes one to keep a
    producer's last batch."""
    if not kept:
        attributes = batch.attributes & ~(0x07 | DELETE_HORIZON_BIT)
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
        is_control=batch.is_control, delete_horizon_ms=delete_horizon_ms))
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


@dataclass
class _Rewrite:
    """The segment a pass is rewriting, read a step at a time from ``cursor``: its new log so far, written to a
    temporary file once a batch changes (the old file is untouched until the swap)."""

    seg: Segment  # as it was when its rewrite began: the swap happens only if it is still there, the same size
    next_first: int
    mtime: float
    expired: bool  # sealed ``delete.retention.ms`` ago: its tombstones may go
    cursor: int
    new: Segment
    chunks: list[bytes] = field(default_factory=list)  # encoded entries not staged yet
    staged: fileio.StagedFile | None = None  # the new log so far, once something changes
    dropped: list[int] = field(default_factory=list)
    markers_gone: set[int] = field(default_factory=set)  # offsets of the markers whose record goes
    read: int = 0  # entries read
    read_all: bool = False  # the whole segment was read: its swap is next
    end: int = -1  # the version after the last entry read
    removed: int = 0  # records removed
    changed: bool = False  # some batch changes (records removed, a marker's delete horizon set)


@dataclass
class _Merge:
    """A run of segments being merged, copied a step at a time into the staged ``.swap`` file."""

    group: list[tuple[int, int]]  # (first version, size) of each segment, as they were when the merge began
    next_first: int
    staged: fileio.StagedFile
    index: int = 0  # the segment being copied
    offset: int = 0  # bytes of it copied


@dataclass
class _Io:
    """The I/O a commit's step left (:data:`_Job`): run once, by the caller's thread between two steps
    (:meth:`Cleaner.staged_sync`), else by the next step itself; its OSError kept for that step."""

    call: Callable[[], None]
    ran: bool = False
    error: OSError | None = None

    def run(self) -> None:
        if not self.ran:
            self.ran = True
            try:
                self.call()
            except OSError as exc:
                self.error = exc


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
    map_from: int  # the dirty point: the key map holds the keys of versions in [map_from, limit)
    limit: int  # where the map ends: ``end``, or the version where the map filled (the next pass goes on from it)
    max_keys: int
    unstable_at_start: int | None  # the partition's first open transaction's first offset when the pass began
    newest: dict[bytes, int] = field(default_factory=dict)  # key -> offset of its newest record in the range
    pending: int = 0  # keys of ended-not-yet transactions the map will take if they commit
    recent: dict[int, deque[int]] = field(default_factory=dict)  # producer id -> versions of its last batches
    last_marker: dict[int, int] = field(default_factory=dict)  # producer id -> version of its newest marker
    # producer id -> its transaction's batches not ended yet: (version, (key, offset) of the records in the range)
    open_txns: dict[int, list[tuple[int, list[tuple[bytes, int]]]]] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)  # versions of batches of aborted transactions
    bare_markers: set[int] = field(default_factory=set)  # versions of markers whose transaction has no batch left
    scanned: bool = False
    truncated: bool = False  # the range stops before an open transaction
    tombstones_go: bool = True  # False once a segment was left as it was (damaged): tombstones after it stay
    rewrite: _Rewrite | None = None
    covered: list[int] = field(default_factory=list)  # first versions of the segments the pass rewrites
    intact: dict[int, int] = field(default_factory=dict)  # first version -> end of a segment read whole and intact
    groups: list[list[tuple[int, int]]] | None = None  # runs of segments ((first, size)) to merge, once rewritten
    merging: _Merge | None = None
    horizon: int | None = None  # the earliest delete horizon (ms) of the markers the pass kept
    stats: CleanStats | None = None
    job: _Job | None = None  # a commit in progress: the pass's steps go on with it until it is done
    io: _Io | None = None  # what the job's last step left to run off the storage thread
    done: bool = False  # the pass's work is over: it ends with its job (the checkpoint)


class Cleaner:
    """The cleaner of every compacted Kafka-native partition of one engine (see the module docstring)."""

    def __init__(self, store: Store, step_bytes: int = STEP_BYTES, step_records: int = STEP_RECORDS) -> None:
        self.store = store
        self.step_bytes = step_bytes
        self.step_records = step_records
        self._dirty: dict[Path, int] = {}  # vnode directory -> dirty point (WAL version)
        self._blocked: dict[Path, int] = {}  # vnode directory -> the first open transaction its last pass stopped at
        self._horizons: dict[Path, int] = {}  # vnode directory -> the earliest delete horizon its markers wait for
        self._pass: _Pass | None = None
        self._defaults: Mapping[str, str] = {}

    def clean(self, now_wall: float, defaults: Mapping[str, str], max_keys: int = MAP_ENTRIES,
              start: bool = True) -> CleanStats | None:
        """One bounded step of cleaning: what the pass in progress did so far (``finished`` once it is whole), or
        None when no partition is due, the pass's partition went away, or the disk refused a write (OSError never
        escapes: the pass stops there, logged, and is tried again later). A topic's configs apply over *defaults*
        (the dynamic broker defaults: ``log.cleanup.policy=compact`` compacts every topic without its own policy).
        A pass's key map holds at most *max_keys* keys (:func:`map_entries`). Without *start*, no new pass is
        started (None when none is in progress): a step of the pass in progress touches its partition's vnode
        alone (:meth:`in_progress`), so it may run on that vnode's lane; choosing the next partition reads every
        compacted one's WAL (an exclusive call)."""
        self._defaults = defaults
        p = self._pass
        if p is None and not start:
            return None
        if p is None:
            p = self._pass = self._start(now_wall, max_keys)
            if p is None:
                return None
        try:
            if self._gone(p):
                self._drop(p)
                return None
            if p.job is not None:
                self._resume(p)
                if p.job is None and p.done:
                    self._pass = None
                    p.stats = None if p.stats is None else dataclasses.replace(p.stats, finished=True)
            elif not p.scanned:
                self._scan(p)
            elif p.segments:
                self._clean_next(p, now_wall)
            elif not self._merge_next(p):
                self._finish(p)
        except OSError as exc:
            log.warning("cleaner: %s-%d: %s; cleaned again later", p.topic.name, p.vnode.index, describe(exc))
            self._drop(p)
            return None
        return p.stats

    def in_progress(self) -> tuple[str, int] | None:
        """The vnode (database, vgroup index) of the pass in progress, the only one its next step touches; None
        when no pass is in progress."""
        p = self._pass
        return None if p is None else (p.topic.db, p.vnode.index)

    def staged_sync(self) -> Callable[[], None] | None:
        """The fsyncs the pass's last step left, for the caller to run on another thread before the next step, so
        the storage thread does not wait for the disk: a commit's (a staged file's whole fsync, a directory's; its
        error goes to the next step, this never raises), or the fdatasync of what the step wrote to a staged file (a
        segment's rewritten log, a merge; raises). None when nothing waits. Crash safety never depends on the caller
        running it: the next step runs what is left first."""
        p = self._pass
        if p is None:
            return None
        if p.io is not None and not p.io.ran:
            return p.io.run
        for work in (p.rewrite, p.merging):
            if work is not None and work.staged is not None and work.staged.unsynced:
                return work.staged.sync
        return None

    def _resume(self, p: _Pass) -> None:
        """The pass's commit job's next step, once the I/O its last step left is done (here, if the caller did not
        run it); an OSError the job raises ends it (the caller drops the pass)."""
        io, p.io = p.io, None
        assert p.job is not None
        if io is not None:
            io.run()
        try:
            call = p.job.send(None) if io is None or io.error is None else p.job.throw(io.error)
        except StopIteration:
            p.job = None
            return
        except OSError:
            p.job = None
            raise
        p.io = _Io(call)

    def _start_job(self, p: _Pass, job: _Job) -> None:
        """Commit with ``job``: its first step runs now, the next ones as the pass's next steps."""
        p.job, p.io = job, None
        self._resume(p)

    def _drop(self, p: _Pass) -> None:
        """End the pass where it is, deleting the temporary files of a rewrite, merge or commit in progress."""
        self._pass = None
        if p.job is not None:
            p.job.close()  # (its files are discarded as it exits)
            p.job = p.io = None
        for work in (p.rewrite, p.merging):
            if work is not None and work.staged is not None:
                work.staged.discard()
        p.rewrite = p.merging = None

    def _unstable(self, topic: TopicDef, vnode: Vnode) -> int | None:
        """The first offset of the partition's first open transaction (None: none is open)."""
        producers = self.store.producers.get((topic.name, vnode.index))
        return None if producers is None else min(producers.ongoing().values(), default=None)

    def _start(self, now_wall: float, max_keys: int) -> _Pass | None:
        """A pass over the dirtiest partition that is due (None: none is)."""
        best: tuple[float, TopicDef, Vnode, list[Segment]] | None = None
        for topic in self.store.catalog.topics.values():
            settings = cleaner_settings({**self._defaults, **topic.configs}) if topic.kind == "kafka" else None
            if settings is None:
                continue
            for vnode in self.store.vnodes.get(topic.db, []):
                if vnode.wal.merging and not vnode.wal.finish_merges():
                    continue  # a merge of it is not finished yet, and the disk still refuses it (see _merge)
                blocked = self._blocked.get(vnode.dir)
                if blocked is not None and blocked == self._unstable(topic, vnode):
                    continue  # its last pass stopped at a transaction still open: nothing new to clean yet
                due = self._due(vnode, settings, now_wall)
                if due is not None and (best is None or due[0] > best[0]):
                    best = (due[0], topic, vnode, due[1])
        if best is None:
            return None
        _, topic, vnode, segments = best
        wal = vnode.wal
        end = wal.segments[len(segments)].first
        return _Pass(topic, vnode, [(s.first, s.size) for s in segments], end, wal.first_version, wal.next_version,
                     min(self.dirty_from(vnode), end), end, max_keys, self._unstable(topic, vnode),
                     stats=CleanStats(topic.name, vnode.index))

    def _gone(self, p: _Pass) -> bool:
        """Whether the pass's partition stopped being a compacted one of this engine (dropped, altered)."""
        topic = self.store.catalog.topics.get(p.topic.name)
        vnodes = self.store.vnodes.get(p.topic.db, [])
        return (topic is None or topic.topic_id != p.topic.topic_id or cleaner_settings({**self._defaults, **topic.configs}) is None
                or not any(v is p.vnode for v in vnodes))

    def _scan(self, p: _Pass) -> None:
        """Read about ``step_bytes`` of the log from the cursor: the newest offset of each key in the map's range,
        every producer's last batches and newest marker in the log as it was when the pass began (keeping those
        keeps at least every producer's last batches and newest marker now: batches appended since are newer, and
        never cleaned by this pass), and the transactions' batches and markers."""
        read = records = 0
        for entry in p.vnode.wal.read_from(p.cursor):
            if entry.version >= p.log_end:
                break
            if entry.version < p.cursor:  # (the entry before a gap holding the cursor)
                continue
            p.cursor = entry.next_version
            read += len(entry.body)
            if entry.kind == KIND_KAFKA:
                self._scan_batch(p, entry)
                records += entry.count
            if read >= self.step_bytes or records >= self.step_records:
                return
        p.scanned = True
        unstable = min((v for batches in p.open_txns.values() for v, _ in batches), default=p.end)
        if unstable < p.end:  # an ongoing transaction: the pass stops before the segment where it begins, and
            firsts = [first for first, _ in p.segments] + [p.end]  # scans again (its map must end there too)
            p.segments = [seg for k, seg in enumerate(p.segments) if firsts[k + 1] <= unstable]
            p.end = firsts[len(p.segments)]
            p.map_from, p.limit = min(p.map_from, p.end), p.end
            p.cursor, p.scanned, p.truncated = p.vnode.wal.first_version, False, True
            p.newest, p.pending, p.recent, p.open_txns, p.aborted, p.bare_markers = {}, 0, {}, {}, set(), set()
            p.last_marker = {}
            return
        if p.limit < p.end:  # the map filled: the segments from the one holding the limit on wait for the next pass
            p.segments = [seg for seg in p.segments if seg[0] < p.limit]
        p.covered = [first for first, _ in p.segments]

    @staticmethod
    def _scan_batch(p: _Pass, entry: WalEntry) -> None:
        """What one stored batch tells the pass: its producer's last batches and newest marker; the newest offset of the keys of a
        batch in the map's range that is neither aborted nor in an unresolved transaction (Kafka's offset map),
        until the map holds ``max_keys`` keys; the markers whose transaction has no batch left in the log."""
        header = batch_header(entry.body)
        pid = header.producer_id
        if pid >= 0:
            p.recent.setdefault(pid, deque(maxlen=BATCHES_KEPT)).append(entry.version)
        if header.attributes & CONTROL_BIT:
            if pid >= 0:
                p.last_marker[pid] = entry.version
            marker = _decoded(entry.body)
            marker_records = marker.records if marker is not None else []
            ended = p.open_txns.pop(pid, [])
            key = marker_records[0].key if marker_records else None
            kind = key[2:4] if key is not None and len(key) >= 4 else None  # version 0, type 0 ABORT / 1 COMMIT
            if kind in (_COMMIT, _ABORT) and not ended:
                p.bare_markers.add(entry.version)  # (Kafka: a marker goes once its transaction's batches are gone)
            p.pending -= sum(len(keys) for _, keys in ended)
            if kind == _COMMIT:
                for _, keys in ended:
                    for k, offset in keys:
                        p.newest[k] = max(p.newest.get(k, offset), offset)
            elif kind == _ABORT:
                p.aborted.update(v for v, _ in ended)
            # (a marker that is neither: its transaction's records never count as a key's newest, and are cleaned
            # as other records are: only ones a newer record of their key supersedes go)
            return
        keys = []
        if p.map_from <= entry.version < p.limit:
            decoded = _decoded(entry.body)
            if decoded is not None:
                keys = [(r.key, r.offset) for r in decoded.records if r.key is not None]
            held = len(p.newest) + p.pending
            if held and held + len({k for k, _ in keys} - p.newest.keys()) > p.max_keys:  # full: the map ends before this batch (an empty map
                p.limit, keys = entry.version, []  # takes one batch whatever its size, so every pass moves on)
        if header.attributes & TRANSACTIONAL_BIT:
            p.open_txns.setdefault(pid, []).append((entry.version, keys))
            p.pending += len(keys)
        else:
            for key, offset in keys:
                p.newest[key] = offset

    def _clean_next(self, p: _Pass, now_wall: float) -> None:
        """A step of rewriting the pass's next segment, if it is still there as it was (retention may delete it)."""
        first, size = p.segments[0]
        wal = p.vnode.wal
        k = bisect_left(wal.segments, first, key=_first)
        if k >= len(wal.segments) - 1 or wal.segments[k].first != first or wal.segments[k].size != size:
            p.segments.pop(0)
            if p.rewrite is not None and p.rewrite.staged is not None:
                p.rewrite.staged.discard()
            p.rewrite = None
            return
        seg = wal.segments[k]
        rw = p.rewrite
        if rw is None:
            settings = cleaner_settings({**self._defaults, **self.store.catalog.topics[p.topic.name].configs})
            assert settings is not None  # (checked by _gone)
            mtime = seg.path.stat().st_mtime
            rw = p.rewrite = _Rewrite(seg, wal.segments[k + 1].first, mtime,
                                      (now_wall - mtime) * 1000 >= settings.delete_retention_ms, seg.first,
                                      Segment(wal.dir, seg.first))
        if not rw.read_all:
            try:
                if not self._rewrite_step(p, rw, now_wall):
                    return
            except _Damaged:  # an older record of a key may be in it: no tombstone after it may go in this pass
                p.tombstones_go = False
                p.segments.pop(0)
                if rw.staged is not None:
                    rw.staged.discard()
                p.rewrite = None
                return
            rw.read_all = True
        p.segments.pop(0)
        p.rewrite = None
        if rw.changed:
            self._start_job(p, self._swap(p, rw))

    def _finish(self, p: _Pass) -> None:
        """Record the new dirty point (where the pass's map ended) and end the pass once its checkpoint is written."""
        p.done = True
        if p.truncated and p.unstable_at_start is not None:
            self._blocked[p.vnode.dir] = p.unstable_at_start
        else:
            self._blocked.pop(p.vnode.dir, None)
        if p.horizon is not None:
            self._horizons[p.vnode.dir] = p.horizon
        else:
            self._horizons.pop(p.vnode.dir, None)
        self._dirty[p.vnode.dir] = p.limit
        point = {"dirty_from": p.limit} if p.horizon is None else {"dirty_from": p.limit, "horizon": p.horizon}
        self._start_job(p, self._checkpoint(p.vnode.dir, lines.encode(point)))

    def _checkpoint(self, directory: Path, data: bytes) -> _Job:
        """Replace the dirty point's checkpoint with ``data`` as :func:`~walgate.storage.fileio.replace_file`
        does, its fsyncs off the storage thread. A failure is logged (a lost dirty point costs one more pass)."""
        path = directory / CHECKPOINT
        try:
            staged = fileio.StagedFile(path, syncs=self.store.syncs)
            try:
                staged.write(data, sync=False)
                staged.seal()
                yield staged.sync
                staged.rename()
            finally:
                staged.discard()  # (nothing left to do once renamed)
            yield _dir_sync(directory, self.store.syncs)
        except OSError as exc:
            log.warning("cleaner: %s: %s", path, describe(exc))

    def dirty_from(self, vnode: Vnode) -> int:
        """The partition's dirty point: versions from this one on have not been cleaned."""
        point = self._dirty.get(vnode.dir)
        if point is None:
            path = vnode.dir / CHECKPOINT
            path.with_name(CHECKPOINT + ".tmp").unlink(missing_ok=True)  # a pass killed while writing it
            point = 0
            if path.exists():
                raw = path.read_bytes()
                try:
                    point = lines.decode_int(raw, "dirty_from", 0)
                    horizon = lines.decode(raw.rstrip(b"\n")).get("horizon")
                    if type(horizon) is int:
                        self._horizons[vnode.dir] = horizon
                except ValueError as exc:
                    self.store.damage_log.report(path, 0, len(raw), f"cleaner checkpoint: {exc}; every segment is "
                                                 "cleaned again", "reset", raw)
            self._dirty[vnode.dir] = point
        return point

    def forget(self, vnode: Vnode) -> None:
        """``vnode`` is closed for good (its files deleted; a copy opened again in its directory is another WAL): a pass
        on it ends, and its points are forgotten (read again from the new copy's checkpoint, if any)."""
        if self._pass is not None and self._pass.vnode is vnode:
            self._drop(self._pass)
        for points in (self._dirty, self._blocked, self._horizons):
            points.pop(vnode.dir, None)

    def truncated(self, vnode: Vnode, version: int) -> None:
        """``vnode``'s WAL was cut back to ``version`` (:mod:`walgate.storage.truncation`): a pass on it ends where it
        is (the segments it read are cut), and the dirty point is moved back to ``version`` at most (the versions
        from there hold other entries now), durably; a refusal is logged (the next pass then takes the new entries
        below the old point as clean: they are compacted later than they could be, never lost)."""
        if self._pass is not None and self._pass.vnode is vnode:
            self._drop(self._pass)
        if self.dirty_from(vnode) <= version and vnode.dir not in self._horizons:
            return
        self._dirty[vnode.dir] = min(self._dirty[vnode.dir], version)
        self._horizons.pop(vnode.dir, None)  # (cut markers' horizons: found again by the next pass)
        self._blocked.pop(vnode.dir, None)
        try:
            fileio.replace_file(vnode.dir / CHECKPOINT, lines.encode({"dirty_from": self._dirty[vnode.dir]}),
                                syncs=self.store.syncs)
        except OSError as exc:
            log.warning("cleaner: %s: %s", vnode.dir / CHECKPOINT, describe(exc))

    def _due(self, vnode: Vnode, settings: CleanerSettings, now_wall: float) -> tuple[float, list[Segment]] | None:
        """(dirty ratio, the cleanable segments) when the partition is due, else None."""
        wal = vnode.wal
        lag_ms = settings.min_compaction_lag_ms
        horizon_ms = now_wall * 1000 - lag_ms
        point = self.dirty_from(vnode)
        cleanable = []
        for k, seg in enumerate(wal.segments[:-1]):  # (Kafka: only a lag > 0 holds dirty segments back)
            if lag_ms > 0 and wal.segments[k + 1].first > point and seg.running_max and seg.running_max[-1] > horizon_ms:
                break
            cleanable.append(seg)
        dirty = [s for k, s in enumerate(cleanable) if wal.segments[k + 1].first > point]
        total = sum(s.size for s in cleanable)
        horizon = self._horizons.get(vnode.dir)
        if horizon is not None and horizon <= now_wall * 1000 and total:
            return 0.0, cleanable  # a marker's delete horizon passed (Kafka cleans such a log even when clean)
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

    def _rewrite_step(self, p: _Pass, rw: _Rewrite, now_wall: float) -> bool:
        """Read about ``step_bytes`` more of the segment, deciding each batch's fate (kept, rewritten with fewer
        records or a delete horizon, or dropped); True once the whole segment is read. Raises _Damaged for a
        segment holding a damaged entry (nothing changed)."""
        seg = rw.seg
        recent = {v for versions in p.recent.values() for v in versions} | set(p.last_marker.values())
        bounds = (seg.versions[0], seg.versions[-1])
        now_ms = int(now_wall * 1000)
        read = records = 0
        for entry in p.vnode.wal.read_from(rw.cursor):
            if entry.version >= rw.next_first:
                break
            if entry.version < rw.cursor:
                continue
            rw.cursor = rw.end = entry.next_version
            rw.read += 1
            read += len(entry.body)
            records += entry.count if entry.kind == KIND_KAFKA else 0
            body = self._cleaned(p, rw, entry, entry.version in recent, entry.version in bounds, now_ms)
            if body is None:
                rw.dropped.append(entry.version)
            else:
                new = rw.new
                new.versions.append(entry.version)
                new.positions.append(new.size)
                new.running_max.append(seg.running_max[bisect_left(seg.versions, entry.version)])
                chunk = encode_entry(entry.kind, 0, entry.version, entry.count, entry.max_ts, body)
                rw.chunks.append(chunk)
                new.size += len(chunk)
            if read >= self.step_bytes or records >= self.step_records:
                self._stage(p, rw)
                return False
        if rw.read != len(seg.versions):
            raise _Damaged  # a damaged entry: left for the damage report, never rewritten away
        p.intact[seg.first] = rw.end
        self._stage(p, rw)
        return True

    @staticmethod
    def _stage(p: _Pass, rw: _Rewrite) -> None:
        """Once the segment changes, write what was read of its new log so far to the temporary file."""
        if rw.changed and rw.chunks:
            if rw.staged is None:
                rw.staged = fileio.StagedFile(rw.seg.path, syncs=p.vnode.wal.syncs)
            rw.staged.write(b"".join(rw.chunks), sync=False)  # (synced by staged_sync or the commit)
            rw.chunks.clear()

    def _cleaned(self, p: _Pass, rw: _Rewrite, entry: WalEntry, recent: bool, bound: bool, now_ms: int
                 ) -> bytes | None:
        """What becomes of one entry of a segment being rewritten: its body, a new one, or None (dropped). *recent*:
        it is one of its producer's last batches, or its newest marker; *bound*: its segment's first or last: either
        stays a batch."""
        if entry.kind != KIND_KAFKA:
            return entry.body
        header = batch_header(entry.body)
        if header.attributes & CONTROL_BIT:
            return self._cleaned_marker(p, rw, entry, header.attributes, header.base_timestamp, recent, bound, now_ms)
        batch = _decoded(entry.body)
        if batch is None:
            return entry.body
        expired = rw.expired and p.tombstones_go and entry.version < p.limit
        newest = p.newest
        kept = [] if entry.version in p.aborted else [r for r in batch.records if r.key is None or (
            newest.get(r.key, r.offset) <= r.offset and not (r.value is None and expired))]
        if len(kept) == len(batch.records) and (kept or recent or bound):
            return entry.body  # (an empty batch kept for a producer or a segment goes once neither needs it)
        if not kept and not recent and not bound:
            body = None
        else:
            try:
                body = retained_batch(batch, kept)
            except ValueError:  # a record encode_batch refuses (a negative timestamp): the batch stays as it is
                return entry.body
        rw.removed += len(batch.records) - len(kept)
        rw.changed = True
        return body

    def _cleaned_marker(self, p: _Pass, rw: _Rewrite, entry: WalEntry, attributes: int, base_timestamp: int,
                        recent: bool, bound: bool, now_ms: int) -> bytes | None:
        """A transaction marker whose transaction has no batch left in the log (KIP-534, Kafka's two passes): the
        first pass that sees it so gives it a delete horizon ``delete.retention.ms`` on; a pass after the horizon
        drops it, or keeps it as an empty control batch when it is its segment's first or last (as Kafka keeps a
        producer's last batch empty). A producer's last batches stay whole (their epochs rebuild its state at open),
        and so does its newest marker (its coordinator epoch, which fences markers of older coordinators).
        Any other control batch, and every one after a damaged segment (a batch of its transaction may be in it),
        stays as it is."""
        if entry.version not in p.bare_markers or not p.tombstones_go or recent:
            return entry.body
        if attributes & DELETE_HORIZON_BIT:
            if base_timestamp <= now_ms:
                marker = _decoded(entry.body) if bound else None
                if bound and marker is None:
                    return entry.body
                rw.changed = True
                rw.markers_gone.add(batch_header(entry.body).base_offset)
                return None if marker is None else retained_batch(marker, [])
            p.horizon = base_timestamp if p.horizon is None else min(p.horizon, base_timestamp)
            return entry.body
        settings = cleaner_settings({**self._defaults, **self.store.catalog.topics[p.topic.name].configs})
        assert settings is not None
        marker = _decoded(entry.body)
        if marker is None:
            return entry.body
        horizon = now_ms + settings.delete_retention_ms
        rw.changed = True
        p.horizon = horizon if p.horizon is None else min(p.horizon, horizon)
        return retained_batch(marker, marker.records, delete_horizon_ms=horizon)

    def _merge_next(self, p: _Pass) -> bool:
        """A step of merging the runs of adjacent rewritten segments (Kafka's ``groupSegmentsBySize``); False when
        none is left."""
        wal = p.vnode.wal
        if p.groups is None:
            p.groups = self._groups(p)
        m = p.merging
        if m is None:
            if not p.groups:
                return False
            group = p.groups.pop(0)
            if self._run(wal, group) is None:
                return True
            next_first = wal.segments[bisect_left(wal.segments, group[-1][0], key=_first) + 1].first
            m = p.merging = _Merge(group, next_first,
                                   fileio.StagedFile(wal.dir / f"{group[0][0]:020d}.{next_first:020d}.swap",
                                                    syncs=wal.syncs))
        segs = self._run(wal, m.group)
        if segs is None:  # changed meanwhile (retention)
            m.staged.discard()
            p.merging = None
            return True
        copied = 0
        while m.index < len(segs) and copied < self.step_bytes:
            seg = segs[m.index]
            with open(seg.path, "rb") as f:
                f.seek(m.offset)
                data = f.read(min(self.step_bytes - copied, seg.size - m.offset))
            if not data:
                raise OSError(errno.EIO, f"{seg.path}: shorter than its {seg.size} bytes")
            m.staged.write(data, sync=False)
            m.offset += len(data)
            copied += len(data)
            if m.offset >= seg.size:
                m.index, m.offset = m.index + 1, 0
        if m.index == len(segs):
            p.merging = None
            self._start_job(p, self._merge(p, m, segs))
        return True

    @staticmethod
    def _run(wal: Wal, group: list[tuple[int, int]]) -> list[Segment] | None:
        """The sealed segments of ``group``, if they are all still there as they were."""
        k = bisect_left(wal.segments, group[0][0], key=_first)
        segs = wal.segments[k : k + len(group)]
        if k + len(group) > len(wal.segments) - 1 or [(s.first, s.size) for s in segs] != group:
            return None
        return segs

    @staticmethod
    def _groups(p: _Pass) -> list[list[tuple[int, int]]]:
        """The runs of at least two adjacent segments of the pass, each read whole and intact and ending where the
        next begins (no lost versions between), together at most ``segment_bytes`` (Kafka's ``segment.bytes``)."""
        wal = p.vnode.wal
        groups: list[list[tuple[int, int]]] = []
        run: list[tuple[int, int]] = []
        for first in p.covered:
            k = bisect_left(wal.segments, first, key=_first)
            if k >= len(wal.segments) - 1 or wal.segments[k].first != first or first not in p.intact:
                seg = None
            else:
                seg = wal.segments[k]
            if seg is not None and run and p.intact[run[-1][0]] == first and \
                    sum(size for _, size in run) + seg.size <= wal.options.segment_bytes:
                run.append((first, seg.size))
                continue
            if len(run) > 1:
                groups.append(run)
            run = [] if seg is None else [(first, seg.size)]
        if len(run) > 1:
            groups.append(run)
        return groups

    def _merge(self, p: _Pass, m: _Merge, segs: list[Segment]) -> _Job:
        """Put the merged log of ``segs`` (all copied to ``m.staged``) in place of them. Crash safety, as Kafka's
        ``.swap`` files: the merged log, staged under a temporary name, is fsynced and renamed to
        ``<first>.<end>.swap`` (the commit), and the directory fsynced; from then on the WAL serves the merged segment,
        read from the swap file, while it deletes the run's files and renames the swap file to the first segment's
        log (:meth:`Wal.merge_segments <walgate.storage.wal.Wal.merge_segments>`), then the directory is fsynced
        again and the sealed index written (staged, fsynced, renamed, the directory fsynced). Every fsync runs off
        the storage thread, between the job's steps. A kill before the commit leaves the old segments; after it,
        the WAL's recovery finishes the merge at open (:mod:`walgate.storage.wal_recovery`). A failed commit removes
        its swap file, unless it is there (its directory's fsync failed after the rename): then it is committed.
        When the disk refuses a step after the commit, the merged segment goes on being served from the swap file,
        and each time a pass is to begin the rest is tried again until it is done (the partition is not cleaned
        meanwhile; a merge the next open could not finish is tried the same way)."""
        wal = p.vnode.wal
        new = Segment(wal.dir, segs[0].first)
        for s in segs:
            new.versions.extend(s.versions)
            new.positions.extend(position + new.size for position in s.positions)
            new.running_max.extend(s.running_max)
            new.size += s.size
        swap = m.staged.path
        try:
            m.staged.seal(max(s.path.stat().st_mtime for s in segs))  # (retention waits for the newest of them)
            yield m.staged.sync
            if self._run(wal, m.group) is None:  # changed meanwhile (retention)
                return
            m.staged.rename()  # the commit
        finally:
            m.staged.discard()  # (nothing left to do once renamed)
        try:
            yield _dir_sync(wal.dir, self.store.syncs)
        except OSError as exc:
            log.warning("cleaner: %s: %s; committed", swap, describe(exc))  # (fsynced by the merge's end)
        new.path = swap
        if not wal.merge_segments(new, len(segs), m.next_first, sync=False):
            p.groups = []  # (logged; finished, synced and indexed, before the next pass begins)
            return
        if p.stats is not None:
            p.stats = dataclasses.replace(p.stats, merged=p.stats.merged + len(segs) - 1)
        try:
            yield _dir_sync(wal.dir, self.store.syncs)
        except OSError as exc:  # (the merge is served; its renames may not be durable yet)
            log.warning("cleaner: %s: %s", wal.dir, describe(exc))
        yield from self._replace_index(new, m.next_first)

    def _replace_index(self, seg: Segment, end: int) -> _Job:
        """Write ``seg``'s sealed index (``end``: the next segment's first version) as
        :func:`~walgate.storage.fileio.replace_file` does, its fsyncs off the storage thread. A failure is only
        logged: the index is derived, rebuilt from the log at the next open."""
        try:
            staged = fileio.StagedFile(seg.index_path, syncs=self.store.syncs)
            try:
                staged.write(sealed_index(seg, end), sync=False)
                staged.seal()
                yield staged.sync
                staged.rename()
            finally:
                staged.discard()  # (nothing left to do once renamed)
            yield _dir_sync(seg.index_path.parent, self.store.syncs)
        except OSError as exc:
            log.warning("cleaner: %s: %s; rebuilt at the next open", seg.index_path, describe(exc))

    def _swap(self, p: _Pass, rw: _Rewrite) -> _Job:
        """Replace the segment by its rewritten log (one rename, see the module docstring), then its sealed index:
        the log fsynced whole, renamed over the old one if that is still there as it was (retention may delete it
        meanwhile), the directory fsynced; every fsync off the storage thread, between the job's steps."""
        wal = p.vnode.wal
        new = rw.new
        assert rw.staged is not None
        try:
            rw.staged.seal(rw.mtime)
            yield rw.staged.sync
            k = bisect_left(wal.segments, rw.seg.first, key=_first)
            if k >= len(wal.segments) - 1 or wal.segments[k].first != rw.seg.first or \
                    wal.segments[k].size != rw.seg.size:
                return
            rw.staged.rename()  # the swap: one rename
        finally:
            rw.staged.discard()  # (nothing left to do once renamed)
        wal.swap_segment(new)
        self.store.indexes[(p.topic.name, p.vnode.index)].remove_versions(set(rw.dropped))
        if rw.markers_gone:  # (the state rebuilt at open never lists them: no batch of theirs is left)
            self.store.producers[(p.topic.name, p.vnode.index)].forget_aborted(rw.markers_gone)
        if p.stats is not None:
            s = p.stats
            p.stats = CleanStats(s.topic, s.partition, s.segments + 1, s.bytes_before + rw.seg.size,
                                 s.bytes_after + new.size, s.records_removed + rw.removed,
                                 s.batches_removed + len(rw.dropped))
        try:
            yield _dir_sync(wal.dir, self.store.syncs)
        except OSError as exc:  # (the new log is served; its rename may not be durable yet)
            log.warning("cleaner: %s: %s; swapped", rw.seg.path, describe(exc))
        yield from self._replace_index(new, rw.next_first)


def _dir_sync(directory: Path, syncs: fileio.SyncLatency) -> Callable[[], None]:
    """The fsync of ``directory`` (the renames in it made durable), for another thread."""
    return lambda: fileio.fsync_dir(directory, syncs=syncs)
