"""ElectLeaders' decisions (KIP-460) and the preferred-leader rebalance, on hand-built states and on many seeded
random ones the rules reach (every answer checked against what the state allows, every state written valid)."""

from __future__ import annotations

import random

from tests.replication.reached_states import reached_state, registrations
from walgate.cluster.partition_codec import decode_state, encode_state
from walgate.replication.elections import ElectionType, elect_leader, imbalanced
from walgate.replication.partition import (
    NO_LEADER,
    IsrMember,
    PartitionState,
    reconcile,
)
from walgate.wire.errors import ErrorCode

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN
LIVE = {1: 10, 2: 20, 3: 30}


def state(replicas: tuple[int, ...], leader: int, isr: tuple[int, ...], elr: tuple[int, ...] = (),
          min_isr: int = 1, epochs: dict[int, int] = LIVE) -> PartitionState:
    return PartitionState(replicas, leader, 4, 100, tuple(IsrMember(r, epochs[r]) for r in sorted(isr)), elr, min_isr)


def test_preferred_moves_leadership_to_the_first_replica_when_it_is_in_sync() -> None:
    new = elect_leader(state((1, 2, 3), 2, (1, 2, 3)), PREFERRED, LIVE)
    assert isinstance(new, PartitionState)
    assert (new.leader, new.leader_epoch, new.partition_epoch, new.isr_ids) == (1, 5, 101, {1, 2, 3})


def test_preferred_is_not_needed_when_the_first_replica_leads_and_not_available_when_it_is_out_of_sync() -> None:
    assert elect_leader(state((1, 2, 3), 1, (1, 2, 3)), PREFERRED, LIVE) == ErrorCode.election_not_needed
    assert elect_leader(state((1, 2, 3), 2, (2, 3)), PREFERRED, LIVE) == ErrorCode.preferred_leader_not_available
    # in the ISR under a broker epoch it no longer has (it restarted, KIP-903): fenced first, so not available
    restarted = {**LIVE, 1: 11}
    assert elect_leader(state((1, 2, 3), 2, (1, 2, 3)), PREFERRED, restarted) == ErrorCode.preferred_leader_not_available
    # not registered at all
    assert elect_leader(state((1, 2, 3), 2, (1, 2, 3)), PREFERRED, {2: 20, 3: 30}) == ErrorCode.preferred_leader_not_available


def test_unclean_elects_only_a_partition_with_no_leader() -> None:
    assert elect_leader(state((1, 2, 3), 2, (2,)), UNCLEAN, LIVE) == ErrorCode.election_not_needed
    # the only ISR member is gone, nothing in the ELR: a live replica out of the ISR leads, the ISR restarts from it
    new = elect_leader(state((1, 2, 3), NO_LEADER, (3,)), UNCLEAN, {1: 10, 2: 20})
    assert isinstance(new, PartitionState)
    assert (new.leader, new.isr, new.elr, new.leader_epoch, new.unclean_election) == (1, (IsrMember(1, 10),), (), 5,
                                                                                       False)
    # an ELR member live: the controller's own election takes it (KIP-966), so no unclean one is needed
    assert elect_leader(state((1, 2, 3), NO_LEADER, (), elr=(2,), min_isr=2), UNCLEAN,
                        {1: 10, 2: 20}) == ErrorCode.election_not_needed
    assert elect_leader(state((1, 2, 3), NO_LEADER, (3,)), UNCLEAN, {4: 40}) == ErrorCode.eligible_leaders_not_available


def test_unclean_on_a_leader_the_controller_has_not_fenced_yet_elects() -> None:
    # the state still names 3 (its lease ran out a moment ago): the election fences it, then picks a live replica
    new = elect_leader(state((1, 2, 3), 3, (3,)), UNCLEAN, {1: 10, 2: 20})
    assert isinstance(new, PartitionState) and new.leader == 1 and new.isr == (IsrMember(1, 10),)


