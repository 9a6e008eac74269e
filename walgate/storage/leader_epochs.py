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

* the file never holds an epoch the memory does not: :meth:`begin` writes the file first and changes memory only
  once it is durable (the disk refusing it raises :class:`StorageUnavailable`, nothing changed), so an epoch a
  leader answers with is one a restart still knows;
* memory never holds an entry past the WAL's end (:meth:`truncate_from_end` always cuts memory; when the disk
  refuses the rewrite the file keeps entries past the end, which :meth:`open` cuts again, since it is told the
  WAL's end after the WAL's own recovery);
* a file that does not verify is reported to the DamageLog (its bytes kept) and read as empty: the caller decides
  what the vnode led (walgate without replicas: epoch 0 from version 0, :data:`SINGLE_NODE_EPOCHS`).

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
    cache's invariant: epochs strictly increasing, starts not decreasing, both >= 0)."""
    record = lines.decode(raw.rstrip(b"\n"))
    pairs = record.get("epochs") if isinstance(record, dict) else None
    if not isinstance(pairs, list) or len(pairs) > _MAX_ENTRIES:
        raise ValueError("no list of epochs")
    out: list[EpochEntry] = []
    for pair in pairs:
        if (not isinstance(pair, list) or len(pair) != 2 or any(type(x) is not int or x < 0 for x in pair)
                or out and (pair[0] <= out[-1].epoch or pair[1] < out[-1].start_offset)):
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
                 syncs: SyncLatency) -> None:
        self.path = path
        self._cache = cache
        self._disk = disk  # what the file holds (None: unknown, damaged or missing)
        self._damaged = False  # the file did not verify at open (and was not written since)
        self._syncs = syncs

    @classmethod
    def open(cls, directory: Path, wal_end: int, *, damage: DamageLog | None = None,
             syncs: SyncLatency | None = None) -> LeaderEpochs:
        """The cache of the vnode in ``directory`` whose WAL (already recovered) ends at ``wal_end``: the file's
        entries (none when it is missing or damaged, reported) cut back to ``wal_end``. Never raises for the
        file's content; the cut is written back when it changed anything (a refusal is logged and left to the
        next write or open)."""
        path = directory / EPOCH_FILE
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():  # a crash in the middle of a replace: the file itself is the old one or the new one
            try:
                fileio.unlink(tmp)
            except OSError as exc:
                log.warning("%s: cannot remove a leftover: %s", tmp, exc)
        entries: tuple[EpochEntry, ...] = ()
        disk: tuple[EpochEntry, ...] | None = None
        try:
            raw = path.read_bytes() if path.exists() else None
        except OSError as exc:
            log.warning("%s: cannot be read (%s): its epochs are taken as unknown", path, exc)
            raw = None
        if raw is not None:
            try:
                entries = disk = _decode(raw)
            except ValueError as exc:
                reason = f"leader-epoch cache: {exc}; its epochs are taken as unknown"
                if damage is None:
                    log.warning("%s: %s", path, reason)
                else:
                    damage.report(path, 0, len(raw), reason, "reset", raw)
        epochs = cls(path, LeaderEpochCache(entries), disk, syncs or SyncLatency())
        epochs._damaged = raw is not None and disk is None
        epochs.truncate_from_end(wal_end)
        return epochs

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._cache.entries

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, or -1 (Kafka's UNDEFINED_EPOCH) when none is known."""
        return self._cache.latest_epoch

    @property
    def saved(self) -> bool:
        """Whether the file holds exactly what memory does (False after a refused rewrite, until the next one)."""
        return self._disk == self._cache.entries

    def begin(self, epoch: int, start_version: int) -> None:
        """A leader of ``epoch`` writes from WAL version ``start_version`` on (its WAL's end when it took over):
        recorded durably before memory changes (the same latest epoch again: nothing written unless an earlier
        write was refused, or the file already holds it). StorageUnavailable, nothing changed, when the disk refuses;
        ValueError for a negative epoch or version."""
        after = LeaderEpochCache(self._cache.entries)
        after.assign(epoch, start_version)
        if after.entries != self._disk:
            try:
                fileio.replace_file(self.path, encode(after.entries), syncs=self._syncs)
            except OSError as exc:
                raise StorageUnavailable(f"{self.path}: leader epoch {epoch} could not be recorded: {exc}") from None
            self._disk = after.entries
        self._cache = after

    def lead_single_node(self, *, new: bool) -> None:
        """walgate without replicas leads every vnode in epoch 0 (:data:`SINGLE_NODE_EPOCHS`), taken into memory
        when no epoch is known. It is written when the vnode is ``new`` (its WAL empty) or its file was damaged (so
        that the damage is reported once); a vnode of an older release keeps no file until its first epoch change
        (a missing file means the same, and an upgraded data dir's first start writes no file per vnode). A
        refusal is logged and left to a later start."""
        if self._cache.entries:
            return
        if not (new or self._damaged):
            self._cache = LeaderEpochCache(SINGLE_NODE_EPOCHS)
            return
        try:
            self.begin(SINGLE_NODE_EPOCHS[0].epoch, SINGLE_NODE_EPOCHS[0].start_offset)
            self._damaged = False
        except StorageUnavailable as exc:
            log.warning("%s (written at a later start)", exc)
            self._cache = LeaderEpochCache(SINGLE_NODE_EPOCHS)

    def truncate_from_end(self, end_version: int) -> None:
        """The WAL was cut back to end at ``end_version``: forget the epochs starting at or after it. Memory always
        follows; the file is rewritten when that changed anything (a refusal is logged: the file then holds epochs
        past the WAL's end, cut again by the next open or rewritten by the next :meth:`begin`)."""
        self._cache.truncate_from_end(end_version)
        if self._cache.entries == self._disk or not self._cache.entries:
            return  # (an empty cache is left to the caller's begin, which may find the file holding it already)
        try:
            fileio.replace_file(self.path, encode(self._cache.entries), syncs=self._syncs)
            self._disk = self._cache.entries
        except OSError as exc:
            log.warning("%s: the leader-epoch cache could not be cut back to version %d (cut again at the next "
                        "start): %s", self.path, end_version, exc)

    def end_for(self, epoch: int, wal_end: int) -> EpochEnd:
        """OffsetForLeaderEpoch in WAL versions: the largest epoch ``<= epoch`` held and the version where it ends
        (the next epoch's start, or ``wal_end`` for the latest); (-1, -1) for an undefined, unknown or future
        epoch (:meth:`LeaderEpochCache.end_offset_for`)."""
        return self._cache.end_offset_for(epoch, wal_end)
