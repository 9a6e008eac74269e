"""Placement of vgroups' replicas over live nodes (walgate/cluster/placement.py): distinct nodes, then distinct
racks, balanced by replicas held and by leaderships, deterministic, a single node takes everything; a manual
assignment names distinct live nodes per partition, the same count for each, checked as Kafka's controller checks
it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.cluster.placement import (
    BadAssignment,
    InvalidReplicationFactor,
    NoLiveNode,
    assigned,
    place,
    unserved,
)


def firsts(placed: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    return tuple(replicas[0] for replicas in placed)


def test_a_single_node_gets_every_vgroup() -> None:
    assert place(4, {7: None}) == ((7,),) * 4
    assert place(0, {7: None}) == ()


def test_new_vgroups_go_to_the_nodes_holding_fewest() -> None:
    assert firsts(place(4, {1: None, 2: None})) == (1, 2, 1, 2)
    # node 1 already holds 3 vgroups of other databases: the next three go to node 2 until they are level
    assert firsts(place(4, {1: None, 2: None}, {1: 3})) == (2, 2, 2, 1)
    # a node that is not live is never chosen, whatever it holds
    assert firsts(place(3, {2: None, 3: None}, {1: 0, 2: 5, 3: 5})) == (2, 3, 2)


def test_placements_stay_balanced_across_databases() -> None:
    nodes = {1: None, 2: None, 3: None}
    held: Counter[int] = Counter()
    for count in (2, 5, 1, 4, 3):
        held.update(firsts(place(count, nodes, held)))
    assert sorted(held.values()) == [5, 5, 5]


def test_racks_alternate_when_the_counts_allow() -> None:
    nodes = {1: "a", 2: "a", 3: "b", 4: "b"}
    placed = firsts(place(4, nodes))
    assert [nodes[n] for n in placed] == ["a", "b", "a", "b"]
    assert sorted(placed) == [1, 2, 3, 4]
    # balance comes first: a lone node of rack c does not take more than its share
    assert Counter(firsts(place(6, {1: "a", 2: "b", 3: "b"}))) == {1: 2, 2: 2, 3: 2}


def test_replicas_are_on_distinct_nodes_and_leaderships_rotate() -> None:
    placed = place(6, {1: None, 2: None, 3: None}, replicas=3)
    assert all(sorted(r) == [1, 2, 3] for r in placed)
    assert Counter(firsts(placed)) == {1: 2, 2: 2, 3: 2}  # each node the preferred leader of two
    assert placed == place(6, {3: None, 2: None, 1: None}, replicas=3)  # deterministic, whatever the order given
    two = place(4, {1: None, 2: None, 3: None, 4: None}, replicas=2)
    assert Counter(n for r in two for n in r) == {1: 2, 2: 2, 3: 2, 4: 2}
    assert Counter(firsts(two)) == {1: 1, 2: 1, 3: 1, 4: 1}


def test_replicas_of_a_vgroup_spread_over_racks_first() -> None:
    nodes = {1: "a", 2: "a", 3: "a", 4: "b", 5: "c"}
    for replicas in place(10, nodes, replicas=3):
        assert sorted(nodes[n] for n in replicas) == ["a", "b", "c"]
    # two racks for three replicas: both racks hold one, never three in one rack
    two_racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in place(8, two_racks, replicas=3):
        assert sorted(Counter(two_racks[n] for n in replicas).values()) == [1, 2]


def test_leaderships_balance_against_what_nodes_already_lead() -> None:
    # node 1 leads 2 vgroups, holds 2 replicas of others: new leaderships go to 2 and 3 first
    placed = place(2, {1: None, 2: None, 3: None}, held={1: 4, 2: 2, 3: 2}, replicas=2, led={1: 2})
    assert sorted(firsts(placed)) == [2, 3]


@pytest.mark.parametrize(("replicas", "live", "message"), [
    (3, {1: None, 2: None}, "The target replication factor of 3 cannot be reached because only 2 broker(s) are "
                            "registered."),
    (0, {1: None}, "Replication factor must be larger than 0, or -1 to use the default value."),
])
def test_a_replication_factor_that_cannot_be_placed_is_refused(replicas: int, live: dict[int, None],
                                                               message: str) -> None:
    with pytest.raises(InvalidReplicationFactor) as refused:
        place(1, live, replicas=replicas)
    assert str(refused.value) == message


def test_no_live_node_is_an_error() -> None:
    with pytest.raises(NoLiveNode, match="no live node"):
        place(1, {})


@settings(max_examples=200, deadline=None)
@given(nodes=st.dictionaries(st.integers(0, 40), st.sampled_from([None, "a", "b", "c"]), min_size=1, max_size=8),
       dead=st.sets(st.integers(0, 40), max_size=4), count=st.integers(0, 12), data=st.data())
def test_placement_properties(nodes: dict[int, str | None], dead: set[int], count: int, data: st.DataObject) -> None:
    replicas = data.draw(st.integers(1, len(nodes)))
    held = {n: data.draw(st.integers(0, 5)) for n in set(nodes) | dead}
    placed = place(count, nodes, held, replicas=replicas)
    assert placed == place(count, dict(reversed(list(nodes.items()))), held, replicas=replicas)
    assert len(placed) == count
    racks = len(set(nodes.values()))
    for r in placed:
        assert len(r) == replicas and len(set(r)) == replicas  # distinct nodes
        assert set(r) <= set(nodes)  # never a node that is not live
        assert len({nodes[n] for n in r}) == min(replicas, racks)  # as many racks as there can be


def test_a_manual_assignment_places_each_partition_on_the_live_nodes_named() -> None:
    # in partition order, whatever the order given
    assert assigned([(1, [1]), (0, [2]), (2, [2])], {1, 2}) == ((2,), (1,), (2,))
    assert assigned([(3, [1]), (4, [3])], {1, 3}, first=3) == ((1,), (3,))  # partitions added after three
    assert assigned([(0, [2, 1]), (1, [1, 3])], {1, 2, 3}) == ((2, 1), (1, 3))  # the first named: preferred leader
    assert assigned([(3, [1, 2])], {1, 2}, first=3, replicas=2) == ((1, 2),)
    assert assigned([], {1}) == ()


@pytest.mark.parametrize(("assignment", "replicas", "message"), [
    ([(0, [1]), (0, [2])], None, "Found multiple manual partition assignments for partition 0"),
    ([(0, [])], None, "The manual partition assignment includes an empty replica list."),
    ([(0, [4])], None, "The manual partition assignment includes broker 4, but no such broker is registered "
                       "(live nodes: 1, 2)."),
    ([(0, [2, 2])], None, "The manual partition assignment includes the broker 2 more than once."),
    ([(0, [1, 2]), (1, [1])], None, "The manual partition assignment includes a partition with 1 replica(s), but "
                                    "this is not consistent with previous partitions, which have 2 replica(s)."),
    ([(0, [1, 2])], 1, "The manual partition assignment includes a partition with 2 replica(s), but this is not "
                       "consistent with previous partitions, which have 1 replica(s)."),
    ([(0, [1]), (2, [2])], None, "partitions should be a consecutive 0-based integer sequence"),
])
def test_a_bad_manual_assignment_is_refused_with_its_reason(assignment: list[tuple[int, list[int]]],
                                                          replicas: int | None, message: str) -> None:
    with pytest.raises(BadAssignment) as refused:
        assigned(assignment, {1, 2}, replicas=replicas)
    assert str(refused.value) == message


def test_a_factor_above_1_is_served_only_with_replication_enabled() -> None:
    for factor in (2, 3):
        assert unserved(factor, True) is None
        assert unserved(factor, False) == (f"replication factor {factor}: this cluster runs without replicas "
                                           "(replication.enable=false on its nodes); use 1")
    assert unserved(1, False) is None and unserved(1, True) is None
