"""A vnode's leader-epoch cache on disk: ``epoch -> first WAL version`` (Kafka's ``leader-epoch-checkpoint``).

The durable form of :class:`walgate.replication.epochs.LeaderEpochCache` (KIP-101): which leader epoch wrote which
part of the vnode's WAL. A leader records its epoch when it starts leading (:meth:`LeaderEpochs.begin`), at the
WAL's end; a WAL truncated at its end (a lost unsynced tail found at open, a follower's truncation by KIP-101 /
KIP-279) cuts the cache back with it (:meth:`LeaderEpochs.truncate_from_end`); OffsetForLeaderEpoch is answered
from it (:meth:`LeaderEpochs.end_for`).

File: ``leader-epoch-checkpoint`` in the vnode's directory, one checksummed line (:mod:`walgate.storage.lines`)
``{"epochs": [[epoch, start version], ...]}``, replaced whole and atomically (:func:`fileio.replace_file`: a
crash leaves the old file or the new one, never a mix; a leftover ``.tmp`` of a crash is removed at open).

Invariants:

* the file never holds an epoch the memory does not, but for entries past the WAL's end (below): :meth:`begin`
  writes the file first and changes memory only once it is durable, so an epoch a leader answers with is one a
  restart still knows. A refusal raises :class:`StorageUnavailable`; one that came after the rename (the directory's
  fsync) leaves the new file in place, not known durable: memory then takes what the file is read back to hold (the
  old entries or the new ones), and when even that read fails the cache is *failed*: :meth:`end_for` raises
  StorageUnavailable until a write succeeds or the vnode is opened again (which reads the file);
* memory never holds an entry past the WAL's end (:meth:`truncate_from_end` always cuts memory; when the disk
  refuses the rewrite the file may keep entries past the end, which :meth:`open` cuts again, since it is told the
  WAL's end after the WAL's own recovery);
* one rule decides whether the file is written (:meth:`LeaderEpochs._settle`, after every change): when it may not
  hold what memory does, so a change that leaves memory as the file holds it writes nothing. :meth:`open` cuts
  memory only and leaves the write to the change that follows it (:meth:`lead_single_node`, :meth:`lead_replicated`,
  :meth:`begin` or :meth:`truncate_from_end`; a vnode makes one before its WAL grows): a new vnode's ``epoch 0 from version 0``,
  cut to nothing at an empty WAL and led again at once, is then not written at all;
* after any refused write the file counts as unknown: the next :meth:`begin` or cut writes it whole again;
* a file that does not verify (checksum, shape, epochs or starts not strictly increasing) or cannot be read is
  reported to the DamageLog (its bytes kept; an unreadable one left in place) and read as empty: the caller
  decides what the vnode led (walgate without replicas: epoch 0 from version 0, :data:`SINGLE_NODE_EPOCHS`);
* a vnode of a replicated database (:meth:`LeaderEpochs.lead_replicated`, told at open) answers from its cache
  alone: its leaders begin their epochs, and any epoch in its file is one of theirs;
* walgate without replicas (:meth:`LeaderEpochs.lead_single_node`) answers OffsetForLeaderEpoch from
  :data:`SINGLE_NODE_EPOCHS`, as Metadata, record batches and the current-epoch check all say epoch 0
  (:data:`walgate.storage.partitions.LEADER_EPOCH`), until a leader of another epoch begins (the replication
  wiring); a file holding a later epoch (a restored data dir, a hand edit, the window above) is reported as damage
  at each start and left as it is.

A missing file is a new vnode's (written at once) or one made before this file existed: to a single node it means
:data:`SINGLE_NODE_EPOCHS`, not reported, and it is written by the first epoch change
(:meth:`LeaderEpochs.lead_single_node`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from walgate.replication.epochs import EpochEnd, EpochEntry, LeaderEpochCache
from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable
from walgate.storage.fileio import SyncLatency

__all__ = ["EPOCH_FILE", "LeaderEpochs", "SINGLE_NODE_EPOCHS", "encode", "write_new"]

log = logging.getLogger("walgate.epochs")

EPOCH_FILE = "leader-epoch-checkpoint"
SINGLE_NODE_EPOCHS = (EpochEntry(0, 0),)
"""What a vnode of walgate without replicas led: epoch 0, from its first version on (every release before the cache
was kept, and every single node since)."""
_MAX_ENTRIES = 1 << 20  # bound on a file's entries before they are built (a damaged or hostile file)


def encode(entries: tuple[EpochEntry, ...]) -> bytes:
    """The file's bytes for ``entries``."""
    return lines.encode({"epochs": [[e.epoch, e.start_offset] for e in entries]})


