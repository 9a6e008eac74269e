"""The transaction coordinator's state machine (walgate.coordinator.transactions), with Kafka's rules."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from walgate.coordinator.transactions import (
    DEFAULT_MAX_TIMEOUT_MS,
    MAX_EPOCH,
    Orphan,
    PendingOffset,
    Step,
    TransactionCoordinator,
    Txn,
    TxnState,
    merge_proxies,
    proxy_part,
)
from walgate.wire.errors import ErrorCode

TID = "app-1"


class Node:
    """A coordinator plus what its caller does: apply each decided state (the log write is the storage test's)."""

    def __init__(self, **kwargs: int) -> None:
        kwargs.setdefault("transaction_version", 1)  # the tests below version 2's are transaction version 1's
        self.c = TransactionCoordinator(**kwargs)
        self.ids = itertools.count(1000)
        self.now = 1_000

    def allocate(self) -> int:
        return next(self.ids)

    def run(self, step: Step) -> Step:
        if step.txn is not None:
            self.c.apply(step.txn.transactional_id, step.txn)
        return step

    def init(self, tid: str = TID, timeout: int = 60_000, expected: tuple[int, int] | None = None) -> Step:
        return self.run(self.c.init_producer_id(tid, timeout, expected, self.now, self.allocate))

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], tid: str = TID, tv: int = 0) -> Step:
        return self.run(self.c.add_partitions(tid, pid, epoch, tps, self.now, tv))

    def end(self, pid: int, epoch: int, commit: bool, tid: str = TID, tv: int = 0) -> Step:
        return self.run(self.c.end_txn(tid, pid, epoch, commit, self.now, tv, self.allocate))

    def complete(self, tid: str = TID) -> Txn:
        txn = self.c.complete(tid, self.now)
        self.c.apply(tid, txn)
        return txn

    def txn(self, tid: str = TID) -> Txn:
        return self.c.txns[tid]


def test_init_allocates_then_bumps_the_epoch_fencing_the_previous_producer() -> None:
    n = Node()
    first = n.init()
    assert first.error == ErrorCode.none and first.txn is not None
    assert (first.txn.producer_id, first.txn.producer_epoch, first.txn.state) == (1000, 0, TxnState.EMPTY)
    second = n.init()
    assert second.txn is not None and (second.txn.producer_id, second.txn.producer_epoch) == (1000, 1)
    # the zombie (epoch 0) is fenced everywhere
    assert n.add(1000, 0, ("t", 0)).error == ErrorCode.producer_fenced
    assert n.end(1000, 0, True).error == ErrorCode.producer_fenced
    assert n.c.offset_commit_check(TID, 1000, 0, "g") == ErrorCode.producer_fenced
    assert n.c.verify(TID, 1000, 0, [("t", 0)]) == {("t", 0): ErrorCode.producer_fenced}


def test_timeouts_are_bounded_by_the_broker_maximum() -> None:
    n = Node()
    assert n.init(timeout=DEFAULT_MAX_TIMEOUT_MS + 1).error == ErrorCode.invalid_transaction_timeout
    assert n.init(timeout=0).error == ErrorCode.invalid_transaction_timeout
    assert n.init(tid="").error == ErrorCode.invalid_request
    assert TID not in n.c.txns
    assert Node(max_timeout_ms=1000).init(timeout=1001).error == ErrorCode.invalid_transaction_timeout


