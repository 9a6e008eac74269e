"""Where the transaction coordinator's changes are made durable: the two strategies of
:class:`~walgate.gateway.kafka.transactions.TransactionService`, both used on the coordinator lane only.

- :class:`OneFile`: ``transactions.log`` in the data dir (a single node, or a cluster without replication). Every
  transactional id's state and the offsets held for other nodes' transactions are its records, all loaded when the
  service opens; a write is durable (fsynced) when :meth:`OneFile.write` returns. The offsets a transaction
  coordinated here gives this node's groups are kept in the transaction itself.
- :class:`PartitionLogs`: a replicated cluster. By ``__consumer_offsets`` partition led here and loaded
  (:meth:`PartitionLogs.install`), its transactional ids' states (records ``["t", id]``) and the offsets its groups
  hold for transactions (``["h", id]``, also those of a transaction coordinated here), each a
  :class:`~walgate.storage.replicated_coordinator_log.ReplicatedTransactionLog`. A write is queued to the partitions
  of its keys and applied at once; a round the in-sync replicas refused takes back what its writes changed
  (:meth:`PartitionLogs.restore`: Kafka's coordinator keeps a pending state until its append is acknowledged).

A stored state is read with :func:`read_state` wherever it is read (at open, at install, when a refused round takes
a change back): one that does not read is reported to the damage log and forgotten, never raised where it is read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

from walgate.coordinator.transactions import TransactionCoordinator, Txn, merge_proxies, proxy_part
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.replicated_coordinator_log import OFFSETS_TOPIC, ReplicatedTransactionLog
from walgate.storage.transactions_log import TRANSACTIONS_LOG, TransactionLog

__all__ = ["TransactionLogs", "OneFile", "PartitionLogs", "read_state"]

Changes = list[tuple[str, Txn | None]]
"""(transactional id, its new state, None: the id expired or, of held offsets, they were ended)."""


def read_state(tid: str, record: dict[str, Any], damage: DamageLog, path: Path, where: str) -> Txn | None:
    """``tid``'s state as ``record`` (of the log at ``path``, named ``where`` in the report) holds it; None when it
    does not read: reported to ``damage`` and skipped (the state is forgotten)."""
    try:
        return Txn.from_record(tid, record)
    except (KeyError, TypeError, ValueError) as exc:
        damage.report(path, 0, 0, f"{where}: the transaction state of {tid!r} does not read ({exc!r}); it is "
                      "forgotten", "skipped")
        return None


class TransactionLogs(Protocol):
    """Where :class:`~walgate.gateway.kafka.transactions.TransactionService` writes the coordinator's changes."""

    @property
    def holds_own_offsets(self) -> bool:
        """Whether the offsets a transaction coordinated here gives this node's groups are held apart from the
        transaction (as another node's are: ended by a marker for their partition) instead of kept in it."""
        ...

    def load(self) -> bool:
        """The states durable now applied to the coordinator; True when they are all of them (the service then ends
        the transactions partitions hold open that no transactional id runs, and the decided ones), False when they
        come later, with the coordinator partitions led here."""
        ...

    def write(self, changes: Changes, proxy: bool) -> None:
        """``changes`` (``proxy``: of held offsets) made durable or queued to be; the caller applies them after.
        Raises StorageUnavailable, nothing written, when they cannot be."""
        ...

    def not_loaded(self, partitions: set[int]) -> list[int]:
        """Those of the coordinator ``partitions`` whose held offsets are not loaded here now, sorted."""
        ...


class OneFile:
    """``transactions.log`` (module docstring); :meth:`load` before anything else."""

    holds_own_offsets: Final = False

    def __init__(self, engine: Engine, coordinator: TransactionCoordinator) -> None:
        self._engine = engine
        self._coordinator = coordinator
        self._log: TransactionLog | None = None

    def load(self) -> bool:
        """The file's states applied, and the producer ids lifted above those they hold."""
        engine = self._engine
        tlog = TransactionLog.open(engine.data_dir / TRANSACTIONS_LOG, engine.damage_log, engine.syncs)
        for tid, record in tlog.records.items():
            txn = read_state(tid, record, engine.damage_log, tlog.path, "transaction log")
            if txn is not None:
                self._coordinator.apply(tid, txn)
                engine.producer_ids.at_least(txn.producer_id + 1)
        self._log = tlog
        return True

    def write(self, changes: Changes, proxy: bool) -> None:
        assert self._log is not None, "TransactionService.open() was not awaited"
        self._log.append([(tid, None if txn is None else txn.to_record()) for tid, txn in changes])

    def not_loaded(self, partitions: set[int]) -> list[int]:
        return []


