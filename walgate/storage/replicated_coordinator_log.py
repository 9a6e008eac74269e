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

The transaction states of p's transactional ids (key ``["t", transactional id]``) and the offsets p's groups hold for
transactions (key ``["h", transactional id]``) are p's records too, each kind in a :class:`ReplicatedTransactionLog`
written the same way:
queued, one batch per round, applied only once the in-sync replicas hold it; when a round is refused, the keys of
every write it refused are handed to its ``refused`` callback, so that the transaction coordinator, which applied
them in memory ahead of their durability, takes back its durable states.

The share-partition states of p's share groups (key ``["s", group, topic key, partition]``, Kafka's
``__share_group_state`` records: docs/cluster.md "Share groups") are kept in a :class:`ReplicatedShareStateLog`
written the same way, for the share-partitions' leaders (:mod:`walgate.gateway.kafka.share_persister`). Such a
leader's own view of what it persisted is a :class:`PersistedShareStateLog`: the share coordinator's log in a
replicated cluster, whose rounds the gateway writes to the coordinator partitions (of any node) instead of a file.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from walgate.storage.coordinator_log import CoordinatorLog, GroupRecord, Key, Value
from walgate.storage.coordinator_records import coordinator_record, encode_records
from walgate.storage.durability import Unsynced
from walgate.storage.fileio import SyncLatency
from walgate.storage.group_committed_log import GroupCommittedLog, LogSync
from walgate.storage.share_state_log import ShareKey, ShareStateLog
from walgate.storage.transactions_log import TransactionLog

__all__ = ["OFFSETS_TOPIC", "PersistedShareStateLog", "ReplicatedCoordinatorLog", "ReplicatedShareStateLog",
           "ReplicatedTransactionLog", "ShareStateSync", "not_led"]

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


class ReplicatedTransactionLog(GroupCommittedLog[str, dict[str, Any]], TransactionLog):
    """The transaction states (``kind`` "t") or held offsets (``kind`` "h") kept in coordinator partition
    ``partition`` (module docstring): written with group commit as batches for the gateway to replicate, never to a
    file; ``refused`` is called (on the coordinator lane) with the transactional ids of the writes a failed round
    refused. Used on the coordinator lane."""

    UNWRITTEN = "the transaction state is unchanged"

    def __init__(self, partition: int, kind: Literal["t", "h"], clock_ms: Callable[[], int],
                 unsynced: Unsynced | None = None, syncs: SyncLatency | None = None,
                 refused: Callable[[set[str]], None] | None = None) -> None:
        super().__init__(Path(f"{OFFSETS_TOPIC}-{partition}.{kind}"), unsynced, syncs)
        self.partition = partition
        self.kind = kind
        self._clock_ms = clock_ms
        self.refused = refused

    @classmethod
    def loaded(cls, partition: int, kind: Literal["t", "h"], replayed: Mapping[str, dict[str, Any]],
               clock_ms: Callable[[], int], unsynced: Unsynced | None = None, syncs: SyncLatency | None = None
               ) -> ReplicatedTransactionLog:
        """The log holding the states ``replayed`` (the partition's replay of ``kind``) holds."""
        log = cls(partition, kind, clock_ms, unsynced, syncs)
        log._apply(replayed.items())
        return log

    def append(self, records: Sequence[tuple[str, dict[str, Any] | None]]) -> None:
        """Queue ``(transactional id, state or None)`` pairs as one write: applied once the in-sync replicas hold
        them (the coordinator lane's call returns then, or raises StorageUnavailable when they were refused)."""
        self._append(list(records))

    def _body(self, records: Sequence[tuple[str, dict[str, Any] | None]]) -> bytes:
        return encode_records([coordinator_record(("t", tid) if self.kind == "t" else ("h", tid), state) for tid, state in records], self._clock_ms())

    def _append_locked(self, body: bytes) -> None:
        raise OSError(errno.EOPNOTSUPP, f"{self.path} is written by the gateway's group commit only")

    def _compact(self) -> None:
        """Never: the log cleaner compacts the partition."""

    def _synced(self, sync: LogSync) -> None:
        refused = set() if sync.error is None else {tid for _, records in self._pending for tid, _ in records}
        super()._synced(sync)
        if refused and self.refused is not None:
            self.refused(refused)


