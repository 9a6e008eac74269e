"""Consumer-group metadata of the node: ``groups.log`` in the data dir (Kafka's group records in ``__consumer_offsets``).

The coordinator (:mod:`walgate.coordinator.group_records`) describes each group it wants to survive a restart as
one JSON value; this module keeps the last value of every group id durably. The file is an append-only log of
checksummed JSON lines (:mod:`walgate.storage.lines`), ``{"g": group id, "v": value}``; ``"v": null`` is a
tombstone (the group is gone). What a value holds is the coordinator's business: here it is opaque JSON.

The log is a :class:`~walgate.storage.keyed_log.KeyedLog`, whose docstring says how it is replayed, appended and
compacted:

* :meth:`GroupMetadataLog.write` appends a batch of records with one write and fsyncs it before returning, so a
  group state the gateway acknowledges after it survives ``kill -9`` and power loss. The batch is applied in memory
  only after that: when the disk refuses the write or the fsync, nothing changes and the caller gets
  :class:`~walgate.storage.errors.StorageUnavailable`.
* Opening replays the log like ``commits.log`` (:mod:`walgate.storage.committed`): a torn last line is dropped;
  damage is reported to the :class:`~walgate.storage.damage.DamageLog` and skipped; every other line still counts.
  A group whose last good line is lost comes back with an older value or none: its members rejoin, as they would
  after a restart without this file. The server always starts.
* Compaction: when superseded lines outnumber ``max(live groups, COMPACT_FLOOR)``, at open or after a write.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from walgate.storage import lines
from walgate.storage.damage import DamageLog
from walgate.storage.fileio import SyncLatency
from walgate.storage.keyed_log import KeyedLog

__all__ = ["COMPACT_FLOOR", "GroupMetadataLog", "GroupRecord"]

log = logging.getLogger("walgate.groups")

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live groups."""

GroupRecord = tuple[str, Any]
"""(group id, value): the value is any JSON value but null; None deletes the group."""


class GroupMetadataLog(KeyedLog[str, Any]):
    """The last value of every group id, durable in *path* (see the module docstring). Used on the storage thread."""

    WHAT = "group metadata"
    NOT_A_RECORD = "not a group record"
    CONSEQUENCE = "; those groups' members rejoin"
    REFUSED = "the group state was not recorded"
    logger = log

    @classmethod
    def open(cls, path: Path, damage: DamageLog, syncs: SyncLatency | None = None) -> GroupMetadataLog:
        """Replay *path* (missing: no groups); damage is reported and skipped, never fatal."""
        store = cls(path, syncs)
        store._replay(damage)
        return store

    def _parse(self, record: Any) -> GroupRecord:
        group_id, value = record["g"], record["v"]
        if not isinstance(group_id, str):
            raise ValueError(f"bad group id {group_id!r}")
        return group_id, value

    def _line(self, key: str, value: Any) -> bytes:
        return lines.encode({"g": key, "v": value})

    def _compact_floor(self) -> int:
        return COMPACT_FLOOR

    def write(self, records: Sequence[GroupRecord]) -> None:
        """Durably record *records* (one write, fsynced), then apply them; raises :class:`StorageUnavailable`,
        recording nothing, when the disk refuses the write or the fsync."""
        self._write(records)

    def groups(self) -> Mapping[str, Any]:
        """Every group's last value (read it, do not change it)."""
        return self._live