def _decode(raw: bytes) -> tuple[EpochEntry, ...]:
    """The entries of the file's bytes; ValueError saying what is wrong (checksum, shape, or entries that break the
    cache's invariant: epochs and starts both strictly increasing, both >= 0; Kafka's ``LeaderEpochFileCache``
    removes an entry whose start a later epoch's equals, so two equal starts are no file it wrote)."""
    record = lines.decode(raw.rstrip(b"\n"))
    pairs = record.get("epochs") if isinstance(record, dict) else None
    if not isinstance(pairs, list) or len(pairs) > _MAX_ENTRIES:
        raise ValueError("no list of epochs")
    out: list[EpochEntry] = []
    for pair in pairs:
        if (not isinstance(pair, list) or len(pair) != 2 or any(type(x) is not int or x < 0 for x in pair)
                or out and (pair[0] <= out[-1].epoch or pair[1] <= out[-1].start_offset)):
            raise ValueError(f"entry {pair!r} after {out[-1:]}")
        out.append(EpochEntry(pair[0], pair[1]))
    return tuple(out)


def write_new(directory: Path, entries: tuple[EpochEntry, ...], *, syncs: SyncLatency) -> None:
    """Write a new vnode's file in ``directory`` (no catalog record names it yet: :func:`walgate.storage.vnode.
    prepare`), fsynced; OSError when the disk refuses."""
    fileio.replace_file(directory / EPOCH_FILE, encode(entries), syncs=syncs)