class ReplicatedShareStateLog(ShareStateLog):
    """The share-partition states kept in coordinator partition ``partition`` (module docstring): written with group
    commit as batches for the gateway to replicate (applied once the in-sync replicas hold them), never to a file.
    Used on the coordinator lane."""

    def __init__(self, partition: int, clock_ms: Callable[[], int], unsynced: Unsynced | None = None,
                 syncs: SyncLatency | None = None) -> None:
        super().__init__(Path(f"{OFFSETS_TOPIC}-{partition}.s"), unsynced, syncs)
        self.partition = partition
        self._clock_ms = clock_ms

    @classmethod
    def loaded(cls, partition: int, replayed: Mapping[ShareKey, Any], clock_ms: Callable[[], int],
               unsynced: Unsynced | None = None, syncs: SyncLatency | None = None) -> ReplicatedShareStateLog:
        """The log holding the states ``replayed`` (the partition's replay of its share records) holds."""
        log = cls(partition, clock_ms, unsynced, syncs)
        log._apply(replayed.items())
        return log

    def latest(self, key: ShareKey) -> Any:
        """The newest value of ``key`` written, durable or queued (a queued one may yet be refused); None: none."""
        for _, records in reversed(self._pending):
            for k, value in reversed(records):
                if k == key:
                    return value
        return self._live.get(key)

    def _body(self, records: Sequence[tuple[ShareKey, Any]]) -> bytes:
        return encode_records([coordinator_record(("s", *key), value) for key, value in records], self._clock_ms())

    def _append_locked(self, body: bytes) -> None:
        raise OSError(errno.EOPNOTSUPP, f"{self.path} is written by the gateway's group commit only")

    def _compact(self) -> None:
        """Never: the log cleaner compacts the partition."""


class ShareStateSync(LogSync):
    """A round of a :class:`PersistedShareStateLog`: the (key, value or None) records of the writes it covers, for
    the gateway's writer to persist (its ``body`` is empty)."""

    __slots__ = ("records",)

    def __init__(self, owner: PersistedShareStateLog, covers: int, records: list[tuple[ShareKey, Any]]) -> None:
        super().__init__(owner, covers, b"")
        self.records = records


class PersistedShareStateLog(ShareStateLog):
    """A share-partition leader's share-partition states in a replicated cluster (module docstring): each
    group-commit round (a :class:`ShareStateSync`) is persisted by the gateway's writer into the share groups'
    coordinator partitions, and the round's writes are applied, or all refused, as a file log's fsync succeeds or
    fails; never written to a file, nor kept: the states are read from the coordinator partitions
    (:meth:`states` is empty). ``unsynced``: the coordinator lane's group-commit ledger (the gateway's)."""

    def __init__(self, unsynced: Unsynced | None = None) -> None:
        super().__init__(Path("share-state-persister"), unsynced)

    def _applied(self, records: Sequence[tuple[ShareKey, Any]]) -> None:
        """Nothing kept: the coordinator partitions hold them."""

    def take_sync(self) -> ShareStateSync | None:
        sync = super().take_sync()
        if sync is None:
            return None
        return ShareStateSync(self, sync.covers, [r for _, records in self._pending for r in records])

    def _body(self, records: Sequence[tuple[ShareKey, Any]]) -> bytes:
        return b""

    def _append_locked(self, body: bytes) -> None:
        raise OSError(errno.EOPNOTSUPP, f"{self.path} is persisted by the gateway's writer only")

    def _compact(self) -> None:
        """Never: nothing is written to a file."""
