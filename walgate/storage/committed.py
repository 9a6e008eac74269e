"""Committed consumer-group offsets of one vnode (the seed's "progress recorded in the vnode").

``commits.log`` in the vnode directory is an append-only log of checksummed JSON lines
(:mod:`walgate.storage.lines`), ``{"g": group, "t": topic, "p": partition, "o": offset, "e": leader_epoch,
"m": metadata, "ts": commit time ms}``; ``"o": null`` is a tombstone (offset deleted).

* :meth:`CommittedOffsets.commit` writes a whole batch with one write and fsyncs it before returning, so an
  acknowledged commit survives ``kill -9`` and power loss. The batch is applied in memory only after that: when
  the disk refuses the write or the fsync, the file is cut back, nothing changes and the caller gets
  :class:`~walgate.storage.errors.StorageUnavailable` (retriable); the next write starts with a ``\\n`` so it
  never joins a torn tail the cut could not remove.
* Group commit (opened with an :class:`~walgate.storage.durability.Unsynced` ledger: the gateway): a commit is only
  queued and notes its need; the write and its fsync are one sync taken later (:meth:`CommittedOffsets.take_sync`,
  run off the storage thread), one for every commit queued while the previous one ran, so the storage thread never
  writes to the file while an fsync of it runs (a write to a page under writeback waits for the disk). Commits are
  applied (seen by :meth:`~CommittedOffsets.get`) only once their sync succeeded; when it fails, the sync's bytes are
  cut off the file and every commit not yet durable (those it covered and those queued while it ran) is refused, so
  nothing refused is ever seen.
* Opening replays the log: a torn last line (a crash while appending: at most one partial line without its
  ``\\n``, :func:`walgate.storage.lines.scan`) is dropped; a last line whose ``\\n`` is damaged still counts
  (reported; the rewrite restores the ``\\n``); a complete line that fails its checksum or does not hold a commit,
  and bytes after the last ``\\n`` that are no torn line (zeros, garbage), are reported to the
  :class:`~walgate.storage.damage.DamageLog` (bytes kept) and skipped, and every line after a bad one still counts,
  so one bad line never loses the commits behind it.
* Compaction: when the superseded lines outnumber ``max(live offsets, COMPACT_FLOOR)``, at open or after a commit,
  the log is rewritten with the live offsets only (:func:`walgate.storage.fileio.replace_file`: a crash leaves the
  old file or the new one). A failed compaction changes nothing and is tried again after a later commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.errors import StorageUnavailable

__all__ = ["Committed", "CommittedOffsets", "COMPACT_FLOOR"]

log = logging.getLogger("walgate.offsets")

Key = tuple[str, str, int]  # group, topic, partition

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live offsets."""


