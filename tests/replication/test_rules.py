"""walgate's replication rules one by one, on hand-built states (the simulation checks them together)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from walgate.replication.epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEnd,
    EpochEntry,
    LeaderEpochCache,
    follower_truncation,
)
from walgate.replication.leader import LeaderView, ack_status
from walgate.replication.partition import (
    NO_LEADER,
    AlterIsr,
    IsrMember,
    PartitionState,
    alter_partition,
    change_isr,
    check_leader_epoch,
    initial_state,
    leads,
    reconcile,
    reconfigure,
)
from walgate.wire.errors import ErrorCode


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(tuple(EpochEntry(e, s) for e, s in entries))


def truncate_fully(follower: LeaderEpochCache, follower_end: int, leader: LeaderEpochCache, leader_end: int) -> int:
    """The OffsetForLeaderEpoch exchange repeated until done, as a follower runs it; returns the follower's end."""
    for _ in range(10):
        answer = leader.end_offset_for(follower.latest_epoch, leader_end)
        step = follower_truncation(follower, follower_end, answer)
        follower_end = step.offset
        follower.truncate_from_end(follower_end)
        if step.done:
            return follower_end
    raise AssertionError("the truncation did not end")


# -- leader epochs (KIP-101, KIP-279) --------------------------------------------------------------------------


def test_end_offset_for_answers_as_offset_for_leader_epoch() -> None:
    leader = cache((0, 0), (2, 5), (4, 9))
    assert leader.end_offset_for(4, 12) == EpochEnd(4, 12)          # the latest epoch ends at the log end
    assert leader.end_offset_for(2, 12) == EpochEnd(2, 9)           # an epoch held ends where the next starts
    assert leader.end_offset_for(3, 12) == EpochEnd(2, 9)           # one not held: the largest below it
    assert leader.end_offset_for(5, 12) == EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert leader.end_offset_for(UNDEFINED_EPOCH, 12) == EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache((3, 7)).end_offset_for(1, 9) == EpochEnd(1, 7)     # below every epoch held: the first start
    assert LeaderEpochCache().end_offset_for(0, 0) == EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_epoch_at_names_the_epoch_whose_leader_wrote_an_offset() -> None:
    leader = cache((0, 0), (2, 5), (4, 9))
    assert [leader.epoch_at(o) for o in (0, 4, 5, 8, 9, 100)] == [0, 0, 2, 2, 4, 4]  # Kafka's epochForOffset
    assert cache((3, 7)).epoch_at(6) == UNDEFINED_EPOCH  # before every epoch held
    assert LeaderEpochCache().epoch_at(0) == UNDEFINED_EPOCH


def test_assign_and_truncate_keep_epochs_and_starts_increasing() -> None:
    epochs = cache((0, 0), (2, 5))
    epochs.assign(2, 7)                                             # the same epoch again: kept as it was
    assert epochs.entries == (EpochEntry(0, 0), EpochEntry(2, 5))
    epochs.assign(3, 4)                                             # a start below a later one replaces it
    assert epochs.entries == (EpochEntry(0, 0), EpochEntry(3, 4))
    epochs.truncate_from_end(4)
    assert epochs.entries == (EpochEntry(0, 0),) and epochs.latest_epoch == 0
    with pytest.raises(ValueError):
        epochs.assign(-1, 0)


def test_follower_drops_the_tail_an_old_leader_never_replicated() -> None:
    """KIP-101: the follower led epoch 1 and wrote 3..5 nobody copied; the leader of epoch 2 wrote from 3 on. The
    follower keeps 0..2 (its epoch 0, which ends at 3), not what the high watermark or the log end would keep."""
    follower = cache((0, 0), (1, 3))
    assert truncate_fully(follower, 6, cache((0, 0), (2, 3)), 8) == 3
    assert follower.entries == (EpochEntry(0, 0),)


