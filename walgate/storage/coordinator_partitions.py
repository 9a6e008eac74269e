"""The group coordinator's partitions: Kafka's ``__consumer_offsets`` on this node.

The data dir's ``coordinator/`` holds ``offsets-<p>.log`` for p in ``0 .. N-1``, each a
:class:`~walgate.storage.coordinator_log.CoordinatorLog` (offset commits and group records, one record stream).
N is fixed when the data dir is made (``walgate.json``'s ``coordinator_partitions``, :mod:`walgate.storage.datadir`),
as Kafka fixes ``offsets.topic.num.partitions`` when it creates ``__consumer_offsets``: every record of a group is in
partition :func:`partition_for` (group id), Kafka's ``Utils.abs(groupId.hashCode) % N``, so a group's offsets and
state are in one log, and a cluster can place each partition (and so each group's coordinator) on a node of its
own. On one node every partition is local.

Every method runs on the storage thread. A write touches only the partition of its group, except a delete without
a group (a dropped topic's offsets) and :meth:`CoordinatorPartitions.write_groups` of several groups: every partition
concerned is tried, one whose disk refuses the write keeps its records, and the first error is raised after the
others were written (writing again is safe: the newest line of a key wins).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from walgate.storage.coordinator_log import Committed, CoordinatorLog, GroupRecord
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.errors import StorageError
from walgate.storage.fileio import SyncLatency

__all__ = ["COORDINATOR_DIR", "DEFAULT_PARTITIONS", "CoordinatorPartitions", "java_hash", "partition_file",
           "partition_for"]

COORDINATOR_DIR: Final = "coordinator"
"""The coordinator partitions' directory in the data dir."""

DEFAULT_PARTITIONS: Final = 1
"""N of a data dir made without ``offsets.topic.num.partitions`` (one node: one file, so one fsync answers the
commits of every group)."""

Item = TypeVar("Item")
T = TypeVar("T")


def partition_file(root: Path, partition: int) -> Path:
    """``coordinator/offsets-<p>.log`` of the data dir ``root``."""
    return root / COORDINATOR_DIR / f"offsets-{partition}.log"


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s`` (a signed 32-bit int over its UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for k in range(0, len(data), 2):
        h = (31 * h + (data[k] << 8 | data[k + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The coordinator partition of ``group_id``: Kafka's ``Utils.abs(groupId.hashCode) % partitions``
    (``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = java_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class CoordinatorPartitions:
    """The N coordinator logs of a data dir (see the module docstring)."""

    def __init__(self, logs: list[CoordinatorLog]) -> None:
        self.logs = logs

    @classmethod
    def open(cls, root: Path, partitions: int, damage: DamageLog, unsynced: Unsynced | None = None,
             syncs: SyncLatency | None = None) -> CoordinatorPartitions:
        """Replay the ``partitions`` logs of ``root`` (a missing one is empty); with ``unsynced``, commits leave
        their fsyncs to group commit; fsyncs are timed into ``syncs`` (the engine's)."""
        (root / COORDINATOR_DIR).mkdir(exist_ok=True)  # (made with the data dir; a kill may have come before)
        return cls([CoordinatorLog.open(partition_file(root, p), damage, unsynced, syncs) for p in range(partitions)])

    def of(self, group_id: str) -> CoordinatorLog:
        """The log holding ``group_id``'s offsets and state."""
        return self.logs[partition_for(group_id, len(self.logs))]

    def commit(self, group: str, offsets: list[tuple[str, int, Committed]]) -> None:
        """Durably commit ``(topic, partition, committed)`` for ``group`` (one write; StorageUnavailable, nothing
        committed, when the disk refuses it)."""
        self.of(group).commit(group, offsets)

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        return self.of(group).get(group, topic, partition)

    def delete(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete the offsets matching every given filter (durably); how many went."""
        logs = self.logs if group is None else [self.of(group)]
        return sum(_each(logs, lambda log: log.delete(group, topic, partition)))

    def items(self) -> Iterator[tuple[str, str, int, Committed]]:
        """Every committed offset: (group, topic, partition, committed)."""
        for log in self.logs:
            for (group, topic, partition), c in log.items():
                yield group, topic, partition, c

    def write_groups(self, records: Sequence[GroupRecord]) -> None:
        """Durably record group records (one write per partition concerned)."""
        by_log: dict[int, list[GroupRecord]] = {}
        for record in records:
            by_log.setdefault(partition_for(record[0], len(self.logs)), []).append(record)
        _each(sorted(by_log.items()), lambda item: self.logs[item[0]].write_groups(item[1]))

    def groups(self) -> Mapping[str, Any]:
        """Every recorded group's last value."""
        return {g: v for log in self.logs for g, v in log.groups().items()}


def _each(items: Iterable[Item], fn: Callable[[Item], T]) -> list[T]:
    """``fn`` of every item; the first StorageError raised once every item was tried."""
    results, error = [], None
    for item in items:
        try:
            results.append(fn(item))
        except StorageError as exc:
            error = error or exc
    if error is not None:
        raise error
    return results