def _random_state(rng: random.Random) -> tuple[PartitionState, dict[int, int]]:
    """A state the rules reach (:func:`reached_state`), and the registrations to judge it under: its last step's, or
    half the time new ones."""
    current, epochs, live = reached_state(rng)
    if rng.random() < 0.5:
        live = registrations(rng, epochs)
    return current, live


def test_every_answer_on_many_random_states_is_the_one_the_state_calls_for() -> None:
    rng = random.Random(26)
    seen: set[object] = set()
    for _ in range(3000):
        before, live = _random_state(rng)
        fenced = reconcile(before, live) or before
        for election in ElectionType:
            answer = elect_leader(before, election, live)
            seen.add((election, answer if isinstance(answer, ErrorCode) else "elected"))
            if isinstance(answer, ErrorCode):
                if election == PREFERRED:
                    assert answer == (ErrorCode.election_not_needed if fenced.leader == before.replicas[0]
                                      else ErrorCode.preferred_leader_not_available)
                    assert answer == ErrorCode.election_not_needed or before.replicas[0] not in fenced.isr_ids
                else:
                    assert answer == (ErrorCode.election_not_needed if fenced.leader != NO_LEADER
                                      else ErrorCode.eligible_leaders_not_available)
                    assert answer == ErrorCode.election_not_needed or not set(before.replicas) & live.keys()
                continue
            assert decode_state(encode_state(answer), answer.partition_epoch) == answer  # a valid state
            assert answer.leader_epoch > before.leader_epoch and answer.partition_epoch > before.partition_epoch
            assert answer.unclean_election == before.unclean_election and answer.min_isr == before.min_isr
            for member in answer.isr:  # every ISR member live under the broker epoch it was admitted with
                assert live.get(member.replica) == member.broker_epoch
            if election == PREFERRED:
                assert answer.leader == before.replicas[0] and answer.isr == fenced.isr
            else:
                assert fenced.leader == NO_LEADER and answer.leader in live
    assert len(seen) == 6, seen  # each of the three answers of each election type was reached


def test_imbalance_moves_leadership_back_only_above_the_percentage_and_only_to_in_sync_replicas() -> None:
    led_by_2 = state((1, 2, 3), 2, (1, 2, 3))
    balanced = state((1, 2, 3), 1, (1, 2, 3))
    # node 1 prefers ten partitions; one led elsewhere is 10%: not above 10
    states = {f"p{i}": balanced for i in range(9)} | {"p9": led_by_2}
    assert imbalanced(states, 10) == []
    assert imbalanced(states, 9) == ["p9"]
    # two of ten: 20%, but only the one whose preferred replica is in sync moves
    states["p8"] = state((1, 2, 3), 2, (2, 3))
    assert imbalanced(states, 10) == ["p9"]
    # counted per preferred replica: node 3's one partition led by 2 is 100% of its own
    states["q"] = state((3, 1, 2), 2, (1, 2, 3))
    assert imbalanced(states, 10) == ["p9", "q"]
    assert imbalanced({"q": state((3, 1, 2), NO_LEADER, (1,))}, 0) == []


def test_imbalance_on_random_states_names_exactly_the_partitions_to_move() -> None:
    rng = random.Random(2610)
    for _ in range(300):
        states = {}
        for i in range(rng.randint(1, 12)):
            before, live = _random_state(rng)
            states[i] = reconcile(before, live) or before
        percentage = rng.choice((0, 10, 25, 50, 100))
        moved = imbalanced(states, percentage)
        for key in moved:
            assert states[key].leader != states[key].replicas[0] and states[key].replicas[0] in states[key].isr_ids
        for preferred in {s.replicas[0] for s in states.values()}:
            own = [k for k, s in states.items() if s.replicas[0] == preferred]
            elsewhere = [k for k in own if states[k].leader != preferred]
            expected = [k for k in elsewhere if preferred in states[k].isr_ids] \
                if len(elsewhere) / len(own) > percentage / 100 else []
            assert [k for k in moved if k in own] == expected
