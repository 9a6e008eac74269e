"""Share groups' durable delivery state: ``share_groups.log`` in the data dir (Kafka's ``__share_group_state``).

One record per share-partition, newest wins: ``{"g": group id, "t": topic key, "p": partition, "v": value}``, the
value being what :meth:`walgate.coordinator.share_partition.SharePartition.to_record` wrote (the start offset and
the states of the records after it; opaque here), ``"v": null`` a tombstone. Kept apart from the group
coordinator's log (``coordinator/offsets-<p>.log``, :mod:`walgate.storage.coordinator_log`) behind
:class:`ShareStateLog`'s two calls (:meth:`ShareStateLog.write`, :meth:`ShareStateLog.states`) so that it can move
into it later (as Kafka keeps ``__share_group_state`` beside ``__consumer_offsets``, it may stay a log of its own).

The log is a :class:`~walgate.storage.keyed_log.KeyedLog`, whose docstring says how it is replayed, appended and
compacted:

* :meth:`ShareStateLog.write` appends its records with one write and fsyncs before returning; only then are they
  applied in memory. When the disk refuses the write or the fsync, nothing changes and
  :class:`~walgate.storage.errors.StorageUnavailable` is raised: the acknowledgements that changed those partitions
  are refused, so nothing acknowledged is lost.
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
from walgate.storage.fileio import SyncLatency
from walgate.storage.keyed_log import KeyedLog

__all__ = ["COMPACT_FLOOR", "SHARE_GROUPS_LOG", "ShareStateLog"]

log = logging.getLogger("walgate.share_groups")

SHARE_GROUPS_LOG: Final = "share_groups.log"
"""The file's name in the data dir."""

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live share-partitions."""

ShareKey = tuple[str, str, int]


class ShareStateLog(KeyedLog[ShareKey, Any]):
    """(group id, topic key, partition) -> the share-partition's newest state, durable (see the module docstring)."""

    WHAT = "share group state"
    NOT_A_RECORD = "not a share-partition record"
    CONSEQUENCE = "; those share-partitions' records acknowledged since an older line are delivered again"
    REFUSED = "the share-partition state is unchanged"
    logger = log

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None, syncs: SyncLatency | None = None) -> ShareStateLog:
        """Replay ``path`` (missing: no state); never refuses (damage is reported and skipped); its fsyncs are timed
        into ``syncs`` (the engine's)."""
        slog = cls(path, syncs)
        slog._replay(damage)
        return slog

    def _parse(self, record: Any) -> tuple[ShareKey, Any]:
        group, topic, partition, value = record["g"], record["t"], record["p"], record["v"]
        if not isinstance(group, str) or not isinstance(topic, str) or type(partition) is not int or partition < 0:
            raise ValueError(f"bad share-partition key {group!r} {topic!r} {partition!r}")
        return (group, topic, partition), value

    def _line(self, key: ShareKey, value: Any) -> bytes:
        return lines.encode({"g": key[0], "t": key[1], "p": key[2], "v": value})

    def _compact_floor(self) -> int:
        return COMPACT_FLOOR

    def write(self, records: Sequence[tuple[ShareKey, Any]]) -> None:
        """Durably record *records* (one write, fsynced), then apply them; raises
        :class:`~walgate.storage.errors.StorageUnavailable`, recording nothing, when the disk refuses."""
        self._write(records)

    def states(self) -> Mapping[ShareKey, Any]:
        """Every share-partition's newest value (read it, do not change it)."""
        return self._live
