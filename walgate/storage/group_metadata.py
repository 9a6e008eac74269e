"""Consumer-group metadata of the node: ``groups.log`` in the data dir (Kafka's group records in ``__consumer_offsets``).

The coordinator (:mod:`walgate.coordinator.group_records`) describes each group it wants to survive a restart as
one JSON value; this module keeps the last value of every group id durably. The file is an append-only log of
checksummed JSON lines (:mod:`walgate.storage.lines`), ``{"g": group id, "v": value}``; ``"v": null`` is a
tombstone (the group is gone). What a value holds is the coordinator's business: here it is opaque JSON.

* :meth:`GroupMetadataLog.write` appends a batch of records with one write and fsyncs it before returning, so a
  group state the gateway acknowledges after it survives ``kill -9`` and power loss. The batch is applied in memory
  only after that: when the disk refuses the write or the fsync, the file is cut back
  (:func:`walgate.storage.fileio.append_file`), nothing changes and the caller gets
  :class:`~walgate.storage.errors.StorageUnavailable`; the next write starts with a ``\\n`` so that it never joins a
  torn tail the cut could not remove.
* Opening replays the log like ``commits.log`` (:mod:`walgate.storage.committed`): a torn last line (a crash while
  appending) is dropped; a complete line that fails its checksum or is not a group record, and bytes after the last
  ``\\n`` that are no torn line, are reported to the :class:`~walgate.storage.damage.DamageLog` (bytes kept) and
  skipped; every other line still counts. A group whose last good line is lost comes back with an older value or
  none: its members rejoin, as they would after a restart without this file. The server always starts.
* Compaction: when superseded lines outnumber ``max(live groups, COMPACT_FLOOR)``, at open or after a write, the
  log is rewritten with the live values only (:func:`walgate.storage.fileio.replace_file`: a crash leaves the old
  file or the new one). A failed compaction changes nothing and is tried again after a later write.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable

__all__ = ["COMPACT_FLOOR", "GroupMetadataLog", "GroupRecord"]

log = logging.getLogger("walgate.groups")

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live groups."""

GroupRecord = tuple[str, Any]
"""(group id, value): the value is any JSON value but null; None deletes the group."""


def _line(group_id: str, value: Any) -> bytes:
    return lines.encode({"g": group_id, "v": value})


def _parse(record: Any) -> GroupRecord:
    group_id, value = record["g"], record["v"]
    if not isinstance(group_id, str):
        raise ValueError(f"bad group id {group_id!r}")
    return group_id, value


class GroupMetadataLog:
    """The last value of every group id, durable in *path* (see the module docstring). Used on the storage thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._live: dict[str, Any] = {}
        self._lines = 0  # lines in the file (live and superseded)
        self._pad = b""  # b"\n" while the file may end in a torn line

    @classmethod
    def open(cls, path: Path, damage: DamageLog) -> GroupMetadataLog:
        """Replay *path* (missing: no groups); damage is reported and skipped, never fatal."""
        store = cls(path)
        data = path.read_bytes() if path.exists() else b""
        scan = lines.scan(data)
        bad = [(b.start, b.end, b.reason, "newline restored" if b.repaired else "skipped") for b in scan.bad]
        for start, end, record in scan.records:
            try:
                group_id, value = _parse(record)
            except (KeyError, TypeError, ValueError) as exc:
                bad.append((start, end, f"not a group record: {exc}", "skipped"))
                continue
            store._apply([(group_id, value)])
        store._lines = len(scan.records)
        for start, end, reason, action in sorted(bad):
            damage.report(path, start, end, f"group metadata: {reason}; those groups' members rejoin", action,
                          data[start:end])
        if bad or scan.complete < len(data) or store._superseded():
            try:
                store._rewrite()
            except OSError as exc:
                log.error("%s: could not compact the group metadata: %s", path, exc)
                store._pad = b"\n"
        return store

    def _superseded(self) -> bool:
        return self._lines - len(self._live) > max(len(self._live), COMPACT_FLOOR)

    def _apply(self, records: Sequence[GroupRecord]) -> None:
        for group_id, value in records:
            if value is None:
                self._live.pop(group_id, None)
            else:
                self._live[group_id] = value

    def _rewrite(self) -> None:
        fileio.replace_file(self.path, b"".join(_line(g, v) for g, v in self._live.items()))
        self._lines = len(self._live)
        self._pad = b""

    def write(self, records: Sequence[GroupRecord]) -> None:
        """Durably record *records* (one write, fsynced), then apply them; raises :class:`StorageUnavailable`,
        recording nothing, when the disk refuses the write or the fsync."""
        if not records:
            return
        data = self._pad + b"".join(_line(g, v) for g, v in records)
        try:
            fileio.append_file(self.path, data)
        except OSError as exc:
            self._pad = b"\n"  # in case the cut back failed too
            raise StorageUnavailable(f"The group metadata could not be written ({exc.strerror or exc}): the group "
                                     "state was not recorded") from None
        self._pad = b""
        self._apply(records)
        self._lines += len(records)
        if self._superseded():
            try:
                self._rewrite()
            except OSError as exc:  # the records are durable in the uncompacted log; compact after a later write
                log.warning("%s: could not compact the group metadata: %s", self.path, exc)

    def groups(self) -> Mapping[str, Any]:
        """Every group's last value (read it, do not change it)."""
        return self._live