class LeaderEpochs:
    """One vnode's leader-epoch cache, kept in ``directory / EPOCH_FILE`` (see the module docstring)."""

    def __init__(self, path: Path, cache: LeaderEpochCache, disk: tuple[EpochEntry, ...] | None,
                 syncs: SyncLatency, damage: DamageLog | None = None) -> None:
        self.path = path
        self._cache = cache
        self._disk = disk  # what the file holds (None: unknown, damaged, missing, or a write of it refused)
        self._damaged = False  # the file did not verify at open (and was not written since)
        self._stale = False  # a write of the file was refused since the last that succeeded
        self._failed: str | None = None  # why the file's content is unknown after a refused write (see module doc)
        self._single_node = False  # answers from SINGLE_NODE_EPOCHS (lead_single_node, until another epoch begins)
        self._syncs = syncs
        self._damage = damage
        self._raw: bytes | None = None  # the file's bytes as read at open, for a damage report (until lead_single_node)

    @classmethod
    def open(cls, directory: Path, wal_end: int, *, damage: DamageLog | None = None,
             syncs: SyncLatency | None = None) -> LeaderEpochs:
        """The cache of the vnode in ``directory`` whose WAL (already recovered) ends at ``wal_end``: the file's
        entries (none when it is missing, damaged or unreadable: the last two reported) cut back to ``wal_end``.
        Never raises for the file's content or a refused read; the cut is in memory only, written by the change
        that follows (module docstring: the caller makes one before the WAL grows)."""
        path = directory / EPOCH_FILE
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():  # a crash in the middle of a replace: the file itself is the old one or the new one
            try:
                fileio.unlink(tmp)
            except OSError as exc:
                log.warning("%s: cannot remove a leftover: %s", tmp, exc)
        entries: tuple[EpochEntry, ...] = ()
        disk: tuple[EpochEntry, ...] | None = None
        epochs = cls(path, LeaderEpochCache(), None, syncs or SyncLatency(), damage)
        try:
            raw = path.read_bytes() if path.exists() else None
        except OSError as exc:  # left in place (not rewritten by lead_single_node): its bytes may read again
            epochs._report(f"leader-epoch cache cannot be read ({exc}); its epochs are taken as unknown",
                           "left in place", keep=False)
            raw = None
        if raw is not None:
            epochs._raw = raw
            try:
                entries = disk = _decode(raw)
            except ValueError as exc:
                epochs._report(f"leader-epoch cache: {exc}; its epochs are taken as unknown", "reset", keep=True)
        epochs._cache, epochs._disk = LeaderEpochCache(entries), disk
        epochs._damaged = raw is not None and disk is None
        epochs._cache.truncate_from_end(wal_end)
        return epochs

    def _report(self, reason: str, action: str, *, keep: bool) -> None:
        """Report the file as damaged (logged when there is no DamageLog), with a copy of the bytes read at open
        when ``keep`` (the file is about to be rewritten)."""
        if self._damage is None:
            log.warning("%s: %s; %s", self.path, reason, action)
        else:
            raw = self._raw or b""
            self._damage.report(self.path, 0, len(raw), reason, action, raw if keep else b"")

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._cache.entries

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, or -1 (Kafka's UNDEFINED_EPOCH) when none is known."""
        return self._cache.latest_epoch

    @property
    def saved(self) -> bool:
        """Whether the file is known to hold exactly what memory does (False after a refused write, until the next
        one succeeds)."""
        return self._disk == self._cache.entries

    def _replace(self, entries: tuple[EpochEntry, ...]) -> None:
        """Write ``entries`` as the whole file, durably. OSError when the disk refuses: the file then holds the old
        entries or these (a refusal after the rename), so it counts as unknown until a write succeeds."""
        self._disk = None
        self._stale = True
        fileio.replace_file(self.path, encode(entries), syncs=self._syncs)
        self._disk = entries
        self._stale = False
        self._failed = None

    def _read_back(self, written: tuple[EpochEntry, ...]) -> bool:
        """After a refused write of ``written``: whether the file holds it (the rename was done). When the file
        cannot be read or decoded, the cache is failed (False)."""
        try:
            return _decode(self.path.read_bytes()) == written
        except (OSError, ValueError) as exc:
            self._failed = f"its file could not be read back after a refused write: {exc}"
            log.error("%s: leader-epoch cache failed (answers refused until a write succeeds or the vnode is "
                      "opened again): %s", self.path, self._failed)
            return False

    def begin(self, epoch: int, start_version: int) -> None:
        """A leader of ``epoch`` writes from WAL version ``start_version`` on (its WAL's end when it took over):
        recorded durably before memory changes (the same latest epoch again: nothing written unless an earlier
        write was refused, or the file already holds it). StorageUnavailable when the disk refuses: memory then
        holds what the file does (unchanged, or ``epoch`` when the refusal came after the rename, see the module
        docstring); ValueError for a negative epoch or version."""
        after = LeaderEpochCache(self._cache.entries)
        after.assign(epoch, start_version)
        if after.entries != self._disk:
            try:
                self._replace(after.entries)
            except OSError as exc:
                if self._read_back(after.entries):
                    self._hold(after)
                raise StorageUnavailable(f"{self.path}: leader epoch {epoch} could not be recorded: {exc}") from None
        self._hold(after)

    def _hold(self, after: LeaderEpochCache) -> None:
        """Memory takes ``after``; one whose latest epoch is not a single node's leaves single-node mode (also when
        the write of it was refused after the rename: the epoch is answered as it is appended under)."""
        self._cache = after
        if after.latest_epoch != SINGLE_NODE_EPOCHS[-1].epoch:
            self._single_node = False

    def lead_replicated(self) -> None:
        """A vnode of a replicated database (``REPLICA n`` above 1, issue 25), told so at open before its WAL grows:
        it answers from its cache, never from :data:`SINGLE_NODE_EPOCHS` (its leaders begin their epochs:
        :meth:`begin`), and a later epoch in its file is what its leaders led, never damage. Writes open's cut of
        the file, if any (a refusal is logged, and the file cut again by the next change or the next start)."""
        self._single_node = False
        self._raw = None
        self._settle("cut back to the WAL's end")

    def lead_single_node(self, *, new: bool) -> None:
        """walgate without replicas leads every vnode in epoch 0 (:data:`SINGLE_NODE_EPOCHS`) and answers from it
        from now on (as Metadata and the batches say epoch 0), taken into memory when no epoch is known. It is
        written when the vnode is ``new`` (its WAL empty) or its file was damaged (so that the damage is reported
        once); a vnode of an older release keeps no file until its first epoch change (a missing file means the
        same, and an upgraded data dir's first start writes no file per vnode). A file holding a later epoch is
        reported as damage (at each start: it is left in place, so not copied) and left as it is. A refusal is
        logged and left to a later start."""
        self._single_node = True
        if self._raw is not None and self._cache.latest_epoch > SINGLE_NODE_EPOCHS[-1].epoch:  # (once, at open)
            self._report(f"leader-epoch cache holds epoch {self._cache.latest_epoch}, which a vnode without "
                         f"replicas never led ({[[e.epoch, e.start_offset] for e in self._cache.entries]})",
                         "answered as epoch 0 from version 0, the file left as it is", keep=False)
        self._raw = None
        if self._cache.entries or not (new or self._damaged):
            self._settle("cut back to the WAL's end")  # open's cut, if it changed anything
            if not self._cache.entries:  # a missing file means the same: none written
                self._cache = LeaderEpochCache(SINGLE_NODE_EPOCHS)
            return
        try:  # (written only if the file does not hold it already: a new vnode's, cut to nothing by open)
            self.begin(SINGLE_NODE_EPOCHS[0].epoch, SINGLE_NODE_EPOCHS[0].start_offset)
            self._damaged = False
        except StorageUnavailable as exc:
            log.warning("%s (written at a later start)", exc)
            self._cache = LeaderEpochCache(SINGLE_NODE_EPOCHS)

    def truncate_from_end(self, end_version: int) -> None:
        """The WAL was cut back to end at ``end_version``: forget the epochs starting at or after it. Memory always
        follows; the file is rewritten when it may differ (an emptied cache too, as a file of no epochs, when the
        file is known to hold epochs or a write of it was refused). A refusal is logged and :attr:`saved` stays
        False: the file then holds these entries or epochs past the WAL's end, cut again by the next open (a
        truncation refuses appends until the rewrite succeeds, :func:`walgate.storage.truncation.truncate_vnode`,
        so the WAL has not grown back past them) or rewritten by the next :meth:`begin` or cut."""
        self._cache.truncate_from_end(end_version)
        self._settle(f"cut back to version {end_version}")

    def _settle(self, what: str) -> None:
        """Write the file when it may not hold what memory does: not when it is known to hold memory's entries, nor
        when no file is known written (missing, damaged or unreadable: left to :meth:`lead_single_node`) and memory
        holds none. A refusal is logged and :attr:`saved` stays False (``what``: the change, for the log)."""
        if self._cache.entries == self._disk or not self._cache.entries and self._disk is None and not self._stale:
            return
        try:
            self._replace(self._cache.entries)
        except OSError as exc:
            log.warning("%s: the leader-epoch cache could not be %s (written again by the next change or cut again "
                        "at the next start): %s", self.path, what, exc)

    @property
    def write_refused(self) -> bool:
        """Whether the disk refused the last write of the file (it may hold the old entries or the new ones)."""
        return self._stale

    @property
    def single_node(self) -> bool:
        """Whether OffsetForLeaderEpoch is answered from :data:`SINGLE_NODE_EPOCHS` (:meth:`lead_single_node`)."""
        return self._single_node

    def epoch_at(self, version: int) -> int:
        """The leader epoch WAL version ``version`` was appended under (the latest epoch starting at or before it;
        -1 when none does), what the record batches served from it carry (Kafka's ``partitionLeaderEpoch``, KIP-101):
        0 on a single node (:data:`SINGLE_NODE_EPOCHS`). From memory, also while the file is failed: the entries
        kept in memory are what the vnode's appends went by."""
        if self._single_node:
            return SINGLE_NODE_EPOCHS[0].epoch
        return self._cache.epoch_at(version)

    def end_for(self, epoch: int, wal_end: int) -> EpochEnd:
        """OffsetForLeaderEpoch in WAL versions: the largest epoch ``<= epoch`` held and the version where it ends
        (the next epoch's start, or ``wal_end`` for the latest); (-1, -1) for an undefined, unknown or future
        epoch (:meth:`LeaderEpochCache.end_offset_for`). A single node answers from :data:`SINGLE_NODE_EPOCHS`;
        StorageUnavailable while the cache is failed (see the module docstring)."""
        if self._single_node:
            return LeaderEpochCache(SINGLE_NODE_EPOCHS).end_offset_for(epoch, wal_end)
        if self._failed is not None:
            raise StorageUnavailable(f"{self.path}: leader-epoch cache unknown: {self._failed}")
        return self._cache.end_offset_for(epoch, wal_end)
