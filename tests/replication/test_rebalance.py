"""The decommission and balance planners (walgate/replication/rebalance.py): hand cases, then hypothesis over random
clusters (seeded and bounded; ``WALGATE_FUZZ_LONG=1`` runs 20 times the examples with fresh randomness) checking
the invariants: distinct replicas, the same replication factor, only live nodes added, racks kept spread where the
cluster allows it, a decommissioned node left with nothing, counts within one after a balance, no move for a
balanced input, and the same plan for the same input."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.replication.rebalance import Holding, LastCopy, NoNodeLeft, PlanRefused, balance, decommission

LONG = os.environ.get("WALGATE_FUZZ_LONG") == "1"
FUZZ = settings(max_examples=2000 if LONG else 200, derandomize=not LONG, database=None, deadline=None)


def counts(targets: Mapping[str, tuple[int, ...]], live: Mapping[int, str | None]) -> Counter[int]:
    held = Counter({n: 0 for n in live})
    held.update(r for t in targets.values() for r in t if r in live)
    return held


def applied(vgroups: Mapping[str, Holding], plan: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    return {k: plan.get(k, h.replicas) for k, h in vgroups.items()}


def test_decommission_replaces_the_node_by_the_least_loaded_on_another_rack() -> None:
    live = {1: "a", 2: "a", 3: "b", 4: "b", 5: "a"}
    vgroups = {"d/0": Holding((1, 3, 5)), "d/1": Holding((3, 4, 2)), "d/2": Holding((2, 4, 5))}
    plan = decommission(3, vgroups, live)
    # d/0 keeps racks a (1, 5): node 4 (rack b) takes 3's place; d/1 keeps 4 (b) and 2 (a): the least loaded of 1
    # and 5 (both a, one replica each), the smaller id
    assert plan == {"d/0": (1, 5, 4), "d/1": (4, 2, 1)}


def test_decommission_refuses_a_one_copy_vgroup_and_a_vgroup_with_no_other_node() -> None:
    live = {1: None, 2: None, 3: None}
    with pytest.raises(LastCopy, match="vgroup power/0 has one copy, on node 2: its data cannot move"):
        decommission(2, {"p0": Holding((2,), movable=False)}, live, name={"p0": "power/0"})
    with pytest.raises(NoNodeLeft, match=r"no live node can take vgroup t/0's replica from node 1: its replicas are "
                                          r"\[1, 2, 3\] and the live nodes \[1, 2, 3\]"):
        decommission(1, {"t/0": Holding((1, 2, 3))}, live)
    assert decommission(2, {"p0": Holding((1,), movable=False)}, live) == {}


def test_balance_moves_followers_onto_a_new_node_and_nothing_when_balanced() -> None:
    live = {1: None, 2: None, 3: None}
    vgroups = {f"t/{i}": Holding(((1, 2), (2, 1), (1, 2), (2, 1))[i]) for i in range(4)}
    plan = balance(vgroups, live)
    after = applied(vgroups, plan)
    assert sorted(counts(after, live).values()) == [2, 3, 3]
    moved = {k: set(vgroups[k].replicas) - set(after[k]) for k in plan}
    assert any(moved.values()) and all(vgroups[k].replicas[0] not in gone for k, gone in moved.items()), \
        "followers' replicas move"
    assert sorted(Counter(t[0] for t in after.values()).values()) == [1, 1, 2], "then the leaderships even out"
    assert balance({k: Holding(t) for k, t in after.items()}, live) == {}


def test_balance_moves_a_vgroup_whose_racks_stay_spread() -> None:
    live = {1: "a", 2: "b", 3: "c", 4: "b"}
    # node 1 holds three, node 4 none: t/0's replica moved to 4 would leave it on rack b alone, t/2's would move its
    # preferred leader: t/1's (a follower; racks c, b after) moves
    vgroups = {"t/0": Holding((2, 1)), "t/1": Holding((3, 1)), "t/2": Holding((1, 3))}
    assert balance(vgroups, live) == {"t/1": (3, 4)}


def test_balance_evens_out_preferred_leaders_by_reordering() -> None:
    live = {1: None, 2: None, 3: None}
    vgroups = {f"t/{i}": Holding((1, 2, 3)) for i in range(3)}
    plan = balance(vgroups, live)
    assert sorted(t[0] for t in applied(vgroups, plan).values()) == [1, 2, 3]
    assert all(sorted(t) == [1, 2, 3] for t in plan.values())


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[str, Holding], dict[int, str | None]]:
    nodes = draw(st.integers(2, 7))
    racks = draw(st.sampled_from([[None], ["a", "b"], ["a", "b", "c"]]))
    live = {n: draw(st.sampled_from(racks)) for n in range(1, nodes + 1)}
    dead = draw(st.lists(st.integers(nodes + 1, nodes + 3), max_size=2, unique=True))
    everyone = [*live, *dead]
    vgroups: dict[str, Holding] = {}
    for i in range(draw(st.integers(0, 12))):
        rf = draw(st.integers(1, min(3, len(everyone))))
        replicas = tuple(draw(st.permutations(everyone))[:rf])
        vgroups[f"db{i % 3}/{i}"] = Holding(replicas, movable=rf > 1 or draw(st.booleans()))
    return vgroups, live


def check_targets(vgroups: Mapping[str, Holding], plan: Mapping[str, tuple[int, ...]],
                  live: Mapping[int, str | None]) -> None:
    for key, target in plan.items():
        old = vgroups[key].replicas
        assert vgroups[key].movable
        assert len(set(target)) == len(target) == len(old), (old, target)
        assert all(r in live for r in set(target) - set(old)), "only live nodes are added"


@FUZZ
@given(clusters(), st.data())
def test_decommission_invariants(cluster: tuple[dict[str, Holding], dict[int, str | None]], data: st.DataObject) -> None:
    vgroups, live = cluster
    node = data.draw(st.sampled_from(sorted({*live, *(r for h in vgroups.values() for r in h.replicas)})))
    try:
        plan = decommission(node, vgroups, live)
    except PlanRefused as refused:
        on_node = [h for h in vgroups.values() if node in h.replicas]
        assert any(not h.movable or all(n in h.replicas for n in live if n != node) for h in on_node), refused
        return
    assert plan == decommission(node, vgroups, live), "deterministic"
    check_targets(vgroups, plan, live)
    after = applied(vgroups, plan)
    assert not any(node in t for t in after.values()), "the node holds nothing"
    assert set(plan) == {k for k, h in vgroups.items() if node in h.replicas}, "only the node's vgroups move"
    for key, target in plan.items():
        racks_left = {live.get(r) for r in target[:-1]}
        could = {live[n] for n in live if n != node and n not in vgroups[key].replicas}
        assert live[target[-1]] not in racks_left or could <= racks_left, "a new rack whenever one could be had"
        if len(target) > 1 and vgroups[key].replicas[0] != node:
            assert target[0] == vgroups[key].replicas[0], "the preferred leader stays"


@FUZZ
@given(clusters())
def test_balance_invariants(cluster: tuple[dict[str, Holding], dict[int, str | None]]) -> None:
    vgroups, live = cluster
    plan = balance(vgroups, live)
    assert plan == balance(vgroups, live), "deterministic"
    check_targets(vgroups, plan, live)
    after = applied(vgroups, plan)
    assert sum(counts(after, live).values()) == sum(counts(applied(vgroups, {}), live).values())
    if all(h.movable for h in vgroups.values()):
        held = counts(after, live)
        assert max(held.values()) - min(held.values()) <= 1, held
    again = {k: Holding(t, vgroups[k].movable) for k, t in after.items()}
    assert balance(again, live) == {}, "a balanced plan needs no move"


@FUZZ
@given(st.integers(2, 5), st.integers(0, 10), st.randoms(use_true_random=False))
def test_balance_evens_out_leaders_when_every_node_holds_every_vgroup(nodes: int, count: int, rnd: object) -> None:
    live = {n: None for n in range(1, nodes + 1)}
    order = list(live)
    vgroups = {}
    for i in range(count):
        rnd.shuffle(order)  # type: ignore[attr-defined]
        vgroups[f"t/{i}"] = Holding(tuple(order))
    after = applied(vgroups, balance(vgroups, live))
    leads = Counter({n: 0 for n in live})
    leads.update(t[0] for t in after.values())
    assert max(leads.values()) - min(leads.values()) <= 1, leads
