"""Transaction version 2 (KIP-890 part 2) in the coordinator's state machine, with Kafka's rules: an epoch bump at
every EndTxn v5, implicit adds, the EndTxn v5 retry table, a new producer id when the epoch would overflow, the
node's own aborts at the finalized level, records written before version 2, ListTransactions v2's pattern and the
outcome the start-up reconcile gives stray open transactions of version 2 producers."""

from __future__ import annotations

import re

from test_transaction_state import TID
from test_transaction_state import Node as StateNode

from walgate.coordinator.transactions import (
    MAX_EPOCH,
    Orphan,
    PendingOffset,
    Step,
    Txn,
    TxnState,
)
from walgate.wire.errors import ErrorCode

V2 = 2


class Node(StateNode):
    """The state tests' node at transaction version 2: a transactional Produce v12 adds its partitions, EndTxn is
    v5."""

    def __init__(self, transaction_version: int = 2) -> None:
        super().__init__(transaction_version=transaction_version)

    def produce(self, pid: int, epoch: int, *tps: tuple[str, int]) -> Step:
        """A transactional Produce v12: the partitions join implicitly."""
        return self.add(pid, epoch, *tps, tv=V2)

    def end(self, pid: int, epoch: int, commit: bool, tid: str = TID, tv: int = V2) -> Step:
        return super().end(pid, epoch, commit, tid, tv)


def test_every_end_txn_bumps_the_epoch_and_the_markers_carry_the_bumped_one() -> None:
    n = Node()
    n.init()  # pid 1000 epoch 0
    for epoch, commit in ((0, True), (1, False), (2, True)):
        assert n.produce(1000, epoch, ("t", 0)).error == ErrorCode.none
        assert n.txn().state is TxnState.ONGOING and n.txn().tv == V2
        step = n.end(1000, epoch, commit)
        assert step.error == ErrorCode.none and step.producer == (1000, epoch + 1)
        prepared = n.txn()  # the Prepare* record: what the markers are written with
        assert (prepared.producer_epoch, prepared.last_producer_epoch) == (epoch + 1, epoch)
        assert prepared.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
        done = n.complete()
        assert (done.producer_id, done.producer_epoch, done.state) == (
            1000, epoch + 1, TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    # the old epoch is fenced everywhere
    assert n.produce(1000, 2, ("t", 0)).error == ErrorCode.producer_fenced
    assert n.c.verify(TID, 1000, 2, [("t", 0)]) == {("t", 0): ErrorCode.producer_fenced}


def test_end_txn_v5_retries_and_the_state_table() -> None:
    n = Node()
    n.init()
    n.produce(1000, 0, ("t", 0))
    n.end(1000, 0, True)
    # a retry while the markers are written: same outcome CONCURRENT_TRANSACTIONS, the other INVALID_TXN_STATE
    assert n.end(1000, 0, True).error == ErrorCode.concurrent_transactions
    assert n.end(1000, 0, False).error == ErrorCode.invalid_txn_state
    assert n.end(1000, 1, True).error == ErrorCode.producer_fenced  # the bumped epoch is not a retry in Prepare*
    n.complete()
    retried = n.end(1000, 0, True)  # CompleteCommit, retry of the commit: NONE, the current epoch answered
    assert (retried.error, retried.txn, retried.producer) == (ErrorCode.none, None, (1000, 1))
    assert n.end(1000, 0, False).error == ErrorCode.invalid_txn_state  # retry of the other outcome
    assert n.end(1000, 1, True).error == ErrorCode.invalid_txn_state  # a commit of nothing
    assert n.end(1000, 5, True).error == ErrorCode.producer_fenced
    assert n.end(77, 1, True).error == ErrorCode.invalid_producer_id_mapping
    # an abort of nothing (Complete*, Empty) bumps the epoch, with no partition to mark
    empty = n.end(1000, 1, False)
    assert empty.error == ErrorCode.none and empty.producer == (1000, 2)
    assert (n.txn().state, n.txn().partitions, n.txn().start_ms) == (TxnState.PREPARE_ABORT, frozenset(), n.now)
    n.complete()
    assert n.end(1000, 1, False).producer == (1000, 2)  # CompleteAbort: a retry of the abort is NONE
    n.init()  # Empty at epoch 3
    assert n.end(1000, 3, True).error == ErrorCode.invalid_txn_state
    assert n.end(1000, 2, False).error == ErrorCode.producer_fenced  # Empty takes no retry
    assert n.end(1000, 3, False).producer == (1000, 4)


def test_an_exhausted_epoch_completes_at_the_next_producer_id() -> None:
    n = Node()
    n.init()
    n.c.apply(TID, Txn(TID, 1000, MAX_EPOCH - 2, 60_000, TxnState.EMPTY, n.now))
    n.produce(1000, MAX_EPOCH - 2, ("t", 0))
    assert n.end(1000, MAX_EPOCH - 2, True).producer == (1000, MAX_EPOCH - 1)  # the last usable epoch
    n.complete()
    n.produce(1000, MAX_EPOCH - 1, ("t", 0))
    step = n.end(1000, MAX_EPOCH - 1, True)
    assert step.producer == (1001, 0)
    prepared = n.txn()  # the markers carry the old id at the last epoch; the next id is durable with the decision
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (1000, MAX_EPOCH, 1001)
    done = n.complete()
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id, done.next_producer_id) == \
        (1001, 0, 1000, -1)
    retried = n.end(1000, MAX_EPOCH - 1, True)  # the retry of the overflowing commit, with the old id
    assert (retried.error, retried.producer) == (ErrorCode.none, (1001, 0))
    # KIP-360 from a producer that lost the answer: its old id at the last epoch gets the new id, not a fence
    recovered = n.c.init_producer_id(TID, 60_000, (1000, MAX_EPOCH - 1), n.now, n.allocate)
    assert recovered.error == ErrorCode.none and recovered.txn is not None
    assert (recovered.txn.producer_id, recovered.txn.producer_epoch) == (1001, 0)
    assert n.produce(1001, 0, ("t", 0)).error == ErrorCode.none


