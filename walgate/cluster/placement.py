"""Placement: which nodes hold the replicas of each vgroup of a database (a Kafka-native topic's partitions are its
vgroups).

Pure: the caller gives the live nodes (node id -> ``broker.rack``, None when unset), how many replicas each already
holds and how many of those it leads; :func:`place` answers the replica list of each new vgroup, its first replica
the preferred leader. Per vgroup, the first replica is, of the live nodes:

1. the one leading the fewest vgroups (those it led before plus those this placement gave it), then holding the
   fewest replicas — leaderships stay balanced, as Kafka's ``StripedReplicaPlacer`` rotates the first replica, and
   placements stay balanced by count across databases, as TDengine's mnode balances vnodes over dnodes;
2. then one whose rack this placement used least — consecutive vgroups land on different racks when the counts
   allow it;
3. then the smallest node id — the same inputs always give the same placement.

Each further replica is a node not yet in the vgroup's list (replicas on distinct nodes), preferring one whose rack
the list does not hold yet (Kafka's rack-aware assignment: every rack gets a replica before any gets two), then the
fewest replicas held, the rack this placement used least, the smallest id. With one replica this is the rule of one
node per vgroup (held = led). Fewer live nodes than replicas: refused (:class:`InvalidReplicationFactor`, the text of
Kafka's placer). Nodes that are not live are never chosen; their vgroups stay theirs (placement is decided once,
when vgroups are created, and is data of the catalog record that creates them).

A manual assignment (CreateTopics' and CreatePartitions' ``assignments``, as ``kafka-topics --replica-assignment``
sends) names each new partition's replicas instead: :func:`assigned` checks it as Kafka's controller does
(``ReplicationControlManager.validateManualPartitionAssignment``: its messages): distinct live brokers, the same
count for every partition.

A replica move (issue 26, KIP-455) places one vgroup anew: the controller writes a :data:`PLACE_VGROUP_OP` catalog
record (:func:`place_vgroup_record`) with the partition state it moves, in the same etcd transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

__all__ = ["place", "assigned", "NoLiveNode", "BadAssignment", "InvalidReplicationFactor", "Replicas",
           "check_replication_factor", "unserved", "PLACE_VGROUP_OP", "place_vgroup_record"]

Replicas = tuple[int, ...]
"""The node ids holding one vgroup, distinct, the first the preferred leader."""

PLACE_VGROUP_OP = "place_vgroup"
"""The catalog record that places one vgroup of a database anew (a replica move): ``db_id``, ``vgroup``, ``replicas``
(distinct node ids, the first the preferred leader; the target followed by the replicas being removed while a move is
in progress, the target once it completed, the original replicas once cancelled)."""


def place_vgroup_record(db_id: str, vgroup: int, replicas: Sequence[int], adding: Sequence[int] = (),
                        removing: Sequence[int] = ()) -> dict[str, object]:
    """The :data:`PLACE_VGROUP_OP` record placing vgroup ``vgroup`` of database ``db_id`` on ``replicas``; while a
    move is in progress also the replicas it adds and removes (``"adding"``, ``"removing"``: KIP-455 keeps them
    with the assignment, so that a partition state made again from it carries the move), written only then."""
    moving = {"adding": list(adding), "removing": list(removing)} if adding or removing else {}
    return {"op": PLACE_VGROUP_OP, "db_id": db_id, "vgroup": vgroup, "replicas": list(replicas), **moving}


class NoLiveNode(ValueError):
    """There is no live node to place vgroups on."""


class InvalidReplicationFactor(ValueError):
    """A replica count that cannot be placed (Kafka's INVALID_REPLICATION_FACTOR); its message says why."""


class BadAssignment(ValueError):
    """A manual replica assignment that cannot be honoured (Kafka's INVALID_REPLICA_ASSIGNMENT); its message says
    why."""


def place(count: int, nodes: Mapping[int, str | None], held: Mapping[int, int] | None = None, replicas: int = 1,
          led: Mapping[int, int] | None = None) -> tuple[Replicas, ...]:
    """The replica list of each of ``count`` new vgroups, in vgroup order, ``replicas`` distinct nodes each, over the
    live ``nodes`` (id -> rack) that already hold ``held[id]`` replicas and lead ``led[id]`` vgroups (absent: none;
    ``led`` absent: ``held``). Raises :class:`NoLiveNode` when ``nodes`` is empty and vgroups are asked for, and
    :class:`InvalidReplicationFactor` when ``replicas`` is below 1 or above the live nodes."""
    if count <= 0:
        return ()
    if not nodes:
        raise NoLiveNode(f"no live node to place {count} vgroup(s) on")
    check_replication_factor(replicas, len(nodes))
    load = {node: (held or {}).get(node, 0) for node in nodes}
    leads = dict(load) if led is None else {node: led.get(node, 0) for node in nodes}
    racks: Counter[str | None] = Counter()
    out: list[Replicas] = []
    for _ in range(count):
        first = min(load, key=lambda n: (leads[n], load[n], racks[nodes[n]], n))
        chosen, used = [first], {nodes[first]}
        leads[first] += 1
        while len(chosen) < replicas:
            node = min((n for n in load if n not in chosen),
                       key=lambda n: (nodes[n] in used, load[n], racks[nodes[n]], n))
            chosen.append(node)
            used.add(nodes[node])
        for node in chosen:
            load[node] += 1
            racks[nodes[node]] += 1
        out.append(tuple(chosen))
    return tuple(out)


def check_replication_factor(replicas: int, live: int) -> None:
    """Raise :class:`InvalidReplicationFactor` (Kafka's messages) unless ``1 <= replicas <= live``."""
    if replicas < 1:
        raise InvalidReplicationFactor("Replication factor must be larger than 0, or -1 to use the default value.")
    if replicas > live:
        raise InvalidReplicationFactor(f"The target replication factor of {replicas} cannot be reached because only "
                                       f"{live} broker(s) are registered.")


def unserved(replicas: int, replication: bool) -> str | None:
    """Why Kafka-native partitions of ``replicas`` copies cannot be created here, or None: the check CreateTopics and
    CreatePartitions make before placing, so that no user gets a topic that claims more copies than exist. Above 1
    they are served only with ``replication`` (``replication.enable``: every node's replica manager copies the
    partitions it follows, issue 25; on unless the operator turned it off), as SQL
    ``CREATE DATABASE ... REPLICA`` is (its own message, :meth:`walgate.storage.ddl.Ddl.create_database`)."""
    if replicas <= 1 or replication:
        return None
    return (f"replication factor {replicas}: this cluster runs without replicas (replication.enable=false on its "
            "nodes); use 1")


def one_copy_unmovable(what: str, single_node: bool, replication: bool) -> str | None:
    """Why ``what`` (a partition or vgroup of one copy, named for the message) cannot be moved here, or None: never
    on a single node (no other node to move it to); in a cluster only with ``replication`` (``replication.enable``:
    its move makes it a partition state and the adding node copies it as a follower, issue 26)."""
    if single_node:
        return f"{what} has one copy and this is a single node: there is no other node to move it to"
    if not replication:
        return (f"{what} has one copy: moving it needs replication.enable=true on every node (its new node copies it "
                "as a replica, docs/cluster.md \"Moving replicas\")")
    return None


def assigned(assignments: Sequence[tuple[int, Sequence[int]]], live: Collection[int],
             first: int = 0, replicas: int | None = None) -> tuple[Replicas, ...]:
    """The replica list of each partition of a manual assignment: ``(partition index, replica broker ids)`` pairs
    for the partitions ``first``, ``first + 1``, ... (in any order), over the ``live`` node ids; ``replicas``: the
    count each must have (a topic's existing partitions'), None: the first partition's. Raises
    :class:`BadAssignment` (Kafka's message where Kafka refuses it too) when a partition is named twice, a replica
    list is empty, names a broker that is not live or one broker twice, has another count than the others, or the
    indexes are not consecutive from ``first``."""
    lists: dict[int, Replicas] = {}
    for index, brokers in assignments:
        if index in lists:
            raise BadAssignment(f"Found multiple manual partition assignments for partition {index}")
        if not brokers:
            raise BadAssignment("The manual partition assignment includes an empty replica list.")
        seen: set[int] = set()
        for broker in brokers:
            if broker not in live:
                raise BadAssignment(f"The manual partition assignment includes broker {broker}, but no such broker "
                                    f"is registered (live nodes: {', '.join(map(str, sorted(live)))}).")
            if broker in seen:
                raise BadAssignment(f"The manual partition assignment includes the broker {broker} more than once.")
            seen.add(broker)
        if replicas is not None and len(brokers) != replicas:
            raise BadAssignment(f"The manual partition assignment includes a partition with {len(brokers)} "
                                f"replica(s), but this is not consistent with previous partitions, which have "
                                f"{replicas} replica(s).")
        replicas = len(brokers)
        lists[index] = tuple(brokers)
    if sorted(lists) != list(range(first, first + len(lists))):
        raise BadAssignment(f"partitions should be a consecutive {first}-based integer sequence")
    return tuple(lists[i] for i in range(first, first + len(lists)))