def test_a_commit_goes_through_prepare_then_complete() -> None:
    n = Node()
    n.init()
    assert n.add(1000, 0, ("t", 0), ("t", 1)).txn is not None
    assert n.txn().state is TxnState.ONGOING and n.txn().start_ms == n.now
    assert n.add(1000, 0, ("t", 1)) == Step(ErrorCode.none)  # already in: nothing to write
    assert n.c.verify(TID, 1000, 0, [("t", 1), ("t", 2)]) == {
        ("t", 1): ErrorCode.none, ("t", 2): ErrorCode.transaction_abortable}
    step = n.end(1000, 0, True)
    assert step.error == ErrorCode.none and n.txn().state is TxnState.PREPARE_COMMIT
    assert [t.transactional_id for t in n.c.preparing()] == [TID]
    # while prepared: everything waits
    assert n.add(1000, 0, ("t", 3)).error == ErrorCode.concurrent_transactions
    assert n.end(1000, 0, True).error == ErrorCode.concurrent_transactions
    assert n.end(1000, 0, False).error == ErrorCode.invalid_txn_state
    assert n.init().error == ErrorCode.concurrent_transactions
    done = n.complete()
    assert (done.state, done.partitions, done.start_ms) == (TxnState.COMPLETE_COMMIT, frozenset(), n.now)
    assert n.end(1000, 0, True) == Step(ErrorCode.none)  # a retry of the finished commit
    assert n.end(1000, 0, False).error == ErrorCode.invalid_txn_state
    assert n.add(1000, 0, ("t", 2)).txn is not None  # the next transaction, same epoch
    assert n.txn().partitions == {("t", 2)}


def test_end_without_a_transaction_and_unknown_ids() -> None:
    n = Node()
    n.init()
    assert n.end(1000, 0, True).error == ErrorCode.invalid_txn_state  # Empty
    assert n.end(999, 0, True).error == ErrorCode.invalid_producer_id_mapping
    assert n.end(1000, 0, True, tid="other").error == ErrorCode.invalid_producer_id_mapping
    assert n.add(1000, 0, ("t", 0), tid="other").error == ErrorCode.invalid_producer_id_mapping


def test_init_during_an_ongoing_transaction_aborts_it_with_a_fence() -> None:
    n = Node()
    n.init()
    n.add(1000, 0, ("t", 0))
    step = n.init()
    assert step.error == ErrorCode.concurrent_transactions and step.txn is not None
    assert (step.txn.state, step.txn.producer_epoch, step.txn.partitions) == (TxnState.PREPARE_ABORT, 1, {("t", 0)})
    assert n.end(1000, 0, True).error == ErrorCode.producer_fenced  # the old producer is fenced at once
    n.complete()
    again = n.init()  # the client's retry: bumped a second time
    assert again.error == ErrorCode.none and again.txn is not None and again.txn.producer_epoch == 2


def test_kip_360_expected_producer_id_and_epoch() -> None:
    n = Node()
    n.init()
    bumped = n.init(expected=(1000, 0))
    assert bumped.txn is not None and bumped.txn.producer_epoch == 1 and bumped.txn.last_producer_epoch == 0
    retried = n.init(expected=(1000, 0))  # its answer was lost: the same epoch again
    assert retried.txn is not None and retried.txn.producer_epoch == 1
    assert n.init(expected=(1000, 5)).error == ErrorCode.producer_fenced
    assert n.init(expected=(42, 1)).error == ErrorCode.producer_fenced
    assert n.init(tid="fresh", expected=(42, 3)).error == ErrorCode.none  # new metadata: epoch -1 accepts any


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    n = Node()
    n.init()
    n.c.apply(TID, Txn(TID, 1000, 32766, 60_000, TxnState.COMPLETE_ABORT, n.now))
    step = n.init(expected=(1000, 32766))
    assert step.txn is not None and (step.txn.producer_id, step.txn.producer_epoch) == (1001, 0)
    assert step.txn.previous_producer_id == 1000
    # a retry naming the old id at the exhausted epoch (its answer was lost) gets the same new id and epoch
    retried = n.init(expected=(1000, 32766))
    assert retried.txn is not None and (retried.txn.producer_id, retried.txn.producer_epoch) == (1001, 0)
    assert n.init(expected=(1000, 32765)).error == ErrorCode.producer_fenced