def test_fast_double_failover_truncates_in_several_rounds() -> None:
    """KIP-279: the follower's latest epoch (3) is unknown to the leader, which answers its epoch 2, unknown to the
    follower: it truncates to where its own epoch 3 started, asks again with epoch 1 and stops where the leader's
    epoch 1 ended."""
    leader = cache((1, 0), (2, 4), (4, 6))
    follower = cache((1, 0), (3, 5))
    first = follower_truncation(follower, 7, leader.end_offset_for(3, 9))
    assert (first.offset, first.done) == (5, False)
    assert truncate_fully(follower, 7, leader, 9) == 4


def test_follower_of_an_empty_leader_truncates_everything() -> None:
    assert truncate_fully(cache((0, 0)), 5, LeaderEpochCache(), 0) == 0


# -- partition state: leader epochs, AlterPartition, the controller --------------------------------------------


def state(isr: dict[int, int], leader: int = 0, elr: tuple[int, ...] = (), unclean: bool = False) -> PartitionState:
    return PartitionState((0, 1, 2), leader, 5, 10, tuple(IsrMember(r, e) for r, e in sorted(isr.items())), elr, 2,
                          unclean)


def test_leader_epoch_fencing() -> None:
    assert check_leader_epoch(5, 4) == ErrorCode.fenced_leader_epoch
    assert check_leader_epoch(5, 6) == ErrorCode.unknown_leader_epoch
    assert check_leader_epoch(5, 5) is None


def test_initial_state_and_leads() -> None:
    first = initial_state((0, 1, 2), {0: 7, 1: 8, 2: 9}, 2)
    assert (first.leader, first.leader_epoch, first.isr_ids) == (0, 0, frozenset({0, 1, 2}))
    assert leads(first, 0, 7) and not leads(first, 0, 11) and not leads(first, 1, 8)
    with pytest.raises(ValueError):
        initial_state((0, 1), {}, 3)


def test_alter_partition_is_a_compare_and_swap() -> None:
    """KIP-497: applied on the partition epoch read; a deposed leader is fenced; a joiner must be registered under
    the broker epoch it fetched with (KIP-903); the proposer itself must be registered under the broker epoch it
    leads under (Kafka's STALE_BROKER_EPOCH)."""
    current = state({0: 7, 1: 8})
    grow = AlterIsr(0, 5, 10, (IsrMember(0, 7), IsrMember(1, 8), IsrMember(2, 9)), 7)
    assert alter_partition(current, AlterIsr(0, 5, 9, grow.isr, 7), {0: 7, 1: 8, 2: 9}) == ErrorCode.invalid_update_version
    assert alter_partition(current, AlterIsr(0, 4, 10, grow.isr, 7), {0: 7, 1: 8, 2: 9}) == ErrorCode.fenced_leader_epoch
    assert alter_partition(current, grow, {0: 7, 1: 8, 2: 12}) == ErrorCode.ineligible_replica
    assert alter_partition(current, grow, {0: 7, 1: 8}) == ErrorCode.ineligible_replica
    assert alter_partition(current, AlterIsr(0, 5, 10, (IsrMember(1, 8),), 7), {0: 7}) == ErrorCode.invalid_request
    grown = alter_partition(current, grow, {0: 7, 1: 8, 2: 9})
    assert isinstance(grown, PartitionState)
    assert grown.isr_ids == {0, 1, 2} and grown.partition_epoch == 11 and grown.leader_epoch == 5


def test_a_fenced_or_restarted_leader_s_proposal_is_a_stale_broker_epoch() -> None:
    """A zombie leader (paused past its lease: not registered) that shrinks the ISR to itself is refused, so the
    controller elects an in-sync follower instead of leaving the partition leaderless (r25p #3); so is the leader's
    next process (registered under a new broker epoch, its ISR entry the old one's)."""
    current = state({0: 7, 1: 8, 2: 9})
    alone = AlterIsr(0, 5, 10, (IsrMember(0, 7),), 7)
    assert alter_partition(current, alone, {1: 8, 2: 9}) == ErrorCode.stale_broker_epoch
    elected = reconcile(current, {1: 8, 2: 9})  # what the controller does instead: an in-sync follower leads
    assert elected is not None and elected.leader == 1 and elected.isr_ids == {1, 2}
    assert alter_partition(current, alone, {0: 11, 1: 8, 2: 9}) == ErrorCode.stale_broker_epoch
    assert alter_partition(current, AlterIsr(0, 5, 10, (IsrMember(0, 11),), 11), {0: 11, 1: 8, 2: 9}
                           ) == ErrorCode.stale_broker_epoch  # registered under 11, but the ISR's leader is 7
    shrunk = alter_partition(current, alone, {0: 7, 1: 8, 2: 9})
    assert isinstance(shrunk, PartitionState) and shrunk.isr_ids == {0}