class PartitionLogs:
    """The coordinator partitions' logs led and loaded here (module docstring); ``partition_of`` places a
    transactional id or group on its coordinator partition, ``damage`` takes the states that do not read."""

    holds_own_offsets: Final = True

    def __init__(self, coordinator: TransactionCoordinator, partition_of: Callable[[str], int],
                 damage: DamageLog) -> None:
        self._coordinator = coordinator
        self._partition_of = partition_of
        self._damage = damage
        self.states: dict[int, ReplicatedTransactionLog] = {}
        self.held: dict[int, ReplicatedTransactionLog] = {}

    def load(self) -> bool:
        return False

    def write(self, changes: Changes, proxy: bool) -> None:
        logs = self.held if proxy else self.states
        writes = self._partition_writes(changes, proxy)
        missing = sorted(set(writes) - set(logs))
        if missing:
            raise StorageUnavailable(f"{OFFSETS_TOPIC} partitions {missing} are not led here now: the transaction "
                                     "state is unchanged")
        for p, records in writes.items():
            logs[p].append(records)

    def not_loaded(self, partitions: set[int]) -> list[int]:
        return sorted(partitions - set(self.held))

    def _in_partition(self, partition: int, key: str) -> bool:
        return self._partition_of(key) == partition

    def _partition_writes(self, changes: Changes, proxy: bool) -> dict[int, list[tuple[str, dict[str, Any] | None]]]:
        """The records of ``changes`` by coordinator partition: a transactional id's state in the id's partition;
        offsets held for a transaction (``proxy``) in each of their groups' partitions, each partition's record
        holding its groups' part (:func:`proxy_part`), a tombstone where the new state holds none of the groups it
        held."""
        out: dict[int, list[tuple[str, dict[str, Any] | None]]] = {}
        for tid, txn in changes:
            if not proxy:
                out.setdefault(self._partition_of(tid), []).append((tid, None if txn is None else txn.to_record()))
                continue
            before = self._coordinator.proxies.get(tid)
            held = {self._partition_of(g) for t in (before, txn) if t is not None for g in t.groups}
            for p in sorted(held):
                part = None if txn is None else proxy_part(txn, functools.partial(self._in_partition, p))
                out.setdefault(p, []).append((tid, None if part is None else part.to_record()))
        return out

    def _read(self, tlog: ReplicatedTransactionLog, tid: str) -> Txn | None:
        """``tid``'s state durable in ``tlog`` (None: none, or one that does not read, reported)."""
        record = tlog.records.get(tid)
        return None if record is None else read_state(tid, record, self._damage, tlog.path,
                                                      f"{OFFSETS_TOPIC} partition {tlog.partition}")

    def install(self, partition: int, states: ReplicatedTransactionLog, held: ReplicatedTransactionLog) -> None:
        """Coordinator partition ``partition`` is led here and loaded, its transaction states and held offsets in
        ``states`` and ``held`` (Kafka's ``TransactionStateManager.loadTransactionsForTxnTopicPartition``): they are
        applied, and a round of either that the in-sync replicas refuse is taken back (:meth:`restore`)."""
        self.states[partition], self.held[partition] = states, held
        for tlog in (states, held):
            tlog.refused = functools.partial(self.restore, tlog)
        for tid in set(states.records) | set(held.records):
            owned, part = self._read(states, tid), self._read(held, tid)
            if owned is not None:
                self._coordinator.apply(tid, owned)
            if part is not None:
                self._coordinator.apply(tid, merge_proxies(self._coordinator.proxies.get(tid), part))

    def restore(self, tlog: ReplicatedTransactionLog, tids: set[str]) -> None:
        """The in-sync replicas refused writes of ``tids`` to ``tlog`` (and so every write of it not durable yet):
        what those changed in memory is taken back to what ``tlog`` holds (of held offsets, the part of ``tlog``'s
        partition only: the other partitions' parts are theirs)."""
        for tid in tids:
            durable = self._read(tlog, tid)
            if tlog.kind == "t":
                self._coordinator.apply(tid, durable)
                continue
            current = self._coordinator.proxies.get(tid)
            others = None if current is None else proxy_part(current,
                                                             lambda g: not self._in_partition(tlog.partition, g))
            self._coordinator.apply(tid, durable if others is None else
                                    others if durable is None else merge_proxies(others, durable), proxy=True)

    def uninstall(self, partition: int) -> list[str]:
        """Coordinator partition ``partition`` is no longer led here: its transactional ids' states and the offsets
        its groups hold are dropped from memory (Kafka's ``removeTransactionsForTxnTopicPartition``). Returns the
        transactional ids dropped."""
        self.states.pop(partition, None)
        self.held.pop(partition, None)
        dropped = [tid for tid in self._coordinator.txns if self._partition_of(tid) == partition]
        for tid in dropped:
            self._coordinator.apply(tid, None)
        for tid, txn in list(self._coordinator.proxies.items()):
            self._coordinator.apply(tid, proxy_part(txn, lambda g: not self._in_partition(partition, g)),
                                    proxy=True)
        return dropped
