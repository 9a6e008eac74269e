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

A manual assignment (CreateTopics' and CreatePartitions' ``assignments``, as ``kafka-topics --replica-assignment``
sends) names each new partition's replicas instead: :func:`assigned` checks it as Kafka's controller does
(``ReplicationControlManager``: its messages) and, with one copy per partition, accepts exactly one live node each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

__all__ = ["place", "assigned", "NoLiveNode", "BadAssignment"]


class NoLiveNode(ValueError):
    """There is no live node to place vgroups on."""


class BadAssignment(ValueError):
    """A manual replica assignment that cannot be honoured (Kafka's INVALID_REPLICA_ASSIGNMENT); its message says
    why."""


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


def assigned(assignments: Sequence[tuple[int, Sequence[int]]], live: Collection[int],
             first: int = 0) -> tuple[int, ...]:
    """The node of each partition of a manual assignment: ``(partition index, replica broker ids)`` pairs for the
    partitions ``first``, ``first + 1``, ... (in any order), over the ``live`` node ids. Raises
    :class:`BadAssignment` (Kafka's message where Kafka refuses it too) when a partition is named twice, a replica
    list is empty, names a broker that is not live or one broker twice, names more than one broker (one copy per
    partition: replication is not supported yet), or the indexes are not consecutive from ``first``."""
    nodes: dict[int, int] = {}
    for index, replicas in assignments:
        if index in nodes:
            raise BadAssignment(f"Found multiple manual partition assignments for partition {index}")
        if not replicas:
            raise BadAssignment("The manual partition assignment includes an empty replica list.")
        seen: set[int] = set()
        for broker in replicas:
            if broker not in live:
                raise BadAssignment(f"The manual partition assignment includes broker {broker}, but no such broker "
                                    f"is registered (live nodes: {', '.join(map(str, sorted(live)))}).")
            if broker in seen:
                raise BadAssignment(f"The manual partition assignment includes the broker {broker} more than once.")
            seen.add(broker)
        if len(replicas) > 1:
            raise BadAssignment(f"replication factor above 1 is not supported yet: partition {index} is assigned "
                                f"{len(replicas)} replicas (brokers {', '.join(map(str, replicas))}); name one broker "
                                "per partition")
        nodes[index] = replicas[0]
    if sorted(nodes) != list(range(first, first + len(nodes))):
        raise BadAssignment(f"partitions should be a consecutive {first}-based integer sequence")
    return tuple(nodes[i] for i in range(first, first + len(nodes)))