def test_isr_below_min_moves_the_leavers_to_the_elr() -> None:
    """KIP-966: while the ISR has min.insync.replicas members the ELR is empty; below, whoever leaves it joins the
    ELR, unless its disk was lost."""
    full = state({0: 7, 1: 8, 2: 9})
    assert change_isr(full, (IsrMember(0, 7), IsrMember(1, 8))).elr == ()
    alone = change_isr(change_isr(full, (IsrMember(0, 7), IsrMember(1, 8))), (IsrMember(0, 7),))
    assert alone.elr == (1,) and alone.partition_epoch == 12
    assert change_isr(full, (IsrMember(0, 7),), wiped=frozenset({2})).elr == (1,)
    assert change_isr(alone, (IsrMember(0, 7), IsrMember(2, 9))).elr == ()


def test_a_changed_min_isr_or_unclean_setting_clears_the_elr() -> None:
    """KIP-966: a topic's min.insync.replicas (or unclean election) altered: the state takes it, its ELR cleared
    and its partition epoch bumped; unchanged settings leave the state as it is."""
    alone = change_isr(change_isr(state({0: 7, 1: 8, 2: 9}), (IsrMember(0, 7), IsrMember(1, 8))), (IsrMember(0, 7),))
    assert alone.elr == (1,) and alone.min_isr == 2
    assert reconfigure(alone, 2, False) is alone
    for min_isr, unclean in ((1, False), (3, False), (2, True)):
        new = reconfigure(alone, min_isr, unclean)
        assert (new.min_isr, new.unclean_election, new.elr, new.partition_epoch) == (min_isr, unclean, (), 13)
        assert (new.isr, new.leader, new.leader_epoch) == (alone.isr, alone.leader, alone.leader_epoch)


def test_controller_elects_from_the_isr_in_replica_order() -> None:
    new = reconcile(state({0: 7, 1: 8, 2: 9}), {1: 8, 2: 9})  # the leader's lease ended
    assert new is not None
    assert (new.leader, new.leader_epoch, new.isr_ids, new.elr) == (1, 6, {1, 2}, ())
    assert new.partition_epoch > 10
    assert reconcile(new, {1: 8, 2: 9}) is None


def test_controller_fences_a_restarted_broker_and_elects_from_the_elr() -> None:
    """The leader restarted under a new broker epoch (KIP-903: it is no longer the ISR member) while the other ISR
    member is down: both leave the ISR for the ELR, and the restarted one, its disk intact, is elected from it."""
    new = reconcile(state({0: 7, 1: 8}), {0: 20, 2: 9})
    assert new is not None
    assert (new.leader, new.isr, new.elr, new.leader_epoch) == (0, (IsrMember(0, 20),), (1,), 6)
    assert leads(new, 0, 20) and not leads(new, 0, 7)


def test_a_wiped_replica_is_not_eligible_and_unclean_election_is_opt_in() -> None:
    """Replica 1, in the ELR, came back with an empty disk: the partition has no leader until replica 0 (down, its
    disk intact, so in the ELR) returns, unless the topic allows unclean election."""
    down = state({0: 7}, elr=(1,))
    offline = reconcile(down, {1: 30}, wiped=frozenset({1}))
    assert offline is not None and (offline.leader, offline.leader_epoch, offline.isr, offline.elr) == (
        NO_LEADER, 6, (), (0,))
    assert reconcile(offline, {1: 30}) is None
    back = reconcile(offline, {0: 31, 1: 30})
    assert back is not None and (back.leader, back.isr, back.leader_epoch) == (0, (IsrMember(0, 31),), 7)
    unclean = reconcile(state({0: 7}, elr=(1,), unclean=True), {2: 40}, wiped=frozenset({1}))
    assert unclean is not None and (unclean.leader, unclean.isr, unclean.elr) == (2, (IsrMember(2, 40),), ())


