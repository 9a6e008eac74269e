"""A durable map: an append-only log of checksummed lines, the newest line of a key wins.

The shape shared by ``transactions.log`` (:mod:`walgate.storage.transactions_log`), ``share_groups.log``
(:mod:`walgate.storage.share_state_log`) and the group coordinator's ``coordinator/offsets-<p>.log``
(:mod:`walgate.storage.coordinator_log`). A
subclass gives the line format (:meth:`KeyedLog._parse`, :meth:`KeyedLog._line`: each line is one
:func:`walgate.storage.lines.encode` record holding a key and its value, or None for a tombstone) and its names;
this class keeps the map (:attr:`KeyedLog._live`) and the file:

* Replay (:meth:`KeyedLog._replay`): a missing file is an empty map. A torn last line (a crash while appending: at
  most one partial line without its ``\\n``, :func:`walgate.storage.lines.scan`) is dropped; a last line whose
  ``\\n`` is damaged still counts (reported; the rewrite restores the ``\\n``); a complete line that fails its
  checksum or is not a record, and bytes after the last ``\\n`` that are no torn line (zeros, garbage), are
  reported to the :class:`~walgate.storage.damage.DamageLog` (bytes kept; without one, logged) and skipped, and
  every line after a bad one still counts. Then, when anything was bad or torn or the log is due a compaction, the
  file is rewritten; when that fails the map stands, and the next append starts with a ``\\n``.
* Append (:meth:`KeyedLog._write`): the records' lines go to the file with one write and an fsync
  (:func:`walgate.storage.fileio.append_file`) before they are applied in memory; when the disk refuses the write
  or the fsync, the file is cut back, nothing changes and :class:`~walgate.storage.errors.StorageUnavailable` is
  raised; the next write starts with a ``\\n`` (:attr:`KeyedLog._pad`) so that it never joins a torn tail the cut
  could not remove. A subclass that writes its lines itself (group commit, from another thread:
  :class:`~walgate.storage.group_committed_log.GroupCommittedLog`) keeps the pad itself and calls
  :meth:`KeyedLog._applied` and :meth:`KeyedLog._compact` once they are durable.
* Compaction: when superseded lines outnumber ``max(live keys, the subclass's compaction floor)``, the log is
  rewritten with the live values only (:func:`walgate.storage.fileio.replace_file`: a crash leaves the old file or
  the new one). A failed compaction changes nothing (the lines are durable in the uncompacted log) and is tried
  again after a later append.
* Without a file (``path`` None): the map of a replicated coordinator partition, replayed from the partition's
  records (:mod:`walgate.storage.coordinator_records`) through the same :meth:`KeyedLog._replay_line`, one line at
  a time (a tombstone record, which has no line, deletes its key: :meth:`KeyedLog._apply`). Such a log never touches a file: every read or write of one (:meth:`KeyedLog._file`) raises
  RuntimeError before anything changes; its writes are records appended to the partition, and its compaction the
  partition's log cleaner.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable
from walgate.storage.fileio import SyncLatency

__all__ = ["KeyedLog"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class KeyedLog(ABC, Generic[K, V]):
    """Key -> newest value, durable in :attr:`path`, or replayed from a partition's records without a file (see the
    module docstring). Used on the storage thread."""

    WHAT: ClassVar[str]
    """What the log holds, as damage reports, errors and log lines name it (``"transaction log"``)."""
    NOT_A_RECORD: ClassVar[str]
    """How a damage report names a checksummed line that holds no record (``"not a transaction record"``)."""
    CONSEQUENCE: ClassVar[str] = ""
    """Added to the reason of every damage report (what a lost line costs)."""
    REFUSED: ClassVar[str]
    """Ends the message of a refused :meth:`_write` (what did not change)."""
    logger: ClassVar[logging.Logger]

    def __init__(self, path: Path | None, syncs: SyncLatency | None = None) -> None:
        self._path = path  # None: replayed from a partition's records, never written (see the module docstring)
        self.syncs = SyncLatency() if syncs is None else syncs  # its engine's fsync times (a log of its own: its own)
        self._live: dict[K, V] = {}
        self._lines = 0  # lines in the file (live and superseded)
        self._pad = b""  # b"\n" while the file may end in a torn line

    @abstractmethod
    def _parse(self, record: Any) -> tuple[K, V | None]:
        """The key and value (None: a tombstone) of one line's record; raises KeyError, TypeError or ValueError on
        anything that is not one."""

    @abstractmethod
    def _line(self, key: K, value: V | None) -> bytes:
        """The checksummed line recording *value* (None: a tombstone) for *key*."""

    @abstractmethod
    def _compact_floor(self) -> int:
        """Superseded lines tolerated before a compaction, whatever the number of live keys."""

    def _replay(self, damage: DamageLog | None, rewrite: bool = True) -> None:
        """Load the file into the empty map (see the module docstring); never refuses. ``rewrite=False``: never
        write the file (a reader of an old file that is removed next)."""
        path = self._file()
        data = path.read_bytes() if path.exists() else b""
        scan = lines.scan(data)
        bad = [(b.start, b.end, b.reason, "newline restored" if b.repaired else "skipped") for b in scan.bad]
        for start, end, record in scan.records:
            try:
                self._replay_line(record)
            except ValueError as exc:
                bad.append((start, end, str(exc), "skipped"))
        self._lines = len(scan.records)
        for start, end, reason, action in sorted(bad):
            if damage is None:
                self.logger.warning("%s bytes [%d, %d): %s; %s", path, start, end, reason, action)
            else:
                damage.report(path, start, end, f"{self.WHAT}: {reason}{self.CONSEQUENCE}", action,
                              data[start:end])
        if rewrite and (bad or scan.complete < len(data) or self._superseded()):
            try:
                self._rewrite()
            except OSError as exc:
                self.logger.error("%s: could not rewrite the %s: %s", self.path, self.WHAT, exc)
                self._pad = b"\n"

    @property
    def path(self) -> Path:
        """The log's file (see :meth:`_file`)."""
        return self._file()

    def _file(self) -> Path:
        """The log's file; RuntimeError for a log replayed from a partition's records, which has none."""
        if self._path is None:
            raise RuntimeError(f"this {self.WHAT} is replayed from its partition's records and has no file: "
                               "its records are written to the partition")
        return self._path

    def _replay_line(self, record: Any, key: K | None = None) -> None:
        """Apply the record of one verified line (its JSON) as the newest value of its key. With *key* (the key of
        the partition record holding the line) the line must record that key. Raises ValueError saying why,
        applying nothing, when the record is not one of this log's or records another key."""
        try:
            parsed, value = self._parse(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{self.NOT_A_RECORD}: {exc}") from None
        if key is not None and parsed != key:
            raise ValueError(f"the line records {parsed!r}, its record's key is {key!r}")
        self._apply([(parsed, value)])

    def _apply(self, records: Iterable[tuple[K, V | None]]) -> None:
        for key, value in records:
            if value is None:
                self._live.pop(key, None)
            else:
                self._live[key] = value

    def _superseded(self) -> bool:
        return self._lines - len(self._live) > max(len(self._live), self._compact_floor())

    def _rewrite(self) -> None:
        fileio.replace_file(self._file(), b"".join(self._line(k, v) for k, v in self._live.items()), syncs=self.syncs)
        self._lines = len(self._live)
        self._pad = b""

    def _encode(self, records: Iterable[tuple[K, V | None]]) -> bytes:
        """The bytes appending *records* writes (after a torn tail, a ``\\n`` first)."""
        return self._pad + b"".join(self._line(k, v) for k, v in records)

    def _applied(self, records: Sequence[tuple[K, V | None]]) -> None:
        """*records* are durable at the end of the file: apply them."""
        self._pad = b""
        self._apply(records)
        self._lines += len(records)

    def _compact(self) -> None:
        """Rewrite the log with the live values when it is due; a failure is logged and changes nothing."""
        if self._superseded():
            try:
                self._rewrite()
            except OSError as exc:  # the lines are durable in the uncompacted log; compact after a later append
                self.logger.warning("%s: could not compact the %s: %s", self.path, self.WHAT, exc)

    def _write(self, records: Sequence[tuple[K, V | None]]) -> None:
        """Durably append *records* (one write, fsynced), then apply them and compact when due; raises
        :class:`StorageUnavailable`, changing nothing, when the disk refuses the write or its fsync."""
        if not records:
            return
        path = self._file()
        try:
            fileio.append_file(path, self._encode(records), syncs=self.syncs)  # cut back when the write or the fsync fails
        except OSError as exc:
            self._pad = b"\n"  # in case the cut back failed too
            raise StorageUnavailable(f"The {self.WHAT} could not be written ({exc.strerror or exc}): "
                                     f"{self.REFUSED}") from None
        self._applied(records)
        self._compact()