@dataclass(frozen=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


def _parse(r: Any) -> tuple[Key, Committed | None]:
    """One line's commit (None: a tombstone); raises on anything that is not one."""
    key = (r["g"], r["t"], r["p"])
    if not (isinstance(key[0], str) and isinstance(key[1], str) and type(key[2]) is int):
        raise ValueError(f"bad key {key!r}")
    if r["o"] is None:
        return key, None
    c = Committed(r["o"], r["e"], r["m"], r["ts"])
    if type(c.offset) is not int or type(c.leader_epoch) is not int or type(c.commit_ms) is not int \
            or not (c.metadata is None or isinstance(c.metadata, str)):
        raise ValueError(f"bad commit {r!r}")
    return key, c


def _line(key: Key, c: Committed | None) -> bytes:
    g, t, p = key
    if c is None:
        return lines.encode({"g": g, "t": t, "p": p, "o": None})
    return lines.encode({"g": g, "t": t, "p": p, "o": c.offset, "e": c.leader_epoch, "m": c.metadata, "ts": c.commit_ms})


class _CommitsSync:
    """Writing the queued commits to ``commits.log`` and fsyncing it (a :class:`~walgate.storage.durability.Sync`)."""

    __slots__ = ("offsets", "covers", "data", "error")

    def __init__(self, offsets: CommittedOffsets, covers: int, data: bytes) -> None:
        self.offsets = offsets
        self.covers = covers  # the last write it covers
        self.data = data  # the lines of every write it covers
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            fileio.append_file(self.offsets.path, self.data)  # (cut back when the write or the fsync fails)
        except FileNotFoundError:
            pass  # its vnode was dropped meanwhile: nothing is left to make durable
        except OSError as exc:
            self.error = exc

    def done(self) -> None:
        self.offsets._synced(self)


class CommittedOffsets:
    def __init__(self, path: Path, unsynced: Unsynced | None = None) -> None:
        self.path = path
        self.unsynced = unsynced  # group commit: commits note what they need instead of fsyncing
        self._live: dict[Key, Committed] = {}
        self._lines = 0  # lines in the file (live and superseded)
        self._pad = b""  # b"\n" while the file may end in a torn line
        self._written = 0  # writes so far (the targets of group commit's needs)
        self.durable_to = 0  # writes up to this one are fsynced and applied
        self._pending: list[tuple[int, list[tuple[Key, Committed | None]]]] = []  # (write, records) not yet durable
        self._syncing = False  # a sync is taken and not done

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None, unsynced: Unsynced | None = None) -> CommittedOffsets:
        store = cls(path, unsynced)
        data = path.read_bytes() if path.exists() else b""
        scan = lines.scan(data)
        bad = [(b.start, b.end, b.reason, "newline restored" if b.repaired else "skipped") for b in scan.bad]
        for start, end, record in scan.records:
            try:
                key, c = _parse(record)
            except (KeyError, TypeError, ValueError) as exc:
                bad.append((start, end, f"not a commit: {exc}", "skipped"))
                continue
            store._apply([(key, c)])
        store._lines = len(scan.records)
        for start, end, reason, action in sorted(bad):
            if damage is None:
                log.warning("%s bytes [%d, %d): %s; %s", path, start, end, reason, action)
            else:
                damage.report(path, start, end, f"committed offsets: {reason}", action, data[start:end])
        if bad or scan.complete < len(data) or store._superseded():
            try:
                store._rewrite()
            except OSError as exc:
                log.error("%s: could not compact the committed offsets: %s", path, exc)
                store._pad = b"\n"
        return store

    def _superseded(self) -> bool:
        return self._lines - len(self._live) > max(len(self._live), COMPACT_FLOOR)

    def _apply(self, records: list[tuple[Key, Committed | None]]) -> None:
        for key, c in records:
            if c is None:
                self._live.pop(key, None)
            else:
                self._live[key] = c

    def _append(self, records: list[tuple[Key, Committed | None]]) -> None:
        """Queue the records as one write; they are applied once written and fsynced: before this returns without
        group commit (StorageUnavailable, nothing applied, when the write or the fsync fails), by the sync that covers
        them with group commit (noted in the ledger)."""
        if not records:
            return
        self._written += 1
        self._pending.append((self._written, records))
        if self.unsynced is not None:
            self.unsynced.note(self, self._written)
            return
        sync = self.take_sync()
        assert sync is not None  # (without group commit no sync is ever left taken)
        sync.run()
        sync.done()
        if sync.error is not None:
            raise StorageUnavailable(f"Committed offsets could not be written ({sync.error.strerror or sync.error}): "
                                     "nothing was committed") from None

    def take_sync(self) -> _CommitsSync | None:
        """A sync writing every queued write (:class:`~walgate.storage.durability.Syncable`; None: nothing queued,
        or a sync is taken and not done). While one is taken nothing else writes the file."""
        if self._syncing or not self._pending:
            return None
        self._syncing = True
        data = self._pad + b"".join(_line(k, c) for _, records in self._pending for k, c in records)
        return _CommitsSync(self, self._written, data)

    def _synced(self, sync: _CommitsSync) -> None:
        """Apply the writes ``sync`` made durable; when it failed (its bytes were cut off the file), refuse every
        write not durable: those it covered and those queued since (``covers`` becomes the last write)."""
        self._syncing = False
        if sync.error is None:
            done = [records for write, records in self._pending if write <= sync.covers]
            del self._pending[: len(done)]
            for records in done:
                self._apply(records)
                self._lines += len(records)
            self.durable_to = sync.covers
            self._pad = b""
            if not self._pending and self._superseded():
                try:
                    self._rewrite()
                except OSError as exc:  # the commits are durable in the uncompacted log; compact after a later one
                    log.warning("%s: could not compact the committed offsets: %s", self.path, exc)
            return
        sync.covers = self._written
        self._pending.clear()
        self._pad = b"\n"  # in case the cut back failed too
        log.error("%s: writing the commits failed (%s); their bytes are cut off and the commits queued since the last "
                  "durable one are refused", self.path, sync.error.strerror or sync.error)

    def _rewrite(self) -> None:
        data = b"".join(_line(k, c) for k, c in self._live.items())
        fileio.replace_file(self.path, data)
        self._lines = len(self._live)
        self._pad = b""

    def commit(self, group: str, offsets: Iterable[tuple[str, int, Committed]]) -> None:
        """Durably record ``(topic, partition, committed)`` for ``group`` (see :meth:`_append`); raises
        :class:`StorageUnavailable`, committing nothing, when the disk refuses the write."""
        self._append([((group, t, p), c) for t, p, c in offsets])

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        return self._live.get((group, topic, partition))

    def delete(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete the offsets matching every given filter (tombstones written as :meth:`commit` writes); returns how
        many were deleted."""
        gone = [
            k for k in self._live
            if (group is None or k[0] == group) and (topic is None or k[1] == topic) and (partition is None or k[2] == partition)
        ]
        self._append([(k, None) for k in gone])
        return len(gone)

    def items(self) -> Iterator[tuple[Key, Committed]]:
        return iter(list(self._live.items()))
