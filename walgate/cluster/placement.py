"""Placement: which node holds each vgroup of a database (a Kafka-native topic's partitions are its vgroups).

Pure: the caller gives the live nodes (node id -> ``broker.rack``, None when unset) and how many vgroups each
already holds; :func:`place` answers the node of each new vgroup. The rule, applied one vgroup at a time:

1. the node holding the fewest vgroups (those it held before plus those this placement gave it) — placements
   stay balanced by count across databases, as TDengine's mnode balances vnodes over dnodes;
2. among those, one whose rack this placement used least — consecutive vgroups of a database land on different
   racks when the counts allow it (Kafka's rack-alternating assignment, for one copy per partition);
3. then the smallest node id — the same inputs always give the same placement.

A single node gets every vgroup. Nodes that are not live are never chosen; their vgroups stay theirs (placement
is decided once, when vgroups are created, and is data of the catalog record that creates them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

__all__ = ["place", "NoLiveNode"]


class NoLiveNode(ValueError):
    """There is no live node to place vgroups on."""


def place(count: int, nodes: Mapping[int, str | None], held: Mapping[int, int] | None = None) -> tuple[int, ...]:
    """The node id of each of ``count`` new vgroups, in vgroup order, over the live ``nodes`` (id -> rack) that
    already hold ``held[id]`` vgroups (absent: none). Raises :class:`NoLiveNode` when ``nodes`` is empty and
    vgroups are asked for."""
    if count <= 0:
        return ()
    if not nodes:
        raise NoLiveNode(f"no live node to place {count} vgroup(s) on")
    load = {node: (held or {}).get(node, 0) for node in nodes}
    racks: Counter[str | None] = Counter()
    out: list[int] = []
    for _ in range(count):
        node = min(load, key=lambda n: (load[n], racks[nodes[n]], n))
        load[node] += 1
        racks[nodes[node]] += 1
        out.append(node)
    return tuple(out)
