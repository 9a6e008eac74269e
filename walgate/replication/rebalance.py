"""Planning replica moves for a whole cluster (pure): decommissioning a node and balancing replicas over the nodes.

TDengine's ``DROP DNODE`` / ``BALANCE VGROUP`` and Kafka's ``kafka-reassign-partitions --generate`` (rpk's
``redpanda admin brokers decommission``) decide the moves; walgate sends them as one reassignment request to the
controller (KIP-455: :mod:`walgate.cluster.reassignments`), which writes and completes each as any other move.

The input is every vgroup's :class:`Holding` (its replicas, the preferred leader first, and whether its data can
move: a vgroup of one copy only in a cluster with ``replication.enable``, where its move makes its first partition
state) and the live nodes with their
``broker.rack`` (None: none set). The output is the target replicas of each vgroup that moves; vgroups left out keep
theirs. Both planners are deterministic: the same input gives the same plan (ties are broken by the smallest node
id, vgroups taken in the order of their keys' ``repr``).

* :func:`decommission` of node ``n``: each vgroup holding ``n`` gets ``n`` replaced by a live node not holding it
  yet, preferring one whose rack the vgroup's other replicas do not hold (Kafka's rack-aware rule: every rack gets a
  replica before any gets two), then the node holding the fewest replicas (counting the plan so far), then the
  smallest id. ``n`` leaves the list and the new node goes last, so the preferred leader is one of the vgroup's
  current replicas (the first of the others) whenever it has others. Refused (a :class:`PlanRefused`, whose
  message says which vgroup and why) when a vgroup on ``n`` has one copy (:class:`LastCopy`: its data cannot move,
  decommissioning would lose it) or when no other live node can take the replica (:class:`NoNodeLeft`: every live
  node holds it already).
* :func:`balance`: moves one replica at a time from the node holding the most replicas to the one holding the
  fewest, until no two live nodes' counts differ by more than one (or no movable vgroup allows a move): each move
  lowers the spread, so a balanced input yields no move at all. Of the vgroups on the fuller node that the emptier
  node does not hold, it takes first one whose racks stay as spread (the rack count of its replicas does not drop),
  then one that node is not the preferred leader of (moving a follower leaves the leadership where it is), then the
  first in key order. Then the preferred leaders (each target's first replica) are evened out the same way by
  reordering a vgroup's replicas, which copies no data. Replicas on nodes that are not live are neither counted nor
  moved (decommission those).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Holding", "LastCopy", "NoNodeLeft", "PlanRefused", "balance", "decommission"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Holding:
    """One vgroup's replicas now (distinct node ids, the preferred leader first; during a move, its target) and
    whether they can move (False: one copy in a cluster without ``replication.enable``, issue 26)."""

    replicas: tuple[int, ...]
    movable: bool = True


class PlanRefused(ValueError):
    """The plan cannot be made; the message names the vgroup and why."""


class LastCopy(PlanRefused):
    """A vgroup on the node to decommission has one copy: its data cannot move, decommissioning would lose it."""


class NoNodeLeft(PlanRefused):
    """No live node but those holding a vgroup already is left to take the decommissioned node's replica (TDengine's
    "Out of dnodes")."""


def decommission(node: int, vgroups: Mapping[K, Holding], live: Mapping[int, str | None],
                 name: Mapping[K, str] | None = None) -> dict[K, tuple[int, ...]]:
    """The target replicas of every vgroup of ``vgroups`` that ``node`` holds, ``node`` replaced by another live
    node (module docstring); ``name`` gives each vgroup's name for messages (default: its key). Raises
    :class:`LastCopy` when a vgroup on ``node`` has one copy, :class:`NoNodeLeft` when no live node other than its
    replicas is left."""
    held = _counts(vgroups, live)
    plan: dict[K, tuple[int, ...]] = {}
    for key in sorted((k for k, h in vgroups.items() if node in h.replicas), key=repr):
        holding = vgroups[key]
        label = str(key) if name is None else name[key]
        if not holding.movable:
            raise LastCopy(f"vgroup {label} has one copy, on node {node}: its data cannot move, so decommissioning "
                              f"node {node} would lose it (drop it, or make it REPLICA 3, or run every node with "
                              "replication.enable=true, first)")
        rest = tuple(r for r in holding.replicas if r != node)
        candidates = [n for n in live if n != node and n not in holding.replicas]
        if not candidates:
            raise NoNodeLeft(f"no live node can take vgroup {label}'s replica from node {node}: its replicas are "
                              f"{list(holding.replicas)} and the live nodes {sorted(live)}")
        racks = {live.get(r) for r in rest}
        new = min(candidates, key=lambda n: (live[n] in racks, held[n], n))
        held[new] += 1
        plan[key] = rest + (new,)
    return plan


def balance(vgroups: Mapping[K, Holding], live: Mapping[int, str | None]) -> dict[K, tuple[int, ...]]:
    """The target replicas of the vgroups to move so that replica counts, then preferred leaderships, over the
    ``live`` nodes differ by at most one where the movable vgroups allow it (module docstring); the others are left
    out."""
    targets = {k: h.replicas for k, h in vgroups.items()}
    movable = sorted((k for k, h in vgroups.items() if h.movable), key=repr)
    held = _counts(vgroups, live)
    while live:
        fullest = max(live, key=lambda n: (held[n], -n))
        emptiest = min(live, key=lambda n: (held[n], n))
        if held[fullest] - held[emptiest] <= 1:
            break
        choices = [k for k in movable if fullest in targets[k] and emptiest not in targets[k]]
        if not choices:
            break  # (only unmovable vgroups hold what would be moved)

        def after(k: K) -> tuple[int, ...]:
            return tuple(emptiest if r == fullest else r for r in targets[k])

        key = min(choices, key=lambda k: (len({live.get(r) for r in after(k)}) < len({live.get(r) for r in targets[k]}),
                                          targets[k][0] == fullest))
        targets[key] = after(key)
        held[fullest] -= 1
        held[emptiest] += 1
    _balance_leaders(targets, movable, live)
    return {k: t for k, t in targets.items() if t != vgroups[k].replicas}


def _balance_leaders(targets: dict[K, tuple[int, ...]], movable: list[K], live: Mapping[int, str | None]) -> None:
    """Reorder ``targets``' replicas (of ``movable`` vgroups) so that the live nodes' counts of first replicas even
    out: each step makes first, in one vgroup, the replica whose node leads at least two fewer than the vgroup's
    first (the widest such gap, then the first vgroup in key order), until no vgroup allows one. Each step lowers
    the sum of the squared counts, so it ends; with every live node in every vgroup the counts end within one."""
    leads = Counter({n: 0 for n in live})
    leads.update(t[0] for t in targets.values() if t and t[0] in live)
    while True:
        gaps = [(leads[targets[k][0]] - leads[r], -i, r, k) for i, k in enumerate(movable)
                for r in targets[k][1:] if r in live and targets[k][0] in live
                and leads[targets[k][0]] - leads[r] > 1]
        if not gaps:
            return
        _, _, node, key = max(gaps, key=lambda g: (g[0], g[1], -g[2]))
        leads[targets[key][0]] -= 1
        leads[node] += 1
        targets[key] = (node,) + tuple(r for r in targets[key] if r != node)


def _counts(vgroups: Mapping[K, Holding], live: Mapping[int, str | None]) -> Counter[int]:
    """Replicas held by each live node (every live node present, with 0 when it holds none)."""
    held = Counter({n: 0 for n in live})
    held.update(r for h in vgroups.values() for r in h.replicas if r in live)
    return held