@pytest.mark.parametrize("by", ["init", "timeout"])
def test_a_fence_at_the_last_usable_epoch_fences_and_the_next_init_rotates(by: str) -> None:
    n = Node()
    n.init()
    n.c.apply(TID, Txn(TID, 1000, MAX_EPOCH - 1, 60_000, TxnState.EMPTY, n.now))
    assert n.add(1000, MAX_EPOCH - 1, ("t", 0)).error == ErrorCode.none
    if by == "init":
        assert n.init().error == ErrorCode.concurrent_transactions
    else:
        [(_, fenced)] = n.c.expire(n.now + 60_000)
        n.c.apply(TID, fenced)
    assert (n.txn().producer_epoch, n.txn().state) == (MAX_EPOCH, TxnState.PREPARE_ABORT)  # the markers' epoch
    n.complete()
    assert n.end(1000, MAX_EPOCH - 1, True).error == ErrorCode.producer_fenced  # the zombie is fenced
    assert n.init(expected=(1000, MAX_EPOCH - 1)).error == ErrorCode.producer_fenced
    step = n.init()
    assert step.txn is not None and (step.txn.producer_id, step.txn.producer_epoch) == (1001, 0)  # never 32767
    assert step.txn.start_ms == -1  # Kafka resets the start time at a rotation and at an epoch bump


def test_an_epoch_bump_resets_the_start_time() -> None:
    n = Node()
    n.init()
    n.add(1000, 0, ("t", 0))
    n.end(1000, 0, False)
    assert n.complete().start_ms == n.now  # kept after the transaction ends
    bumped = n.init().txn
    assert bumped is not None and (bumped.producer_epoch, bumped.start_ms) == (1, -1)
def test_offsets_join_only_after_add_offsets_and_later_ones_win() -> None:
    n = Node()
    n.init()
    assert n.c.offset_commit_check(TID, 1000, 0, "g") == ErrorCode.transaction_abortable
    assert n.run(n.c.add_offsets(TID, 1000, 0, "g", n.now)).txn is not None
    assert n.txn().state is TxnState.ONGOING and n.txn().groups == {"g"}
    assert n.c.offset_commit_check(TID, 1000, 0, "g") == ErrorCode.none
    assert n.c.offset_commit_check(TID, 1000, 0, "other") == ErrorCode.transaction_abortable
    o1, o2 = PendingOffset("g", "in", 0, 5, -1, "", 1), PendingOffset("g", "in", 0, 9, -1, "m", 2)
    n.c.apply(TID, n.c.add_offsets_pending(TID, [o1], n.now))
    n.c.apply(TID, n.c.add_offsets_pending(TID, [o2, PendingOffset("g", "in", 1, 3, -1, "", 2)], n.now))
    assert sorted(o.offset for o in n.txn().offsets) == [3, 9]
    n.end(1000, 0, False)
    assert n.complete().offsets == ()  # an abort drops them


