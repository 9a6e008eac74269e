"""One partition of the group coordinator's log: committed offsets and group records in one record stream.

Kafka keeps both in ``__consumer_offsets``; walgate keeps them in ``coordinator/offsets-<p>.log`` (the partitions
and which group goes where: :mod:`walgate.storage.coordinator_partitions`). The file is an append-only log of
checksummed JSON lines (:mod:`walgate.storage.lines`) of two kinds, told apart by their fields:

* an offset commit ``{"g": group, "t": topic, "p": partition, "o": offset, "e": leader_epoch, "m": metadata,
  "ts": commit time ms}``, key (group, topic, partition); ``"o": null`` is a tombstone (offset deleted);
* a group record ``{"g": group id, "v": value}``, key the group id: the state the coordinator
  (:mod:`walgate.coordinator.group_records`) wants to survive a restart, opaque JSON here; ``"v": null`` is a
  tombstone (the group is gone).

The two kinds never share a key, so the order between them in the file does not matter: only the order of one
key's lines does. One replay function (a :class:`~walgate.storage.keyed_log.KeyedLog`, whose docstring says how)
rebuilds both:

* :meth:`CoordinatorLog.commit` (and :meth:`~CoordinatorLog.delete`) writes a batch of offset lines with one write
  and fsyncs it before the commit is applied (seen by :meth:`~CoordinatorLog.get`), so an acknowledged commit
  survives ``kill -9`` and power loss. When the disk refuses the write or the fsync, the file is cut back, nothing
  changes and the caller gets :class:`~walgate.storage.errors.StorageUnavailable` (retriable); the next write
  starts with a ``\\n`` so it never joins a torn tail the cut could not remove.
* Group commit (opened with an :class:`~walgate.storage.durability.Unsynced` ledger: the gateway): a commit is only
  queued and notes its need; the write and its fsync are one sync taken later (:meth:`CoordinatorLog.take_sync`,
  run off the storage thread), one for every commit queued while the previous one ran (the machinery is
  :class:`~walgate.storage.group_committed_log.GroupCommittedLog`'s). Commits are applied only
  once their sync succeeded; when it fails, the sync's bytes are cut off the file and every commit not yet durable
  (those it covered and those queued since) is refused, so nothing refused is ever seen.
* :meth:`CoordinatorLog.write_groups` writes group records with one write and an fsync on the calling (storage)
  thread before they are applied, as before group commit. Appends to the file are serialized by a lock that a
  running sync holds for its write and fsync, so a group record waits at most for one fsync of its partition, and
  each append's cut-back (on failure) removes only its own bytes.
* Damage found by the replay is reported to the :class:`~walgate.storage.damage.DamageLog` (bytes kept) and
  skipped: a damaged offset line makes its key fall back to its previous line; a damaged group record brings that
  group back with an older value or none (its members rejoin, as after a restart without the record).
* Compaction: when the superseded lines outnumber ``max(live keys, COMPACT_FLOOR)``, at open or after a write, and
  only while no commit is queued or being synced, the log is rewritten with the live values only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from walgate.storage import lines
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.errors import StorageUnavailable
from walgate.storage.fileio import SyncLatency
from walgate.storage.group_committed_log import GroupCommittedLog

__all__ = ["COMPACT_FLOOR", "Committed", "CoordinatorLog", "GroupRecord", "OffsetKey", "record_line"]

log = logging.getLogger("walgate.offsets")

OffsetKey = tuple[str, str, int]
"""(group, topic, partition): the key of an offset commit (a group record's key is its group id, a str)."""

GroupRecord = tuple[str, Any]
"""(group id, value): the value is any JSON value but null; None deletes the group."""

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live keys."""


@dataclass(frozen=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


Key = OffsetKey | str
Value = Any  # a Committed for an OffsetKey, the group's JSON value for a group id


def record_line(key: Key, value: Value) -> bytes:
    """The checksummed line recording *value* (None: a tombstone) for *key*: an offset commit for an
    :data:`OffsetKey`, a group record for a group id."""
    if isinstance(key, str):
        return lines.encode({"g": key, "v": value})
    g, t, p = key
    if value is None:
        return lines.encode({"g": g, "t": t, "p": p, "o": None})
    return lines.encode({"g": g, "t": t, "p": p, "o": value.offset, "e": value.leader_epoch, "m": value.metadata,
                         "ts": value.commit_ms})


class CoordinatorLog(GroupCommittedLog[Key, Value]):
    """Offsets and group records of one coordinator partition, durable in :attr:`path` (see the module docstring).
    Used on the storage thread, except a taken sync's
    :meth:`~walgate.storage.group_committed_log.LogSync.run`."""

    WHAT = "coordinator log"
    NOT_A_RECORD = "not an offset commit or group record"
    CONSEQUENCE = "; that offset or group state falls back to its previous record (a group's members may rejoin)"
    UNWRITTEN = "nothing was committed"
    logger = log

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None, unsynced: Unsynced | None = None,
             syncs: SyncLatency | None = None) -> CoordinatorLog:
        """Replay *path* (missing: empty); damage is reported and skipped, never fatal; its fsyncs are timed into
        ``syncs`` (the engine's)."""
        store = cls(path, unsynced, syncs)
        store._replay(damage)
        return store

    @classmethod
    def read(cls, path: Path, damage: DamageLog | None) -> CoordinatorLog:
        """Replay *path* without ever rewriting it (the data dir's migration reads old files with it)."""
        store = cls(path)
        store._replay(damage, rewrite=False)
        return store

    # ------------------------------------------------------------------ lines

    def _parse(self, record: Any) -> tuple[Key, Value]:
        if "v" in record:  # a group record
            group_id = record["g"]
            if not isinstance(group_id, str):
                raise ValueError(f"bad group id {group_id!r}")
            return group_id, record["v"]
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

    def _line(self, key: Key, value: Value) -> bytes:
        return record_line(key, value)

    def _compact_floor(self) -> int:
        return COMPACT_FLOOR

    # ------------------------------------------------------------------ offset commits

    def commit(self, group: str, offsets: Iterable[tuple[str, int, Committed]]) -> None:
        """Durably record ``(topic, partition, committed)`` for ``group`` (see :meth:`_append`); raises
        :class:`StorageUnavailable`, committing nothing, when the disk refuses the write."""
        self._append([((group, t, p), c) for t, p, c in offsets])

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        value = self._live.get((group, topic, partition))
        return value if isinstance(value, Committed) else None

    def delete(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete the offsets matching every given filter (tombstones written as :meth:`commit` writes); returns how
        many were deleted."""
        gone: list[tuple[Key, Value]] = [
            (k, None) for k in self._live
            if not isinstance(k, str) and (group is None or k[0] == group) and (topic is None or k[1] == topic)
            and (partition is None or k[2] == partition)
        ]
        self._append(gone)
        return len(gone)

    def items(self) -> Iterator[tuple[OffsetKey, Committed]]:
        """Every live committed offset."""
        return iter([(k, v) for k, v in self._live.items() if not isinstance(k, str)])

    # ------------------------------------------------------------------ group records

    def write_groups(self, records: Sequence[GroupRecord]) -> None:
        """Durably record *records* (one write, fsynced on this thread), then apply them; raises
        :class:`StorageUnavailable`, recording nothing, when the disk refuses the write or the fsync."""
        if not records:
            return
        try:
            self._append_locked(self._body(records))
        except OSError as exc:
            raise StorageUnavailable(f"The {self.WHAT} could not be written ({exc.strerror or exc}): "
                                     "the group state was not recorded") from None
        self._applied(records)
        self._compact()

    def groups(self) -> Mapping[str, Any]:
        """Every group's last value."""
        return {k: v for k, v in self._live.items() if isinstance(k, str)}