def test_the_nodes_own_aborts_follow_the_finalized_level() -> None:
    for level, epoch, last in ((2, 2, 1), (1, 1, -1)):
        n = Node(transaction_version=level)
        n.init()
        n.produce(1000, 0, ("t", 0))
        fenced = n.init()  # another producer of the id: the transaction is aborted with a fence
        assert fenced.error == ErrorCode.concurrent_transactions and fenced.txn is not None
        assert (fenced.txn.state, fenced.txn.producer_epoch, fenced.txn.last_producer_epoch) == \
            (TxnState.PREPARE_ABORT, epoch, last)
        n.complete()
        again = n.init()
        assert again.txn is not None and again.txn.producer_epoch == epoch + 1
        n.produce(1000, epoch + 1, ("t", 0))
        [(_, expired)] = n.c.expire(n.now + 60_000)  # the transaction's timeout: aborted the same way
        assert expired is not None and (expired.state, expired.producer_epoch) == \
            (TxnState.PREPARE_ABORT, 2 * epoch + 1)


def test_end_txn_v4_keeps_version_1_rules_on_a_version_2_node() -> None:
    n = Node()
    n.init()
    n.run(n.c.add_partitions(TID, 1000, 0, [("t", 0)], n.now))
    step = n.run(n.c.end_txn(TID, 1000, 0, True, n.now))
    assert step.error == ErrorCode.none and step.producer is None
    assert (n.txn().producer_epoch, n.txn().tv) == (0, 0)
    assert n.complete().producer_epoch == 0


def test_txn_offset_commit_v5_adds_the_group_implicitly() -> None:
    n = Node()
    n.init()
    assert n.c.offset_commit_check(TID, 1000, 0, "g") == ErrorCode.transaction_abortable
    step = n.c.add_offsets(TID, 1000, 0, "g", n.now, V2)
    assert step.error == ErrorCode.none and step.txn is not None
    offset = PendingOffset("g", "t", 0, 5, -1, "", n.now)
    txn = n.c.add_offsets_pending(TID, [offset], n.now, step.txn)
    n.c.apply(TID, txn)
    assert (txn.state, txn.groups, txn.offsets, txn.tv) == (TxnState.ONGOING, frozenset({"g"}), (offset,), V2)
    assert n.c.pending_offsets("g") == {("t", 0)}


def test_records_without_the_version_2_fields_read_as_version_0() -> None:
    txn = Txn(TID, 7, 3, 60_000, TxnState.PREPARE_COMMIT, 5, 2, 6, 4, frozenset({("t", 1)}), tv=2,
              next_producer_id=9)
    assert Txn.from_record(TID, txn.to_record()) == txn
    old = {k: v for k, v in txn.to_record().items() if k not in ("tv", "next_pid")}
    assert Txn.from_record(TID, old) == Txn(TID, 7, 3, 60_000, TxnState.PREPARE_COMMIT, 5, 2, 6, 4,
                                            frozenset({("t", 1)}))
    for bad in ({**txn.to_record(), "tv": "2"}, {**txn.to_record(), "next_pid": None}):
        try:
            Txn.from_record(TID, bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} was read")


def test_list_transactions_v2_pattern_matches_whole_ids() -> None:
    n = Node()
    for tid in ("my-special-0", "your-special-1", "plain"):
        n.init(tid)

    def listed(pattern: str) -> set[str]:
        return {t.transactional_id for t in n.c.list([], [], -1, n.now, re.compile(pattern))}
    assert listed(".*special-.*") == {"my-special-0", "your-special-1"}
    assert listed("special") == set()  # a whole match, as Java's Matcher.matches
    assert listed("plain|my-.*") == {"plain", "my-special-0"}
    assert len(n.c.list([], [], -1, n.now, None)) == 3


def test_orphans_of_version_2_producers_never_fence_the_producer_id_their_transactional_id_holds() -> None:
    """Stray open transactions come only from damage (markers are durable before Complete*): the owner's Complete*
    outcome, else an abort at its current epoch (at once, without fencing it); a producer id a completion rotated
    away from is nobody's: aborted at the last epoch after transaction.max.timeout.ms."""
    n = Node()
    n.init()
    n.produce(1000, 0, ("t", 0), ("t", 1))
    n.end(1000, 0, True)
    n.complete()  # CompleteCommit at epoch 1
    assert n.c.orphans({1000: [("t", 1)]}, n.now) == [Orphan(1000, 1, True, (("t", 1),), n.now)]
    n.produce(1000, 1, ("t", 0))  # a newer transaction, Ongoing, that does not hold t-1
    assert n.c.orphans({1000: [("t", 0), ("t", 1)]}, n.now) == [Orphan(1000, 1, False, (("t", 1),), n.now)]
    n.c.apply(TID, Txn(TID, 2000, 0, 60_000, TxnState.COMPLETE_COMMIT, n.now, previous_producer_id=1000))
    assert n.c.orphans({1000: [("t", 1)]}, n.now) == [
        Orphan(1000, MAX_EPOCH, False, (("t", 1),), n.now + n.c.max_timeout_ms)]
