"""Placement of vgroups over live nodes (walgate/cluster/placement.py): balanced by count, racks alternated,
deterministic, a single node takes everything."""

from __future__ import annotations

from collections import Counter

import pytest

from walgate.cluster.placement import NoLiveNode, place


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
