"""Share groups' durable delivery state: ``share_groups.log`` in the data dir (Kafka's ``__share_group_state``).

One record per share-partition, newest wins: ``{"g": group id, "t": topic key, "p": partition, "v": value}``, the
value being what :meth:`walgate.coordinator.share_partition.SharePartition.to_record` wrote (the start offset and
the states of the records after it; opaque here), ``"v": null`` a tombstone. Kept apart from the group
coordinator's log (``coordinator/offsets-<p>.log``, :mod:`walgate.storage.coordinator_log`) behind
:class:`ShareStateLog`'s two calls (:meth:`ShareStateLog.write`, :meth:`ShareStateLog.states`) so that it can move
into it later (as Kafka keeps ``__share_group_state`` beside ``__consumer_offsets``, it may stay a log of its own).

The log is a :class:`~walgate.storage.keyed_log.KeyedLog`, whose docstring says how it is replayed, appended and
compacted:

* :meth:`ShareStateLog.write` queues its records as one write, applied in memory only once written and fsynced
  (a :class:`~walgate.storage.group_committed_log.GroupCommittedLog`, whose docstring says how). Opened alone (tools,
  tests) the write and its fsync run before it returns, and when the disk refuses either nothing changes and
  :class:`~walgate.storage.errors.StorageUnavailable` is raised. Opened with the engine's group-commit ledger (the
  gateway) it only notes what its caller must wait for: the write and the fsync run off its lane, one for
  every write queued meanwhile; a failed one refuses every write not yet durable (the ledger's waiters get
  StorageUnavailable) and counts in :attr:`ShareStateLog.refusals`, which the share coordinator's owner reads to
  undo the changes it made ahead of the disk. Either way an acknowledgement is answered only once durable.
* Opening replays the log: a torn last line is dropped; damage is reported to the
  :class:`~walgate.storage.damage.DamageLog` and skipped (a share-partition whose last good line is lost comes back
  with an older state: records acknowledged after it are delivered again, never lost). A missing file holds none.
* Compaction: when superseded lines outnumber ``max(live partitions, COMPACT_FLOOR)``, at open or after a write.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from walgate.storage import lines
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.fileio import SyncLatency
from walgate.storage.group_committed_log import GroupCommittedLog

__all__ = ["COMPACT_FLOOR", "SHARE_GROUPS_LOG", "ShareKey", "ShareStateLog", "share_line"]

log = logging.getLogger("walgate.share_groups")

SHARE_GROUPS_LOG: Final = "share_groups.log"
"""The file's name in the data dir."""

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live share-partitions."""

ShareKey = tuple[str, str, int]
"""(group id, topic key, partition)."""


def share_line(key: ShareKey, value: Any) -> bytes:
    """The checksummed line recording *value* (None: a tombstone) of share-partition *key*, as the log writes it."""
    return lines.encode({"g": key[0], "t": key[1], "p": key[2], "v": value})


class ShareStateLog(GroupCommittedLog[ShareKey, Any]):
    """(group id, topic key, partition) -> the share-partition's newest state, durable (see the module docstring)."""

    WHAT = "share group state"
    NOT_A_RECORD = "not a share-partition record"
    CONSEQUENCE = "; those share-partitions' records acknowledged since an older line are delivered again"
    UNWRITTEN = "the share-partition state is unchanged"
    logger = log

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None, syncs: SyncLatency | None = None,
             unsynced: Unsynced | None = None) -> ShareStateLog:
        """Replay ``path`` (missing: no state); never refuses (damage is reported and skipped); its fsyncs are timed
        into ``syncs`` (the engine's); ``unsynced``: the engine's group-commit ledger (module docstring)."""
        slog = cls(path, unsynced, syncs)
        slog._replay(damage)
        return slog

    def _parse(self, record: Any) -> tuple[ShareKey, Any]:
        group, topic, partition, value = record["g"], record["t"], record["p"], record["v"]
        if not isinstance(group, str) or not isinstance(topic, str) or type(partition) is not int or partition < 0:
            raise ValueError(f"bad share-partition key {group!r} {topic!r} {partition!r}")
        return (group, topic, partition), value

    def _line(self, key: ShareKey, value: Any) -> bytes:
        return share_line(key, value)

    def _compact_floor(self) -> int:
        return COMPACT_FLOOR

    def write(self, records: Sequence[tuple[ShareKey, Any]]) -> int:
        """Queue *records* as one write and return its number (0: none), applied once durable (module docstring);
        opened alone, raises :class:`~walgate.storage.errors.StorageUnavailable`, recording nothing, when the disk
        refuses."""
        return self._append(records)

    def states(self) -> Mapping[ShareKey, Any]:
        """Every share-partition's newest durable value (read it, do not change it)."""
        return self._live
