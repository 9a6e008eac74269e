"""Placement of vgroups over live nodes (walgate/cluster/placement.py): balanced by count, racks alternated,
deterministic, a single node takes everything; a manual assignment names one live node per partition, checked as
Kafka's controller checks it."""

from __future__ import annotations

from collections import Counter

import pytest

from walgate.cluster.placement import BadAssignment, NoLiveNode, assigned, place


def test_a_single_node_gets_every_vgroup() -> None:
    assert place(4, {7: None}) == (7, 7, 7, 7)
    assert place(0, {7: None}) == ()


def test_new_vgroups_go_to_the_nodes_holding_fewest() -> None:
    assert place(4, {1: None, 2: None}) == (1, 2, 1, 2)
    # node 1 already holds 3 vgroups of other databases: the next three go to node 2 until they are level
    assert place(4, {1: None, 2: None}, {1: 3}) == (2, 2, 2, 1)
    # a node that is not live is never chosen, whatever it holds
    assert place(3, {2: None, 3: None}, {1: 0, 2: 5, 3: 5}) == (2, 3, 2)


def test_placements_stay_balanced_across_databases() -> None:
    nodes = {1: None, 2: None, 3: None}
    held: Counter[int] = Counter()
    for count in (2, 5, 1, 4, 3):
        held.update(place(count, nodes, held))
    assert sorted(held.values()) == [5, 5, 5]


def test_racks_alternate_when_the_counts_allow() -> None:
    nodes = {1: "a", 2: "a", 3: "b", 4: "b"}
    placed = place(4, nodes)
    assert [nodes[n] for n in placed] == ["a", "b", "a", "b"]
    assert sorted(placed) == [1, 2, 3, 4]
    # balance comes first: a lone node of rack c does not take more than its share
    assert Counter(place(6, {1: "a", 2: "b", 3: "b"})) == {1: 2, 2: 2, 3: 2}


def test_no_live_node_is_an_error() -> None:
    with pytest.raises(NoLiveNode, match="no live node"):
        place(1, {})


def test_a_manual_assignment_places_each_partition_on_the_live_node_named() -> None:
    assert assigned([(1, [1]), (0, [2]), (2, [2])], {1, 2}) == (2, 1, 2)  # in partition order, whatever the order given
    assert assigned([(3, [1]), (4, [3])], {1, 3}, first=3) == (1, 3)  # partitions added after three
    assert assigned([], {1}) == ()


@pytest.mark.parametrize(("assignment", "message"), [
    ([(0, [1]), (0, [2])], "Found multiple manual partition assignments for partition 0"),
    ([(0, [])], "The manual partition assignment includes an empty replica list."),
    ([(0, [4])], "The manual partition assignment includes broker 4, but no such broker is registered "
                 "(live nodes: 1, 2)."),
    ([(0, [2, 2])], "The manual partition assignment includes the broker 2 more than once."),
    ([(0, [1, 2])], "replication factor above 1 is not supported yet: partition 0 is assigned 2 replicas (brokers 1, 2)"
                    "; name one broker per partition"),
    ([(0, [1]), (2, [2])], "partitions should be a consecutive 0-based integer sequence"),
])
def test_a_bad_manual_assignment_is_refused_with_its_reason(assignment: list[tuple[int, list[int]]],
                                                          message: str) -> None:
    with pytest.raises(BadAssignment) as refused:
        assigned(assignment, {1, 2})
    assert str(refused.value) == message
