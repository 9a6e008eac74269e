"""The transaction coordinator's two log strategies (walgate.gateway.kafka.transaction_logs), driven as the
coordinator lane drives them: a state that does not read is reported and forgotten wherever it is read (the file at
open, a coordinator partition at install, and the durable state a refused round takes a change back to), never
raised; a refused round takes back what its writes changed, of held offsets only its own partition's part."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, Literal

from tests.storage.clocks import ManualClock
from walgate.coordinator.transactions import PendingOffset, TransactionCoordinator, Txn, TxnState
from walgate.gateway.kafka.transaction_logs import OneFile, PartitionLogs
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.engine import Engine
from walgate.storage.replicated_coordinator_log import ReplicatedTransactionLog
from walgate.storage.transactions_log import TRANSACTIONS_LOG, TransactionLog

DAMAGED = {"pid": "seven", "epoch": 0}  # a record whose fields are not a state's
GROUP_PARTITION = {"g0": 0, "g1": 1}  # the coordinator partition of each group (and of every transactional id: 0)


def _txn(tid: str, epoch: int, state: TxnState = TxnState.ONGOING, groups: tuple[str, ...] = (),
         proxy: bool = False) -> Txn:
    offsets = tuple(PendingOffset(g, "t", 0, 10 * epoch, -1, "", 1000) for g in groups)
    return Txn(tid, 7, epoch, 60_000, state, 1000, groups=frozenset(groups), offsets=offsets, proxy=proxy)


def _partition_logs(tmp_path: Path) -> tuple[PartitionLogs, TransactionCoordinator, DamageLog]:
    coordinator, damage = TransactionCoordinator(), DamageLog(tmp_path, ManualClock())
    coordinator.kept_apart = True
    return PartitionLogs(coordinator, lambda key: GROUP_PARTITION.get(key, 0), damage), coordinator, damage


def _loaded(partition: int, kind: Literal["t", "h"], records: dict[str, dict[str, Any]]) -> ReplicatedTransactionLog:
    """Coordinator partition ``partition``'s log of ``kind`` as a load makes it, holding ``records``."""
    return ReplicatedTransactionLog.loaded(partition, kind, records, lambda: 1, Unsynced(lambda _: None))


def _refuse_round(tlog: ReplicatedTransactionLog) -> None:
    """The group-commit round of ``tlog``'s queued writes, not taken by the in-sync replicas."""
    sync = tlog.take_sync()
    assert sync is not None
    sync.error = OSError(errno.EAGAIN, "not taken by the in-sync replicas: NOT_LEADER_OR_FOLLOWER")
    sync.done()


def test_a_refused_round_takes_a_damaged_state_back_to_forgotten_and_reports_it(tmp_path: Path) -> None:
    logs, coordinator, damage = _partition_logs(tmp_path)
    good = _txn("good", 1)
    states = _loaded(0, "t", {"good": good.to_record(), "bad": DAMAGED})
    logs.install(0, states, _loaded(0, "h", {}))
    assert coordinator.txns == {"good": good}
    assert [("'bad'" in d.reason, d.action) for d in damage.records] == [(True, "skipped")]

    changes: list[tuple[str, Txn | None]] = [("good", _txn("good", 2)), ("bad", _txn("bad", 0))]
    logs.write(changes, proxy=False)  # as TransactionService.record: queued, then applied at once
    for tid, txn in changes:
        coordinator.apply(tid, txn)
    _refuse_round(states)  # the refused callback runs inside the round: it must not raise

    assert coordinator.txns == {"good": good}  # back to what the partition holds; the damaged one forgotten again
    assert len(damage.records) == 2 and "'bad'" in damage.records[1].reason
    assert "__consumer_offsets partition 0" in damage.records[1].reason


def test_install_reads_each_record_on_its_own(tmp_path: Path) -> None:
    logs, coordinator, damage = _partition_logs(tmp_path)
    held = _txn("a", 3, groups=("g0",), proxy=True)
    logs.install(0, _loaded(0, "t", {"a": DAMAGED, "b": _txn("b", 1).to_record()}),
                 _loaded(0, "h", {"a": held.to_record(), "b": DAMAGED}))
    assert coordinator.txns == {"b": _txn("b", 1)} and coordinator.proxies == {"a": held}
    assert sorted(Path(d.file).name for d in damage.records) == ["__consumer_offsets-0.h", "__consumer_offsets-0.t"]


def test_a_refused_round_of_held_offsets_keeps_the_other_partitions_part(tmp_path: Path) -> None:
    logs, coordinator, _ = _partition_logs(tmp_path)
    held0, held1 = _loaded(0, "h", {}), _loaded(1, "h", {})
    logs.install(0, _loaded(0, "t", {}), held0)
    logs.install(1, _loaded(1, "t", {}), held1)
    both = _txn("a", 1, groups=("g0", "g1"), proxy=True)
    logs.write([("a", both)], proxy=True)
    coordinator.apply("a", both, proxy=True)
    _refuse_round(held0)  # partition 0's part refused, partition 1's still queued
    assert coordinator.proxies == {"a": _txn("a", 1, groups=("g1",), proxy=True)}


def test_the_file_forgets_a_damaged_state_and_lifts_the_producer_ids_above_the_others(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    tlog = TransactionLog.open(data / TRANSACTIONS_LOG)
    tlog.append([("good", Txn("good", 4242, 0, 60_000, TxnState.EMPTY, 1000).to_record()), ("bad", DAMAGED)])
    engine = Engine.open(data)
    try:
        coordinator = TransactionCoordinator()
        assert OneFile(engine, coordinator).load() is True
        assert list(coordinator.txns) == ["good"]
        assert [("'bad'" in d.reason, d.action) for d in engine.damage_log.records] == [(True, "skipped")]
        assert engine.producer_ids.allocate() > 4242
    finally:
        engine.close()
