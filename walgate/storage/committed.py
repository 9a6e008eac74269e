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
* Opening replays the log (a :class:`~walgate.storage.keyed_log.KeyedLog`, whose docstring says how): a torn last
  line is dropped; damage is reported to the :class:`~walgate.storage.damage.DamageLog` (bytes kept) and skipped,
  and every line after a bad one still counts, so one bad line never loses the commits behind it.
* Compaction: when the superseded lines outnumber ``max(live offsets, COMPACT_FLOOR)``, at open or after a commit
  (with group commit, once no commit is queued), the log is rewritten with the live offsets only.
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
from walgate.storage.fileio import SyncLatency
from walgate.storage.keyed_log import KeyedLog

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
            fileio.append_file(self.offsets.path, self.data, syncs=self.offsets.syncs)  # (cut back when the write or the fsync fails)
        except FileNotFoundError:
            pass  # its vnode was dropped meanwhile: nothing is left to make durable
        except OSError as exc:
            self.error = exc

    def done(self) -> None:
        self.offsets._synced(self)


class CommittedOffsets(KeyedLog[Key, Committed]):
    WHAT = "committed offsets"
    NOT_A_RECORD = "not a commit"
    logger = log

    def __init__(self, path: Path, unsynced: Unsynced | None = None, syncs: SyncLatency | None = None) -> None:
        super().__init__(path, syncs)
        self.unsynced = unsynced  # group commit: commits note what they need instead of fsyncing
        self._written = 0  # writes so far (the targets of group commit's needs)
        self.durable_to = 0  # writes up to this one are fsynced and applied
        self._pending: list[tuple[int, list[tuple[Key, Committed | None]]]] = []  # (write, records) not yet durable
        self._syncing = False  # a sync is taken and not done

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None, unsynced: Unsynced | None = None,
             syncs: SyncLatency | None = None) -> CommittedOffsets:
        store = cls(path, unsynced, syncs)
        store._replay(damage)
        return store

    def _parse(self, record: Any) -> tuple[Key, Committed | None]:
        key = (record["g"], record["t"], record["p"])
        if not (isinstance(key[0], str) and isinstance(key[1], str) and type(key[2]) is int):
            raise ValueError(f"bad key {key!r}")
        if record["o"] is None:
            return key, None
        c = Committed(record["o"], record["e"], record["m"], record["ts"])
        if type(c.offset) is not int or type(c.leader_epoch) is not int or type(c.commit_ms) is not int \
                or not (c.metadata is None or isinstance(c.metadata, str)):
            raise ValueError(f"bad commit {record!r}")
        return key, c

    def _line(self, key: Key, value: Committed | None) -> bytes:
        g, t, p = key
        if value is None:
            return lines.encode({"g": g, "t": t, "p": p, "o": None})
        return lines.encode({"g": g, "t": t, "p": p, "o": value.offset, "e": value.leader_epoch, "m": value.metadata,
                             "ts": value.commit_ms})

    def _compact_floor(self) -> int:
        return COMPACT_FLOOR

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
        data = self._encode(r for _, records in self._pending for r in records)
        return _CommitsSync(self, self._written, data)

    def _synced(self, sync: _CommitsSync) -> None:
        """Apply the writes ``sync`` made durable; when it failed (its bytes were cut off the file), refuse every
        write not durable: those it covered and those queued since (``covers`` becomes the last write)."""
        self._syncing = False
        if sync.error is None:
            done = [records for write, records in self._pending if write <= sync.covers]
            del self._pending[: len(done)]
            for records in done:
                self._applied(records)
            self.durable_to = sync.covers
            if not self._pending:
                self._compact()
            return
        sync.covers = self._written
        self._pending.clear()
        self._pad = b"\n"  # in case the cut back failed too
        log.error("%s: writing the commits failed (%s); their bytes are cut off and the commits queued since the last "
                  "durable one are refused", self.path, sync.error.strerror or sync.error)

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
