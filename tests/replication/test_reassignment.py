"""KIP-455's replica moves on partition states: the requests and the controller's completion by hand, then a
hypothesis state machine mixing moves, cancellations, catch-ups, ISR shrinks, kills, restarts and the controller's
passes, checking the invariants after every step. Seeded and bounded; ``WALGATE_FUZZ_LONG=1`` runs 20 times the
examples with fresh randomness."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from walgate.cluster.partition_codec import (
    PartitionId,
    PartitionStateDamaged,
    ReplicatedVnode,
    decode_state,
    encode_state,
    missing_states,
)
from walgate.replication.partition import (
    NO_LEADER,
    AlterIsr,
    IsrMember,
    PartitionState,
    alter_partition,
    initial_state,
    reconcile,
)
from walgate.replication.reassignment import Refusal, cancel, reassign
from walgate.wire.errors import ErrorCode

LONG = os.environ.get("WALGATE_FUZZ_LONG") == "1"

LIVE = {1: 10, 2: 20, 3: 30, 4: 40}


def admit(state: PartitionState, replica: int, live: Mapping[int, int]) -> PartitionState:
    """The leader's AlterPartition adding ``replica`` (caught up) to the ISR."""
    proposal = AlterIsr(state.leader, state.leader_epoch, state.partition_epoch,
                        (*state.isr, IsrMember(replica, live[replica])), live[state.leader])
    new = alter_partition(state, proposal, live)
    assert isinstance(new, PartitionState), new
    return new


def test_a_move_adds_catches_up_then_completes_and_elects_from_the_target() -> None:
    state = initial_state((1, 2), LIVE, 1)
    moving = reassign(state, (3, 2), LIVE)
    assert isinstance(moving, PartitionState)
    assert (moving.replicas, moving.adding, moving.removing) == ((3, 2, 1), (3,), (1,))
    assert (moving.leader, moving.leader_epoch, moving.target, moving.original) == (1, 0, (3, 2), (2, 1))
    assert 3 not in moving.isr_ids and reconcile(moving, LIVE) is None  # not caught up: the move waits
    caught_up = admit(moving, 3, LIVE)
    done = reconcile(caught_up, LIVE)
    assert done is not None
    assert (done.replicas, done.adding, done.removing, done.isr_ids) == ((3, 2), (), (), {2, 3})
    assert (done.leader, done.leader_epoch) == (3, 1)  # the removed leader replaced, one new epoch
    assert decode_state(encode_state(done), done.partition_epoch) == done


def test_a_move_keeps_a_leader_that_stays() -> None:
    state = initial_state((1, 2), LIVE, 1)
    moving = reassign(state, (1, 3), LIVE)
    assert isinstance(moving, PartitionState)
    done = reconcile(admit(moving, 3, LIVE), LIVE)
    assert done is not None and (done.replicas, done.leader, done.leader_epoch) == ((1, 3), 1, 0)


def test_lowering_the_replication_factor_completes_at_once() -> None:
    state = initial_state((1, 2, 3), LIVE, 2)
    lowered = reassign(state, (2, 3), LIVE)
    assert isinstance(lowered, PartitionState)
    assert (lowered.replicas, lowered.isr_ids, lowered.moving) == ((2, 3), {2, 3}, False)
    assert (lowered.leader, lowered.leader_epoch) == (2, 1)


def test_an_adding_replica_is_never_elected_before_it_joins_the_isr() -> None:
    state = initial_state((1, 2), LIVE, 1, unclean_election=True)
    moving = reassign(state, (3, 4), LIVE)
    assert isinstance(moving, PartitionState)
    both_down = {3: 30, 4: 40}
    offline = reconcile(moving, both_down)
    assert offline is not None and offline.leader == NO_LEADER  # no unclean election of an empty log
    back = reconcile(offline, {**both_down, 2: 21})  # 2 restarted: unclean, it holds the data
    assert back is not None and back.leader == 2 and back.isr_ids == {2}


