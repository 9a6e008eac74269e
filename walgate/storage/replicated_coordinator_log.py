"""A group coordinator partition kept in a replicated partition of the internal topic ``__consumer_offsets``
(docs/plans/replication-wiring.md, step 7; a cluster with ``replication.enable``).

The node leading partition p of ``__consumer_offsets`` holds p's offsets and group records in a
:class:`ReplicatedCoordinatorLog`: its map is the replay of the partition's records, made when the node began to
lead it (:func:`~walgate.storage.coordinator_records.replay_records`). Every write, offset commits and group records
alike, is queued with group commit (:class:`~walgate.storage.group_committed_log.GroupCommittedLog`): the writes a
round covers are one Kafka record batch (:meth:`ReplicatedCoordinatorLog._body`) that the gateway appends to the
partition and waits on until the in-sync replicas hold it (the high watermark passed it); only then are they applied,
and when that fails they are refused and nothing of them is seen, as when a file log's fsync fails. So a commit or
a group state is seen, and answered, only once a new leader would load it too (Kafka's ``CoordinatorRuntime``
answers a write once the offsets topic's high watermark passed it). The gateway runs the rounds
(:meth:`GroupCommit.own <walgate.gateway.group_commit.GroupCommit.own>`'s writer): this object never writes a file,
and a round run without that writer is refused. It never compacts: the log cleaner compacts the partition
(``cleanup.policy=compact``).

A node that does not lead p holds :func:`not_led`'s: empty, every write refused; the gateway answers NOT_COORDINATOR
before asking it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from walgate.storage.coordinator_log import CoordinatorLog, GroupRecord, Key, Value
from walgate.storage.coordinator_records import coordinator_record, encode_records
from walgate.storage.durability import Unsynced
from walgate.storage.fileio import SyncLatency

__all__ = ["OFFSETS_TOPIC", "ReplicatedCoordinatorLog", "not_led"]

OFFSETS_TOPIC: Final = "__consumer_offsets"
"""The internal topic whose partitions hold a replicated cluster's coordinator partitions."""


class ReplicatedCoordinatorLog(CoordinatorLog):
    """Coordinator partition ``partition``'s offsets and group records, each write a batch for the gateway to
    replicate (module docstring). Used on the coordinator lane."""

    def __init__(self, partition: int, clock_ms: Callable[[], int], unsynced: Unsynced | None = None,
                 syncs: SyncLatency | None = None) -> None:
        super().__init__(Path(f"{OFFSETS_TOPIC}-{partition}"), unsynced, syncs)
        self.partition = partition
        self._clock_ms = clock_ms

    @classmethod
    def loaded(cls, partition: int, replayed: CoordinatorLog, clock_ms: Callable[[], int],
               unsynced: Unsynced | None = None, syncs: SyncLatency | None = None) -> ReplicatedCoordinatorLog:
        """The log holding what ``replayed`` (the partition's replay) holds."""
        log = cls(partition, clock_ms, unsynced, syncs)
        log._apply([*replayed.items(), *replayed.groups().items()])
        return log

    def _body(self, records: Sequence[tuple[Key, Value]]) -> bytes:
        """One record batch of ``records`` (what a round hands the gateway to append)."""
        return encode_records([coordinator_record(("g", k) if isinstance(k, str) else ("o", *k), v)
                               for k, v in records], self._clock_ms())

    def write_groups(self, records: Sequence[GroupRecord]) -> None:
        """Queue group records as one write, as commits are (applied once the in-sync replicas hold them)."""
        self._append(list(records))

    def _append_locked(self, body: bytes) -> None:
        raise OSError(errno.EOPNOTSUPP, f"{self.path} is written by the gateway's group commit only")

    def _compact(self) -> None:
        """Never: the log cleaner compacts the partition."""


def not_led(partition: int) -> ReplicatedCoordinatorLog:
    """Partition ``partition``'s log on a node that does not lead it now: empty, every write refused."""
    return ReplicatedCoordinatorLog(partition, lambda: 0)