# -- the leader's view -----------------------------------------------------------------------------------------


def view(isr: dict[int, int], hw: int = 0, now: int = 0) -> LeaderView:
    return LeaderView(0, isr[0], state(isr), epoch_start=0, hw=hw, now_ms=now, lag_max_ms=100)


def test_follower_fetches_are_fenced() -> None:
    lead = view({0: 7, 1: 8})
    assert lead.on_fetch(1, 8, 8, 4, 0, 0, 10, 1) == ErrorCode.fenced_leader_epoch
    assert lead.on_fetch(1, 8, 8, 6, 0, 0, 10, 1) == ErrorCode.unknown_leader_epoch
    assert lead.on_fetch(1, 8, 9, 5, 0, 0, 10, 1) == ErrorCode.stale_broker_epoch      # registered again since
    assert lead.on_fetch(3, 8, 8, 5, 0, 0, 10, 1) == ErrorCode.not_leader_or_follower
    assert lead.on_fetch(1, 8, 8, 5, 11, 0, 10, 1) == ErrorCode.offset_out_of_range
    assert lead.on_fetch(1, 9, 9, 5, 4, 4, 10, 1) is None
    assert lead.on_fetch(1, 8, None, 5, 4, 4, 10, 1) == ErrorCode.stale_broker_epoch   # older than one seen


def test_high_watermark_counts_durable_ends_and_needs_min_isr() -> None:
    lead = view({0: 7, 1: 8, 2: 9})
    assert lead.on_fetch(1, 8, 8, 5, 10, 6, 10, 1) is None
    assert lead.update_hw(10, 10) == 0                      # replica 2 has not fetched: its position is unknown
    assert lead.on_fetch(2, 9, 9, 5, 10, 10, 10, 2) is None
    assert lead.update_hw(10, 8) == 6                       # min of the durable ends 8 (leader), 6, 10
    assert lead.on_fetch(1, 8, 8, 5, 10, 3, 10, 3) is None  # a position reported lower never moves it back
    assert lead.update_hw(10, 10) == 6
    alone = view({0: 7}, hw=2)
    assert alone.update_hw(10, 10) == 2                     # below min.insync.replicas: no advance
    assert alone.check_produce() == ErrorCode.not_enough_replicas


def test_the_low_watermark_is_the_least_log_start_of_the_registered_replicas() -> None:
    """KIP-107's DeleteRecords waits for it (Kafka's ``Partition.lowWatermarkIfLeader``): a registered replica that
    has not fetched counts 0, one that reported no log starts (WalFetch v0) is not counted, one not registered is
    not counted."""
    lead = view({0: 7, 1: 8, 2: 9})
    everyone = {0, 1, 2}.__contains__
    assert lead.low_watermark("t", 5, everyone) == 0                          # replicas 1 and 2 never fetched
    assert lead.on_fetch(1, 8, 8, 5, 10, 10, 10, 1, {"t": 5}) is None
    assert lead.on_fetch(2, 9, 9, 5, 10, 10, 10, 1, {"t": 3, "u": 9}) is None
    assert lead.low_watermark("t", 5, everyone) == 3
    assert lead.low_watermark("u", 9, everyone) == 0                          # replica 1 holds u from 0
    assert lead.low_watermark("t", 5, {0, 1}.__contains__) == 5               # replica 2 no longer registered
    assert lead.on_fetch(2, 9, 9, 5, 10, 10, 10, 2) is None                   # an older release's fetch
    assert lead.low_watermark("t", 5, everyone) == 5