def test_a_move_replaced_by_another_removes_the_first_ones_adding_replicas() -> None:
    state = initial_state((1, 2), LIVE, 1)
    first = reassign(state, (3, 2), LIVE)
    assert isinstance(first, PartitionState)
    second = reassign(first, (4, 2), LIVE)
    assert isinstance(second, PartitionState)
    assert (second.replicas, second.adding, second.removing) == ((4, 2, 1, 3), (4,), (1, 3))


def test_a_move_asked_again_keeps_its_adding_replicas_out_of_unclean_elections() -> None:
    """(Found by the state machine: the same move asked again while its adding replica had not caught up made it an
    original replica, which an unclean election then chose with an empty log.)"""
    moving = reassign(initial_state((1, 2), LIVE, 1, unclean_election=True), (3,), LIVE)
    assert isinstance(moving, PartitionState) and moving.adding == (3,)
    only_3 = {3: 30}
    again = reassign(moving, (3,), only_3)
    assert isinstance(again, PartitionState)
    assert (again.adding, again.removing, again.leader) == ((3,), (1, 2), NO_LEADER)
    other = reassign(moving, (3, 4), LIVE)
    assert isinstance(other, PartitionState) and (other.adding, other.original) == ((3, 4), (1, 2))


def test_cancellation_reverts_to_the_original_replicas() -> None:
    state = initial_state((1, 2), LIVE, 1)
    moving = reassign(state, (3, 4), LIVE)
    assert isinstance(moving, PartitionState)
    reverted = cancel(admit(moving, 3, LIVE), LIVE)
    assert isinstance(reverted, PartitionState)
    assert (reverted.replicas, reverted.isr_ids, reverted.moving, reverted.leader, reverted.leader_epoch) == (
        (1, 2), {1, 2}, False, 1, 0)
    assert cancel(reverted, LIVE) == Refusal(ErrorCode.no_reassignment_in_progress,
                                             "no reassignment is in progress for this partition")


def test_cancelling_replaces_an_adding_leader() -> None:
    moving = reassign(initial_state((1, 2), LIVE, 1), (3, 4), LIVE)
    assert isinstance(moving, PartitionState)
    without_1 = {2: 20, 3: 30, 4: 40}
    failed_over = reconcile(admit(moving, 3, LIVE), without_1)  # 1 lost its lease: 3 is in sync and first
    assert failed_over is not None and (failed_over.leader, failed_over.leader_epoch) == (3, 1)
    reverted = cancel(failed_over, without_1)
    assert isinstance(reverted, PartitionState)
    assert (reverted.replicas, reverted.isr_ids, reverted.leader, reverted.leader_epoch) == ((1, 2), {2}, 2, 2)


def test_cancelling_needs_unclean_election_when_only_adding_replicas_are_in_sync() -> None:
    for unclean in (False, True):
        moving = reassign(initial_state((1,), LIVE, 1, unclean), (2, 3), LIVE)
        assert isinstance(moving, PartitionState) and (moving.adding, moving.removing) == ((2, 3), (1,))
        only_adding = reconcile(admit(moving, 2, LIVE), {2: 20, 3: 30})  # 1 lost its lease: 2 leads
        assert only_adding is not None and (only_adding.leader, only_adding.isr_ids) == (2, {2})
        reverted = cancel(only_adding, {1: 11, 2: 20, 3: 30})  # 1 back under a new broker epoch
        if unclean:
            assert isinstance(reverted, PartitionState)
            assert (reverted.replicas, reverted.leader, reverted.isr) == ((1,), 1, (IsrMember(1, 11),))
        else:
            assert isinstance(reverted, Refusal) and reverted.error == ErrorCode.invalid_replica_assignment


def test_invalid_targets_are_refused() -> None:
    state = initial_state((1, 2), LIVE, 2)
    for target, why in [((), "empty"), ((3, 3), "repeats"), ((1, 9), "broker 9"), ((3,), "min.insync.replicas")]:
        refusal = reassign(state, target, LIVE)
        assert isinstance(refusal, Refusal) and refusal.error == ErrorCode.invalid_replica_assignment
        assert why in refusal.message