def test_expiry_aborts_timed_out_transactions_and_forgets_idle_ids() -> None:
    n = Node(id_expiration_ms=10_000)
    n.init(timeout=5_000)
    n.init(tid="idle")
    n.add(1000, 0, ("t", 0))
    assert n.c.expire(n.now + 4_999) == []
    n.now += 5_000
    changes = dict(n.c.expire(n.now))
    fenced = changes[TID]
    assert fenced is not None and (fenced.state, fenced.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert "idle" not in changes
    n.c.apply(TID, fenced)
    n.now += 10_000
    assert n.c.expire(n.now) == [("idle", None)]  # a decided transaction is never forgotten


def test_records_round_trip_and_bad_ones_raise() -> None:
    txn = Txn(TID, 7, 3, 60_000, TxnState.ONGOING, 5, 2, 6, 4, frozenset({("t", 1), ("u", 0)}), frozenset({"g"}),
              (PendingOffset("g", "t", 1, 10, 0, "meta", 4),))
    assert Txn.from_record(TID, txn.to_record()) == txn
    for bad in ({**txn.to_record(), "state": "Nope"}, {**txn.to_record(), "pid": "7"},
                {k: v for k, v in txn.to_record().items() if k != "epoch"}):
        with pytest.raises((KeyError, TypeError, ValueError)):
            Txn.from_record(TID, bad)


def test_describe_and_list() -> None:
    n = Node()
    n.init()
    n.init(tid="b")
    n.add(1000, 0, ("t", 1), ("t", 0))
    d = n.c.describe(TID)
    assert d["error_code"] == ErrorCode.none and d["transaction_state"] == "Ongoing"
    assert d["topics"] == [{"topic": "t", "partitions": [0, 1]}]
    assert n.c.describe("nope")["error_code"] == ErrorCode.transactional_id_not_found
    assert {t.transactional_id for t in n.c.list([], [], -1, n.now)} == {TID, "b"}
    assert [t.transactional_id for t in n.c.list(["Ongoing"], [], -1, n.now)] == [TID]
    assert [t.transactional_id for t in n.c.list([], [1001], -1, n.now)] == ["b"]
    assert [t.transactional_id for t in n.c.list([], [], 1, n.now)] == ["b"]  # TID started 0 ms ago, "b" never
    assert {t.transactional_id for t in n.c.list([], [], 1, n.now + 5)} == {TID, "b"}
    assert [t.transactional_id for t in n.c.list([], [], 5, n.now + 5)] == ["b"]  # Kafka: started MORE than 5 ago


def test_orphans_are_the_open_partitions_no_running_transaction_holds() -> None:
    n = Node()
    n.init(tid="running")  # pid 1000
    n.add(1000, 0, ("t", 0), tid="running")
    n.init(tid="done")  # pid 1001
    n.add(1001, 0, ("t", 1), tid="done")
    n.end(1001, 0, True, tid="done")
    n.complete(tid="done")
    ongoing = {1000: [("t", 0)], 1001: [("t", 1)], 555: [("t", 2), ("u", 0)]}
    assert n.c.orphans(ongoing, n.now) == [
        Orphan(555, MAX_EPOCH, False, (("t", 2), ("u", 0)), n.now + DEFAULT_MAX_TIMEOUT_MS),  # nobody's: aborted later
        Orphan(1001, 0, True, (("t", 1),), n.now),  # its commit marker again, at once
    ]


def test_offsets_of_another_nodes_transaction_are_held_by_a_proxy_until_its_marker() -> None:
    """Cluster mode, on a group's coordinator: a proxy holds the offsets TxnOffsetCommit gave for a transactional id
    another node coordinates; it is never timed out, listed or taken for an orphan's owner, a marker of its producer
    at its epoch or later ends it, an older epoch is refused, and it round-trips through its record."""
    n = Node()
    offset = PendingOffset("g", "t", 0, 7, -1, "", n.now)
    step = n.run(n.c.proxy_offsets(TID, 4097, 3, "g", [offset], n.now, 0))
    proxy = n.c.proxies[TID]
    assert TID not in n.c.txns, "kept apart from the ids this node coordinates"
    assert step.error == ErrorCode.none and proxy.proxy and proxy.state is TxnState.ONGOING
    assert (proxy.producer_id, proxy.producer_epoch, proxy.groups, proxy.offsets) == (4097, 3, {"g"}, (offset,))
    assert n.c.pending_offsets("g") == {("t", 0)}, "OffsetFetch require_stable sees it as unstable"
    assert n.c.proxy_offsets(TID, 4097, 2, "g", [], n.now, 0).error == ErrorCode.invalid_producer_epoch
    assert Txn.from_record(TID, proxy.to_record()) == proxy
    own = n.init("own").txn
    assert own is not None and "proxy" not in own.to_record(), "a coordinator's own record is as before"
    far = n.now + 10 * DEFAULT_MAX_TIMEOUT_MS
    assert n.c.expire(far) == [], "past its timeout, the proxy is not aborted here: its coordinator does that"
    assert [t.transactional_id for t in n.c.list([], [], -1, far)] == ["own"]
    assert [o.epoch for o in n.c.orphans({4097: [("t", 1)]}, n.now)] == [MAX_EPOCH], "no owner: not the proxy"
    in_partition = {"g"}.__contains__
    assert n.c.proxies_ended(4097, 2, in_partition) == [], "an older epoch's marker"
    assert n.c.proxies_ended(4098, 3, in_partition) == [], "another producer's"
    assert n.c.proxies_ended(4097, 3, lambda g: False) == [], "another partition's"
    assert n.c.proxies_ended(4097, 4, in_partition) == [proxy], "the marker, at the bumped epoch (version 2)"
    newer = n.run(n.c.proxy_offsets(TID, 4097, 5, "h", [], n.now, 0)).txn
    assert newer is not None and (newer.producer_epoch, newer.groups, newer.offsets) == (5, {"h"}, ())
    assert n.c.proxy_offsets("own", 4097, 5, "g", [], n.now, 0).error == ErrorCode.invalid_txn_state


def test_a_marker_arriving_while_a_group_is_verified_stops_the_late_proxy() -> None:
    """Cluster mode, on a group's coordinator: a TxnOffsetCommit takes a guard, asks the transaction's coordinator,
    and the marker ending that transaction (producer 4097, epoch 3 kept: transaction version 1) arrives before the
    proxy is written. The late write is refused (Kafka's verification guard) instead of holding offsets nobody ends:
    nothing pending for require_stable, and the producer's next transaction (same epoch) holds only its own offsets.
    Another producer's marker does not stop it."""
    n = Node()
    first = n.c.proxy_guard(4097)
    other = n.c.proxy_guard(4098)
    assert n.c.proxies_ended(4097, 3, {"g"}.__contains__) == []
    n.c.marker_arrived(4097)  # the abort marker of transaction 1: nothing held yet
    late = n.c.proxy_offsets(TID, 4097, 3, "g", [PendingOffset("g", "t", 0, 100, -1, "", n.now)], n.now, first)
    assert (late.error, late.txn) == (ErrorCode.transaction_abortable, None)
    assert n.c.pending_offsets("g") == set()
    unrelated = n.c.proxy_offsets("app-2", 4098, 0, "g", [PendingOffset("g", "t", 2, 1, -1, "", n.now)], n.now, other)
    assert unrelated.error == ErrorCode.none, "a marker of another producer id leaves its guard standing"
    second = n.c.proxy_guard(4097)  # transaction 2, same producer id and epoch
    n.run(n.c.proxy_offsets(TID, 4097, 3, "g", [PendingOffset("g", "t", 1, 5, -1, "", n.now)], n.now, second))
    assert [(o.partition, o.offset) for o in n.c.proxies[TID].offsets] == [(1, 5)]


def test_the_proxy_guards_remember_a_bounded_number_of_producers_and_refuse_when_unsure() -> None:
    n = Node()
    before = n.c.proxy_guard(1)
    for pid in range(2, 2 + 65_537):  # one more producer id than remembered: producer 2 is forgotten, so a guard
        # taken before its marker is stale for any producer id not remembered (1 had no marker: refused, to be safe)
        n.c.marker_arrived(pid)
    assert n.c.proxy_offsets(TID, 1, 0, "g", [], n.now, before).error == ErrorCode.transaction_abortable
    assert n.c.proxy_offsets(TID, 1, 0, "g", [], n.now, n.c.proxy_guard(1)).error == ErrorCode.none


def test_a_groups_coordinator_partition_verifies_as_in_the_transaction_only_while_it_is_ongoing() -> None:
    """AddPartitionsToTxn verify_only from a group's coordinator (TxnOffsetCommit v0-v4): the group's
    ``__consumer_offsets`` partition is in the transaction when a group it coordinates was added (AddOffsetsToTxn),
    never added by the question, and not once the transaction ended."""
    n = Node()
    pid = n.run(n.init()).txn.producer_id  # type: ignore[union-attr]
    by_group = {"g": ("__consumer_offsets", 1), "h": ("__consumer_offsets", 2)}.__getitem__
    asked = [("__consumer_offsets", 1), ("__consumer_offsets", 2)]
    assert n.c.verify(TID, pid, 0, asked, by_group) == dict.fromkeys(asked, ErrorCode.transaction_abortable)
    assert n.txn().state is TxnState.EMPTY, "verifying starts nothing"
    n.run(n.c.add_offsets(TID, pid, 0, "g", n.now))
    assert n.c.verify(TID, pid, 0, asked, by_group) == {asked[0]: ErrorCode.none,
                                                         asked[1]: ErrorCode.transaction_abortable}
    assert n.c.verify(TID, pid, 0, asked[:1]) == {asked[0]: ErrorCode.transaction_abortable}, "no groups: partitions"
    n.end(pid, 0, False)
    n.complete()
    assert n.c.verify(TID, pid, 0, asked, by_group) == dict.fromkeys(asked, ErrorCode.transaction_abortable)


def test_a_proxy_untouched_for_its_timeout_is_due_for_the_question_to_its_coordinator() -> None:
    n = Node()
    n.run(n.c.proxy_offsets(TID, 4097, 3, "g", [PendingOffset("g", "t", 0, 1, -1, "", n.now)], n.now, 0))
    n.init("own")
    timeout = n.c.proxies[TID].timeout_ms
    assert n.c.proxies_due(n.now + timeout - 1) == []
    n.run(n.c.proxy_offsets(TID, 4097, 3, "g", [], n.now + 10, 0))  # written to again: its timeout starts again
    assert n.c.proxies_due(n.now + timeout) == []
    assert n.c.proxies_due(n.now + 10 + timeout) == [n.c.proxies[TID]], "the proxy only, not the coordinator's own id"


def test_a_replicated_node_holds_offsets_for_an_id_it_coordinates_too_and_splits_them_by_partition() -> None:
    """A replicated cluster (``kept_apart``): the states and the held offsets are in different records, so a node
    that coordinates an id holds offsets for it as well, each apart; a proxy's part per coordinator partition
    (:func:`proxy_part`) and the parts loaded from several partitions joined again (:func:`merge_proxies`)."""
    n = Node()
    n.c.kept_apart = True
    own = n.init().txn
    assert own is not None
    g1, h1 = PendingOffset("g", "t", 0, 7, -1, "", n.now), PendingOffset("h", "t", 1, 9, -1, "", n.now)
    held = n.run(n.c.proxy_offsets(TID, own.producer_id, own.producer_epoch, "g", [g1], n.now, 0)).txn
    assert held is not None and n.c.txns[TID] == own, "the id's own state is untouched"
    held = n.run(n.c.proxy_offsets(TID, own.producer_id, own.producer_epoch, "h", [h1], n.now + 1, 0)).txn
    assert held is not None and held.groups == {"g", "h"} and n.c.pending_offsets("h") == {("t", 1)}
    in_g = proxy_part(held, "g".__eq__)
    in_h = proxy_part(held, "h".__eq__)
    assert in_g is not None and in_h is not None and proxy_part(held, "x".__eq__) is None
    assert (in_g.groups, in_g.offsets, in_h.groups, in_h.offsets) == ({"g"}, (g1,), {"h"}, (h1,))
    joined = merge_proxies(merge_proxies(None, in_g), in_h)
    assert (joined.groups, set(joined.offsets)) == (held.groups, set(held.offsets))
    later = replace(in_h, producer_epoch=in_h.producer_epoch + 1, last_update_ms=n.now + 5)
    assert merge_proxies(in_g, later) == later, "another epoch's: the one written last"
    assert merge_proxies(later, in_g) == later
    n.c.apply(TID, None, proxy=True)
    assert TID not in n.c.proxies and n.c.txns[TID] == own, "dropping the held offsets leaves the state"
