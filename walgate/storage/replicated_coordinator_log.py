"""A group coordinator partition kept in a replicated partition of the internal topic ``__consumer_offsets``
(docs/plans/replication-wiring.md, step 7; a cluster with ``replication.enable``).

The node leading partition p of ``__consumer_offsets`` holds p's offsets and group records in a
:class:`ReplicatedCoordinatorLog`: its map is the replay of the partition's records, made when the node began to
lead it (:mod:`walgate.storage.coordinator_records`), and what a group-commit round covers (the offset commits
queued meanwhile), or one :meth:`~walgate.storage.coordinator_log.CoordinatorLog.write_groups`, is one Kafka record
batch handed to ``sink``. The sink appends them to the partition in the leader epoch the log
was loaded in and returns once the in-sync replicas hold them (the high watermark passed them), or raises
:class:`OSError` when that cannot be (this node deposed, the ISR below ``min.insync.replicas``, the wait's
timeout): the writes are then refused and nothing is applied, as when a file log's disk refuses them, so a write is
seen (and answered) only once a new leader would load it too (Kafka's ``CoordinatorRuntime``, which answers a write
once the offsets topic's high watermark passed it).

A node that does not lead p holds one whose sink refuses every write (:func:`not_led`): it reads empty and its writes
fail, and the gateway answers NOT_COORDINATOR before asking it. Nothing here writes a file or compacts: the log
cleaner compacts the partition (``cleanup.policy=compact``).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from walgate.storage.coordinator_log import CoordinatorLog, Key, Value
from walgate.storage.coordinator_records import coordinator_record, encode_records
from walgate.storage.durability import Unsynced
from walgate.storage.fileio import SyncLatency

__all__ = ["OFFSETS_TOPIC", "ReplicatedCoordinatorLog", "Sink", "not_led"]

OFFSETS_TOPIC: Final = "__consumer_offsets"
"""The internal topic whose partitions hold a replicated cluster's coordinator partitions."""

Sink = Callable[[bytes], None]
"""Appends the record batches it is given (concatenated) to the partition and returns once the in-sync replicas hold
them; raises OSError when it cannot (any non-event-loop thread)."""


class ReplicatedCoordinatorLog(CoordinatorLog):
    """Coordinator partition ``partition``'s offsets and group records, written through ``sink`` (module docstring).
    Used on the coordinator lane, except a taken sync's :meth:`~walgate.storage.group_committed_log.LogSync.run`."""

    def __init__(self, partition: int, sink: Sink, clock_ms: Callable[[], int], unsynced: Unsynced | None = None,
                 syncs: SyncLatency | None = None) -> None:
        super().__init__(Path(f"{OFFSETS_TOPIC}-{partition}"), unsynced, syncs)
        self.partition = partition
        self._sink = sink
        self._clock_ms = clock_ms

    @classmethod
    def loaded(cls, partition: int, replayed: CoordinatorLog, sink: Sink, clock_ms: Callable[[], int],
               unsynced: Unsynced | None = None, syncs: SyncLatency | None = None) -> ReplicatedCoordinatorLog:
        """The log holding what ``replayed`` (the partition's replay, :func:`~walgate.storage.coordinator_records.
        replay_records`) holds."""
        log = cls(partition, sink, clock_ms, unsynced, syncs)
        log._apply([*replayed.items(), *replayed.groups().items()])
        return log

    def _body(self, records: Sequence[tuple[Key, Value]]) -> bytes:
        return encode_records([coordinator_record(("g", k) if isinstance(k, str) else ("o", *k), v)
                               for k, v in records], self._clock_ms())

    def _append_locked(self, body: bytes) -> None:
        with self._lock:
            self._sink(body)

    def _compact(self) -> None:
        """Never: the log cleaner compacts the partition."""


def not_led(partition: int) -> ReplicatedCoordinatorLog:
    """Partition ``partition``'s log on a node that does not lead it now: empty, every write refused."""
    def refuse(_: bytes) -> None:
        raise OSError(errno.EAGAIN, f"this node does not coordinate {OFFSETS_TOPIC} partition {partition} now")

    return ReplicatedCoordinatorLog(partition, refuse, lambda: 0)