def test_a_state_made_again_mid_move_keeps_its_adding_replicas_out_of_the_isr_and_completes_the_move() -> None:
    """KIP-455: a state the controller makes again from the catalog's ``place_vgroup`` record of a move in progress
    (its key deleted) carries the move, and its adding replica, which may hold nothing, is neither in the ISR nor
    the leader, even when listed first; the move completes once the leader admits it."""
    moving = reassign(initial_state((1, 2), LIVE, 1), (3, 2), LIVE)
    assert isinstance(moving, PartitionState)
    again = initial_state(moving.replicas, LIVE, 1, False, moving.adding, moving.removing)
    assert (again.replicas, again.adding, again.removing) == ((3, 2, 1), (3,), (1,))
    assert (again.isr_ids, again.leader, again.leader_epoch) == ({1, 2}, 2, 0)
    assert reconcile(again, LIVE) is None, "the adding replica has not caught up: the move waits"
    done = reconcile(admit(again, 3, LIVE), LIVE)
    assert done is not None and (done.replicas, done.moving, done.leader) == ((3, 2), False, 2)
    only_adding = initial_state((3, 2, 1), {3: 30}, 1, True, (3,), (1,))
    assert (only_adding.isr, only_adding.leader) == ((), NO_LEADER)
    assert reconcile(only_adding, {3: 30}) is None, "not even uncleanly elected"
    for adding, removing in [((2,), (2,)), ((9,), ()), ((), (3,)), ((3, 3), ()), ((), (3, 2, 1))]:
        with pytest.raises(ValueError, match="a move of replicas"):
            initial_state((3, 2, 1), LIVE, 1, False, adding, removing)


def test_missing_states_carry_the_catalogs_move_and_wait_for_a_replica_not_being_added() -> None:
    moving, other = PartitionId("d", 0), PartitionId("d", 1)
    catalog = {moving: ReplicatedVnode((3, 2, 1), 1, False, (3,), (1,)), other: ReplicatedVnode((3, 2), 1)}
    states, refused = missing_states(catalog, (), {3: 30}, 1)
    assert (list(states), refused) == ([other], {}), "only the adding replica registered: no state for d/0 yet"
    states, _ = missing_states(catalog, (), {1: 10, 3: 30}, 1)
    assert (states[moving].isr_ids, states[moving].leader, states[moving].adding) == ({1}, 1, (3,))
    _, refused = missing_states({moving: ReplicatedVnode((3, 2, 1), 1, False, (1,), (1,))}, (), LIVE, 1)
    assert "a move of replicas" in refused[moving]


def test_codec_keeps_the_move_and_reads_values_without_it() -> None:
    moving = reassign(initial_state((1, 2), LIVE, 1), (3, 2), LIVE)
    assert isinstance(moving, PartitionState)
    value = encode_state(moving)
    assert b'"adding": [3]' in value and b'"removing": [1]' in value
    assert decode_state(value, 7) == replace(moving, partition_epoch=7)
    old = b'{"elr": [], "isr": [[1, 10]], "leader": 1, "leader_epoch": 0, "min_isr": 1, "replicas": [1], "unclean": false}'
    assert decode_state(old, 3).adding == () and encode_state(decode_state(old, 3)) == old


def test_codec_refuses_moves_that_break_an_invariant() -> None:
    base = ('{"elr": [], "isr": [[1, 10]], "leader": 1, "leader_epoch": 0, "min_isr": 1, "replicas": [1, 2, 3], '
            '"unclean": false, ')
    for moves in ('"adding": [2], "removing": [2]', '"adding": [9], "removing": []', '"adding": [], "removing": [1]',
                  '"adding": [2, 2], "removing": []', '"adding": [], "removing": [1, 2, 3]', '"adding": "x"'):
        with pytest.raises(PartitionStateDamaged):
            decode_state((base + moves + "}").encode(), 1)