def test_isr_shrinks_after_the_lag_time_and_expands_when_caught_up() -> None:
    lead = view({0: 7, 1: 8, 2: 9})
    assert lead.on_fetch(1, 8, 8, 5, 10, 10, 10, 10) is None   # caught up at 10
    assert lead.on_fetch(2, 9, 9, 5, 10, 10, 10, 10) is None
    assert lead.on_fetch(2, 9, 9, 5, 10, 10, 20, 50) is None   # reached the end of its previous fetch: 10
    assert lead.on_fetch(1, 8, 8, 5, 20, 20, 20, 100) is None  # caught up at 100
    assert lead.propose(105, {1: 8, 2: 9}) is None
    shrink = lead.propose(111, {1: 8, 2: 9})                    # 2 has not been caught up since 10 (> 100 ms)
    assert shrink is not None and [m.replica for m in shrink.isr] == [0, 1]
    assert lead.propose(111, {1: 8, 2: 9}) is None             # one proposal in flight at a time
    shrunk = alter_partition(lead.state, shrink, {0: 7, 1: 8, 2: 9})
    assert isinstance(shrunk, PartitionState)
    lead.on_state(shrunk)
    assert lead.update_hw(20, 20) == 20                        # 0 and 1 hold 20 durably; 2 no longer counts
    assert lead.on_fetch(2, 9, 9, 5, 20, 15, 20, 120) is None  # fetched to the end, durable below the hw
    assert lead.propose(120, {1: 8, 2: 9}) is None
    assert lead.on_fetch(2, 9, 9, 5, 20, 20, 20, 125) is None
    assert lead.propose(125, {1: 8, 2: 12}) is None            # registered again since that fetch (KIP-903)
    grow = lead.propose(125, {1: 8, 2: 9})
    assert grow is not None and IsrMember(2, 9) in grow.isr


def test_a_follower_no_longer_a_replica_never_joins_an_expansion() -> None:
    """A replica being added by a reassignment fetched and caught up; the move was cancelled (it is no replica
    now): the expansion the leader proposes for replica 2, caught up again, does not name it (the controller would
    refuse the whole proposal, every time: the 10,000-seed simulation's replica_moves seeds 5089, 5889, 7459)."""
    lead = view({0: 7, 1: 8})
    adding = replace(lead.state, replicas=(0, 1, 2, 3), adding=(3,), partition_epoch=11)
    lead.on_state(adding)
    assert lead.on_fetch(3, 4, 4, 5, 0, 0, 0, 1) is None      # the adding replica caught up at the hw (0)
    lead.on_state(replace(adding, replicas=(0, 1, 2), adding=(), partition_epoch=12))  # the move cancelled
    assert lead.on_fetch(3, 4, 4, 5, 0, 0, 0, 2) == ErrorCode.not_leader_or_follower
    assert lead.on_fetch(2, 9, 9, 5, 0, 0, 0, 3) is None
    grow = lead.propose(3, {1: 8, 2: 9, 3: 4})
    assert grow is not None and [m.replica for m in grow.isr] == [0, 1, 2]
    assert isinstance(alter_partition(lead.state, grow, {0: 7, 1: 8, 2: 9, 3: 4}), PartitionState)


def test_a_member_back_under_a_new_broker_epoch_does_not_count() -> None:
    """KIP-903: replica 2 restarted (perhaps with an empty disk): its fetches do not stand for the ISR member
    admitted under broker epoch 9, which is out of sync at once."""
    lead = view({0: 7, 1: 8, 2: 9})
    assert lead.on_fetch(1, 8, 8, 5, 10, 10, 10, 1) is None
    assert lead.on_fetch(2, 12, 12, 5, 0, 0, 10, 1) is None
    assert lead.update_hw(10, 10) == 0
    shrink = lead.propose(2, {1: 8, 2: 12})
    assert shrink is not None and [m.replica for m in shrink.isr] == [0, 1]


def test_acks_all_waits_for_the_high_watermark() -> None:
    assert ack_status(5, 5, 3, 2) is None
    assert ack_status(6, 5, 3, 2) == ErrorCode.none
    assert ack_status(6, 5, 1, 2) == ErrorCode.not_enough_replicas_after_append
