"""A :class:`~walgate.storage.keyed_log.KeyedLog` whose appends may be group-committed: written and fsynced off the
storage thread, one write + fsync for every append queued while the previous one ran.

The shape shared by a coordinator partition's committed offsets (:mod:`walgate.storage.coordinator_log`) and share
groups' delivery state (:mod:`walgate.storage.share_state_log`):

* :meth:`GroupCommittedLog._append` queues its records as one *write* (numbered from 1) and returns its number.
  Without group commit (an engine opened alone: tools, tests) the write and its fsync run at once on the calling
  thread, the records are applied, and :class:`~walgate.storage.errors.StorageUnavailable` (nothing applied) is
  raised when the disk refuses either. With group commit (opened with an
  :class:`~walgate.storage.durability.Unsynced` ledger: the gateway) the write only notes its need; the write to the
  file and its fsync are one sync taken later (:meth:`GroupCommittedLog.take_sync`, a
  :class:`~walgate.storage.durability.Syncable`), run off the storage thread, covering every write queued so far.
* Records are applied (seen by the map) only once their sync succeeded. When it fails, the sync's bytes are cut off
  the file and every write not yet durable (those it covered and those queued since) is refused: the ledger's
  waiters are told so, and :attr:`GroupCommittedLog.refusals` counts up, so that whoever changed state in memory
  ahead of its durability (the share coordinator) can undo it. Nothing refused is ever seen by a reader of the map.
* Appends to the file are serialized by a lock that a running sync holds for its write and fsync (a subclass's own
  direct appends, :meth:`GroupCommittedLog._append_locked`, take it too), and each append's cut-back on failure
  removes only its own bytes; the next append after a failure starts with a ``\\n`` so it never joins a torn tail the
  cut could not remove.
* Compaction (:class:`~walgate.storage.keyed_log.KeyedLog`'s rule) runs only while no write is queued or syncing (a
  running sync appends to the file a rewrite replaces).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

from walgate.storage import fileio
from walgate.storage.durability import Unsynced
from walgate.storage.errors import StorageUnavailable
from walgate.storage.fileio import SyncLatency
from walgate.storage.keyed_log import KeyedLog

__all__ = ["GroupCommittedLog", "LogSync"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

log = logging.getLogger(__name__)


class LogSync:
    """Writing the queued records to the log and fsyncing it (a :class:`~walgate.storage.durability.Sync`)."""

    __slots__ = ("log", "covers", "body", "error")

    def __init__(self, owner: GroupCommittedLog[K, V], covers: int, body: bytes) -> None:
        self.log: GroupCommittedLog[K, V] = owner
        self.covers = covers  # the last write it covers
        self.body = body  # the lines of every write it covers
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            self.log._append_locked(self.body)
        except OSError as exc:
            self.error = exc

    def done(self) -> None:
        self.log._synced(self)


class GroupCommittedLog(KeyedLog[K, V]):
    """A keyed log written with group commit when given a ledger (see the module docstring). Used on the storage
    thread, except a taken sync's :meth:`LogSync.run`."""

    UNWRITTEN: ClassVar[str]
    """Ends the message of a write refused without group commit (what was not recorded)."""

    def __init__(self, path: Path | None, unsynced: Unsynced | None = None, syncs: SyncLatency | None = None) -> None:
        super().__init__(path, syncs)
        self.unsynced = unsynced  # group commit: appends note what they need instead of fsyncing
        self._written = 0  # writes queued so far (the targets of group commit's needs)
        self.durable_to = 0  # writes up to this one are fsynced and applied
        self.refusals = 0  # syncs that failed so far (each refused every write not durable then)
        self._pending: list[tuple[int, Sequence[tuple[K, V | None]]]] = []  # (write, records) not yet durable
        self._syncing = False  # a sync is taken and not done
        self._lock = threading.Lock()  # held by every append to the file, and by the pad it decides

    def _append_locked(self, body: bytes) -> None:
        """Append *body* (after a ``\\n`` when the file may end in a torn line) with one write and an fsync, under
        the file's lock; OSError (the file cut back, the next append padded) when the disk refuses it."""
        path = self._file()
        with self._lock:
            try:
                fileio.append_file(path, self._pad + body, syncs=self.syncs)  # cut back on failure
            except OSError:
                self._pad = b"\n"  # in case the cut back failed too
                raise
            self._pad = b""

    def _rewrite(self) -> None:
        with self._lock:
            super()._rewrite()

    def _applied(self, records: Sequence[tuple[K, V | None]]) -> None:
        """*records* are durable: apply them (the pad is :meth:`_append_locked`'s, under the lock)."""
        self._apply(records)
        self._lines += len(records)

    def _compact(self) -> None:
        if not self._syncing and not self._pending:
            super()._compact()

    def _append(self, records: Sequence[tuple[K, V | None]]) -> int:
        """Queue *records* as one write and return its number (0: nothing to write); see the module docstring for
        when they are applied. Without group commit raises :class:`StorageUnavailable`, applying nothing, when the
        write or the fsync fails."""
        if not records:
            return 0
        self._file()  # refuses a log without a file before anything is queued
        self._written += 1
        self._pending.append((self._written, records))
        if self.unsynced is not None:
            self.unsynced.note(self, self._written)
            return self._written
        sync = self.take_sync()
        assert sync is not None  # (without group commit no sync is ever left taken)
        sync.run()
        sync.done()
        if sync.error is not None:
            raise StorageUnavailable(f"The {self.WHAT} could not be written ({sync.error.strerror or sync.error}): "
                                     f"{self.UNWRITTEN}") from None
        return self._written

    def take_sync(self) -> LogSync | None:
        """A sync writing every queued write (:class:`~walgate.storage.durability.Syncable`; None: nothing queued,
        or a sync is taken and not done). While one is taken no other write reaches the file and nothing compacts."""
        if self._syncing or not self._pending:
            return None
        self._syncing = True
        return LogSync(self, self._written, self._body([r for _, records in self._pending for r in records]))

    def _body(self, records: Sequence[tuple[K, V | None]]) -> bytes:
        """What appending ``records`` writes with :meth:`_append_locked`: their lines."""
        return b"".join(self._line(k, v) for k, v in records)

    def _synced(self, sync: LogSync) -> None:
        """Apply the writes ``sync`` made durable; when it failed (its bytes were cut off the file), refuse every
        write not durable: those it covered and those queued since (``covers`` becomes the last write)."""
        self._syncing = False
        if sync.error is None:
            done = [records for write, records in self._pending if write <= sync.covers]
            del self._pending[: len(done)]
            for records in done:
                self._applied(records)
            self.durable_to = sync.covers
            self._compact()
            return
        sync.covers = self._written
        self._pending.clear()
        self.refusals += 1
        self.logger.error("%s: writing the %s failed (%s); its bytes are cut off and the writes queued since the last "
                          "durable one are refused", self.path, self.WHAT, sync.error.strerror or sync.error)