NODES = (1, 2, 3, 4)


class Moves(RuleBasedStateMachine):
    """One partition under moves, cancellations and node faults; the controller reconciles when a rule says so.
    What is checked after every step: the codec's invariants (a round trip), the leader in the ISR; a leader
    changed only by the controller's rules, with one leader epoch bump (never more than one per step), and elected
    from the ISR or the ELR, or unclean only when the topic allows it and never an adding replica; a completed move
    leaves exactly the target as replicas, all in sync, at least ``min_isr`` of them; a cancelled one the original
    replicas."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = dict(LIVE)
        self.epochs = 100
        self.state = initial_state((1, 2), self.live, 1)

    @initialize(min_isr=st.integers(1, 2), unclean=st.booleans(), rf=st.integers(2, 3))
    def partition(self, min_isr: int, unclean: bool, rf: int) -> None:
        self.state = initial_state(NODES[:rf], self.live, min_isr, unclean)

    @rule(replicas=st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True))
    def move(self, replicas: list[int]) -> None:
        target = tuple(replicas)
        new = reassign(self.state, target, self.live)
        if isinstance(new, Refusal):
            assert new.error == ErrorCode.invalid_replica_assignment
            assert len(target) < self.state.min_isr or not set(target) <= set(self.live)
            return
        self._step(new, elects=True)
        assert self.state.replicas[:len(target)] == target

    @rule()
    def cancel_move(self) -> None:
        old = self.state
        new = cancel(old, self.live)
        if isinstance(new, Refusal):
            expected = (ErrorCode.invalid_replica_assignment if old.moving
                        else ErrorCode.no_reassignment_in_progress)
            assert new.error == expected
            return
        self._step(new, elects=True)
        assert self.state.replicas == old.original and not self.state.moving

    @rule(replica=st.sampled_from(NODES), joins=st.booleans())
    def leader_alters_isr(self, replica: int, joins: bool) -> None:
        s = self.state
        if s.leader not in self.live or replica == s.leader or joins == (replica in s.isr_ids) or (
                joins and replica not in self.live):
            return
        isr = (*s.isr, IsrMember(replica, self.live[replica])) if joins else tuple(
            m for m in s.isr if m.replica != replica)
        new = alter_partition(s, AlterIsr(s.leader, s.leader_epoch, s.partition_epoch, isr, self.live[s.leader]),
                              self.live)
        if isinstance(new, PartitionState):
            self._step(new, elects=False)

    @rule(node=st.sampled_from(NODES))
    def kill(self, node: int) -> None:
        self.live.pop(node, None)

    @rule(node=st.sampled_from(NODES))
    def restart(self, node: int) -> None:
        self.epochs += 1
        self.live[node] = self.epochs

    @rule()
    def controller(self) -> None:
        old = self.state
        new = reconcile(old, self.live)
        if new is None:
            return
        self._step(new, elects=True)
        if old.moving and not new.moving:
            assert new.replicas == old.target and new.isr_ids == set(new.replicas)
            assert len(new.isr) >= new.min_isr

    def _step(self, new: PartitionState, elects: bool) -> None:
        old, self.state = self.state, new
        assert new.leader_epoch - old.leader_epoch in (0, 1)
        if new.leader != old.leader:
            assert elects and new.leader_epoch == old.leader_epoch + 1
            if new.leader != NO_LEADER:
                clean = new.leader in old.isr_ids or new.leader in old.elr
                assert clean or (new.unclean_election and new.leader not in old.adding), (old, new)

    @invariant()
    def holds(self) -> None:
        s = self.state
        assert decode_state(encode_state(s), s.partition_epoch) == s
        assert s.leader == NO_LEADER or s.leader in s.isr_ids


Moves.TestCase.settings = settings(max_examples=2000 if LONG else 150, stateful_step_count=40, derandomize=not LONG,
                                   database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_moves = Moves.TestCase
